"""Paired statistics on synthetic batch medians (test input, not measurements)."""
import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.stats import (StatsConfig, batch_medians, classify, comparisons_for_job,
                                   hierarchical_geomean, paired_interval, summarize)

CFG = StatsConfig(seed=3)


@pytest.mark.parametrize("low,high,expected", [
    (1.06, 1.20, "WIN"), (0.80, 0.94, "LOSS"), (0.96, 1.04, "TIE"), (0.99, 1.10, "INCONCLUSIVE"),
    (0.90, 1.00, "INCONCLUSIVE"), (1 / 1.05, 1.05, "TIE"), (1.05, 1.2, "INCONCLUSIVE")])
def test_classify(low, high, expected):
    assert classify(low, high, 0.05) == expected


def test_paired_interval_covers_the_true_ratio_and_is_paired():
    rng = np.random.default_rng(0)
    drift = rng.lognormal(0, 0.2, 10)  # large shared drift between batches
    candidate = 10.0 * drift * rng.lognormal(0, 0.005, 10)
    baseline = 13.0 * drift * rng.lognormal(0, 0.005, 10)
    ratio, low, high = paired_interval(baseline, candidate, CFG)
    assert low < 1.3 < high and low < ratio < high
    assert high / low < 1.02, "pairing must cancel the shared drift"


def test_identical_ratios_give_a_point_interval():
    assert paired_interval(np.full(10, 2.0), np.full(10, 1.0), CFG) == (2.0, 2.0, 2.0)


def test_interval_is_deterministic_for_a_seed():
    rng = np.random.default_rng(1)
    b, c = rng.lognormal(0, 0.05, 10), rng.lognormal(0, 0.05, 10)
    assert paired_interval(b, c, CFG) == paired_interval(b, c, CFG)


def test_config_rejects_bad_values_by_name():
    with pytest.raises(ValueError, match="threshold"):
        StatsConfig(threshold=1.5)
    with pytest.raises(ValueError, match="resamples"):
        StatsConfig(resamples=10)


def test_hierarchical_geomean():
    logs = [np.log(np.full(10, 2.0)), np.log(np.full(10, 0.5)), np.log(np.full(10, 4.0))]
    gm, low, high = hierarchical_geomean(logs, CFG)
    assert gm == pytest.approx(4.0 ** (1 / 3)) and low == pytest.approx(gm)
    rng = np.random.default_rng(2)
    noisy = [np.log(rng.lognormal(0.1, 0.05, 10)) for _ in range(40)]
    gm, low, high = hierarchical_geomean(noisy, CFG)
    assert low < gm < high and low < np.exp(0.1) < high


def _samples(shape_ids, impls, speed, batches=10, per_batch=5, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for sid in shape_ids:
        for boundary in ("graph_device", "sync_api"):
            for b in range(batches):
                for impl in impls:
                    for s in range(per_batch):
                        rows.append((sid, impl, boundary, b, s,
                                     speed[impl] * rng.lognormal(0, 0.01), False))
    return pd.DataFrame(rows, columns=["shape_id", "implementation", "boundary", "batch",
                                       "sample", "latency_us", "clock_flagged"])


def test_job_comparisons_keep_unsupported_and_incorrect_cells():
    samples = _samples(["a", "b"], ["k2", "k0", "torch_tuned"],
                       {"k2": 10.0, "k0": 20.0, "torch_tuned": 9.0})
    status = {(s, i): ("correct", "") for s in "abc" for i in ("k2", "k0", "torch_tuned")}
    status[("c", "k2")] = ("unsupported", "8 input channels per group")
    status[("b", "torch_tuned")] = ("incorrect", "planted")
    samples = samples[~((samples.shape_id == "b") & (samples.implementation == "torch_tuned"))]
    table = comparisons_for_job(batch_medians(samples), ["k2", "k0", "torch_tuned"], status,
                                ["a", "b", "c"], ("graph_device", "sync_api"), CFG)
    indexed = table.set_index(["shape_id", "baseline", "boundary"])
    assert indexed.loc[("a", "k0", "graph_device"), "ratio"] == pytest.approx(2.0, rel=0.02)
    assert indexed.loc[("a", "k0", "graph_device"), "class"] == "WIN"
    assert indexed.loc[("a", "torch_tuned", "sync_api"), "class"] == "LOSS"
    assert indexed.loc[("c", "k0", "graph_device"), "class"] == "UNSUPPORTED"
    assert "8 input channels" in indexed.loc[("c", "k0", "graph_device"), "reason"]
    assert indexed.loc[("b", "torch_tuned", "sync_api"), "class"] == "INCORRECT"
    summary = summarize(table, CFG).set_index(["baseline", "boundary"])
    row = summary.loc[("k0", "graph_device")]
    assert (row.n_win, row.n_unsupported, row.shapes_compared) == (2, 1, 2)
    assert row.geomean_ratio == pytest.approx(2.0, rel=0.02)


def test_cross_job_spread_compares_one_implementation_across_jobs():
    from groupconv_atlas.stats import cross_job_spread

    rows = []
    for job, tuned_us in (("k3-tuned", 200.0), ("k4-tuned", 86.0)):
        rows.append({"job": job, "shape_id": "s", "candidate": job[:2], "baseline": "torch_tuned",
                     "boundary": "graph_device", "class": "WIN", "candidate_median_us": 50.0,
                     "baseline_median_us": tuned_us})
    rows.append({**rows[0], "job": "aa", "candidate": "k0", "baseline": "k0_twin"})
    spread = cross_job_spread(pd.DataFrame(rows)).set_index("implementation")
    assert spread.loc["torch_tuned", "jobs"] == 2
    assert spread.loc["torch_tuned", "spread"] == pytest.approx(200 / 86)
    assert "k0_twin" not in spread.index and "k3" not in spread.index  # one job each
