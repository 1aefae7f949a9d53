"""The real kernels on stress shapes (GPU): correct, every output written, errors far under the
tolerance; and a verification outcome that does not move between runs (a moving error is a race)."""
import pytest

from groupconv_atlas.build import compile_kernel
from groupconv_atlas.kernels import KERNELS, support
from groupconv_atlas.provenance import REPO_ROOT
from groupconv_atlas.shapes import load_shapes, shapes_by_id

SHAPES = shapes_by_id(load_shapes(REPO_ROOT / "config" / "shapes.yaml"))
STRESS = ["stress-1xw-n64-c256-1x301-g256", "stress-oddw-n32-c144-57x13-g144",
          "stress-tiny-n1-c32-7x7-g32", "cpg4-oddw-n32-c128-19x19-g32",
          "stress-depth-multiplier-n16-c32to64-56x56-g32", "resnext50-32x4d-n32-c1024-7x7-g32"]


@pytest.fixture(scope="module")
def cubins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cubins")
    for k in KERNELS:
        compile_kernel(k, folder / f"{k}.cubin")
    return {k: str(folder / f"{k}.cubin") for k in KERNELS}


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("shape_id", STRESS)
def test_kernel_correct_on_stress_shape(kernel, shape_id, cubins, gpu_session):
    from groupconv_atlas.verify import verify_one

    shape = SHAPES[shape_id]
    if not support(kernel, shape)[0]:
        pytest.skip(f"{kernel} declares {shape_id} unsupported")
    first = verify_one(gpu_session, kernel, shape, 1, cubins, 16.0, 256)
    second = verify_one(gpu_session, kernel, shape, 1, cubins, 16.0, 256)
    assert first["status"] == "correct", first["reason"]
    assert first["unwritten_elements"] == 0
    assert first["error_to_tolerance_fp64"] < 0.1
    assert first["max_abs_error"] == second["max_abs_error"], "error moved between runs: a race"


@pytest.mark.gpu
def test_every_k5_variant_is_correct_and_the_tuner_chooses_one(cubins, gpu_session):
    from groupconv_atlas.tuning import tune_kernel

    shapes = [SHAPES[s] for s in STRESS]
    tuning = tune_kernel(gpu_session, "k5", shapes, cubins["k5"], seed=3, factor=16.0,
                         repeats=2, target_us=50, progress=lambda _msg: None)
    bad = [(t["shape_id"], t["entry"], t["threads"]) for t in tuning["trials"]
           if t["status"] != "correct"]
    assert not bad, f"incorrect k5 variants: {bad}"
    assert set(tuning["choices"]) == set(STRESS)
    for shape_id, choice in tuning["choices"].items():
        timed = [t["median_us"] for t in tuning["trials"] if t["shape_id"] == shape_id]
        assert choice["median_us"] == min(timed)
