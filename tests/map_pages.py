"""Atlas map pages made from synthetic inputs for the browser tests: cells, a two-layout record's
map-details.json and atlas.json, and the page opened in headless Chromium."""
from pathlib import Path


def payload_cell(row: dict) -> dict:
    """A table row's cell as the map's payload holds it (report/atlas_map._short_batches):
    map_cell's, less the per-batch medians, its per-batch ratios at 4 significant digits."""
    from groupconv_atlas.study.report import atlas_map
    from groupconv_atlas.study.statistics.map_cells import map_cell

    cell = map_cell(row)
    for key in atlas_map.LEFT_OUT:
        cell.pop(key, None)
    for key in atlas_map.BATCH_ARRAYS:
        if isinstance(cell.get(key), list):
            cell[key] = [float(f"{v:.4g}") for v in cell[key]]
    return cell


def synthetic_cell(ratio: float, choice: str | None = None) -> dict:
    cell = {"class": "WIN" if ratio > 1.05 else "LOSS" if ratio < 1 / 1.05 else "TIE",
            "ratio": ratio, "ci_low": ratio * 0.97, "ci_high": ratio * 1.03, "batches": 2,
            "candidate_median_us": 10.0, "baseline_median_us": 10.0 * ratio,
            "batch_ratios": [ratio * 0.99, ratio * 1.01],
            "candidate_batch_medians_us": [10.0, 10.1],
            "baseline_batch_medians_us": [10.0 * ratio, 10.1 * ratio],
            "clock_flagged_batches": 0}
    if choice:
        cell["torch_best_choice"] = choice
    return cell


def two_layout_inputs() -> tuple[dict, dict]:
    """A map-details.json and atlas.json of two shapes measured in both layouts: k5 (NCHW), k8
    (channels_last) and the dispatcher against the NCHW and channels_last tuned references and
    both derived ones; torch_best chose the channels_last reference on the first shape."""
    comps = [f"{c}:{b}" for c in ("k5", "k8", "dispatch")
             for b in ("torch_tuned", "torch_tuned_nhwc", "torch_best", "torch_best_nchw")]
    shapes = []
    for i, (sid, best) in enumerate((("dw-a", "torch_tuned_nhwc"), ("dw-b", "torch_tuned"))):
        cells = {}
        for c in comps:
            cand, base = c.split(":")
            ratio = 1.1 + 0.2 * i + (0.3 if cand == "k8" else 0.0)
            choice = best if base == "torch_best" else "torch_tuned" if base == \
                "torch_best_nchw" else None
            cells[c] = {b: synthetic_cell(ratio, choice) for b in ("graph_device", "sync_api")}
        shapes.append({"id": sid, "source": "synthetic depthwise", "n": 1, "c_in": 64,
                       "c_out": 64, "h": 56, "w": 56, "groups": 64, "cin_per_group": 1,
                       "cout_per_group": 1, "footprint_mb": 1.6, "flops": 3.6e6,
                       "verification": {}, "comparisons": cells})
    details = {"schema": 1, "shape_set_sha256": "0" * 64, "comparisons": sorted(comps),
               "evidence": {"device": "synthetic", "mode": "replay", "record": "synthetic",
                            "statement": "synthetic two-layout data", "caveats": []},
               "shapes": shapes}
    atlas = {"config": {"statistics": {"threshold": 0.05, "confidence_level": 0.95,
                                       "method": "BCa"}},
             "comparisons": [], "session": {},
             "aa": {"implementation": "k0", "win_or_loss": 0, "pairs": 4, "rate": 0.0,
                    "limit": 0.05, "passed": True}}
    return details, atlas


def open_map(browser, tmp_path, details: dict, atlas: dict, passes: dict | None = None):
    """(context, tab, page errors) of the map page built from `details` and `atlas` (and a
    record's backward passes, report.atlas_map.pass_payload's), loaded."""
    from groupconv_atlas.study import report

    template = (Path(__file__).parents[1] / "workflow" / "templates" / "atlas_map.html")
    path = tmp_path / "atlas-map.html"
    path.write_text(report.atlas_map_html(details, atlas, template.read_text(), passes))
    context = browser.new_context(viewport={"width": 1600, "height": 1000}, offline=True)
    tab = context.new_page()
    errors = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.goto(path.as_uri())
    tab.wait_for_selector("body[data-ready=true]")
    return context, tab, errors
