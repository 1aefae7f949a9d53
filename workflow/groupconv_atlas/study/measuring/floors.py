"""The measured floor of every shape: how far each implementation stands from what the hardware
allows, measured in the same harness as the convolutions.

Two runs join each shape's timing batches (kernels/floor_copy.cu), launched on the same stream,
captured into the same graphs and sampled by the same PairedSampler, in the same jobs and
processes as the convolutions:

- `floor_copy`: a copy moving the least bytes any implementation of the shape must move (reads
  N*C_in*H*W floats, writes N*C_out*H*W), checked bit for bit before it is timed. Its variant
  (16-byte vectors per thread, or the scalar entry where sizes or pointers rule the vectors out)
  is the fastest of a one-launch estimate, as the sampler estimates every run.
- `floor_launch`: an empty kernel, the least a launch takes at the boundary.

A shape's floor at a boundary in one timing job (`measured_floor_us`) is the larger of the two
runs' medians of batch medians in that job. Every time over the floor divides a median by the
floor of the same job: a comparison's sides by their own job's floor, and an implementation's
`time_over_floor` is the geometric mean, over the jobs that timed it beside a floor, of its
median over that job's floor. Why: jobs differ in conditions (one timed an empty launch 1.5x
another's on the same shape with the same launch count), so a median of one job over a floor
pooled with another's can land below 1 without any implementation beating the floor. Neither
run is a convolution: they are never verified as one, compared, classified or dispatched to. Records
made before the floor have no such samples: every floor column is then NaN and the artifacts say the
floor was not measured.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..plans.shapes_table import channel_bin, shape_kind  # the headline's regions of shapes

FLOOR_SOURCE = "kernels/floor_copy.cu"
FLOOR_COPY, FLOOR_LAUNCH = "floor_copy", "floor_launch"
FLOOR_RUNS = (FLOOR_COPY, FLOOR_LAUNCH)
COPY_VECTORS = (1, 2, 4)  # float4 per thread of the 16-byte entries (floor_copy_v<k>)
COPY_THREADS = 256
MAX_GRID_X = 2**31 - 1
# measured_floor_us: not floor_us, which the roofline table already holds (the nominal floor,
# bytes over the measured bandwidth or FLOPs over the FMA rate).
FLOOR_VALUES = ["floor_copy_us", "floor_launch_us", "measured_floor_us"]
FLOOR_COLUMNS = ["job", "shape_id", "boundary", *FLOOR_VALUES]


def copy_sizes(shape) -> tuple[int, int]:
    """(floats read, floats written): every input element once, every output element once."""
    return shape.n * shape.c_in * shape.h * shape.w, shape.n * shape.c_out * shape.h_out * shape.w_out


def launch_counts(shapes, ceilings: dict, cfg) -> dict[str, int]:
    """{shape id: its one graph_device launch count} (timing.shape_launch_count over the bytes
    of the shape's floor copy), for every job that times these shapes."""
    from groupconv.timing import shape_launch_count

    return {s.id: shape_launch_count(4 * sum(copy_sizes(s)), ceilings, cfg) for s in shapes}


def copy_launches(n_in: int, n_out: int, x_ptr: int, y_ptr: int) -> list[dict]:
    """Every launch of the copy that fits the buffers: the 16-byte entries where both pointers
    are 16-byte aligned and both sizes multiples of 4, else the scalar entry alone. Each is
    {"entry", "grid", "block", "args": (n_in', n_out')}, sizes in the entry's own units."""
    if n_in < 1 or n_out < 1:
        raise ValueError(f"floor copy of {n_in} -> {n_out} floats: both must be positive")
    block = (COPY_THREADS, 1, 1)
    if x_ptr % 16 == 0 and y_ptr % 16 == 0 and n_in % 4 == 0 and n_out % 4 == 0:
        n4_in, n4_out = n_in // 4, n_out // 4
        return [{"entry": f"floor_copy_v{v}", "block": block, "args": (n4_in, n4_out),
                 "grid": (min(-(-max(n4_in, n4_out) // (COPY_THREADS * v)), MAX_GRID_X), 1, 1)}
                for v in COPY_VECTORS]
    return [{"entry": "floor_copy_scalar", "block": block, "args": (n_in, n_out),
             "grid": (min(-(-max(n_in, n_out) // COPY_THREADS), MAX_GRID_X), 1, 1)}]


def bind_floor(session, cubin: str | Path, shape, x, cfg, clocks) -> tuple[dict, dict]:
    """({run name: enqueue one launch}, details) of the shape's two floor runs, on the session's
    stream, reading `x` (the shape's input) into a buffer of the output's size. The copy is
    verified exact before it is returned; its variant is the fastest single-launch estimate."""
    from groupconv.launch import kernel_plan
    from groupconv.timing import PairedSampler

    torch = session.torch
    n_in, n_out = copy_sizes(shape)
    with session.on_stream():
        src = x.reshape(-1)
        if src.numel() != n_in:
            raise ValueError(f"{shape.id}: input holds {src.numel()} floats, the shape {n_in}")
        dst = torch.empty(n_out, device=x.device, dtype=torch.float32)
    stream = session.stream.handle
    runs = {}
    for spec in copy_launches(n_in, n_out, src.data_ptr(), dst.data_ptr()):
        plan = kernel_plan(cubin, spec["entry"], spec["grid"], spec["block"], "PPqq")
        args = (src.data_ptr(), dst.data_ptr(), *spec["args"])
        runs[spec["entry"]] = (lambda plan=plan, args=args: plan.launch(stream, *args), spec)
    for entry, (run, _) in runs.items():  # each variant exact before any is timed
        with session.on_stream():
            dst.fill_(float("nan"))
            run()
        session.synchronize()
        _check_copy(src, dst, entry, shape.id)
    if len(runs) > 1:
        sampler = PairedSampler(session, {e: r for e, (r, _) in runs.items()}, cfg, clocks,
                                boundaries=("graph_device",))
        with session.on_stream():
            sampler.prepare()
        sampler.close()
        chosen = min(sampler.estimates, key=sampler.estimates.get)
    else:
        chosen = next(iter(runs))
    copy_run, spec = runs[chosen]
    empty = kernel_plan(cubin, "floor_launch", (1, 1, 1), (1, 1, 1), "")

    def launch_run():
        empty.launch(stream)

    held = (src, dst)  # the buffers live as long as the runs

    def floor_copy():
        copy_run()
        return held[1]

    details = {FLOOR_COPY: {"entry": spec["entry"], "grid": list(spec["grid"]),
                            "block": list(spec["block"]), "floats_read": n_in,
                            "floats_written": n_out, "bytes": 4 * (n_in + n_out),
                            "verified": "exact (bit for bit) before timing"},
               FLOOR_LAUNCH: {"entry": "floor_launch", "grid": [1, 1, 1], "block": [1, 1, 1]}}
    return {FLOOR_COPY: floor_copy, FLOOR_LAUNCH: launch_run}, details


def _check_copy(src, dst, entry: str, shape_id: str) -> None:
    """dst[i] == src[i % len(src)] bit for bit (compared as int32, so NaN poison never passes),
    or raise naming the first wrong element."""
    import torch

    n_in, n_out = src.numel(), dst.numel()
    expected = src.repeat(-(-n_out // n_in))[:n_out] if n_out > n_in else src[:n_out]
    wrong = (dst.view(torch.int32) != expected.view(torch.int32)).nonzero()
    if wrong.numel():
        first = int(wrong[0])
        raise RuntimeError(f"{shape_id}: the floor copy {entry} is not exact: element {first} "
                           f"is {float(dst[first])}, expected {float(expected[first])} "
                           f"({wrong.numel()} of {n_out} wrong); the floor is not timed")


# ---- CPU: the floor of every measured cell, from the raw samples ----

def floor_table(samples: pd.DataFrame) -> pd.DataFrame:
    """(job, shape_id, boundary, floor_copy_us, floor_launch_us, measured_floor_us) from raw
    samples (every job's, concatenated, with their `job`): each run's median of batch medians
    within each job (timing_frames.pooled_medians of that job's samples, the atlas's one
    median). Empty for samples without floor runs (records made before the floor)."""
    from ..statistics.timing_frames import pooled_medians

    rows = samples[samples["implementation"].isin(FLOOR_RUNS)]
    if rows.empty:
        return pd.DataFrame(columns=FLOOR_COLUMNS)
    per_job = [pooled_medians(part).assign(job=job)
               for job, part in rows.groupby("job", sort=True)]
    medians = pd.concat(per_job, ignore_index=True).pivot(
        index=["job", "shape_id", "boundary"], columns="implementation", values="median_us")
    medians = medians.reindex(columns=list(FLOOR_RUNS)).rename(
        columns={FLOOR_COPY: "floor_copy_us", FLOOR_LAUNCH: "floor_launch_us"})
    medians["measured_floor_us"] = medians[["floor_copy_us", "floor_launch_us"]].max(
        axis=1, skipna=False)
    return medians.reset_index()[FLOOR_COLUMNS]


def with_floor(table: pd.DataFrame, floors: pd.DataFrame, time_column: str = "median_us",
               ratio_column: str = "time_over_floor") -> pd.DataFrame:
    """`table` (rows keyed by job, shape_id and boundary: each a median of one timing job) with
    the floor columns of the same job and shape, and `ratio_column` = time_column /
    measured_floor_us; NaN where that job timed no floor (the dispatcher's and the A/A jobs)."""
    merged = table.merge(floors if not floors.empty else pd.DataFrame(columns=FLOOR_COLUMNS),
                         on=["job", "shape_id", "boundary"], how="left")
    for column in FLOOR_VALUES:
        merged[column] = merged[column].astype(float)
    merged[ratio_column] = merged[time_column].astype(float) / merged["measured_floor_us"]
    return merged


def over_floor_by_implementation(job_medians: pd.DataFrame, floors: pd.DataFrame
                                 ) -> pd.DataFrame:
    """(shape_id, implementation, boundary, time_over_floor, floor jobs, floor columns) from
    each job's median of each implementation (medians.job_medians): its median over the floor
    of the same job, the geometric mean over the jobs that timed both; the floor columns are the
    geometric means of those jobs' floors (shown beside it, never divided across jobs)."""
    keys = ["shape_id", "implementation", "boundary"]
    cells = with_floor(job_medians, floors).dropna(subset=["time_over_floor"])
    if cells.empty:
        return pd.DataFrame(columns=[*keys, "time_over_floor", "floor_jobs", *FLOOR_VALUES])
    logs = cells[["time_over_floor", *FLOOR_VALUES]].astype(float).apply(np.log)
    out = logs.groupby([cells[k] for k in keys], sort=True).mean().apply(np.exp)
    out["floor_jobs"] = cells.groupby(keys, sort=True)["job"].agg(lambda j: ",".join(sorted(j)))
    return out.reset_index()


def geomean_over_floor(values) -> float:
    """Geometric mean of time-over-floor ratios, NaN ignored; NaN when none was measured."""
    from ..statistics.stats import geometric_mean

    finite = pd.Series(values, dtype=float).dropna()
    return geometric_mean(finite) if len(finite) else float("nan")



def read_floor_samples(paths) -> pd.DataFrame:
    """The floor runs' raw samples of every timing job (only those rows are read)."""
    from groupconv.record_formats import read_samples

    frames = [read_samples(p, filters=[("implementation", "in", list(FLOOR_RUNS))])
              .assign(job=Path(p).stem) for p in paths]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["job", "shape_id", "implementation", "boundary", "batch", "latency_us",
                 "clock_flagged", "process"])


# ---- where each kind of shape stands: the headline's regions ----

N1_SMALL_BYTES = 4 * 10**6  # "N = 1 under 4 MB": small maps, where a launch sets the pace


def size_class(entry: dict, l2_bytes: int | None) -> str:
    """over 2x L2 (DRAM-bound when streamed), N = 1 under 4 MB, or between."""
    if l2_bytes and entry["min_bytes"] > 2 * l2_bytes:
        return "over 2x L2"
    if entry["n"] == 1 and entry["min_bytes"] < N1_SMALL_BYTES:
        return "N = 1, under 4 MB"
    return "between"


def floor_block(roofline: pd.DataFrame, shapes_doc: dict, l2_bytes: int | None,
                customs: list[str], torch_refs: list[str],
                more: dict[str, list[str]] | None = None) -> dict | None:
    """Per boundary and region (kind x size class): over how many shapes, and the geometric mean
    and worst of time over floor of the best PyTorch reference (`torch_refs`, strict FP32, either
    layout) and of the best custom kernel (`customs`) on each shape; `more` ({side: runs}) adds
    sides of its own (best_<side>_...), on the shapes every side measured. None without
    floors."""
    if "time_over_floor" not in roofline or roofline["time_over_floor"].isna().all():
        return None
    by_id = {e["id"]: e for e in shapes_doc["shapes"]}
    measured = roofline.dropna(subset=["time_over_floor"])
    best = {}
    for side, names in (("torch", torch_refs), ("custom", customs), *(more or {}).items()):
        rows = measured[measured["implementation"].isin(names)]
        idx = rows.groupby(["shape_id", "boundary"])["time_over_floor"].idxmin()
        best[side] = rows.loc[idx].set_index(["shape_id", "boundary"])
    # atlas.json's words, which a replay of a committed record reproduces byte for byte: the path
    # is the one the records name (the module is study/measuring/floors.py).
    out = {"definition": "time over floor: an implementation's median over its shape's measured "
                         "floor (the larger of a same-bytes copy and an empty launch, timed "
                         "beside it; study/floors.py); best = the lowest on each shape",
           "by_boundary": {}}
    for boundary in sorted(measured["boundary"].unique()):
        regions = []
        keys = sorted(set.intersection(*({k for k in b.index if k[1] == boundary}
                                         for b in best.values())))
        groups: dict[tuple[str, str], list] = {}
        for key in keys:
            e = by_id[key[0]]
            groups.setdefault((shape_kind(e), size_class(e, l2_bytes)), []).append(key)
        for (kind, size), members in sorted(groups.items()):
            row = {"kind": kind, "size": size, "shapes": len(members)}
            for side in best:
                ratios = best[side].loc[members, "time_over_floor"]
                worst = ratios.idxmax()
                row[f"best_{side}_geomean_over_floor"] = geomean_over_floor(ratios)
                row[f"best_{side}_worst_over_floor"] = float(ratios.max())
                row[f"best_{side}_worst_shape"] = worst[0]
            regions.append(row)
        out["by_boundary"][boundary] = regions
    return out


def glance_floor(roofline: pd.DataFrame, shapes_doc: dict, candidate: str,
                 boundary: str = "graph_device") -> dict | None:
    """The first screen's floor panel: for `candidate` (one of the headline's leads), per region
    of the figure's rows (all shapes, each kind, each channels-per-group bin, labelled as the
    rows are) the geometric mean of its time over floor as "point" and the fastest and slowest
    shape's as "low" and "high". None without floors (older records)."""
    if "time_over_floor" not in roofline:
        return None
    rows = roofline[(roofline["implementation"] == candidate) & (roofline["boundary"] == boundary)]
    rows = rows.dropna(subset=["time_over_floor"])
    if rows.empty:
        return None
    kind = {e["id"]: shape_kind(e) for e in shapes_doc["shapes"]}
    bins = {e["id"]: f"channels per group: {channel_bin(e['cin_per_group'])}"
            for e in shapes_doc["shapes"]}
    regions = {"all shapes": rows}
    for labels in (kind, bins):
        for name, part in rows.groupby(rows["shape_id"].map(labels), sort=True):
            regions[name] = part
    return {label: {"point": geomean_over_floor(part["time_over_floor"]),
                    "low": float(part["time_over_floor"].min()),
                    "high": float(part["time_over_floor"].max())}
            for label, part in regions.items()}


def floor_lines(block: dict | None, boundary: str = "graph_device") -> list[str]:
    """The headline's sentences on the floor: per region, how far the best PyTorch reference and
    the best custom kernel stand from it (geometric mean and worst shape); none without it."""
    regions = ((block or {}).get("by_boundary") or {}).get(boundary) or []
    if not regions:
        return []
    return [f"Against the measured floor at {boundary} (time over a same-bytes copy or an empty "
            "launch timed beside the kernels; 1 is the floor), per region: " + "; ".join(
                f"{r['kind']}, {r['size']} ({shape_count(r['shapes'])}): best PyTorch "
                f"{region_side(r, 'torch')}, best custom kernel {region_side(r, 'custom')}"
                for r in regions) + "."]


def shape_count(n: int) -> str:
    """A region's size in words: "1 shape", "9 shapes"."""
    return f"{n} shape" if n == 1 else f"{n} shapes"


def region_side(row: dict, who: str) -> str:
    """One side of a floor_block region in words: its geometric mean over the floor and its
    worst shape."""
    return (f"{row[f'best_{who}_geomean_over_floor']:.2f}x (worst "
            f"{row[f'best_{who}_worst_over_floor']:.2f}x, {row[f'best_{who}_worst_shape']})")
