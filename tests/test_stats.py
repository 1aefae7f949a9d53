"""Paired statistics on synthetic batch medians (test input, not measurements)."""
import numpy as np
import pandas as pd
import pytest

from groupconv_atlas.study.statistics.comparisons import comparisons_for_job, summarize
from groupconv_atlas.study.statistics.stats import (StatsConfig, classify, hierarchical_geomean,
                                                    paired_interval)
from groupconv import record_formats
from groupconv_atlas.study.statistics.timing_frames import batch_medians

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
                                     speed[impl] * rng.lognormal(0, 0.01), False, 0))
    return pd.DataFrame(rows, columns=["shape_id", "implementation", "boundary", "batch",
                                       "sample", "latency_us", "clock_flagged", "process"])


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
    from groupconv_atlas.study.statistics.medians import cross_job_spread

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


def _process_samples(offsets, batches_per_process=4, ratio=1.3, seed=0):
    """A candidate and a reference timed in several processes; each process shifts the
    reference by its own offset (its cuDNN algorithm). Batch numbers stay unique in the job."""
    rng = np.random.default_rng(seed)
    rows, batch = [], 0
    for process, offset in enumerate(offsets):
        for _ in range(batches_per_process):
            for impl, us in (("k5", 10.0), ("torch_tuned", 10.0 * ratio * offset)):
                for s in range(5):
                    rows.append(("a", impl, "graph_device", batch, s,
                                 us * rng.lognormal(0, 0.002), False, process))
            batch += 1
    return pd.DataFrame(rows, columns=["shape_id", "implementation", "boundary", "batch",
                                       "sample", "latency_us", "clock_flagged", "process"])


def test_process_is_a_level_when_a_comparison_spans_processes():
    from groupconv_atlas.study.statistics.comparisons import compare

    # One process's reference is 40% slower: pooled batches would call this a clear WIN.
    samples = _process_samples([1.0, 1.0, 1.4])
    medians = batch_medians(samples)
    assert sorted(medians["process"].unique()) == [0, 1, 2]
    row = compare(medians, "k5", "torch_tuned", CFG).iloc[0]
    assert row["interval_method"] == "process-t" and row["processes"] == 3
    assert row["batch_processes"] == [0] * 4 + [1] * 4 + [2] * 4
    assert row["class"] == "INCONCLUSIVE" and row["ci_low"] < 1.0
    # the same samples read as one process's (a record before the split: record_formats)
    pooled = compare(batch_medians(record_formats.samples(samples.drop(columns="process"))),
                     "k5", "torch_tuned", CFG).iloc[0]
    assert pooled["processes"] == 1 and pooled["interval_method"] == "t"
    assert pooled["class"] == "WIN"


def test_job_pairs_take_roles_from_the_metadata():
    from groupconv_atlas.study.statistics.comparisons import job_pairs

    impls = ["k4", "k5", "torch_tuned", "torch_default"]
    assert job_pairs(impls) == [("k4", "k5"), ("k4", "torch_tuned"), ("k4", "torch_default")]
    meta = {"job": "x", "candidates": ["k4", "k5"], "references": ["k5", "torch_tuned"]}
    assert job_pairs(impls, meta) == [("k4", "k5"), ("k4", "torch_tuned"), ("k5", "torch_tuned")]
    with pytest.raises(ValueError, match="references"):
        job_pairs(impls, {"job": "x", "candidates": ["k4"]})


def test_comparisons_for_job_compares_every_candidate_in_the_metadata():
    impls = ["k2", "k0", "torch_tuned"]
    samples = _samples(["a"], impls, {"k2": 10.0, "k0": 20.0, "torch_tuned": 9.0})
    status = {("a", i): ("correct", "") for i in impls}
    meta = {"candidates": ["k2", "k0"], "references": ["torch_tuned"]}
    table = comparisons_for_job(batch_medians(samples), impls, status, ["a"],
                                ("graph_device", "sync_api"), CFG, meta)
    pairs = set(zip(table["candidate"], table["baseline"]))
    assert pairs == {("k2", "torch_tuned"), ("k0", "torch_tuned")}
    k0 = table[(table.candidate == "k0") & (table.boundary == "graph_device")].iloc[0]
    assert k0["ratio"] == pytest.approx(0.45, rel=0.02) and k0["class"] == "LOSS"


