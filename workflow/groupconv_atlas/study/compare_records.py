"""Cross-record comparison: the cells that two or more committed records share, each record
re-classified from its own raw layer (timing samples, the timing jobs' implementation lists,
verification) with one StatsConfig, set side by side.

Only records/ is read, never a device's results/, so any checkout can compare any records; each
file read is first checked against its record's manifest (records.checked_files). Cells are
keyed by (shape, candidate, baseline, boundary), not by timing job: records name their jobs
differently ("k3" in one, "k3-tuned" and "k3-default" in another)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..runtime import record_formats
from ..runtime.files import RecordError
from ..runtime.kernels import base_implementation
from .report import esc, fmt_interval, fmt_ratio, html_page, table_html
from .comparisons import comparisons_for_job
from .record_check import check
from .reference_algorithms import algorithm_table, session_changes  # noqa: F401  (the job's)
from .records import (_vouched_for, build_files, checked_files,  # noqa: F401  (its name here too)
                      kernel_sources, vouched_sources)
from .stats import CLASSES, StatsConfig
from ..runtime.timing import BOUNDARIES, batch_medians

KEY = ["shape_id", "candidate", "baseline", "boundary"]
# What each record contributes per cell; in the side-by-side table as "<record>:<column>".
PER_RECORD = ["class", "ratio", "ci_low", "ci_high", "batches", "samples_per_batch", "job", "code"]


def cell_code(implementation: str, shape_id: str, sources: dict[str, str],
              dispatches_to: dict[str, str]) -> str:
    """The code behind one side of a cell: a kernel's sources (its A/A twin's are its own), the
    dispatcher's choice on the shape and that choice's sources, or PyTorch ("torch")."""
    if implementation == "dispatch":
        target = dispatches_to.get(shape_id)
        return f"dispatch->{target}:{cell_code(target, shape_id, sources, {})}" if target else \
            "dispatch->?"
    return sources.get(base_implementation(implementation), "torch")


def shared_code(record_dirs: list[Path]) -> dict[str, dict[str, str]]:
    """{record: {kernel: code identity}} of records compared side by side: each build's own hashes
    (kernel_sources), except that a kernel another record vouches compiles to its own machine
    code (tools/same_machine_code.py) takes that record's identity, so a source refactored
    between two sessions without changing the machine code still counts as the same code."""
    sources = {d.name: kernel_sources(d) for d in record_dirs}
    files = {d.name: build_files(d) for d in record_dirs}
    vouched = {d.name: vouched_sources(d) for d in record_dirs}
    for later in record_dirs:
        for earlier in record_dirs:
            if earlier == later:
                continue
            for kernel, code in sources[later.name].items():
                if kernel in sources[earlier.name] and _vouched_for(
                        vouched[earlier.name].get(kernel), files[later.name].get(kernel)):
                    sources[earlier.name][kernel] = code
    return sources


def record_cells(record_dir: str | Path, cfg: StatsConfig,
                 sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Every cell of one record, classified from its raw layer as compare_job would, with the
    code behind the cell (`code`: from `sources`, shared_code's identities, or the record's own
    build hashes), so that a cell whose kernel changed between records is not counted as the
    same measurement taken again."""
    raw = Path(record_dir) / "raw"
    sources = sources if sources is not None else kernel_sources(record_dir)
    verification = pd.concat([pd.read_parquet(p)
                              for p in checked_files(sorted(raw.glob("verification/*.parquet")))],
                             ignore_index=True)
    status = {(r.shape_id, r.implementation): (r.status, r.reason)
              for r in verification.itertuples(index=False)}
    shape_ids = list(dict.fromkeys(verification["shape_id"]))
    frames = []
    for meta_path in checked_files(sorted(raw.glob("timing/*.json"))):
        meta = record_formats.read_timing_meta(meta_path)
        samples = record_formats.read_samples(*checked_files([meta_path.with_suffix(".parquet")]))
        table = comparisons_for_job(batch_medians(samples), meta["implementations"], status,
                                    shape_ids, BOUNDARIES, cfg, meta)
        table["job"] = meta_path.stem
        dispatches_to = {m["shape_id"]: m.get("dispatches_to", {}).get("dispatch")
                         for m in meta.get("shapes", [])}
        table["code"] = [f"{cell_code(c, s, sources, dispatches_to)} vs "
                         f"{cell_code(b, s, sources, dispatches_to)}"
                         for s, c, b in zip(table["shape_id"], table["candidate"],
                                            table["baseline"])]
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
    then whether all classes agree, whether all intervals share a point (only where every
    record timed the cell), and whether one record says WIN where another says LOSS."""
    names = list(cells_by_record)
    wide = None
    for name, cells in cells_by_record.items():
        renamed = cells.rename(columns={c: f"{name}:{c}" for c in PER_RECORD})
        wide = renamed if wide is None else wide.merge(renamed, on=KEY, how="inner")
    classes = wide[[f"{n}:class" for n in names]]
    timed_everywhere = classes.isin(CLASSES).all(axis=1)
    common_low = wide[[f"{n}:ci_low" for n in names]].astype(float).max(axis=1)
    common_high = wide[[f"{n}:ci_high" for n in names]].astype(float).min(axis=1)
    wide["classes_agree"] = classes.nunique(axis=1) == 1
    wide["intervals_overlap"] = pd.array(
        [bool(lo <= hi) if timed else pd.NA
         for lo, hi, timed in zip(common_low, common_high, timed_everywhere)], dtype="boolean")
    wide["reversal"] = (classes == "WIN").any(axis=1) & (classes == "LOSS").any(axis=1)
    # The same measurement taken again only where every record ran the same code for the cell.
    wide["same_code"] = wide[[f"{n}:code" for n in names]].nunique(axis=1) == 1
    return wide.sort_values(KEY, ignore_index=True)


def agreement(wide: pd.DataFrame) -> pd.DataFrame:
    """Per boundary and overall, over the shared cells whose code is the same in every record
    (`code_changed` counts the others, left out): cells, share whose classes agree, share (of
    the cells every record timed) whose intervals overlap, flips and WIN/LOSS reversals."""
    rows = []
    for boundary, whole in [*wide.groupby("boundary", sort=True), ("all", wide)]:
        part = whole[whole["same_code"]]
        timed = part["intervals_overlap"].notna()
        overlap = int(part.loc[timed, "intervals_overlap"].sum())
        agree = int(part["classes_agree"].sum())
        rows.append({"boundary": boundary, "cells": len(part), "classes_agree": agree,
                     "share_classes_agree": agree / len(part) if len(part) else None,
                     "timed_in_all": int(timed.sum()), "intervals_overlap": overlap,
                     "share_intervals_overlap": overlap / int(timed.sum()) if timed.any()
                     else None,
                     "class_flips": len(part) - agree, "reversals": int(part["reversal"].sum()),
                     "code_changed": len(whole) - len(part)})
    return pd.DataFrame(rows)


def flips_by_comparison(wide: pd.DataFrame) -> list[list]:
    """Per (candidate, baseline): shared cells, flips per boundary, reversals; most flips first,
    so a baseline that is itself unstable between sessions stands out."""
    rows = []
    for (cand, base), part in wide[wide["same_code"]].groupby(["candidate", "baseline"],
                                                              sort=True):
        flips = part[~part["classes_agree"]]
        rows.append([cand, base, len(part),
                     int((flips["boundary"] == "graph_device").sum()),
                     int((flips["boundary"] == "sync_api").sum()), int(part["reversal"].sum())])
    return sorted(rows, key=lambda r: (-(r[3] + r[4]), r[0], r[1]))


def share_text(value) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.1%}"


def _cells_table(wide: pd.DataFrame, names: list[str]) -> str:
    columns = ["shape", "candidate", "baseline", "boundary"]
    for name in names:
        columns += [f"{name} class", f"{name} ratio", f"{name} interval"]
    columns += ["classes agree", "intervals overlap"]
    rows, classes = [], []
    for r in wide.to_dict("records"):
        row, css = [r["shape_id"], r["candidate"], r["baseline"], r["boundary"]], [None] * 4
        for name in names:
            timed = r[f"{name}:class"] in CLASSES
            row += [r[f"{name}:class"], fmt_ratio(r[f"{name}:ratio"]) if timed else None,
                    fmt_interval(r[f"{name}:ci_low"], r[f"{name}:ci_high"]) if timed else None]
            css += [f"cls-{r[f'{name}:class']}", None, None]
        overlap = r["intervals_overlap"]
        row += ["yes" if r["classes_agree"] else ("no: WIN/LOSS" if r["reversal"] else "no"),
                "—" if overlap is None or overlap is pd.NA else ("yes" if overlap else "no")]
        rows.append(row)
        classes.append(css + [None, None])
    numeric = [c for c in columns if c.endswith((" ratio", " interval"))]
    return table_html(columns, rows, classes, numeric=numeric)


def comparison_page(wide: pd.DataFrame, checks: dict[str, dict], settings: dict[str, str],
                    threshold: float) -> str:
    """The HTML page: the records (with their caveats), agreement, the flips, every cell.
    `checks` is records.check() per record; `settings` says how each record was sampled."""
    names = list(checks)
    record_rows = [[name, c.get("device"), settings[name], " / ".join(c["caveats"]) or "none"]
                   for name, c in checks.items()]
    summary = agreement(wide)
    summary_rows = [[r["boundary"], r["cells"], share_text(r["share_classes_agree"]),
                     r["timed_in_all"], share_text(r["share_intervals_overlap"]), r["class_flips"],
                     r["reversals"], r["code_changed"]] for r in summary.to_dict("records")]
    changed = wide[~wide["same_code"]]
    wide = wide[wide["same_code"]]
    flips = wide[~wide["classes_agree"]]
    body = (
        "<h2>Records</h2>"
        + table_html(["record", "device", "sampling", "caveats (repeated from the record)"],
                     record_rows)
        + "<h2>Agreement</h2>"
        + table_html(["boundary", "shared cells, same code", "classes agree",
                      "timed in every record", "intervals overlap", "class flips",
                      "WIN/LOSS reversals", "left out: code changed"], summary_rows,
                     numeric=["shared cells, same code", "timed in every record", "class flips",
                              "WIN/LOSS reversals", "left out: code changed"])
        + "<h2>Flips by comparison</h2>"
        + table_html(["candidate", "baseline", "shared cells", "graph_device flips",
                      "sync_api flips", "WIN/LOSS reversals"], flips_by_comparison(wide),
                     numeric=["shared cells", "graph_device flips", "sync_api flips",
                              "WIN/LOSS reversals"])
        + f"<h2>Cells whose class flips ({len(flips)})</h2>"
        + (_cells_table(flips, names) if len(flips) else "<p>None: every shared cell has the "
           "same class in every record.</p>")
        + f"<h2>Every shared cell with the same code ({len(wide)})</h2>"
        + _cells_table(wide, names)
        + f"<h2>Cells left out: the code changed between records ({len(changed)})</h2>"
        + ("<p>A kernel's sources (or the dispatcher's choice) differ, so these are different "
           "measurements, not the same one taken again.</p>" + _cells_table(changed, names)
           if len(changed) else "<p>None.</p>"))
    note = (f"Each record re-classified from its own raw samples with the same statistics "
            f"(threshold {threshold:.0%}); ratio = baseline time / candidate time, above 1 the "
            "candidate is faster. Only cells present in every record are shown. Intervals "
            "overlap when all of them share a point. An interval covers the batch-to-batch "
            "variation of one session (or, where a job ran in several processes, the "
            "process-to-process one), not the session-to-session one, and a record with few "
            "batches has wide or unreliable intervals, so a flip between a class and "
            "INCONCLUSIVE or TIE can be a matter of sampling; a WIN/LOSS reversal cannot.")
    return html_page(f"Records compared: {' vs '.join(names)}", body, esc(note))


def sampling(record_dir: str | Path) -> str:
    """How a record sampled, from its timing metadata: "10 batches x 30 samples"."""
    settings = set()
    for meta_path in checked_files(sorted((Path(record_dir) / "raw" / "timing").glob("*.json"))):
        config = json.loads(meta_path.read_text()).get("config") or {}
        settings.add(f"{config.get('batches')} batches x {config.get('samples_per_batch')} "
                     "samples")
    return "; ".join(sorted(settings))
