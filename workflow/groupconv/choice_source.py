"""Where the op's choices come from, decided once per process and answered without a GPU.

The tables (`TableSource`): with `configure(record=...)` a checkout's record (launch_tables),
with `configure(tunings=..., dispatch=...)` those, and by default the package's table file for
the GPU's name (torch.cuda.get_device_name; packaged_tables), exported from a committed record by
the pipeline. A GPU no packaged file names has no tables: its `dispatch` calls autotune on the
first call of each geometry (kept in $GROUPCONV_CACHE/autotune.json), or with
GROUPCONV_AUTOTUNE=0 take the untuned rule (NCHW: the registry's fallback kernel, untuned;
channels_last: PyTorch).

A `dispatch` call's choice (`planned_choice`): the layout's dispatch table where it holds the
geometry; else autotuned where autotuning is on; else the nearest measured geometry's choice
(unseen.nearest_choice), which without a table is the untuned rule. The runtime's plan cache
makes this choice once per key (op_runtime), with the same function `describe_choice` answers
on the CPU.

Public (groupconv_atlas.table_source, groupconv_atlas.describe_choice): plain dicts, no GPU,
no torch needed when a device name is given."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .packaged_tables import load_packaged
from .shapes import geometry_shape
from .unseen import AUTOTUNE_VAR, autotune_enabled, nearest_choice

# Where the tables come from (TableSource.kind), and where one choice comes from besides.
PACKAGED, RECORD, CONFIGURED, STAGE = "packaged table", "record", "configure()", "a stage"
AUTOTUNE, UNTUNED, NEAREST = "autotune on first call", "untuned rule", "nearest measured geometry"
TABLE_HIT = "the dispatch table"  # planned_choice's "where from" for a geometry the table holds


@dataclass(frozen=True)
class TableSource:
    """Where one process's launch tables come from: `kind` (PACKAGED, RECORD, CONFIGURED, STAGE,
    or AUTOTUNE / UNTUNED for a GPU without tables), a `label` for the logs, the `tables` by name
    (launch_tables.TABLE_NAMES), and whether a geometry they lack is autotuned."""

    kind: str
    label: str
    autotune: bool
    device_name: str | None = None
    tables: dict = field(default_factory=dict, repr=False)
    record: str | None = None
    file: str | None = None

    def as_dict(self) -> dict:
        return {"source": self.kind, "device_name": self.device_name, "record": self.record,
                "file": self.file, "autotune": self.autotune, "summary": self.label}


def gpu_tables(device_name: str, autotune: bool | None = None) -> TableSource:
    """The default: the package's tables for this GPU name, else none (autotune or untuned)."""
    doc = load_packaged(device_name)
    if doc is not None:
        label = f"packaged table {Path(doc['file']).name} (record {doc['record']})"
        return TableSource(PACKAGED, label, autotune_enabled(autotune, covered=True), device_name,
                           doc["tables"], doc["record"], doc["file"])
    on = autotune_enabled(autotune, covered=False)
    label = (f"no packaged launch table names GPU {device_name!r}: "
             + ("each geometry is autotuned on its first call" if on else
                f"the untuned rule (autotuning off: {AUTOTUNE_VAR}=0 or configure(autotune="
                "False))"))
    return TableSource(AUTOTUNE if on else UNTUNED, label, on, device_name)


def record_source(record: str | Path, autotune: bool | None = None) -> TableSource:
    """`configure(record=...)`: a checkout's committed record, its files checked."""
    from .launch_tables import record_tables  # here: table_source needs no gpu module loaded

    return TableSource(RECORD, f"record {Path(record).name}", autotune_enabled(autotune),
                       tables=record_tables(record), record=Path(record).name)


def with_tables(source: TableSource, given: dict) -> TableSource:
    """`source` with the tables `configure(...)` gave (None: keep the source's)."""
    tables = {**source.tables, **{k: v for k, v in given.items() if v is not None}}
    return dataclasses.replace(source, tables=tables)


def planned_choice(source: TableSource, shape, layout: str = "nchw", tables: dict | None = None
                   ) -> tuple[str | None, dict | None, str, str]:
    """(implementation, launch variant or None for the tables' own, why, where from: TABLE_HIT,
    AUTOTUNE, NEAREST or UNTUNED) of a `dispatch` call in `layout`; implementation None where it
    is to be autotuned. `tables`
    (default: the source's) are the launcher's own where it holds them."""
    tables = source.tables if tables is None else tables
    table = tables.get("dispatch" if layout == "nchw" else f"dispatch_{layout}") or {}
    if shape.geometry in table:
        return table[shape.geometry], None, f"the {layout} dispatch table ({source.label})", \
            TABLE_HIT
    if source.autotune:
        return None, None, "measured here on its first call, then cached", AUTOTUNE
    impl, variant, why = nearest_choice(shape, table, tables.get("tunings") or {}, layout)
    return impl, variant, why, NEAREST if table else UNTUNED


