"""Reading Nsight Compute captures: finding ncu and its Python module (ncu_report), every profiled
launch of a .ncu-rep or of a saved raw CSV page with its metrics by name, and the checks that a
pair's capture holds the launch it was taken for; an unusable pair raises NsightError
(study/plans/nsight_plan's), naming it."""
from __future__ import annotations

import glob
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..plans.nsight_plan import NsightError, pair_name

NCU_FALLBACK_GLOB = "/opt/nvidia/nsight-compute/*/ncu"


def entry_regex(entry: str) -> str:
    """ncu's kernel filter for an entry name, or for an entry prefix ("k6_*")."""
    if entry.endswith("*"):
        return f"^{re.escape(entry[:-1])}"
    return f"^{re.escape(entry)}$"


def find_ncu(pair: str) -> str:
    installed = sorted(glob.glob(NCU_FALLBACK_GLOB), reverse=True)  # newest version first
    found = shutil.which("ncu") or (installed[0] if installed else None)
    if found is None:
        raise NsightError(f"{pair}: ncu (Nsight Compute) not found on PATH nor at "
                          f"{NCU_FALLBACK_GLOB}")
    return found


def import_ncu_report():
    """The ncu_report module: the PyPI package `ncu-report`, else the copy that ships with
    Nsight Compute (extras/python), else None."""
    try:
        import ncu_report
        return ncu_report
    except ImportError:
        pass
    candidates = [Path(p).resolve().parent / "extras" / "python"
                  for p in [shutil.which("ncu"), *glob.glob(NCU_FALLBACK_GLOB)] if p]
    for folder in candidates:
        if (folder / "ncu_report.py").is_file():
            sys.path.insert(0, str(folder))
            try:
                import ncu_report
                return ncu_report
            except ImportError:  # built for another Python: read through `ncu --import` instead
                sys.path.remove(str(folder))
    return None


def _number(value):
    """A metric value as float; strings such as '(256, 1, 1)' or 'PolicySpread' stay strings."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return str(value)


def launches_from_report(path: Path, ncu_report) -> list[dict]:
    """Every profiled launch in a .ncu-rep: kernel names and all metrics by name."""
    context = ncu_report.load_report(str(path))
    launches = []
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            metrics = {}
            for name in action.metric_names():
                try:
                    metrics[name] = _number(action.metric_by_name(name).value())
                except Exception:  # noqa: BLE001, S112 - a metric without a scalar value is left out
                    continue
            launches.append({"kernel_name": action.name(),
                             "kernel_name_demangled": action.name(action.NameBase_DEMANGLED),
                             "metrics": metrics})
    return launches


# ncu prints scaled units unless --print-units base; the raw page can hold any of these.
_UNIT_SCALE = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1, "nsecond": 1,
               "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def launches_from_raw_csv(text: str) -> list[dict]:
    """Every launch in `ncu --csv --page raw` output: header row, units row, one row per launch;
    lines ncu prints around it (==PROF==, ==WARNING==) are skipped. Values go to base units."""
    import csv

    rows = list(csv.reader(line for line in text.splitlines() if not line.startswith("==")))
    rows = [r for r in rows if r]
    if len(rows) < 2 or "Kernel Name" not in rows[0]:
        return []
    header, units, body = rows[0], rows[1], rows[2:]
    launches = []
    for row in body:
        metrics = {}
        for name, unit, raw in zip(header, units, row):
            value = _number(raw)
            if isinstance(value, float) and unit in _UNIT_SCALE:
                value *= _UNIT_SCALE[unit]
            metrics[name] = value
        name = row[header.index("Kernel Name")]
        launches.append({"kernel_name": name, "kernel_name_demangled": name, "metrics": metrics})
    return launches


def load_launches(path: str | Path, pair: str) -> list[dict]:
    """Launches of a .ncu-rep (through ncu_report, else `ncu --import ... --csv --page raw`) or of
    a saved raw CSV page (.csv)."""
    path = Path(path)
    if not path.is_file():
        raise NsightError(f"{pair}: capture {path} does not exist")
    if path.suffix == ".csv":
        return launches_from_raw_csv(path.read_text())
    module = import_ncu_report()
    if module is not None:
        return launches_from_report(path, module)
    ncu = find_ncu(pair)
    res = subprocess.run([ncu, "--import", str(path), "--csv", "--page", "raw",
                          "--print-units", "base"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise NsightError(f"{pair}: ncu could not read {path}: {res.stderr.strip()[-600:]}")
    return launches_from_raw_csv(res.stdout)


def _matches(entry: str, launch: dict) -> bool:
    if entry.endswith("*"):
        return launch["kernel_name"].startswith(entry[:-1])
    return launch["kernel_name"] == entry or launch["kernel_name_demangled"].startswith(entry + "(")


def read_capture(path: str | Path, shape_id: str, impl: str, entry: str | None) -> list[dict]:
    """The launches of one pair's capture. A custom kernel's capture must hold exactly one launch,
    of `entry`; a PyTorch capture at least one launch of any name."""
    pair = pair_name(shape_id, impl)
    launches = load_launches(path, pair)
    if not launches:
        raise NsightError(f"{pair}: capture {path} holds no result (no profiled kernel)")
    names = sorted({launch["kernel_name"] for launch in launches})
    if entry is not None:
        matched = [launch for launch in launches if _matches(entry, launch)]
        if not matched:
            raise NsightError(f"{pair}: kernel filter regex:{entry_regex(entry)} matched no kernel "
                              f"in {path}; "
                              f"captured: {', '.join(names)}")
        if len(launches) != 1:
            raise NsightError(f"{pair}: expected exactly one launch of {entry} in {path}, found "
                              f"{len(launches)}: {', '.join(names)}")
    return launches
