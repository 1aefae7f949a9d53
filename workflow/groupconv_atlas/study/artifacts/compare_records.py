"""Cross-record comparison: the cells that two or more committed records share, each record
re-classified from its own raw layer (timing samples, the timing jobs' implementation lists,
verification) with one StatsConfig, set side by side.

Only records/ is read, never a device's results/, so any checkout can compare any records; each
file read is first checked against its record's manifest (records.checked_files). Cells are
keyed by (shape, candidate, baseline, boundary), not by timing job: records name their jobs
differently ("k3" in one, "k3-tuned" and "k3-default" in another).

Agreement is counted over the cells every record timed with the same code; what that leaves out
is counted beside it, and every WIN/LOSS reversal is listed with its cause (reversals). Here are
data only: the page is report/compare_pages'."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from groupconv import record_formats
from groupconv.files import RecordError
from groupconv.kernels import DISPATCH, DISPATCH_NHWC, DISPATCHERS, base_implementation
from ..records.record_check import check
from ..statistics.medians import job_comparisons
# session_changes is for the session_agreement job, which imports it from here.
from ..records.committed import build_records, checked_files, kernel_sources, machine_code_vouch
from ..statistics.reference_algorithms import algorithm_table, session_changes  # noqa: F401
from ..statistics.stats import CLASSES, StatsConfig

KEY = ["shape_id", "candidate", "baseline", "boundary"]
# What each record contributes per cell; in the side-by-side table as "<record>:<column>".
# `code` is the code behind the cell as compared (build hashes, or a machine-code identity that
# a SASS comparison stands behind: shared_code), `source` the build hashes alone, `target` a
# dispatcher's choice on the shape, `reference_algorithms` the cuDNN kernels the baseline ran
# in the cell's processes (None where the record does not name them).
PER_RECORD = ["class", "ratio", "ci_low", "ci_high", "batches", "samples_per_batch", "job", "code",
              "candidate_code", "source", "target", "reference_algorithms"]
# Why a cell says WIN in one record and LOSS in another, in the order a reversal is explained
# by (reversals): another kernel ran, other code ran, the reference ran another algorithm.
CAUSES = ("dispatch_target", "candidate_code", "baseline_code", "code", "reference_algorithm")
UNEXPLAINED = "same_code"


def cell_code(implementation: str, shape_id: str, sources: dict[str, str],
              dispatches_to: dict[str, dict[str, str]]) -> str:
    """The code behind one side of a cell: a kernel's sources (its A/A twin's are its own), a
    dispatcher's choice on the shape ({shape: {dispatcher: target}}) and that choice's sources,
    or PyTorch ("torch")."""
    if implementation in DISPATCHERS:
        target = dispatches_to.get(shape_id, {}).get(implementation)
        return (f"{implementation}->{target}:{cell_code(target, shape_id, sources, {})}"
                if target else f"{implementation}->?")
    return sources.get(base_implementation(implementation), "torch")


def dispatch_targets(record_dir: str | Path) -> dict[str, dict[str, str]]:
    """{shape: {dispatcher: the implementation it ran}} from the record's dispatch table
    (raw/dispatch/table.json; {} without one)."""
    path = Path(record_dir, "raw", "dispatch", "table.json")
    if not path.is_file():
        return {}
    doc = record_formats.read_dispatch_document(*checked_files([path]))
    targets: dict[str, dict[str, str]] = {}
    for dispatcher, key in ((DISPATCH, "table"), (DISPATCH_NHWC, "table_nhwc")):
        for shape_id, entry in doc[key].items():
            targets.setdefault(shape_id, {})[dispatcher] = entry["implementation"]
    return targets


def machine_code_matches(record_dirs: list[Path]) -> list[dict]:
    """Per kernel that two compared records built from different sources, where a SASS
    comparison one of them holds shows both compiled to the same machine code
    (records.machine_code_vouch): {"kernel", "records": the two, "vouched_by", "cubin",
    "functions", "how"}. Named wherever it counts, so that a reader sees which cells are the
    same code by machine code rather than by source."""
    record_dirs = [Path(d) for d in record_dirs]
    builds = {d.name: build_records(d) for d in record_dirs}
    sources = {d.name: kernel_sources(d) for d in record_dirs}
    matches = []
    for i, first in enumerate(record_dirs):
        for second in record_dirs[i + 1:]:
            for kernel in sorted(set(builds[first.name]) & set(builds[second.name])):
                if sources[first.name][kernel] == sources[second.name][kernel]:
                    continue
                for vouching, other in ((first, second), (second, first)):
                    found = machine_code_vouch(vouching, kernel, builds[other.name][kernel])
                    if found:
                        matches.append({**found, "records": [first.name, second.name]})
                        break
    return matches


def same_source_kernels(record_dirs: list[Path]) -> list[str]:
    """The kernels every record built from the same source and header hashes."""
    sources = [kernel_sources(d) for d in record_dirs]
    return [k for k in sources[0] if all(s.get(k) == sources[0][k] for s in sources[1:])]


def shared_code(record_dirs: list[Path],
                matches: list[dict] | None = None) -> dict[str, dict[str, str]]:
    """{record: {kernel: code identity}} of records compared side by side: each build's own hashes
    (kernel_sources), except that kernels machine_code_matches finds compiled to the same
    machine code share one identity, so a source refactored between two sessions without
    changing the machine code still counts as the same code (and says so: record_cells'
    `source` keeps the hashes apart)."""
    record_dirs = [Path(d) for d in record_dirs]
    sources = {d.name: kernel_sources(d) for d in record_dirs}
    matches = machine_code_matches(record_dirs) if matches is None else matches
    same: dict[str, str] = {}  # identity -> the identity it is the same code as

    def root(code: str) -> str:
        while same.get(code, code) != code:
            code = same[code]
        return code

    for match in matches:
        a, b = (root(sources[r][match["kernel"]]) for r in match["records"])
        if a != b:
            same[max(a, b)] = min(a, b)
    return {name: {kernel: root(code) for kernel, code in kernels.items()}
            for name, kernels in sources.items()}


def record_cells(record_dir: str | Path, cfg: StatsConfig,
                 sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Every cell of one record, classified from its raw layer as compare_job would, with the
    code behind the cell (`code`: from `sources`, shared_code's identities, or the record's own
    build hashes; `source`: the build hashes alone), a dispatcher's target on the shape and the
    cuDNN kernels the baseline ran, so that a cell whose kernel changed between records is not
    counted as the same measurement taken again and a reversal can be traced to its cause."""
    own = kernel_sources(record_dir)
    sources = sources if sources is not None else own
    table_targets = dispatch_targets(record_dir)
    frames = []
    for meta_path, meta, table in job_comparisons(record_dir, cfg):
        table = with_code(table, sources, own, _job_targets(meta, table_targets,
                                                            Path(record_dir).name),
                          _reference_algorithms(meta_path.stem, meta))
        table["samples_per_batch"] = (meta.get("config") or {}).get("samples_per_batch")
        frames.append(table)
    cells = pd.concat(frames, ignore_index=True)
    for column in PER_RECORD:  # untimed rows carry no ratio or batches
        if column not in cells:
            cells[column] = None
    # Two jobs timing the same pair would give one cell two answers; refuse rather than pick.
    twice = cells[cells.duplicated(KEY, keep=False)]
    if not twice.empty:
        first = twice.iloc[0]
        jobs = sorted(twice[(twice[KEY] == first[KEY]).all(axis=1)]["job"])
        raise ValueError(f"record {Path(record_dir).name}: ({', '.join(map(str, first[KEY]))}) "
                         f"is measured by more than one timing job ({', '.join(jobs)})")
    return cells[KEY + PER_RECORD]


