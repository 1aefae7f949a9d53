"""The headline in atlas.json and the first screen of current-evidence.md, on synthetic
comparison rows (test input, not measurements), then on the committed record's raw layer."""
import numpy as np
import pandas as pd
import pytest
from groupconv_atlas.study.artifacts.atlas_document import aa_result
from groupconv_atlas.study.artifacts.headline import (build_headline, channel_bin, footprint_bin,
                                                      shape_groups)
from groupconv_atlas.study.statistics.comparisons import summarize
from groupconv_atlas.study.statistics.medians import with_torch_best
from groupconv_atlas.study.statistics.stats import StatsConfig

CFG = StatsConfig(seed=3, resamples=2000)
L2 = 1000
# id, C_in per group, bytes: two depthwise shapes (one over 2x L2), two grouped ones.
SHAPES = [("dw-small", 1, 100), ("dw-big", 1, 3000), ("g4", 4, 800), ("g32", 32, 600)]
# k5's ratio against torch_tuned / torch_default per shape; torch_default is faster on g32.
RATIOS = {"dw-small": (2.0, 2.5), "dw-big": (3.0, 3.5), "g4": (1.5, 1.6), "g32": (0.8, 0.7)}


def shapes_doc():
    return {"shapes": [{"id": s, "cin_per_group": cpg, "cout_per_group": cpg, "min_bytes": b}
                       for s, cpg, b in SHAPES]}


def comparisons():
    rng = np.random.default_rng(0)
    rows = []
    for shape, (tuned, default) in RATIOS.items():
        for boundary in ("graph_device", "sync_api"):
            for ref, ratio in (("torch_tuned", tuned), ("torch_default", default)):
                batch = list(ratio * rng.lognormal(0, 0.01, 10))
                cls = "WIN" if ratio > 1.1 else "LOSS"
                rows.append({"job": f"k5-{ref}", "shape_id": shape, "candidate": "k5",
                             "baseline": ref, "boundary": boundary, "class": cls,
                             "ratio": float(np.exp(np.mean(np.log(batch)))),
                             "ci_low": ratio * 0.98, "ci_high": ratio * 1.02,
                             "candidate_median_us": 10.0, "baseline_median_us": 10.0 * ratio,
                             "batch_ratios": batch})
    return with_torch_best(pd.DataFrame(rows))


def verification():
    return pd.DataFrame([{"shape_id": s, "implementation": i, "status": "correct"}
                         for s, _, _ in SHAPES for i in ("k5", "torch_tuned", "torch_default")])


@pytest.fixture(scope="module")
def headline():
    comp = comparisons()
    aa = {"exclude_one_limit": 0.07,
          "by_boundary": {"graph_device": {"exclude_one": 1, "exclude_one_pairs": 40,
                                           "exclude_one_rate": 0.025}}}
    return build_headline(comp, summarize(comp, CFG), shapes_doc(), verification(), L2, aa, CFG)


def test_bins_name_their_ranges():
    assert [channel_bin(c) for c in (1, 2, 4, 5, 16, 17, 64)] == \
        ["1", "2-4", "2-4", "5-8", "9-16", "17+", "17+"]
    assert [footprint_bin(f) for f in (0.1, 0.5, 1.99, 2.0)] == \
        ["under 0.5x L2", "0.5-2x L2", "0.5-2x L2", "2x L2 or more"]
    with pytest.raises(ValueError, match="cin_per_group"):
        channel_bin(0)
    groups = shape_groups(shapes_doc(), L2).set_index("shape_id")
    assert groups.loc["dw-big", "footprint"] == "2x L2 or more"
    assert groups.loc["g32", "kind"] == "grouped"


def test_the_depth_multiplier_shape_is_a_kind_of_its_own():
    """Depthwise is groups = C_in = C_out; one input channel per group feeding two outputs (the
    shape set's depth multiplier) is named apart, and grouped stays grouped."""
    doc = {"shapes": [{"id": "dw", "cin_per_group": 1, "cout_per_group": 1, "min_bytes": 1},
                      {"id": "mult", "cin_per_group": 1, "cout_per_group": 2, "min_bytes": 1},
                      {"id": "g2", "cin_per_group": 2, "cout_per_group": 2, "min_bytes": 1}]}
    kinds = shape_groups(doc, L2).set_index("shape_id")["kind"].to_dict()
    assert kinds == {"dw": "depthwise", "mult": "depth multiplier", "g2": "grouped"}


