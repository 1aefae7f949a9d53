"""A synthetic backward-pass world for the CPU tests (tests/test_passes*.py): the raw samples,
metadata and verification tables two backward timing jobs per pass would write (one per reference
group, as study/plans/pass_plan plans them), with known answers per shape:

- `win`: the NCHW custom one is twice as fast as every reference (WIN),
- `loss`: every custom one is twice as slow as the slowest reference (LOSS),
- `tie`: the custom ones and the references take the same time (TIE); the NHWC custom one is
  unsupported there, with its reason.

Other shape ids (a committed record's, for a replay) take these answers in turn (KIND_OF).
"""
import numpy as np
import pandas as pd

from groupconv.timing import BOUNDARIES

PASS_CUSTOMS = {"input_grad": ("ig_nchw", "ig_nhwc"), "weight_grad": ("wg_nchw", "wg_nhwc")}
GROUPS = {"tuned": ["torch_tuned", "torch_tuned_nhwc"],
          "default": ["torch_default", "torch_default_nhwc"]}
SHAPES = ("win", "loss", "tie")
GEOMETRY = {"win": [8, 32, 32, 28, 28, 32], "loss": [8, 64, 64, 14, 14, 64],
            "tie": [1, 16, 16, 7, 7, 16]}
# The references' medians (us) per shape: torch_tuned_nhwc is the strongest on `win`.
REFERENCE_US = {"torch_tuned": 12.0, "torch_default": 14.0, "torch_tuned_nhwc": 10.0,
                "torch_default_nhwc": 13.0}


def kind_of(shape_id: str, shape_ids=SHAPES) -> str:
    """The answer a shape takes: its own name, or win, loss, tie in turn along `shape_ids`."""
    return shape_id if shape_id in SHAPES else SHAPES[list(shape_ids).index(shape_id) % 3]


def custom_us(shape_id: str, impl: str) -> float | None:
    """A custom implementation's median on a shape (win, loss or tie); None where unsupported."""
    if shape_id == "win":
        return 5.0 if impl.endswith("nchw") else 11.0
    if shape_id == "loss":
        return 30.0
    return None if impl.endswith("nhwc") else 10.0


def reference_us(shape_id: str, ref: str) -> float:
    return 10.0 if shape_id == "tie" else REFERENCE_US[ref]


def verification(pass_: str, shape_ids=SHAPES) -> pd.DataFrame:
    rows = []
    for shape_id in shape_ids:
        for impl in [*PASS_CUSTOMS[pass_], *REFERENCE_US]:
            ok = impl in REFERENCE_US or custom_us(kind_of(shape_id, shape_ids), impl) is not None
            rows.append({"pass": pass_, "shape_id": shape_id, "implementation": impl,
                         "layout": "nhwc" if impl.endswith("nhwc") else "nchw",
                         "status": "correct" if ok else "unsupported",
                         "reason": "within tolerance" if ok else
                         f"{impl}: channels per group below the vector width"})
    return pd.DataFrame(rows)


def job(pass_: str, group: str, seed: int = 0, batches: int = 6, samples: int = 5,
        shape_ids=SHAPES):
    """(raw samples, metadata) of the (pass, group) job: every batch of every shape, process
    batch % 3, samples scattered 0.2 % around each median."""
    rng = np.random.default_rng(seed)
    customs, refs = PASS_CUSTOMS[pass_], GROUPS[group]
    rows = []
    for shape_id in shape_ids:
        kind = kind_of(shape_id, shape_ids)
        for impl in [*customs, *refs]:
            center = custom_us(kind, impl) if impl in customs else reference_us(kind, impl)
            if center is None:
                continue
            for boundary in BOUNDARIES:
                offset = 3.0 if boundary == "sync_api" else 0.0
                for b in range(batches):
                    for s in range(samples):
                        rows.append({"shape_id": shape_id, "implementation": impl,
                                     "boundary": boundary, "batch": b, "sample": s,
                                     "latency_us": (center + offset)
                                     * (1 + 0.002 * rng.standard_normal()),
                                     "clock_flagged": False, "process": b % 3})
    name = f"{pass_}-{group}"
    meta = {"job": name, "pass": pass_, "group": group, "candidates": list(customs),
            "references": list(refs),
            "layouts": {i: ("nhwc" if i.endswith("nhwc") else "nchw") for i in [*customs, *refs]},
            "shapes": [{"shape_id": s} for s in shape_ids]}
    return pd.DataFrame(rows), meta


def world(passes=("input_grad", "weight_grad"), shape_ids=SHAPES):
    """{job: (samples, meta)} and {pass: verification} of every (pass, group) job."""
    jobs = {f"{p}-{g}": job(p, g, seed=i, shape_ids=shape_ids) for i, (p, g) in
            enumerate((p, g) for p in passes for g in GROUPS)}
    return jobs, {p: verification(p, shape_ids) for p in passes}