def with_code(cells: pd.DataFrame, sources: dict[str, str], own: dict[str, str],
              targets: dict[str, dict[str, str]],
              algorithms: dict[tuple[str, str], str] | None = None) -> pd.DataFrame:
    """`cells` (shape_id, candidate, baseline, ...) of one record with the code behind each:
    `code` (the candidate's and the baseline's cell_code from `sources`, the identities compared)
    and `candidate_code` alone, `source` (the same from `own`, the record's build hashes),
    `target` (a dispatcher's choice on the shape, from `targets`: {shape: {dispatcher:
    target}}) and `reference_algorithms` (the baseline's cuDNN kernels, from `algorithms`:
    {(shape, reference): kernels})."""
    shapes, cands, bases = cells["shape_id"], cells["candidate"], cells["baseline"]
    algorithms = algorithms or {}
    cells = cells.copy()
    cells["candidate_code"] = [cell_code(c, s, sources, targets) for s, c in zip(shapes, cands)]
    cells["code"] = [f"{c} vs {cell_code(b, s, sources, targets)}"
                     for s, c, b in zip(shapes, cells["candidate_code"], bases)]
    cells["source"] = [f"{cell_code(c, s, own, targets)} vs {cell_code(b, s, own, targets)}"
                       for s, c, b in zip(shapes, cands, bases)]
    cells["target"] = [targets.get(s, {}).get(c) if c in DISPATCHERS else None
                       for s, c in zip(shapes, cands)]
    cells["reference_algorithms"] = [algorithms.get((s, b)) for s, b in zip(shapes, bases)]
    return cells


