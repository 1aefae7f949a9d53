"""Job planning: which timing jobs a configuration asks for, which jobs a record measured, what
each job compares, and which records the cross-record comparison reads. Pure Python on plain
data, imported while Snakemake builds the DAG (so it imports no renderer, no torch and no
PyCUDA), and tested on its own."""
from __future__ import annotations

import os
from pathlib import Path

from groupconv import record_formats
from groupconv.kernels import (BASELINES, DISPATCHERS, KERNELS, implementation_names,
                               base_implementation, twin_name)

Roles = dict[str, list[str]]  # {"candidates": [...], "references": [...]}


class PlanError(ValueError):
    """A configuration the planner refuses; the message names the config field."""


def jobs_import_from(basedir: str | Path) -> None:
    """Put the checkout's own package first on PYTHONPATH, which every job of the run inherits:
    a job in a copy of the repository then reads that copy's kernels and records, never those of
    the installed tree. What was on PYTHONPATH before (a GPU machine's wheels) stays after it."""
    ours = str(Path(basedir) / "workflow")
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ours]
    os.environ["PYTHONPATH"] = os.pathsep.join([ours, *rest])


def check_names(config: dict) -> None:
    """Every implementation the timing section names exists and is built or verified, and no
    reference group puts torch_default beside torch_tuned."""
    known = set(implementation_names()) | set(DISPATCHERS)
    timing = config["timing"]
    named = [("timing.candidates", n) for n in timing["candidates"]]
    named += [(f"timing.reference_groups.{g}", n) for g, refs in timing["reference_groups"].items()
              for n in refs]
    for field, name in named:
        if name not in known:
            raise PlanError(f"config {field}: unknown implementation {name!r}; "
                            f"known: {', '.join(sorted(known))}")
    enabled = set(config["kernels"]) | set(config["baselines"])
    for field, name in [*named, ("timing.aa_implementation", timing["aa_implementation"])]:
        if name not in enabled:
            raise PlanError(f"config {field}: {name!r} is not listed in 'kernels' or "
                            "'baselines', so it is never built or verified")
    for group, refs in timing["reference_groups"].items():
        clash = cache_clash(refs)
        if clash:
            raise PlanError(
                f"config timing.reference_groups.{group}: {clash[0]} and {clash[1]} cannot be "
                "timed in one process: PyTorch's cuDNN algorithm cache is process-global and not "
                "keyed by cudnn.benchmark (pytorch/pytorch#45372), so the first call's algorithm "
                "would serve both; put them in separate groups")


def cache_clash(refs) -> tuple[str, str] | None:
    """Two strict-FP32 PyTorch references that would share cuDNN's algorithm cache entries in
    one process: the same layout (the cache is keyed by memory format and TF32 setting) but
    different cudnn.benchmark settings."""
    strict = [r for r in refs if r in BASELINES and not BASELINES[r]["tf32"]]
    for i, a in enumerate(strict):
        for b in strict[i + 1:]:
            if (BASELINES[a]["layout"] == BASELINES[b]["layout"]
                    and BASELINES[a]["benchmark"] != BASELINES[b]["benchmark"]):
                return a, b
    return None


def configured_jobs(timing: dict) -> dict[str, Roles]:
    """A live run's timing jobs and their roles: one job per reference group timing every
    candidate interleaved with that group's references (each group in its own processes), the
    dispatcher's job per group (it is chosen from the candidates' timings), and the A/A job."""
    jobs: dict[str, Roles] = {}
    for group, refs in timing["reference_groups"].items():
        jobs[group] = {"candidates": list(timing["candidates"]), "references": list(refs)}
    if timing.get("dispatch"):
        # The dispatcher answers "what does a caller gain over PyTorch": its jobs time it against
        # the group's PyTorch references only (a custom reference such as k0 would add its samples
        # to the job and no question; the dispatcher's kernels already face k0 in the group's job).
        for group, refs in timing["reference_groups"].items():
            torch_refs = [r for r in refs if r not in KERNELS]
            if torch_refs:
                jobs[f"dispatch-{group}"] = {"candidates": list(DISPATCHERS),
                                             "references": torch_refs}
    aa = timing["aa_implementation"]
    jobs["aa"] = {"candidates": [aa], "references": [twin_name(aa)]}
    return jobs


def recorded_jobs(record: str | Path) -> dict[str, Roles]:
    """The jobs a record measured and their roles, from its timing metadata, so a record stays
    replayable whatever the configuration says now (read in the current format:
    record_formats.timing_meta)."""
    jobs: dict[str, Roles] = {}
    for meta_path in sorted(Path(record, "raw", "timing").glob("*.json")):
        meta = record_formats.read_timing_meta(meta_path)
        jobs[meta_path.stem] = {"candidates": list(meta["candidates"]),
                                "references": list(meta["references"])}
    return jobs


def implementations(roles: Roles) -> list[str]:
    """What a job measures: its candidates, then its references (or the A/A twin), once each."""
    return list(dict.fromkeys([*roles["candidates"], *roles["references"]]))


def pairs(roles: Roles) -> list[tuple[str, str]]:
    """(candidate, reference) pairs a job compares."""
    return [(c, r) for c in roles["candidates"] for r in roles["references"] if c != r]


def comparison_pairs(jobs: dict[str, Roles]) -> list[tuple[str, str]]:
    """Every (candidate, reference) pair the jobs compare, except the A/A job's."""
    return [pair for job, roles in jobs.items() if job != "aa" for pair in pairs(roles)]


def jobs_of(jobs: dict[str, Roles], candidates) -> list[str]:
    """The jobs (not the A/A one) that time any of `candidates` as a candidate."""
    return [job for job, roles in jobs.items()
            if job != "aa" and set(roles["candidates"]) & set(candidates)]


def job_kernels(roles: Roles) -> list[str]:
    """The custom kernels a job launches (twins included, as their base kernel)."""
    return sorted({base_implementation(i) for i in implementations(roles)} & set(KERNELS))


def committed_records(records_dir: str | Path = "records") -> list[str]:
    """Every record folder with a manifest, by name."""
    return sorted(p.parent.name for p in Path(records_dir).glob("*/record.json"))


def compare_inputs(names: list[str] | None, records_dir: str = "records") -> dict[str, list[str]]:
    """The compare_records job's inputs: each record's manifest, in the order named (`names`, or
    every committed record when empty), and the raw files its cells are computed from, so an
    amended record reruns. Refuses an unknown record or fewer than two."""
    committed = committed_records(records_dir)
    names = list(names or committed)
    unknown = [n for n in names if n not in committed]
    if unknown:
        raise LookupError(f"config compare.records: no committed record {', '.join(unknown)}; "
                          f"committed: {', '.join(committed) or 'none'}")
    if len(names) < 2:
        raise LookupError(f"compare_records needs two or more records, got {names}")
    # The builds, dispatch table and machine-code note decide which cells are the same code.
    raw = [str(p) for n in names for pattern in ("timing/*.json", "timing/*.parquet",
                                                 "verification/*.parquet", "builds/*.json",
                                                 "builds/*.cubin", "dispatch/table.json",
                                                 "same_machine_code.json")
           for p in sorted(Path(records_dir, n, "raw").glob(pattern))]
    return {"manifests": [f"{records_dir}/{n}/record.json" for n in names], "raw": raw}


def figure_stem(candidate: str, baseline: str, boundary: str) -> str:
    """The file stem of a comparison's forest figure."""
    return f"{candidate}__vs__{baseline}__{boundary}"
