"""The op ranks autotuning runs with timing.run_medians (numpy: its install has no pandas); the
study reads the same samples as frames and takes timing_frames.pooled_medians. Both must be one
median of batch medians, or a kernel tuned by the op would be ranked on another figure than the
one the atlas reports for it."""
from __future__ import annotations

import numpy as np
import pytest

from groupconv import timing
from groupconv.timing import SAMPLE_COLUMNS, median_latencies, run_medians
from groupconv_atlas.study.statistics.timing_frames import pooled_medians, samples_frame


def synthetic_rows(seed: int, boundary: str = "graph_device") -> list[tuple]:
    """time_runs-shaped rows: several runs, batches of unequal (odd and even) sizes, latencies
    skewed so that the median of all samples and the median of batch medians differ."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, scale in (("k5", 10.0), ("k7", 10.2), ("torch_tuned", 9.9), ("torch_default", 12.0)):
        for batch in range(int(rng.integers(3, 8))):
            size = int(rng.integers(1, 9))
            shift = float(rng.exponential(2.0))  # a slow batch moves all its samples
            for sample in range(size):
                latency = scale + shift + float(rng.exponential(0.5))
                rows.append((name, boundary, batch, sample, latency, 1980.0, 40.0, 8, sample))
    rng.shuffle(rows)  # time_runs interleaves the runs
    return rows


def study_medians(rows: list[tuple]) -> dict[str, float]:
    frame = pooled_medians(samples_frame(rows, "s0"))
    return dict(zip(frame["implementation"], frame["median_us"].astype(float)))


@pytest.mark.parametrize("seed", range(12))
def test_run_medians_is_the_studys_pooled_median_and_ranks_the_same(seed):
    rows = synthetic_rows(seed)
    ours, study = run_medians(rows), study_medians(rows)
    assert ours == study
    assert sorted(ours, key=ours.get) == sorted(study, key=study.get)


def test_the_rows_tell_a_median_of_samples_from_a_median_of_batch_medians():
    """Without this the equality above could not catch run_medians pooling samples directly."""
    differs = 0
    for seed in range(12):
        rows = synthetic_rows(seed)
        all_samples = {name: float(np.median([r[SAMPLE_COLUMNS.index("latency_us")]
                                              for r in rows if r[0] == name]))
                       for name in {r[0] for r in rows}}
        differs += all_samples != run_medians(rows)
    assert differs


def test_median_latencies_ranks_by_run_medians_and_returns_the_raw_rows(monkeypatch):
    rows = synthetic_rows(3)
    seen = {}

    def fake_time_runs(session, runs, cfg, clocks, rng, boundaries, launches):
        seen.update(runs=sorted(runs), boundaries=boundaries, launches=launches)
        return rows, None, None

    monkeypatch.setattr(timing, "time_runs", fake_time_runs)
    runs = {name: (lambda: None) for name in ("k5", "k7", "torch_tuned", "torch_default")}
    medians, raw = median_latencies(object(), runs, object(), np.random.default_rng(0),
                                    clocks=object(), launches=8)
    assert seen == {"runs": sorted(runs), "boundaries": ("graph_device",), "launches": 8}
    assert raw is rows
    assert medians == study_medians(raw)
