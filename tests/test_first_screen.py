"""The first screen: the headline leads with the dispatcher in each layout (a second,
channels_last one slots in when a record times it), single kernels after it, labelled; the
figure that answers at a glance (report/glance.py), with the floor panel it takes once the floor
is measured; the landing page that shows it; and a per-shape figure against torch_best. On
synthetic comparison rows (test input, not measurements)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.plans.atlas_plan import torch_best_pairs
from groupconv_atlas.study.statistics.comparisons import summarize
from groupconv_atlas.study.artifacts.headline import build_headline
from groupconv_atlas.study.statistics.medians import with_torch_best
from groupconv_atlas.study.statistics.stats import StatsConfig

CFG = StatsConfig(seed=3, resamples=2000)
L2 = 1000
SHAPES = [("dw1", 1, 1, 100), ("dw2", 1, 1, 300), ("mult", 1, 2, 800), ("g4", 4, 4, 600)]
# Per candidate, its ratio against torch_tuned (torch_default is 10% slower everywhere).
RATIOS = {"dispatch": 1.5, "dispatch_nhwc": 1.8, "k5": 1.3, "k8": 0.9}


def comparisons(candidates=("dispatch", "k5", "k8"), ratios=RATIOS) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for shape, *_ in SHAPES:
        for cand in candidates:
            for boundary in ("graph_device", "sync_api"):
                for ref, scale in (("torch_tuned", 1.0), ("torch_default", 1.1)):
                    ratio = ratios[cand] * scale
                    batch = list(ratio * rng.lognormal(0, 0.01, 10))
                    rows.append({"job": f"{cand}-{ref}", "shape_id": shape, "candidate": cand,
                                 "baseline": ref, "boundary": boundary,
                                 "class": "WIN" if ratio > 1.1 else "LOSS",
                                 "ratio": float(np.exp(np.mean(np.log(batch)))),
                                 "ci_low": ratio * 0.98, "ci_high": ratio * 1.02,
                                 "candidate_median_us": 10.0 / ratio,
                                 "baseline_median_us": 10.0 * scale, "batch_ratios": batch})
    return with_torch_best(pd.DataFrame(rows))


def headline(candidates=("dispatch", "k5", "k8"), ratios=RATIOS) -> dict:
    comp = comparisons(candidates, ratios)
    doc = {"shapes": [{"id": s, "cin_per_group": i, "cout_per_group": o, "min_bytes": b}
                      for s, i, o, b in SHAPES]}
    verified = pd.DataFrame([{"shape_id": s, "implementation": i, "status": "correct"}
                             for s, *_ in SHAPES for i in (*candidates, "torch_tuned",
                                                            "torch_default")])
    return build_headline(comp, summarize(comp, CFG), doc, verified, L2, {}, CFG)


@pytest.fixture(scope="module")
def today() -> dict:
    return headline()


def test_the_dispatcher_leads_and_single_kernels_come_after_labelled(today):
    assert today["candidate"] == "dispatch" and today["candidates"] == ["dispatch"]
    assert today["kernel_candidate"] == "k5" and today["candidate_layouts"] == {"dispatch": "nchw"}
    lines = today["summary_lines"]
    assert lines[0].startswith("At graph_device, the dispatcher dispatch (NCHW calls) against")
    assert re.search(r"geometric mean 1\.50x over 4 of 4 shapes", lines[0]), lines[0]
    single = [i for i, line in enumerate(lines) if line.startswith("Single kernels")]
    assert single and single[0] > 1, lines
    assert "k5 (NCHW) 1.30x" in lines[single[0]] and "k8 (NHWC) 0.90x" in lines[single[0]]


def test_a_channels_last_dispatcher_slots_in_second():
    doc = headline(("dispatch", "dispatch_nhwc", "k5"))
    assert doc["candidates"] == ["dispatch", "dispatch_nhwc"]
    assert doc["candidate_layouts"]["dispatch_nhwc"] == "nhwc"
    lines = doc["summary_lines"]
    assert lines[0].startswith("At graph_device, the dispatcher dispatch (NCHW calls)")
    assert any(line.startswith("At graph_device, the dispatcher dispatch_nhwc (NHWC calls)")
               for line in lines[:4]), lines[:4]
    regions = doc["boundaries"]["graph_device"]["regions"]["dispatch_nhwc"]
    assert [e["group"] for e in regions["by_kind"]] == ["depthwise", "depth multiplier",
                                                        "grouped"]


def test_without_a_dispatcher_the_single_kernel_leads_labelled_as_one():
    doc = headline(("k5", "k8"))
    assert doc["candidate"] == "k5" and doc["candidates"] == ["k5"]
    assert doc["summary_lines"][0].startswith("At graph_device, k5 (a single kernel, NCHW)")
    assert not any(line.startswith("Single kernels") for line in doc["summary_lines"])


def test_the_fastest_implementation_is_counted_per_region_with_its_layout(today):
    regions = today["boundaries"]["graph_device"]["fastest_by_region"]
    assert regions["all shapes"] == {"k5 (nchw)": 4}  # the dispatcher is a choice, not counted
    assert set(regions) >= {"depthwise", "depth multiplier", "grouped",
                            "channels per group: 1"}
    assert sum(regions["depthwise"].values()) == 2


def test_the_glance_figure_draws_each_region_and_names_the_fastest(today):
    from groupconv_atlas.study.report import glance_figure, svg_bytes

    fig = glance_figure(today, 0.05)
    ax, names = fig.axes  # the ratios; the column naming the fastest per region
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["all shapes (4)", "depthwise (2)", "depth multiplier (1)", "grouped (1)",
                      "channels per group: 1 (3)", "channels per group: 2-4 (1)"]
    assert [t.get_text() for t in names.texts][0] == "k5 (nchw) 4"
    assert "against the floor" in ax.get_xlabel() and "not in this record" in ax.get_xlabel()
    # It says whose lead it plots, and its legend names the series and what each colour says.
    assert "dispatch (NCHW calls) against torch_best" in fig.get_suptitle()
    [legend] = fig.legends
    words = [t.get_text() for t in legend.get_texts()]
    assert words[0] == "dispatch (NCHW calls)"
    assert {w.split(":")[0] for w in words} >= {"WIN", "LOSS", "TIE", "INCONCLUSIVE"}
    assert svg_bytes(fig).startswith(b"<?xml")


def test_the_glance_figure_is_drawn_to_fill_its_pane_and_writes_its_losses():
    """Two leads (the dispatcher in each layout), one of them losing: each named in the
    legend by its marker, the loss's value written beside it, and the SVG responsive (as wide as
    the landing page's pane, its height from the viewBox), its text at reading size."""
    from groupconv_atlas.study.report import glance_figure, responsive_svg, svg_bytes

    doc = headline(("dispatch", "dispatch_nhwc", "k5"), {**RATIOS, "dispatch_nhwc": 0.7})
    fig = glance_figure(doc, 0.05)
    [legend] = fig.legends
    words = [t.get_text() for t in legend.get_texts()]
    assert words[:2] == ["dispatch (NCHW calls)", "dispatch_nhwc (channels_last calls)"]
    assert [h.get_marker() for h in legend.legend_handles[:2]] == ["o", "s"]
    ax = fig.axes[0]
    written = [t.get_text() for t in ax.texts]
    assert "0.70x" in written and not any(w.startswith("1.5") for w in written), written
    assert min(t.get_fontsize() for t in [*ax.get_yticklabels(), *legend.get_texts()]) >= 9
    svg = responsive_svg(svg_bytes(fig))
    tag = svg[svg.index(b"<svg "):svg.index(b">", svg.index(b"<svg "))]
    assert b'width="100%"' in tag and b"viewBox=" in tag and b"height=" not in tag