def _job_targets(meta: dict, table: dict[str, dict[str, str]],
                 record: str) -> dict[str, dict[str, str]]:
    """{shape: {dispatcher: target}} for one timing job: the record's dispatch table, with what
    the job says it dispatched to where the table is silent; a job that names another target
    than the table is refused, since either could be what was timed."""
    targets = {s: dict(t) for s, t in table.items()}
    for entry in meta.get("shapes", []):
        for dispatcher, target in (entry.get("dispatches_to") or {}).items():
            known = targets.setdefault(entry["shape_id"], {}).setdefault(dispatcher, target)
            if known != target:
                raise ValueError(f"record {record}: timing job {meta.get('job', '?')} says "
                                 f"{dispatcher} ran {target} on {entry['shape_id']}, its "
                                 f"dispatch table {known}")
    return targets


def _reference_algorithms(job: str, meta: dict) -> dict[tuple[str, str], str]:
    """{(shape, reference): the cuDNN kernels it ran in the job's processes, each process's
    call as " + "-joined names, distinct calls sorted and joined by " | "}; only the references
    the job names (algorithm_table)."""
    table = algorithm_table({job: meta})
    return {key: " | ".join(sorted(set(kernels))) for key, kernels in
            table.groupby(["shape_id", "reference"])["kernels"]}


def compare(manifests, cfg: StatsConfig, progress=print
            ) -> tuple[pd.DataFrame, dict[str, dict], dict[str, str]]:
    """The records of `manifests` side by side (side_by_side), each checked as a replay checks
    it (record_check.check; RecordError for one whose files do not match), with the checks and
    how each sampled (`sampling`), per record name. `progress` takes a line per record."""
    checks, settings, cells = {}, {}, {}
    sources = shared_code([Path(m).parent for m in manifests])
    for manifest in manifests:
        record_dir = Path(manifest).parent
        name = record_dir.name
        checks[name] = check(record_dir)
        settings[name] = sampling(record_dir)
        cells[name] = record_cells(record_dir, cfg, sources[name])
        progress(f"{name}: {len(cells[name])} cells ({settings[name]})")
    return side_by_side(cells), checks, settings


def record_algorithms(record_dir: str | Path) -> pd.DataFrame:
    """The kernels cuDNN ran per process in a record's timing jobs (algorithm_table)."""
    return algorithm_table({p.stem: json.loads(p.read_text()) for p in checked_files(
        sorted((Path(record_dir) / "raw" / "timing").glob("*.json")))})


