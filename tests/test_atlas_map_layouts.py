"""The atlas map's payload carries each candidate's and baseline's memory layout, as
groupconv.kernels.layout_of gives it, and the layouts the record measured: what the page's
layout switch reads. CPU only, on synthetic inputs (no replay)."""
from groupconv.kernels import layout_of
from groupconv_atlas.study.report.atlas_map import map_payload
from groupconv_atlas.study.statistics.stats import TORCH_BEST, TORCH_BEST_NCHW


def _cell(ratio: float, choice: str | None = None) -> dict:
    cell = {"class": "WIN" if ratio > 1.05 else "TIE", "ratio": ratio, "ci_low": ratio * 0.98,
            "ci_high": ratio * 1.02}
    if choice:
        cell["torch_best_choice"] = choice
    return cell


def _inputs(comparisons: list[str]) -> tuple[dict, dict]:
    """The least map-details.json and atlas.json that map_payload reads."""
    shape = {"id": "dw-1", "comparisons": {c: {"graph_device": _cell(1.2), "sync_api": _cell(1.0)}
                                           for c in comparisons}}
    details = {"evidence": {"device": "synthetic", "mode": "replay", "record": "synthetic"},
               "shape_set_sha256": "0" * 64, "schema": 1, "comparisons": sorted(comparisons),
               "shapes": [shape]}
    atlas = {"config": {"statistics": {"threshold": 0.05, "confidence_level": 0.95,
                                       "method": "BCa"}},
             "comparisons": [], "aa": {}, "session": {}}
    return details, atlas


TWO_LAYOUTS = ["k5:torch_tuned", "k5:torch_tuned_nhwc", "k5:torch_best", "k5:torch_best_nchw",
               "k8:torch_tuned", "k8:torch_tuned_nhwc", "k8:torch_best", "k8:torch_best_nchw",
               "k9:torch_tuned_nhwc", "k9:torch_best",
               "dispatch:torch_tuned", "dispatch:torch_best", "torch_tuned_nhwc:torch_tuned"]


def test_each_candidate_and_baseline_has_its_layout():
    payload = map_payload(*_inputs(TWO_LAYOUTS))
    cands = {c["id"]: c for c in payload["candidates"]}
    bases = {b["id"]: b for b in payload["baselines"]}
    assert set(cands) == {"k5", "k8", "k9", "dispatch", "torch_tuned_nhwc"}
    assert set(bases) == {"torch_tuned", "torch_tuned_nhwc", TORCH_BEST, TORCH_BEST_NCHW}

    # Custom kernels and references: their own layout, as layout_of gives it.
    assert cands["k5"]["layout"] == "nchw" and not cands["k5"]["derived"]
    assert cands["k8"]["layout"] == "nhwc" and not cands["k8"]["derived"]
    assert cands["k9"]["layout"] == "nhwc" and not cands["k9"]["derived"]
    assert cands["torch_tuned_nhwc"]["layout"] == "nhwc"
    assert bases["torch_tuned"]["layout"] == "nchw" and not bases["torch_tuned"]["derived"]
    assert bases["torch_tuned_nhwc"]["layout"] == "nhwc"
    assert not bases["torch_tuned_nhwc"]["derived"]
    # The dispatcher is NCHW.
    assert cands["dispatch"]["layout"] == "nchw"
    for impl in (*cands.values(), *bases.values()):
        if not impl["derived"]:
            assert impl["layout"] == layout_of(impl["id"]), impl

    # Derived references: torch_best covers either layout, torch_best_nchw NCHW only.
    best, best_nchw = bases[TORCH_BEST], bases[TORCH_BEST_NCHW]
    assert best["derived"] and best_nchw["derived"]
    assert best["layout"] == "either" and best["covers"] == ["nchw", "nhwc"]
    assert best["measured_covers"] == ["nchw", "nhwc"]
    assert best_nchw["layout"] == "nchw" and best_nchw["covers"] == ["nchw"]
    assert "either layout" in best["label"] and "NCHW only" in best_nchw["label"]

    # The layouts the record has, and the layout of every name the page shows, the derived
    # references' sources included (a torch_best cell names the one it chose).
    assert payload["layouts"] == [
        {"id": "nchw", "label": "NCHW", "measured": True},
        {"id": "nhwc", "label": "channels_last (NHWC)", "measured": True}]
    lay = payload["layout_of"]
    assert {n: lay[n] for n in ("k5", "k8", "k9", "dispatch", "torch_tuned", "torch_tuned_nhwc",
                                "torch_default", "torch_default_nhwc", TORCH_BEST,
                                TORCH_BEST_NCHW)} == {
        "k5": "nchw", "k8": "nhwc", "k9": "nhwc", "dispatch": "nchw", "torch_tuned": "nchw",
        "torch_tuned_nhwc": "nhwc", "torch_default": "nchw", "torch_default_nhwc": "nhwc",
        TORCH_BEST: "either", TORCH_BEST_NCHW: "nchw"}
    # The cells go through as they are, a torch_best cell's choice with them.
    assert payload["comparisons"] == sorted(TWO_LAYOUTS)


