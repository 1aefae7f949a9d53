"""current-evidence.md (study/artifacts/evidence.py) states what the record holds: the layouts it
measured and which kernels and references ran in each, what it did not measure, its caveats and
amendments once each, in a page short enough to read (LINES lines at most, no line over
evidence.LINE_LIMIT characters). On synthetic atlas documents, on the smoke record's replay, and
(the integration set) on a replay of the committed H100 record; the newest H200 record's page where
`make atlas` replays it (tests/test_readme_commands_run.py). The checks: tests/evidence_checks.py."""
import json
import re

import pytest

from evidence_checks import (assert_readable, check_committed_page, check_replayed_page, items,
                             layout_bullet, section)
from groupconv_atlas.study.artifacts.evidence import cut_line, evidence_markdown
from groupconv_atlas.study.artifacts.evidence_facts import NOT_MEASURED
from groupconv_atlas.study.records.committed import replay_arguments
from helpers import ROOT, SMOKE_DEVICE, copy_checkout, snakemake

H100_RECORD = "h100-2026-12-06"


def comparison(candidate: str, baseline: str, boundary: str, ratio: float = 1.2) -> dict:
    return {"job": "aa" if baseline.endswith("_twin") else candidate, "candidate": candidate,
            "baseline": baseline, "boundary": boundary, "geomean_ratio": ratio,
            "shape_ci_low": ratio * 0.9, "shape_ci_high": ratio * 1.1, "ci_low": ratio * 0.99,
            "ci_high": ratio * 1.01, "n_win": 40, "n_tie": 10, "n_loss": 5,
            "n_inconclusive": 25, "n_unsupported": 0, "n_incorrect": 0}


def synthetic_atlas(kernels: list[str], references: list[str], dispatchers: list[str],
                    summary_lines: list[str] | None = None, caveats: list[str] | None = None,
                    amendments: list[str] | None = None) -> dict:
    """The atlas.json fields the page reads, for a record that built `kernels`, verified them
    and `references`, and timed the kernels and `dispatchers` against the references and
    torch_best at both boundaries."""
    verified = [*kernels, *references]
    comparisons = [comparison(cand, ref, b) for b in ("graph_device", "sync_api")
                   for cand in (*dispatchers, *kernels) for ref in (*references, "torch_best")]
    comparisons.append(comparison(kernels[0], f"{kernels[0]}_twin", "graph_device", 1.0))
    return {
        "evidence": {"mode": "replay", "device": "synthetic", "record": "synthetic-record",
                     "statement": "replayed from committed record synthetic-record; no GPU was "
                                  "used to make this artifact",
                     "caveats": caveats or [], "amendments": amendments or []},
        "session": {"gpu_name": "NVIDIA H100", "driver": "1", "cuda_runtime": "13.0",
                    "cudnn": 91900, "torch": "2.11", "pycuda": "2026.1",
                    "precision": {"api": "fp32_precision", "tf32": False},
                    "timing_measured_alone": True, "timing_wall_s": {"default": 1.0, "aa": 1.0}},
        "config": {"statistics": {"threshold": 0.05, "confidence_level": 0.95, "method": "t",
                                  "resamples": 10000, "seed": 1},
                   "timing": {"batches": 10, "samples_per_batch": 30, "l2_policy": "warm"},
                   "verification_tolerance_factor": 16.0},
        "shape_set": {"count": 80, "sha256": "0" * 64,
                      "geometry": {"dtype": "float32", "kernel": 3, "stride": 1, "padding": 1,
                                   "dilation": 1, "bias": False, "layout": "NCHW contiguous"}},
        "builds": {k: {} for k in kernels},
        "verification": {i: {"correct": 49, "incorrect": 0, "unsupported": 31} for i in verified},
        "comparisons": comparisons,
        "aa": {"implementation": kernels[0], "win_or_loss": 0, "pairs": 80, "rate": 0.0,
               "limit": 0.05, "passed": True, "by_boundary": {}},
        "clock": {"batches_clock_flagged": 0, "batches_total": 100, "flag_rule": "a rule"},
        "headline": {"summary_lines": summary_lines or ["At graph_device, the dispatcher ..."]},
        "probes": {"overhead": {"measured": False, "snakemake_target": "overhead_probe"}},
        "crosscheck": None, "mobilenet": None, "roofline": None,
        "nsight": {"mode": "replay", "snakemake_target": "nsight", "captures": 0,
                   "borrowed_from": None, "borrowed_captures": 0},
    }


