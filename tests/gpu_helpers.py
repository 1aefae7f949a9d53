"""Shared by the GPU tests of the public conv2d: the atlas shapes, fresh inputs per check, and the
elementwise check against float64 F.conv2d at the verification stage's tolerance."""
from __future__ import annotations

import zlib

import yaml

from groupconv.files import REPO_ROOT
from groupconv_atlas.study.plans.shapes_table import load_shapes
from groupconv.verify import bound_scale

SHAPES = load_shapes(REPO_ROOT / "config" / "shapes.yaml")
SHAPE_BY_ID = {s.id: s for s in SHAPES}
# f in |y - ref| <= f * K * 2**-24 * (|x| conv |w|): the pipeline's own setting, not a copy.
TOLERANCE_FACTOR = float(yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
                         ["verification"]["tolerance_factor"])


def check_seed(*parts: object) -> int:
    """A distinct, reproducible seed per check (so no two checks share inputs)."""
    return zlib.crc32("/".join(map(str, parts)).encode())


def fresh_inputs(torch, shape, seed: int, x_out=None, w_out=None):
    """Standard-normal x and weight for `shape` on the GPU (never zeros); written into x_out and
    w_out when given (a captured graph's static inputs), else new tensors."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((shape.n, shape.c_in, shape.h, shape.w), generator=gen, device="cuda")
    w = torch.randn((shape.c_out, shape.cin_per_group, 3, 3), generator=gen, device="cuda")
    if x_out is None:
        return x, w
    x_out.copy_(x)
    w_out.copy_(w)
    return x_out, w_out


def poison_free_memory(torch, numel: int) -> None:
    """Fill a freed block of `numel` floats with NaN: the caching allocator most likely hands that
    block to the next output of this size, so an element a kernel leaves unwritten reads NaN
    rather than a stale, possibly correct, value."""
    block = torch.empty(numel, device="cuda")
    block.fill_(float("nan"))
    del block


def assert_matches_fp64(torch, y, x, w, groups: int, what: str) -> float:
    """y (FP32) equals float64 F.conv2d(x, w) within the verification tolerance elementwise, every
    element finite; returns the largest error / tolerance."""
    functional = torch.nn.functional
    n, c_in, h, width = x.shape
    c_out = w.shape[0]
    assert y.dtype == torch.float32, f"{what}: output dtype {y.dtype}"
    assert tuple(y.shape) == (n, c_out, h, width), f"{what}: output shape {tuple(y.shape)}"
    torch.cuda.synchronize()
    ref = functional.conv2d(x.double(), w.double(), None, 1, 1, 1, groups)
    scale = functional.conv2d(x.abs().double(), w.abs().double(), None, 1, 1, 1, groups)
    tol = bound_scale(9 * (c_in // groups), TOLERANCE_FACTOR) * scale
    err = (y.double() - ref).abs()
    nonfinite = int((~torch.isfinite(y)).sum().item())
    bad = ~(err <= tol)  # NaN compares False: unwritten (poisoned) elements count as bad
    ratio = (err / tol).nan_to_num(nan=float("inf"))
    worst = float(ratio.max().item())
    if bad.any():
        index = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum().item())} of {y.numel()} outputs outside the tolerance "
            f"({nonfinite} non-finite); first at (n,c,h,w)={index}: y={float(y[index])}, "
            f"fp64 ref={float(ref[index])}, tolerance={float(tol[index])}; worst error/tolerance "
            f"{worst:.3g}")
    return worst


def compiled_launcher(session, folder, kernels):
    """A launcher over `kernels` compiled for this GPU into `folder`, without tuning tables (a
    tuned kernel takes its untuned rule unless a test names a variant)."""
    from groupconv.build import compile_kernel
    from groupconv.launcher import Launcher

    for k in kernels:
        compile_kernel(k, folder / f"{k}.cubin")
    return Launcher(session, {k: str(folder / f"{k}.cubin") for k in kernels})