def test_the_glance_figure_takes_a_floor_panel(today):
    from groupconv_atlas.study.report import glance_figure

    floor = {"dispatch": {"all shapes": {"point": 3.0, "low": 2.5, "high": 3.5},
                          "depthwise": {"point": 1.5, "low": 1.2, "high": 1.9}}}
    fig = glance_figure(today, 0.05, floor=floor)
    assert len(fig.axes) == 3
    assert fig.axes[1].get_title(loc="left").startswith("each lead against the floor")
    assert "not in this record" not in fig.axes[0].get_xlabel()
    # A record that timed the floor beside its kernels but not beside the lead: no empty panel,
    # the axis says so.
    unfloored = glance_figure(today, 0.05, floor={"dispatch": None})
    assert len(unfloored.axes) == 2
    assert "dispatch not timed beside it" in unfloored.axes[0].get_xlabel()
    # One reading per region given, at its point.
    from matplotlib.collections import PathCollection

    points = [c.get_offsets()[0][0] for c in fig.axes[1].collections
              if isinstance(c, PathCollection)]
    assert sorted(points) == [1.5, 3.0]


def test_the_landing_page_shows_the_figure_before_the_prose_and_the_kernels_by_layout(today):
    from groupconv_atlas.study.report import landing_headline

    atlas = {"headline": today, "evidence": {"mode": "replay", "record": "r", "device": "d"},
             "builds": {k: {} for k in ("k9", "k0", "k8", "k1")}}
    text = landing_headline(atlas, b"<svg/>")
    image = text.index(".. image::\n      data:image/svg+xml;base64,")
    # docutils reads an included file with a line-length limit: no line comes near it.
    assert max(map(len, text.splitlines())) < 1000
    # The one-sentence verdict first, then the figure, then the headline in full.
    verdict = text.index(".. class:: verdict\n\nVerdict at graph\\_device against torch\\_best")
    assert verdict < image < text.index("from atlas.json") < text.index("- At graph\\_device")
    assert ("Implementations measured: k0, k1 on contiguous NCHW; k8, k9 on channels\\_last."
            in text), text[-300:]