# --- synthetic records ---------------------------------------------------------------------------

def test_a_record_with_channels_last_kernels_names_them_under_that_layout():
    atlas = synthetic_atlas(["k5", "k8", "k11"], ["torch_tuned", "torch_tuned_nhwc"],
                            ["dispatch", "dispatch_nhwc"])
    # k10 built and verified, never timed: said so, not counted as timed.
    atlas["builds"]["k10"] = {}
    atlas["verification"]["k10"] = {"correct": 49, "incorrect": 0, "unsupported": 31}
    text = evidence_markdown(atlas)
    nhwc = layout_bullet(text, "channels_last (NHWC)")
    assert "custom kernels k8, k11 (built, verified and timed)" in nhwc
    assert "custom kernel k10 (built and verified, not timed)" in nhwc
    assert "dispatcher dispatch_nhwc (timed)" in nhwc and "torch_tuned_nhwc" in nhwc
    nchw = layout_bullet(text, "contiguous NCHW")
    assert "k5" in nchw and not re.search(r"\bk(8|10|11)\b", nchw)
    assert "dispatch (timed)" in nchw and "torch_tuned (verified and timed)" in nchw
    assert "no channels_last implementation ran" not in text
    assert "Custom kernels read and write contiguous NCHW" not in text
    not_claimed = " ".join(section(text, "What is not claimed").split())
    assert "layouts other than contiguous NCHW and channels_last (NHWC)" in not_claimed
    # The table's layout column is each candidate's own.
    rows = {r.split("|")[1].strip(): r.split("|")[2].strip()
            for r in section(text, "What was measured").splitlines() if r.startswith("| k")}
    assert rows == {"k5": "NCHW", "k8": "channels_last", "k11": "channels_last"}
    assert_readable(text, "synthetic two-layout record")


def test_an_nchw_only_record_says_nchw_only_and_guesses_no_layout():
    atlas = synthetic_atlas(["k0", "k3", "k5"], ["torch_default", "torch_tuned"], ["dispatch"])
    atlas["builds"]["k99"] = {}  # a kernel the registry does not hold: no layout invented
    text = evidence_markdown(atlas)
    layouts = section(text, "Layouts measured")
    assert "no channels_last implementation ran" in " ".join(layouts.split())
    assert "channels_last (NHWC)**" not in layouts
    assert "Not in the registry, so no layout is stated: k99." in items(layouts)
    assert "k99" not in layout_bullet(text, "contiguous NCHW")
    not_claimed = " ".join(section(text, "What is not claimed").split())
    assert "layouts other than contiguous NCHW," in not_claimed
    assert_readable(text, "synthetic NCHW-only record")


def test_caveats_and_amendments_are_listed_once_each_one_bullet_each():
    vouched = "kernel sources edited without changing machine code (k0, k5): hashes vouched"
    atlas = synthetic_atlas(
        ["k5"], ["torch_tuned"], ["dispatch"],
        caveats=["Timing ran on a shared machine.", "Timing ran on a shared machine"],
        amendments=[vouched, "the op's GPU tests, run later", vouched, f"{vouched} ", vouched])
    text = evidence_markdown(atlas)
    caveats = items(section(text, "Known limitations of this record"))
    assert caveats == ["Timing ran on a shared machine. (stated 2 times)"]
    amendments = items(section(text, "Amendments to the record"))
    assert amendments == [f"{vouched}. (4 amendments with this note)",
                          "the op's GPU tests, run later."]
    assert text.count(vouched) == 1
    assert_readable(text, "synthetic amended record")


def test_no_caveat_and_no_amendment_leave_no_empty_sections():
    text = evidence_markdown(synthetic_atlas(["k5"], ["torch_tuned"], ["dispatch"]))
    assert "## Known limitations of this record" not in text
    assert "## Amendments to the record" not in text
    assert "\n\n\n" not in text