def test_method_is_checked_by_name_and_bca_stays_selectable():
    with pytest.raises(ValueError, match="statistics.method"):
        StatsConfig(method="bayes")
    rng = np.random.default_rng(4)
    b, c = rng.lognormal(0.2, 0.02, 10), rng.lognormal(0, 0.02, 10)
    t_point, t_low, t_high = paired_interval(b, c, CFG)
    bca = paired_interval(b, c, StatsConfig(seed=3, method="BCa"))
    assert bca[0] == t_point and (bca[1], bca[2]) != (t_low, t_high)
    assert bca[1] < bca[0] < bca[2]


def test_two_stage_interval_covers_shape_to_shape_spread_that_noise_alone_hides():
    from groupconv_atlas.study.statistics.stats import two_stage_geomean

    rng = np.random.default_rng(5)
    # 40 shapes whose true ratios differ widely, each measured precisely.
    logs = [np.log(rng.lognormal(mu, 0.005, 10)) for mu in rng.normal(0.5, 0.3, 40)]
    gm, noise_low, noise_high = hierarchical_geomean(logs, CFG)
    same, shape_low, shape_high = two_stage_geomean(logs, CFG)
    assert same == gm
    assert shape_low < noise_low < gm < noise_high < shape_high
    assert np.log(shape_high / shape_low) > 10 * np.log(noise_high / noise_low)
    # Expected width: about 2 * 1.96 * 0.3 / sqrt(40) in log space.
    assert np.log(shape_high / shape_low) == pytest.approx(2 * 1.96 * 0.3 / np.sqrt(40), rel=0.3)
    assert two_stage_geomean(logs, CFG) == (same, shape_low, shape_high)


def test_summary_carries_both_intervals_and_the_old_names():
    samples = _samples(["a", "b", "c"], ["k2", "k0"], {"k2": 10.0, "k0": 20.0})
    status = {(s, i): ("correct", "") for s in "abc" for i in ("k2", "k0")}
    table = comparisons_for_job(batch_medians(samples), ["k2", "k0"], status, ["a", "b", "c"],
                                ("graph_device",), CFG)
    row = summarize(table, CFG).iloc[0]
    assert (row.ci_low, row.ci_high) == (row.noise_ci_low, row.noise_ci_high)
    assert row.shape_ci_low <= row.noise_ci_low <= row.geomean_ratio <= row.noise_ci_high \
        <= row.shape_ci_high


def _k5_row(job, shape, base, ratio, base_us):
    """A measured comparison row of k5 against `base` (test input, not a measurement)."""
    return {"job": job, "shape_id": shape, "candidate": "k5", "baseline": base,
            "boundary": "graph_device", "class": "WIN", "ratio": ratio,
            "candidate_median_us": 10.0, "baseline_median_us": base_us,
            "batch_ratios": [ratio] * 3}


def test_torch_best_is_the_faster_reference_per_shape_and_boundary():
    from groupconv_atlas.study.statistics.medians import with_torch_best

    row = _k5_row
    table = pd.DataFrame([row("k5-tuned", "a", "torch_tuned", 1.5, 15.0),
                          row("k5-default", "a", "torch_default", 2.0, 20.0),
                          row("k5-tuned", "b", "torch_tuned", 3.0, 30.0),
                          row("k5-default", "b", "torch_default", 1.2, 12.0),
                          row("k5-tuned", "c", "k0", 4.0, 40.0)])
    best = with_torch_best(table)
    derived = best[best.baseline == "torch_best"].set_index("shape_id")
    assert list(derived.index) == ["a", "b"]
    assert derived.loc["a", "torch_best_choice"] == "torch_tuned"
    assert derived.loc["a", "ratio"] == 1.5 and derived.loc["a", "job"] == "k5-tuned"
    assert derived.loc["b", "torch_best_choice"] == "torch_default"
    assert derived.loc["b", "ratio"] == 1.2 and derived.loc["b", "job"] == "k5-default"
    # Only one of the two references timed: no torch_best at all.
    assert "torch_best" not in set(with_torch_best(table[table.baseline != "torch_default"])
                                   ["baseline"])