def test_a_record_of_one_layout_says_so():
    # As the smoke record: k0-k3 and the NCHW references only.
    comps = ["k0:k0_twin", "k1:k0", "k1:torch_default", "k1:torch_tuned", "k1:torch_best",
             "k3:torch_tuned", "k3:torch_best"]
    payload = map_payload(*_inputs(comps))
    assert {lay["id"]: lay["measured"] for lay in payload["layouts"]} == {"nchw": True,
                                                                         "nhwc": False}
    assert {c["id"]: c["layout"] for c in payload["candidates"]} == {
        "k0": "nchw", "k1": "nchw", "k3": "nchw"}
    bases = {b["id"]: b for b in payload["baselines"]}
    assert bases["k0_twin"]["layout"] == "nchw"
    # torch_best still covers either layout, but this record timed only its NCHW sources.
    assert bases[TORCH_BEST]["covers"] == ["nchw", "nhwc"]
    assert bases[TORCH_BEST]["measured_covers"] == ["nchw"]


def test_layouts_follow_layout_of_not_a_list(monkeypatch):
    # Were k5 to compute on channels_last, the payload would say so: it asks layout_of.
    from groupconv_atlas.study.report import atlas_map

    monkeypatch.setattr(atlas_map, "layout_of",
                        lambda name: "nhwc" if name == "k5" else layout_of(name))
    payload = atlas_map.map_payload(*_inputs(["k5:torch_tuned", "k1:torch_tuned"]))
    assert {c["id"]: c["layout"] for c in payload["candidates"]} == {"k5": "nhwc", "k1": "nchw"}
    assert {lay["id"]: lay["measured"] for lay in payload["layouts"]} == {"nchw": True,
                                                                         "nhwc": True}


def _page_numbers(monkeypatch, limit_between: tuple[int, int | None] | None):
    """atlas_map_html on synthetic inputs, its pages unpacked, with the frame's limit set between
    the sizes of the page rounded to `limit_between`'s two digit counts (a second None: between
    the first's size and the full numbers'; None: the full page's size)."""
    import json
    import re

    from groupconv_atlas.study.report import atlas_map

    template = f"<script>{atlas_map.MAP_DATA_MARKER}</script>"
    details, atlas = _inputs(["k5:torch_tuned", "k5:torch_best"])
    # Numbers with many digits, as measured medians and intervals have.
    for cells in details["shapes"][0]["comparisons"].values():
        for cell in cells.values():
            cell.update(ratio=1.23456789012, ci_low=1.11111111111, ci_high=1.33333333333)
    monkeypatch.setattr(atlas_map, "packed_page", lambda page: page)
    monkeypatch.setattr(atlas_map, "data_url_bytes", len)
    sizes = {}
    for digits in atlas_map.MAP_DIGITS:
        payload = atlas_map._rounded(atlas_map.map_payload(details, atlas), digits)
        sizes[digits] = len(atlas_map._page({**payload, "digits": digits}, details, template))
    full = len(atlas_map._page(atlas_map.map_payload(details, atlas), details, template))
    if limit_between is None:
        limit = full
    elif limit_between[1] is None:  # the first digit count fits, the full numbers do not
        limit = (sizes[limit_between[0]] + full) // 2
    else:
        limit = (sizes[limit_between[0]] + sizes[limit_between[1]]) // 2
    monkeypatch.setattr(atlas_map, "DATA_URL_LIMIT", limit)
    page = atlas_map.atlas_map_html(details, atlas, template)
    payload = json.loads(re.search(r"<script>(.*)</script>", page).group(1).replace("<\\/", "</"))
    return payload, page


def test_the_map_keeps_full_numbers_where_the_page_fits(monkeypatch):
    payload, page = _page_numbers(monkeypatch, None)
    assert "digits" not in payload
    assert "1.23456789012" in page


def test_the_map_rounds_to_the_first_digit_count_that_fits(monkeypatch):
    # A frame that holds the 4-digit page and not the 6-digit one: 4 digits, said on the page.
    from groupconv_atlas.study.report import atlas_map

    six, four = atlas_map.MAP_DIGITS
    payload, page = _page_numbers(monkeypatch, (four, six))
    assert payload["digits"] == four
    assert "1.235" in page and "1.23457" not in page and "1.23456789012" not in page


def test_the_map_keeps_six_digits_where_they_fit(monkeypatch):
    from groupconv_atlas.study.report import atlas_map

    six, four = atlas_map.MAP_DIGITS
    payload, page = _page_numbers(monkeypatch, (six, None))
    assert payload["digits"] == six
    assert "1.23457" in page and "1.23456789012" not in page