def test_what_the_record_did_not_measure_is_said_for_each_stage():
    atlas = synthetic_atlas(["k5"], ["torch_tuned"], ["dispatch"])
    beyond = items(section(evidence_markdown(atlas), "Beyond the forward atlas"))
    for stage in ("Backward passes", "MobileNetV2 probe", "Probes overhead",
                  "Nsight Compute captures", "Independent timer cross-check",
                  "Roofline ceilings", "Measured floor"):
        found = [b for b in beyond if b.startswith(stage)]
        assert found and NOT_MEASURED in found[0], (stage, beyond)
    # Measured ones say so, and where the record's captures come from another record, whose.
    atlas["passes"] = {"by_pass": {"input_grad": {}, "weight_grad": {}},
                       "record": {"name": "synthetic-passes"}}
    atlas["nsight"] = {**atlas["nsight"], "borrowed_from": "older-record", "borrowed_captures": 6}
    beyond = items(section(evidence_markdown(atlas), "Beyond the forward atlas"))
    assert any(b.startswith("Backward passes: input_grad, weight_grad, from record "
                            "synthetic-passes") for b in beyond), beyond
    nsight = next(b for b in beyond if b.startswith("Nsight"))
    assert NOT_MEASURED in nsight and "the 6 of record older-record" in nsight
    atlas["nsight"] = {**atlas["nsight"], "captures": 22, "borrowed_from": None}
    beyond = items(section(evidence_markdown(atlas), "Beyond the forward atlas"))
    assert "Nsight Compute captures: 22 in this record (the report's nsight page)." in beyond


def test_long_headlines_and_lists_stay_within_the_limits():
    """Twenty headline sentences of 1500 characters, a cuDNN-length name in them, and many
    implementations: the page keeps to the limits, a long sentence cut after whole parts."""
    name = "void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, float>(params, float*)"
    sentence = "; ".join(f"region {i} (shapes [{i}, {i + 1}]; {name}) 1.{i:02d}x"
                         for i in range(14))
    lines = [f"Sentence {n}: {sentence}" for n in range(20)]
    kernels = ["k0", "k3", "k5", "k6", "k7", "k8", "k9", "k10", "k11", "k12"]
    atlas = synthetic_atlas(kernels, ["torch_default", "torch_tuned", "torch_default_nhwc",
                                      "torch_tuned_nhwc", "torch_default_tf32"],
                            ["dispatch", "dispatch_nhwc"], summary_lines=lines,
                            caveats=["a caveat " * 60])
    text = evidence_markdown(atlas)
    assert_readable(text, "synthetic long record")
    answer = items(section(text, "The answer first"))
    cut = [b for b in answer if b.startswith("Sentence")]
    assert len(cut) == 20 and all("more parts (whole: the report's landing page)" in b
                                  for b in cut)
    # Whole parts only: brackets balanced, every kept part as in the sentence.
    for bullet in cut:
        kept = bullet.split("; and ")[0]
        assert kept.count("(") == kept.count(")") and kept.count("[") == kept.count("]")
        assert lines[0].replace("Sentence 0", bullet.split(":")[0]).startswith(kept)


def test_a_short_sentence_is_never_cut():
    line = "At graph_device, the dispatcher (NCHW calls): 1.5x [1.4x, 1.6x]; wins 40"
    assert cut_line(line) == line


# --- replays -------------------------------------------------------------------------------------

def test_the_smoke_replays_page_is_within_the_limits_and_states_its_layouts(smoke_replay):
    check_replayed_page(smoke_replay / "results" / SMOKE_DEVICE)


# A replay of an 80-shape record up to its atlas (minutes on 2 cores): the integration set. The
# newest H200 record's page is checked where `make atlas` replays it
# (tests/test_readme_commands_run.py), rather than in a replay of its own.
@pytest.mark.integration
def test_the_committed_h100_records_page_is_within_the_limits(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    args = replay_arguments(ROOT / "records", H100_RECORD)
    device = json.loads((ROOT / "records" / H100_RECORD / "record.json").read_text())["device"]
    snakemake(repo, f"results/{device}/current-evidence.md", "--cores", "1", *args)
    check_committed_page(repo / "results" / device, ROOT / "records" / H100_RECORD)
