"""What cuDNN ran for each PyTorch reference, per timing process, and what follows from it.

Each timing worker names the GPU kernels one call of every PyTorch reference launched after its
warm-up (groupconv/cudnn_choice; the job's metadata keeps them per shape and process as
`reference_kernels`). cudnn.benchmark chooses per process, so one reference may run two
algorithms in two processes at very different speeds. From those names:
- `algorithm_table`: (job, shape, reference, process, kernels), empty for a record made before
  the names were kept;
- `algorithm_changes`: the cells whose reference ran more than one algorithm, each algorithm
  with the processes that ran it and its median latency there;
- `strongest_readings`: every comparison row against such a reference read again on the
  batches of the processes that ran its fastest algorithm (among the row's own processes: a
  ratio pairs the candidate and the reference within a batch), which is what torch_best takes
  (medians.with_torch_best): the best a user of that reference could get.
Without names every function leaves the comparisons as they are, so a record without them
replays exactly as before."""
from __future__ import annotations

import pandas as pd

from .comparisons import compare
from .stats import CLASSES, TORCH_BEST_FROM, StatsConfig

COLUMNS = ["job", "shape_id", "reference", "process", "kernels"]
# The rows of a comparison that a reading on fewer batches replaces.
READING = ["ratio", "ci_low", "ci_high", "class", "interval_method", "batches", "processes",
           "candidate_median_us", "baseline_median_us", "batch_ratios", "batch_processes",
           "candidate_batch_medians_us", "baseline_batch_medians_us"]


def algorithm_table(timing_meta: dict[str, dict]) -> pd.DataFrame:
    """(job, shape_id, reference, process, kernels) from the timing jobs' metadata (by job
    name); `kernels` joins one call's kernel names with " + ". Empty without names."""
    rows = [(job, entry["shape_id"], reference, process, " + ".join(names))
            for job, meta in timing_meta.items() for entry in meta.get("shapes", [])
            for reference, per_process in (entry.get("reference_kernels") or {}).items()
            for process, names in enumerate(per_process)]
    return pd.DataFrame(rows, columns=COLUMNS)


def session_changes(tables: dict[str, pd.DataFrame]) -> list[dict] | None:
    """Between records (algorithm_table of each, by record name): per (shape, reference) every
    record names, the algorithms each ran where they differ; None when a record names none (a
    change between sessions is then not known)."""
    if not tables or any(t.empty for t in tables.values()):
        return None
    ran = pd.concat({name: t.groupby(["shape_id", "reference"])["kernels"]
                     .agg(lambda k: sorted(set(k))) for name, t in tables.items()},
                    axis=1, join="inner")
    return [{"shape_id": shape_id, "reference": reference,
             "algorithms": {name: row[name] for name in tables}}
            for (shape_id, reference), row in ran.iterrows()
            if len({tuple(v) for v in row}) > 1]


def _reference_batches(comparisons: pd.DataFrame) -> pd.DataFrame:
    """(job, shape_id, reference, boundary, process, median_us): every measured batch median of
    a strict-FP32 PyTorch reference, once per job (each of its rows repeats the same batches)."""
    rows = comparisons[comparisons["baseline"].isin(TORCH_BEST_FROM)
                       & comparisons["class"].isin(CLASSES)
                       & ~comparisons["candidate"].isin(TORCH_BEST_FROM)]
    rows = rows.drop_duplicates(["job", "shape_id", "baseline", "boundary"])
    batches = rows[["job", "shape_id", "baseline", "boundary", "batch_processes",
                    "baseline_batch_medians_us"]].explode(["batch_processes",
                                                           "baseline_batch_medians_us"])
    return batches.set_axis(["job", "shape_id", "reference", "boundary", "process", "median_us"],
                            axis=1).astype({"process": int, "median_us": float})


def algorithm_changes(algorithms: pd.DataFrame, comparisons: pd.DataFrame,
                      boundary: str = "graph_device") -> list[dict]:
    """Per (shape, reference) that ran more than one algorithm over its processes and jobs:
    each algorithm, the job:process pairs that ran it and the reference's median latency in
    them at `boundary`, fastest first."""
    if algorithms.empty:
        return []
    varied = algorithms.groupby(["shape_id", "reference"])["kernels"].transform("nunique") > 1
    batches = _reference_batches(comparisons)
    batches = batches[batches["boundary"] == boundary]
    out = []
    for (shape_id, reference), part in algorithms[varied].groupby(["shape_id", "reference"],
                                                                  sort=True):
        timed = batches.merge(part, on=["job", "shape_id", "reference", "process"])
        runs = []
        for kernels, ran in part.groupby("kernels", sort=True):
            median = timed.loc[timed["kernels"] == kernels, "median_us"].median()
            runs.append({"kernels": kernels,
                         "processes": [f"{j}:{p}" for j, p in zip(ran["job"], ran["process"])],
                         "median_us": None if pd.isna(median) else float(median)})
        runs.sort(key=lambda r: (r["median_us"] is None, r["median_us"] or 0.0, r["kernels"]))
        out.append({"shape_id": shape_id, "reference": reference, "boundary": boundary,
                    "algorithms": runs})
    return out


def strongest_readings(comparisons: pd.DataFrame, algorithms: pd.DataFrame,
                       cfg: StatsConfig) -> pd.DataFrame:
    """`comparisons` with each row against a reference that ran several algorithms in the row's
    processes read again on the batches of the processes whose algorithm was fastest for that
    reference there (lowest median of its batch medians); `reference_algorithm` names the
    kernels of the algorithm each reading rests on. Unchanged without names."""
    if algorithms.empty:
        return comparisons
    kernels_of = {(j, s, r, p): k for j, s, r, p, k in algorithms[COLUMNS].itertuples(index=False)}
    rows = comparisons.to_dict("records")
    for row in rows:
        row["reference_algorithm"] = None
        if row["baseline"] not in TORCH_BEST_FROM or row["class"] not in CLASSES:
            continue
        names = [kernels_of.get((row["job"], row["shape_id"], row["baseline"], int(p)))
                 for p in row["batch_processes"]]
        if None in names:
            continue
        row["reference_algorithm"] = names[0]
        if len(set(names)) < 2:
            continue
        by_name = pd.Series(row["baseline_batch_medians_us"]).groupby(names).median()
        fastest = by_name.sort_values(kind="stable").index[0]
        keep = [n == fastest for n in names]
        row.update(_reading(row, keep, cfg), reference_algorithm=fastest)
    return pd.DataFrame(rows, columns=[*comparisons.columns, "reference_algorithm"])


def _reading(row: dict, keep: list[bool], cfg: StatsConfig) -> dict:
    """A comparison row's READING on the batches `keep` marks (comparisons.compare on them)."""
    def kept(values):
        return [v for v, k in zip(values, keep) if k]

    medians = pd.DataFrame({"shape_id": row["shape_id"], "boundary": row["boundary"],
                            "clock_flagged": False, "batch": kept(range(len(keep))),
                            "process": kept(row["batch_processes"])})
    medians = pd.concat([
        medians.assign(implementation=row["candidate"],
                       median_us=kept(row["candidate_batch_medians_us"])),
        medians.assign(implementation=row["baseline"],
                       median_us=kept(row["baseline_batch_medians_us"]))])
    again = compare(medians, row["candidate"], row["baseline"], cfg).iloc[0]
    return {column: again[column] for column in READING}