def test_the_shape_sets_depthwise_shapes_are_those_with_groups_equal_to_both_channel_counts():
    from groupconv.files import REPO_ROOT
    from groupconv_atlas.study.plans.shapes_table import load_shapes

    shapes = load_shapes(REPO_ROOT / "config" / "shapes.yaml")
    doc = {"shapes": [{"id": s.id, "cin_per_group": s.c_in // s.groups,
                       "cout_per_group": s.c_out // s.groups, "min_bytes": 1} for s in shapes]}
    kinds = shape_groups(doc, L2).set_index("shape_id")["kind"]
    by_rule = {s.id for s in shapes if s.groups == s.c_in == s.c_out}
    assert set(kinds[kinds == "depthwise"].index) == by_rule
    assert list(kinds[kinds == "depth multiplier"].index) == [
        s.id for s in shapes if s.groups == s.c_in != s.c_out]


def test_a_footprint_region_is_named_as_a_footprint():
    from groupconv_atlas.study.artifacts.headline_lines import _group_words

    assert _group_words("2x L2 or more") == "footprint 2x L2 or more"
    assert _group_words("under 0.5x L2") == "footprint under 0.5x L2"
    assert _group_words("2-4") == "2-4 channels per group"


def test_headline_uses_torch_best_and_splits_wins_from_losses(headline):
    assert headline["reference"] == "torch_best" and headline["candidate"] == "k5"
    graph = headline["boundaries"]["graph_device"]
    kinds = {e["group"]: e for e in graph["by_kind"]}
    # torch_best on g32 is torch_default (k5 ratio 0.7 there), elsewhere torch_tuned.
    assert kinds["grouped"]["geomean_ratio"] == pytest.approx(np.sqrt(1.5 * 0.7), rel=0.02)
    assert kinds["depthwise"]["geomean_ratio"] == pytest.approx(np.sqrt(2.0 * 3.0), rel=0.02)
    assert (kinds["grouped"]["n_win"], kinds["grouped"]["n_loss"]) == (1, 1)
    channels = {e["group"]: e["n_loss"] for e in graph["by_channels_per_group"]}
    assert channels == {"1": 0, "2-4": 0, "17+": 1}
    assert [e["group"] for e in graph["by_footprint"]] == ["under 0.5x L2", "0.5-2x L2",
                                                          "2x L2 or more"]
    fastest = {f["shape_id"]: f for f in graph["fastest_per_shape"]}
    assert fastest["g32"]["fastest"] == "torch_default" and not fastest["g32"]["fastest_is_custom"]
    assert fastest["g32"]["best_custom"]["reference_chosen"] == "torch_default"
    assert fastest["g32"]["best_custom"]["class"] == "LOSS"
    assert fastest["dw-big"]["fastest"] == "k5"
    assert graph["fastest_counts"] == {"k5": 3, "torch_default": 1}


def test_summary_lines_state_computed_numbers(headline):
    lines = headline["summary_lines"]
    overall = next(o for o in headline["boundaries"]["graph_device"]["overall"]
                   if o["candidate"] == "k5")
    assert any(f"{overall['geomean_ratio']:.2f}x" in line and "graph_device" in line
               for line in lines)
    assert any("17+ channels per group (1 of 1)" in line for line in lines)
    assert any("custom kernel on 3 of 4 shapes and PyTorch on 1" in line for line in lines)
    assert any("Agreement between sessions is absent" in line for line in lines)
    assert any("1 of 40 pairs at graph_device (limit 7% per boundary: met)" in line
               for line in lines)


def test_an_unmet_aa_limit_names_the_boundary_and_how_far_from_one():
    comp = comparisons()
    aa = {"exclude_one_limit": 0.07,
          "by_boundary": {"graph_device": {"exclude_one": 6, "exclude_one_pairs": 80,
                                           "exclude_one_rate": 0.075,
                                           "exclude_one_largest_deviation": 0.0027},
                          "sync_api": {"exclude_one": 0, "exclude_one_pairs": 80,
                                       "exclude_one_rate": 0.0,
                                       "exclude_one_largest_deviation": None}}}
    doc = build_headline(comp, summarize(comp, CFG), shapes_doc(), verification(), L2, aa, CFG)
    assert any("NOT met at graph_device, where the excluding pairs' ratios lie within 0.3% of 1"
               in line for line in doc["summary_lines"])


def test_session_agreement_is_read_from_the_cross_record_cells():
    comp = comparisons()
    wide = pd.DataFrame({"shape_id": ["g4", "g32", "g4"], "candidate": ["k5", "k5", "k0"],
                         "baseline": ["torch_tuned"] * 3, "boundary": ["graph_device"] * 3,
                         "b:class": ["WIN", "LOSS", "WIN"], "c:class": ["WIN", "WIN", "TIE"],
                         "classes_agree": [True, False, False],
                         "intervals_overlap": pd.array([True, False, False], dtype="boolean"),
                         "reversal": [False, True, False], "same_code": [True] * 3})
    doc = build_headline(comp, summarize(comp, CFG), shapes_doc(), verification(), L2, {}, CFG,
                         wide)
    agreement = doc["certainty"]["session_agreement"]
    assert agreement["records"] == ["b", "c"]
    graph = agreement["boundaries"]["graph_device"]
    assert (graph["cells"], graph["classes_agree"], graph["reversals"]) == (3, 1, 1)
    assert graph["candidate"]["cells"] == 2 and graph["candidate"]["classes_agree"] == 1
    assert any(line.startswith("Between sessions b and c, on the cells timed in every session "
                               "with the same code: at graph_device")
               and "agree in 33.3% of 3 cells (50.0% of 2 for k5" in line
               and "with 1 WIN/LOSS reversal (against torch_tuned: 1)." in line
               and line.endswith("at graph_device 1, 1 with the same code and no change found, "
                                 "unexplained (against torch_tuned on 1; the reference's cuDNN "
                                 "kernels not named in every record for 1).")
               for line in doc["summary_lines"])
    assert agreement["reversals"][0]["shape_id"] == "g32"
    summary = summarize(comp, CFG).set_index(["baseline", "boundary"])
    assert summary.loc[("torch_best", "graph_device"), "torch_best_chosen"] == {
        "torch_default": 1, "torch_tuned": 3}


def test_aa_result_counts_intervals_that_exclude_one_per_boundary():
    rows = [{"job": "aa", "candidate": "k0", "baseline": "k0_twin", "boundary": b,
             "class": "TIE", "ratio": (lo + hi) / 2, "ci_low": lo, "ci_high": hi}
            for b, lo, hi in [("graph_device", 0.99, 1.01), ("graph_device", 1.001, 1.009),
                              ("sync_api", 0.98, 1.02), ("sync_api", 0.97, 1.03)]]
    aa = aa_result(pd.DataFrame(rows))
    assert aa["by_boundary"]["graph_device"]["exclude_one"] == 1
    assert aa["by_boundary"]["graph_device"]["exclude_one_rate"] == 0.5
    assert aa["by_boundary"]["graph_device"]["exclude_one_largest_deviation"] == \
        pytest.approx(0.005)
    assert aa["by_boundary"]["sync_api"]["exclude_one_largest_deviation"] is None
    assert aa["by_boundary"]["sync_api"]["exclude_one"] == 0
    assert not aa["exclude_one_passed"]  # 50% at graph_device is over the 7% limit
    assert aa["passed"]  # no WIN or LOSS


def test_evidence_template_has_its_blocks_and_names_a_missing_value(tmp_path):
    from string import Template

    from groupconv_atlas.study.artifacts.evidence import fill, template_blocks

    blocks = template_blocks()
    assert set(blocks) == {"document", "headline_items", "caveats", "amendments", "roofline",
                           "spread", "algorithms", "crosscheck"}
    assert "## The answer first" in blocks["document"].template
    with pytest.raises(KeyError, match="no_such_value"):
        fill(Template("$device $no_such_value"), device="h200")


def test_headline_over_both_layouts_keeps_the_nchw_reading_beside_it():
    rng = np.random.default_rng(1)
    rows = []
    # On the depthwise shapes cuDNN on channels_last beats k5 (ratio 0.6); NCHW PyTorch does not.
    for shape, nchw, nhwc in (("dw-small", 2.0, 0.6), ("dw-big", 3.0, 0.6), ("g4", 1.5, 3.0),
                              ("g32", 0.8, 2.0)):
        for ref, ratio in (("torch_tuned", nchw), ("torch_default", nchw * 1.1),
                           ("torch_tuned_nhwc", nhwc), ("torch_default_nhwc", nhwc * 1.1)):
            batch = list(ratio * rng.lognormal(0, 0.01, 10))
            rows.append({"job": ref, "shape_id": shape, "candidate": "k5", "baseline": ref,
                         "boundary": "graph_device", "class": "WIN" if ratio > 1.1 else "LOSS",
                         "ratio": float(np.exp(np.mean(np.log(batch)))), "ci_low": ratio * 0.98,
                         "ci_high": ratio * 1.02, "candidate_median_us": 10.0,
                         "baseline_median_us": 10.0 * ratio, "batch_ratios": batch})
    comp = with_torch_best(pd.DataFrame(rows))
    ver = pd.DataFrame([{"shape_id": s, "implementation": i, "status": "correct"}
                        for s, _, _ in SHAPES for i in ("k5", "torch_tuned", "torch_default",
                                                        "torch_tuned_nhwc", "torch_default_nhwc")])
    doc = build_headline(comp, summarize(comp, CFG), shapes_doc(), ver, L2, {}, CFG)
    assert doc["reference"] == "torch_best"
    assert "channels_last" in doc["reference_statement"]
    kinds = {e["group"]: e for e in doc["boundaries"]["graph_device"]["by_kind"]}
    assert kinds["depthwise"]["n_loss"] == 2
    old = doc["nchw_only"]
    assert old["reference"] == "torch_best_nchw"
    old_kinds = {e["group"]: e for e in old["boundaries"]["graph_device"]["by_kind"]}
    assert old_kinds["depthwise"]["n_loss"] == 0 and old_kinds["depthwise"]["n_win"] == 2
    fastest = {f["shape_id"]: f for f in doc["boundaries"]["graph_device"]["fastest_per_shape"]}
    assert fastest["dw-big"]["fastest"] == "torch_tuned_nhwc"
    assert fastest["dw-big"]["fastest_layout"] == "nhwc"
    assert any("NHWC on 2 shapes" in line for line in doc["summary_lines"])


def test_best_custom_kernel_per_shape_is_read_in_either_layout_and_named_by_region():
    """k8 (channels_last) is the faster custom kernel on the depthwise shapes, k5 on one grouped
    shape and k9 (channels_last) on the other: the headline's best_custom block takes each
    shape's own, names it with its layout per region, and its region means are those shapes'
    rows against torch_best."""
    rng = np.random.default_rng(2)
    medians = {"torch_tuned": 20.0, "torch_default": 22.0, "torch_tuned_nhwc": 6.0,
               "torch_default_nhwc": 6.6}
    ours = {"dw-small": {"k5": 10.0, "k8": 5.0}, "dw-big": {"k5": 10.0, "k8": 4.0},
            "g4": {"k5": 10.0, "k9": 8.0}, "g32": {"k5": 10.0, "k9": 12.0}}
    rows = []
    for shape, kernels in ours.items():
        for cand, us in kernels.items():
            for ref, ref_us in medians.items():
                ratio = ref_us / us
                batch = list(ratio * rng.lognormal(0, 0.01, 10))
                rows.append({"job": ref, "shape_id": shape, "candidate": cand, "baseline": ref,
                             "boundary": "graph_device",
                             "class": "WIN" if ratio > 1.1 else "LOSS" if ratio < 0.9 else "TIE",
                             "ratio": float(np.exp(np.mean(np.log(batch)))),
                             "ci_low": ratio * 0.98, "ci_high": ratio * 1.02,
                             "candidate_median_us": us, "baseline_median_us": ref_us,
                             "batch_ratios": batch})
    comp = with_torch_best(pd.DataFrame(rows))
    ver = pd.DataFrame([{"shape_id": s, "implementation": i, "status": "correct"}
                        for s, _, _ in SHAPES for i in ("k5", "k8", "k9", *medians)])
    doc = build_headline(comp, summarize(comp, CFG), shapes_doc(), ver, L2, {}, CFG)
    best = doc["boundaries"]["graph_device"]["best_custom"]
    assert best["by_kind_layouts"] == {"depthwise": {"k8 (nhwc)": 2},
                                       "grouped": {"k5 (nchw)": 1, "k9 (nhwc)": 1}}
    kinds = {e["group"]: e for e in best["by_kind"]}
    # depthwise: torch_best is torch_tuned_nhwc (6 us) against k8 at 5 and 4 us
    assert kinds["depthwise"]["geomean_ratio"] == pytest.approx((6 / 5 * 6 / 4) ** 0.5, rel=0.02)
    # g4: k9 at 8 us, g32: k5 at 10 us, against torch_tuned_nhwc's 6
    assert kinds["grouped"]["n_loss"] == 2
    assert kinds["grouped"]["geomean_ratio"] == pytest.approx((6 / 8 * 6 / 10) ** 0.5, rel=0.02)
    assert any("fastest custom kernel in either layout (k8 (nhwc) on 2" in line
               for line in doc["summary_lines"])