def test_torch_best_spans_both_layouts_and_keeps_the_nchw_reading_beside_it():
    from groupconv_atlas.study.statistics.medians import with_torch_best

    # Shape a: cuDNN on channels_last is the fastest PyTorch path; shape b: NCHW tuned is.
    def row(job, shape, base, ratio, base_us):
        return {**_k5_row(job, shape, base, ratio, base_us),
                "batch_ratios": [ratio * f for f in (0.99, 1.0, 1.01)]}

    table = pd.DataFrame([row("tuned", "a", "torch_tuned", 3.0, 30.0),
                          row("tuned", "a", "torch_tuned_nhwc", 1.2, 12.0),
                          row("default", "a", "torch_default", 3.1, 31.0),
                          row("default", "a", "torch_default_nhwc", 1.3, 13.0),
                          row("tuned", "b", "torch_tuned", 1.5, 15.0),
                          row("tuned", "b", "torch_tuned_nhwc", 3.0, 30.0),
                          row("default", "b", "torch_default", 2.0, 20.0),
                          row("default", "b", "torch_default_nhwc", 3.0, 30.0)])
    both = with_torch_best(table)
    best = both[both.baseline == "torch_best"].set_index("shape_id")
    nchw = both[both.baseline == "torch_best_nchw"].set_index("shape_id")
    assert best.loc["a", "torch_best_choice"] == "torch_tuned_nhwc"
    assert best.loc["a", "ratio"] == 1.2
    assert best.loc["b", "torch_best_choice"] == "torch_tuned"
    # The NCHW-only reading never picks a channels_last reference.
    assert list(nchw["torch_best_choice"]) == ["torch_tuned", "torch_tuned"]
    assert nchw.loc["a", "ratio"] == 3.0
    summary = summarize(both, CFG).set_index("baseline")
    assert summary.loc["torch_best", "torch_best_chosen"] == {
        "torch_default": 0, "torch_tuned": 1, "torch_tuned_nhwc": 1}
    assert summary.loc["torch_best_nchw", "torch_best_chosen"] == {
        "torch_default": 0, "torch_tuned": 2}
    # A record without channels_last references gets no torch_best_nchw (it would equal
    # torch_best), and its torch_best is the older one.
    old = with_torch_best(table[~table.baseline.str.endswith("_nhwc")])
    assert "torch_best_nchw" not in set(old.baseline)
    assert list(old[old.baseline == "torch_best"]["torch_best_choice"]) == ["torch_tuned"] * 2


def test_the_dispatcher_never_chooses_a_channels_last_reference():
    from groupconv_atlas.study.statistics.dispatch import choose

    medians = pd.DataFrame([
        {"shape_id": "a", "implementation": impl, "boundary": "graph_device", "median_us": us}
        for impl, us in (("k5", 10.0), ("torch_tuned", 12.0), ("torch_tuned_nhwc", 4.0),
                         ("torch_default_tf32", 3.0))])
    verification = pd.DataFrame([{"shape_id": "a", "implementation": i, "status": "correct"}
                                 for i in medians["implementation"]])
    assert choose(medians, verification)["a"]["implementation"] == "k5"


def test_geometric_mean_intervals_resample_processes_where_batches_span_them():
    from groupconv_atlas.study.statistics.comparisons import replication_units

    rows = pd.DataFrame({"class": ["WIN", "WIN"],
                         "batch_ratios": [[2.0, 2.0, 4.0, 4.0], [3.0, 3.0, 3.0]],
                         "batch_processes": [[0, 0, 1, 1], [0, 0, 0]]})
    units = replication_units(rows)
    assert np.allclose(units[0], np.log([2.0, 4.0]))  # one value per process
    assert np.allclose(units[1], np.log([3.0, 3.0, 3.0]))  # one process: its batches
    old_rows = rows.drop(columns="batch_processes")  # tables made before processes
    assert len(replication_units(old_rows)[0]) == 4
