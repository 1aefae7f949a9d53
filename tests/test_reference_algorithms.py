"""The algorithm cuDNN ran per timing process for each PyTorch reference (groupconv/cudnn_choice,
kept in the timing job's metadata as `reference_kernels`) and what the study makes of it
(study/statistics/reference_algorithms): the cells whose reference changed algorithm, named in the
evidence, and torch_best read on the reference's fastest algorithm. On synthetic metadata and
batch medians (test input, not measurements); on the GPU, the names themselves."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from groupconv.files import REPO_ROOT
from groupconv_atlas.study.statistics.comparisons import compare
from groupconv_atlas.study.statistics.medians import with_torch_best
from groupconv_atlas.study.statistics.reference_algorithms import (algorithm_changes,
                                                                   algorithm_table,
                                                                   strongest_readings)
from groupconv_atlas.study.statistics.stats import StatsConfig

CFG = StatsConfig(seed=1, resamples=2000)
PROCESSES = [0, 1, 2, 0, 1, 2, 0, 1, 2]
# torch_tuned_nhwc ran algorithm A in process 0 (fast) and B in processes 1 and 2 (slow).
FAST, SLOW, CANDIDATE = 2.0, 7.0, 4.0
NAMES = {"torch_tuned_nhwc": [["A_kernel"], ["B_transform", "B_gemm"], ["B_transform", "B_gemm"]],
         "torch_tuned": [["C_kernel"]] * 3}


def _rows(job: str, baseline: str, baseline_us: list[float]) -> pd.DataFrame:
    """k5 against `baseline` in `job` on shape s1 at graph_device, from batch medians."""
    batches = range(len(PROCESSES))
    medians = pd.DataFrame({"shape_id": "s1", "boundary": "graph_device", "batch": list(batches),
                            "process": PROCESSES, "clock_flagged": False})
    medians = pd.concat([medians.assign(implementation="k5", median_us=CANDIDATE),
                         medians.assign(implementation=baseline, median_us=baseline_us)])
    return compare(medians, "k5", baseline, CFG).assign(job=job)


def comparisons() -> pd.DataFrame:
    nhwc = [FAST if p == 0 else SLOW for p in PROCESSES]
    return pd.concat([_rows("tuned", "torch_tuned_nhwc", nhwc),
                      _rows("tuned", "torch_tuned", [10.0] * len(PROCESSES)),
                      _rows("default", "torch_default", [12.0] * len(PROCESSES))],
                     ignore_index=True)


def meta() -> dict:
    return {"tuned": {"shapes": [{"shape_id": "s1", "reference_kernels": NAMES}]},
            "default": {"shapes": [{"shape_id": "s1"}]}}  # a job without names


def test_the_table_holds_one_row_per_shape_reference_and_process():
    table = algorithm_table(meta())
    assert len(table) == 6 and set(table["job"]) == {"tuned"}
    row = table[(table["reference"] == "torch_tuned_nhwc") & (table["process"] == 1)].iloc[0]
    assert row["kernels"] == "B_transform + B_gemm"
    assert algorithm_table({"old": {"shapes": [{"shape_id": "s1"}]}}).empty


def test_a_reference_that_changed_algorithm_is_named_with_each_algorithms_processes():
    [cell] = algorithm_changes(algorithm_table(meta()), comparisons())
    assert (cell["shape_id"], cell["reference"]) == ("s1", "torch_tuned_nhwc")
    fastest, other = cell["algorithms"]
    assert (fastest["kernels"], fastest["processes"]) == ("A_kernel", ["tuned:0"])
    assert other["processes"] == ["tuned:1", "tuned:2"]
    assert fastest["median_us"] == pytest.approx(FAST) and other["median_us"] == pytest.approx(SLOW)


def test_torch_best_takes_the_fastest_algorithm_and_the_reference_stays_as_measured():
    comp = comparisons()
    before = with_torch_best(comp)
    after = with_torch_best(comp, algorithms=algorithm_table(meta()), cfg=CFG)
    best = after[after["baseline"] == "torch_best"].iloc[0]
    # Over every process torch_tuned_nhwc's median is the slow algorithm's; on A's batches alone
    # it is the fast one, and k5 against it is FAST / CANDIDATE.
    assert best["torch_best_choice"] == "torch_tuned_nhwc"
    assert best["ratio"] == pytest.approx(FAST / CANDIDATE)
    assert best["batches"] == PROCESSES.count(0) and best["reference_algorithm"] == "A_kernel"
    # Before: over the three processes' mean log ratios, the slow algorithm's two among them.
    assert before[before["baseline"] == "torch_best"].iloc[0]["ratio"] == pytest.approx(
        (FAST * SLOW * SLOW) ** (1 / 3) / CANDIDATE)
    measured = ["shape_id", "candidate", "baseline", "boundary", "ratio", "ci_low", "ci_high"]
    pd.testing.assert_frame_equal(after[after["baseline"] != "torch_best"][measured]
                                  .reset_index(drop=True),
                                  before[before["baseline"] != "torch_best"][measured]
                                  .reset_index(drop=True))


def test_without_names_torch_best_is_exactly_what_it_was():
    comp = comparisons()
    empty = algorithm_table({"old": {"shapes": [{"shape_id": "s1"}]}})
    pd.testing.assert_frame_equal(with_torch_best(comp, algorithms=empty, cfg=CFG),
                                  with_torch_best(comp))
    assert strongest_readings(comp, empty, CFG) is comp


# The first record whose timing processes named the kernels cuDNN ran.
FIRST_NAMING = "h200-2026-12-02-c"


def test_records_before_the_names_have_none_so_their_replays_read_as_before():
    """A record made before the names were kept has none: its replay takes the path above; the
    first record that keeps them names them in its jobs with tuned references."""
    first = json.loads((REPO_ROOT / "records" / FIRST_NAMING / "record.json").read_text())
    for meta_path in sorted(REPO_ROOT.glob("records/*/raw/timing/*.json")):
        doc = json.loads(meta_path.read_text())
        record = json.loads((meta_path.parents[2] / "record.json").read_text())
        if record["created_utc"] < first["created_utc"]:
            assert algorithm_table({meta_path.stem: doc}).empty, meta_path
    named = algorithm_table({"tuned": json.loads(
        (REPO_ROOT / "records" / FIRST_NAMING / "raw/timing/tuned.json").read_text())})
    assert not named.empty and set(named["reference"]) >= {"torch_tuned", "torch_tuned_nhwc"}


def test_the_evidence_names_the_cells_and_says_what_torch_best_takes():
    from groupconv_atlas.study.artifacts.evidence import _algorithms, template_blocks

    changes = algorithm_changes(algorithm_table(meta()), comparisons())
    text = _algorithms({"reference_algorithms": {"named": 6, "changed": changes}},
                       template_blocks())
    assert text.startswith("- **The algorithm each PyTorch reference ran:**")
    assert "(6 readings of shape, reference and process)" in text
    # Counted per reference with the shapes; the kernels' names stay in atlas.json.
    assert ("On 1 (shape, reference) cells a reference ran more than one algorithm "
            "(torch_tuned_nhwc on 1; shapes s1)") in text
    assert "torch_best reads it on the batches of its fastest algorithm's processes" in text
    assert "A_kernel" not in text and "atlas.json's reference_algorithms" in text
    assert _algorithms({}, template_blocks()) == ""
    same = _algorithms({"reference_algorithms": {"named": 3, "changed": []}}, template_blocks())
    assert "each reference ran the same kernels on each shape" in same


@pytest.mark.gpu
def test_the_kernels_a_convolution_launches_are_named():
    import torch

    from groupconv.cudnn_choice import gpu_kernels

    x = torch.randn(8, 64, 28, 28, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(64, 4, 3, 3, device="cuda").contiguous(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 16)  # the search, outside the reading
    names = gpu_kernels(torch, lambda: torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 16))
    assert names and all(isinstance(n, str) and n for n in names), names
    assert len(set(names)) == len(names)
    assert gpu_kernels(torch, lambda: None) == []
    assert gpu_kernels(torch, lambda: x.fill_(1.0)) != []  # one elementwise kernel