def test_each_candidate_gets_a_per_shape_figure_against_torch_best():
    pairs = [("k5", "torch_tuned"), ("k5", "torch_default"), ("dispatch", "torch_tuned"),
             ("k1", "k0"), ("k5", "torch_default_tf32")]
    assert torch_best_pairs(pairs) == [("k5", "torch_best"), ("dispatch", "torch_best")]
    assert torch_best_pairs([("k5", "torch_tuned")]) == []  # no torch_default: no torch_best


def test_the_verdict_sentence_says_what_wins_what_loses_and_how_sure():
    """One sentence, every number the headline's: per lead its geometric mean and interval over
    shapes with what the interval says, its WIN and LOSS counts and its worst shape, named."""
    from groupconv_atlas.study.report.landing import verdict_sentence

    doc = headline(("dispatch", "dispatch_nhwc", "k5"), {**RATIOS, "dispatch_nhwc": 0.7})
    atlas = {"headline": doc,
             "config": {"statistics": {"threshold": 0.05, "confidence_level": 0.95}}}
    sentence = verdict_sentence(atlas)
    assert sentence.startswith("Verdict at graph_device against torch_best (95% intervals over "
                               "shapes): "), sentence
    assert sentence.endswith(".") and ". " not in sentence, sentence  # one sentence
    graph = doc["boundaries"]["graph_device"]
    said = sentence.split(": ", 1)[1].split("; ")
    for name, part, whole in (("dispatch", said[0], "faster"),
                              ("dispatch_nhwc", said[1], "slower")):
        o = next(o for o in graph["overall"] if o["candidate"] == name)
        worst = graph["worst_shapes"][name]
        assert part.startswith(f"{name} (") and f" is {whole}: " in part, part
        assert (f"{o['geomean_ratio']:.2f}x [{o['shape_ci_low']:.2f}x, "
                f"{o['shape_ci_high']:.2f}x] over {o['shapes_compared']} shapes") in part, part
        assert f"WIN on {o['n_win']} and LOSS on {o['n_loss']}" in part, part
        assert worst["shape_id"] in part and f"{worst['ratio']:.2f}x" in part, part
    # The losing lead's worst shape is called a loss; the winning lead's is not.
    assert "its worst loss" in said[1] and "not a loss" in said[0]
    assert verdict_sentence({"headline": {"reference": None}}).startswith("Verdict: none")