def compare_job(smk, job, name: str):
    """What a comparing job (compare_records, session_agreement) starts with: its statistics
    and its records side by side (compare); a record whose files do not match their hashes
    stops the job, named, as a replay would."""
    cfg = StatsConfig(**smk.params.statistics)
    try:
        return (cfg, *compare(smk.input.manifests, cfg, job.progress))
    except RecordError as err:
        raise SystemExit(f"{name}: {err}") from None


def side_by_side(cells_by_record: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per cell present in every record, each record's columns as "<record>:<column>";
    then whether every record timed it (`timed`: a measured class in each), whether all classes
    agree, whether all intervals share a point (only where every record timed the cell), whether
    one record says WIN where another says LOSS, and whether every record ran the same code
    (`same_code`), by its sources or only by its machine code (`same_code_by`)."""
    names = list(cells_by_record)
    wide = None
    for name, cells in cells_by_record.items():
        renamed = cells.rename(columns={c: f"{name}:{c}" for c in PER_RECORD})
        wide = renamed if wide is None else wide.merge(renamed, on=KEY, how="inner")
    classes = wide[[f"{n}:class" for n in names]]
    timed_everywhere = classes.isin(CLASSES).all(axis=1)
    common_low = wide[[f"{n}:ci_low" for n in names]].astype(float).max(axis=1)
    common_high = wide[[f"{n}:ci_high" for n in names]].astype(float).min(axis=1)
    wide["timed"] = timed_everywhere
    wide["classes_agree"] = classes.nunique(axis=1) == 1
    wide["intervals_overlap"] = pd.array(
        [bool(lo <= hi) if timed else pd.NA
         for lo, hi, timed in zip(common_low, common_high, timed_everywhere)], dtype="boolean")
    wide["reversal"] = (classes == "WIN").any(axis=1) & (classes == "LOSS").any(axis=1)
    # The same measurement taken again only where every record ran the same code for the cell.
    wide["same_code"] = wide[[f"{n}:code" for n in names]].nunique(axis=1) == 1
    source = [f"{n}:source" for n in names]
    same_source = (wide[source].nunique(axis=1) == 1 if all(c in wide for c in source)
                   else wide["same_code"])
    wide["same_code_by"] = [("source" if by_source else "machine_code") if same else None
                            for same, by_source in zip(wide["same_code"], same_source)]
    return wide.sort_values(KEY, ignore_index=True)


def record_names(wide: pd.DataFrame) -> list[str]:
    """The records of a side-by-side table, in its column order."""
    return [c[:-len(":class")] for c in wide.columns if c.endswith(":class")]


def timed_in_every_record(wide: pd.DataFrame) -> pd.Series:
    """Whether every record measured the cell (WIN, LOSS, TIE or INCONCLUSIVE in each): an
    unsupported, incorrect or unmeasured side says nothing about agreement, so such cells are
    counted apart rather than as agreeing."""
    return wide[[f"{n}:class" for n in record_names(wide)]].isin(CLASSES).all(axis=1)


def agreement(wide: pd.DataFrame) -> pd.DataFrame:
    """Per boundary and overall, over the shared cells every record timed with the same code
    (`cells`): the share whose classes agree, the share whose intervals overlap, flips and
    WIN/LOSS reversals, and how many of them are the same code by machine code only. Left out
    and counted: `untimed` (not timed in every record: `untimed_everywhere` in none,
    `timed_in_some` in some), `code_changed` (timed everywhere, other code), with the reversals
    among the latter (`reversals_code_changed`). shared = cells + code_changed + untimed."""
    rows = []
    timed_mask = timed_in_every_record(wide)
    anywhere = wide[[f"{n}:class" for n in record_names(wide)]].isin(CLASSES).any(axis=1)
    for boundary, whole in [*wide.groupby("boundary", sort=True), ("all", wide)]:
        timed = whole[timed_mask[whole.index]]
        part = timed[timed["same_code"]]
        changed = timed[~timed["same_code"]]
        overlap = int(part["intervals_overlap"].astype(bool).sum())
        agree = int(part["classes_agree"].sum())
        untimed = whole[~timed_mask[whole.index]]
        some = int(anywhere[untimed.index].sum())
        by = part["same_code_by"] if "same_code_by" in part else pd.Series("source", part.index)
        rows.append({"boundary": boundary, "shared": len(whole), "timed": len(timed),
                     "cells": len(part), "classes_agree": agree,
                     "share_classes_agree": agree / len(part) if len(part) else None,
                     "intervals_overlap": overlap,
                     "share_intervals_overlap": overlap / len(part) if len(part) else None,
                     "class_flips": len(part) - agree, "reversals": int(part["reversal"].sum()),
                     "same_code_by_machine_code": int((by == "machine_code").sum()),
                     "code_changed": len(changed),
                     "reversals_code_changed": int(changed["reversal"].sum()),
                     "untimed": len(untimed), "untimed_everywhere": len(untimed) - some,
                     "timed_in_some": some})
    return pd.DataFrame(rows)


def _value(value):
    """A cell's value as JSON holds it: None for a missing one."""
    if value is None or (not isinstance(value, (str, list, dict)) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def reversals(wide: pd.DataFrame) -> list[dict]:
    """Every cell that one record calls a WIN and another a LOSS (timed in both, whatever the
    code), with its causes in CAUSES' order: the dispatcher's target changed (`targets` names
    each record's), the candidate's or the baseline's code changed (`code` where the table
    does not say which side), the reference ran another cuDNN algorithm (both records name
    the kernels and they differ; `reference_algorithms` None where a record names none), or
    none of these: the same code, unexplained (UNEXPLAINED). `cause` is the first."""
    names = record_names(wide)
    out = []
    for row in wide[wide["reversal"]].to_dict("records"):
        def each(column: str) -> dict:
            return {n: _value(row.get(f"{n}:{column}")) for n in names}

        causes = []
        targets = each("target") if row["candidate"] in DISPATCHERS else None
        if targets and len(set(targets.values())) > 1:
            causes.append("dispatch_target")
        elif not row["same_code"]:
            mine = each("candidate_code")
            causes.append("code" if None in mine.values() else
                          "candidate_code" if len(set(mine.values())) > 1 else "baseline_code")
        algorithms = each("reference_algorithms")
        known = None not in algorithms.values()
        if known and len(set(algorithms.values())) > 1:
            causes.append("reference_algorithm")
        causes = sorted(causes, key=CAUSES.index) or [UNEXPLAINED]
        out.append({**{k: row[k] for k in KEY}, "classes": each("class"),
                    "ratios": each("ratio"), "cause": causes[0], "causes": causes,
                    "same_code": bool(row["same_code"]),
                    "same_code_by": _value(row.get("same_code_by")),
                    "targets": targets,
                    "reference_algorithms": algorithms if known else None})
    return out


def flips_by_comparison(wide: pd.DataFrame) -> list[list]:
    """Per (candidate, baseline), over the cells every record timed with the same code: cells,
    flips per boundary, reversals; most flips first, so a baseline that is itself unstable
    between sessions stands out."""
    rows = []
    counted = wide[timed_in_every_record(wide) & wide["same_code"]]
    for (cand, base), part in counted.groupby(["candidate", "baseline"], sort=True):
        flips = part[~part["classes_agree"]]
        rows.append([cand, base, len(part),
                     int((flips["boundary"] == "graph_device").sum()),
                     int((flips["boundary"] == "sync_api").sum()), int(part["reversal"].sum())])
    return sorted(rows, key=lambda r: (-(r[3] + r[4]), r[0], r[1]))


def sampling(record_dir: str | Path) -> str:
    """How a record sampled, from its timing metadata: "10 batches x 30 samples"."""
    settings = set()
    for meta_path in checked_files(sorted((Path(record_dir) / "raw" / "timing").glob("*.json"))):
        config = json.loads(meta_path.read_text()).get("config") or {}
        settings.add(f"{config.get('batches')} batches x {config.get('samples_per_batch')} "
                     "samples")
    return "; ".join(sorted(settings))