def sources_against_record(doc: dict, kernels_dir: Path | None = None) -> dict[str, str]:
    """{kernel: "measured" | "vouched" | "differs"} for each kernel the tables' record built: its
    source and headers here (KERNELS_DIR, what the package compiles) against the SHA-256 the
    record's build hashed, or those it vouches compile to the same machine code. "differs": the
    tables were measured on other code (re-measure, then re-export)."""
    from .kernels import KERNELS, KERNELS_DIR

    folder = kernels_dir or KERNELS_DIR
    found = {}
    for kernel, build in sorted(doc.get("builds", {}).items()):
        if kernel not in KERNELS:
            continue
        built = {build["source"]: build["source_sha256"], **(build.get("header_sha256") or {})}
        vouched = doc.get("vouched_sources", {}).get(kernel, {})
        here = {path: hashlib.sha256((folder / Path(path).name).read_bytes()).hexdigest()
                for path in KERNELS[kernel].inputs}
        found[kernel] = ("measured" if here == built else
                         "vouched" if all(d in vouched.get(p, ()) for p, d in here.items()) else
                         "differs")
    return found


class NoGpuError(RuntimeError):
    """table_source or describe_choice asked for this process's GPU where there is none."""


def _device_name(device_name: str | None, caller: str) -> str:
    """`device_name`, or without one the name of this process's current CUDA GPU. Without a GPU
    torch answers with its own assertion ("Torch not compiled with CUDA enabled") or a driver
    error, which says nothing of the argument that would have answered on the CPU."""
    if device_name is not None:
        return device_name
    try:
        import torch

        return torch.cuda.get_device_name()
    except (ImportError, AssertionError, RuntimeError) as err:
        names = ", ".join(repr(n) for n in _packaged_gpu_names()) or "none"
        raise NoGpuError(
            f"{caller}: no device_name given, so it answers for this process's CUDA GPU, and a "
            f"CUDA GPU is needed for that (torch: {err}); without one, pass device_name, the "
            "GPU's name as torch.cuda.get_device_name() gives it (the package's launch tables "
            f"are for {names})") from None


def _packaged_gpu_names() -> list[str]:
    """The GPU names the package's table files were exported for."""
    from .packaged_tables import TABLES_DIR

    names = []
    for path in sorted(TABLES_DIR.glob("*.json")):
        try:
            names.append(json.loads(path.read_text())["gpu_name"])
        except (OSError, ValueError, KeyError):
            continue
    return sorted(names)


def table_source(device_name: str | None = None, autotune: bool | None = None) -> dict:
    """Where conv2d's launch tables come from on the GPU named `device_name` (default: this
    process's current GPU; without a CUDA GPU, NoGpuError asks for the name) without
    configure(): {"source": "packaged table" (with its "record", "file" and "kernel_sources":
    sources_against_record), "autotune on first call" or "untuned rule", "device_name",
    "autotune", "summary"}.
    `autotune` as configure's (default: GROUPCONV_AUTOTUNE, else on only where no table covers
    the GPU)."""
    source = gpu_tables(_device_name(device_name, "table_source"), autotune)
    found = source.as_dict()
    if source.kind == PACKAGED:
        found["kernel_sources"] = sources_against_record(load_packaged(source.device_name))
    return found


def describe_choice(n: int, c_in: int, c_out: int, h: int, w: int, groups: int,
                    layout: str = "nchw", device_name: str | None = None,
                    autotune: bool | None = None) -> dict:
    """What `conv2d(..., "dispatch")` runs on this geometry and layout ("nchw" or "nhwc") on the
    GPU named `device_name`, as table_source: {"implementation" (None where it is autotuned on
    the first call), "variant", "source" (packaged table, nearest measured geometry, autotune on
    first call, untuned rule), "record", "why"}."""
    source = gpu_tables(_device_name(device_name, "describe_choice"), autotune)
    impl, variant, why, where = planned_choice(source, geometry_shape(n, c_in, c_out, h, w,
                                                                      groups), layout)
    return {"implementation": impl, "variant": variant,
            "source": source.kind if where == TABLE_HIT else where,
            "record": source.record, "device_name": source.device_name, "why": why}
