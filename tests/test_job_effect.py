"""A job effect planted in synthetic samples (test input, not measurements): two timing jobs time
the same shape, the second running everything 1.3x slower, as one job's conditions can. Every
figure that compares implementations timed in different jobs (torch_best's choice, time over the
floor, the fastest implementation per shape) must read them through same-job comparisons, so it
stays where it is without the effect; the old reading, medians pooled over the jobs, moves."""
import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.statistics.timing_frames import batch_medians, pooled_medians
from groupconv_atlas.study.statistics.comparisons import comparisons_for_job
from groupconv_atlas.study.measuring.floors import (FLOOR_COPY, FLOOR_LAUNCH, floor_table,
                                          over_floor_by_implementation)
from groupconv_atlas.study.artifacts.headline import fastest_per_shape
from groupconv_atlas.study.statistics.medians import job_medians, torch_best_choice, with_torch_best
from groupconv_atlas.study.statistics.stats import TORCH_BEST, StatsConfig

SHAPE = "dw-s"
# True per-launch times (us): torch_tuned is the strongest reference, k8 beats it by 1.2x.
TRUE_US = {"k8": 15.0, "torch_default": 20.0, "torch_tuned": 18.0,
           FLOOR_COPY: 10.0, FLOOR_LAUNCH: 1.0}
JOBS = {"default": ["k8", "torch_default"], "tuned": ["k8", "torch_tuned"]}


def _job_samples(job: str, slowdown: float, rng) -> pd.DataFrame:
    rows = [{"job": job, "shape_id": SHAPE, "implementation": impl, "boundary": "graph_device",
             "batch": b, "sample": s, "process": b % 3, "clock_flagged": False,
             "latency_us": TRUE_US[impl] * slowdown * (1 + 0.002 * rng.standard_normal())}
            for impl in [*JOBS[job], FLOOR_COPY, FLOOR_LAUNCH]
            for b in range(10) for s in range(30)]
    return pd.DataFrame(rows)


def _record(tuned_slowdown: float):
    rng = np.random.default_rng(7)
    samples = {job: _job_samples(job, tuned_slowdown if job == "tuned" else 1.0, rng)
               for job in JOBS}
    cfg = StatsConfig(threshold=0.05, confidence_level=0.95, resamples=1000, seed=1, method="t")
    status = {(SHAPE, impl): ("correct", "") for impl in TRUE_US}
    comparisons = pd.concat([
        comparisons_for_job(batch_medians(frame), JOBS[job], status, [SHAPE], ("graph_device",),
                            cfg, {"implementations": JOBS[job], "candidates": ["k8"],
                                  "references": JOBS[job][1:]}).assign(job=job)
        for job, frame in samples.items()], ignore_index=True)
    return samples, comparisons


def _paired_figures(tuned_slowdown: float) -> dict:
    samples, comparisons = _record(tuned_slowdown)
    table = with_torch_best(comparisons)
    best = table[(table["baseline"] == TORCH_BEST) & (table["candidate"] == "k8")].iloc[0]
    floors = floor_table(pd.concat(samples.values(), ignore_index=True))
    over = over_floor_by_implementation(job_medians(comparisons), floors).set_index(
        "implementation")["time_over_floor"]
    verification = pd.DataFrame({"shape_id": SHAPE, "implementation": list(TRUE_US),
                                 "status": "correct"})
    (fastest,) = fastest_per_shape(table, verification, TORCH_BEST, "graph_device")
    return {"torch_best": best["torch_best_choice"], "ratio": float(best["ratio"]),
            "k8_over_floor": float(over["k8"]),
            "torch_tuned_over_floor": float(over["torch_tuned"]),
            "torch_default_over_floor": float(over["torch_default"]),
            "fastest": fastest["fastest"]}


def test_a_planted_job_effect_leaves_every_paired_figure_where_it_was():
    without, with_effect = _paired_figures(1.0), _paired_figures(1.3)
    assert without["torch_best"] == with_effect["torch_best"] == "torch_tuned"
    assert with_effect["ratio"] == pytest.approx(without["ratio"], rel=0.005)
    assert with_effect["ratio"] == pytest.approx(18.0 / 15.0, rel=0.01)
    for key, true in (("k8_over_floor", 1.5), ("torch_tuned_over_floor", 1.8),
                      ("torch_default_over_floor", 2.0)):
        assert with_effect[key] == pytest.approx(without[key], rel=0.005), key
        assert with_effect[key] == pytest.approx(true, rel=0.01), key
    assert without["fastest"] == with_effect["fastest"] == "k8"


def test_the_old_pooled_reading_moves_under_the_same_effect():
    samples, comparisons = _record(1.3)
    # torch_best chosen by medians across jobs: the reference of the faster job wins.
    pooled_choice = torch_best_choice(comparisons)
    assert pooled_choice["reference"].tolist() == ["torch_default"]
    _, clean = _record(1.0)
    assert torch_best_choice(clean)["reference"].tolist() == ["torch_tuned"]
    # The floor pooled over both jobs' batches: torch_tuned's median over it is off by the effect.
    both = pd.concat(samples.values(), ignore_index=True)
    pooled = pooled_medians(both).set_index("implementation")["median_us"]
    moved = pooled["torch_tuned"] / max(pooled[FLOOR_COPY], pooled[FLOOR_LAUNCH])
    assert moved == pytest.approx(1.8 * 1.3 / pooled[FLOOR_COPY] * 10.0, rel=0.01)
    assert abs(moved - 1.8) > 0.1
