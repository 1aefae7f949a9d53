"""The real kernels on stress shapes (GPU): correct, every output written, errors far under the
tolerance; and a verification outcome that does not move between runs (a moving error is a race)."""
import pytest
from gpu_helpers import TOLERANCE_FACTOR, compiled_launcher

from groupconv.kernels import KERNELS, support
from groupconv.files import REPO_ROOT
from groupconv_atlas.study.plans.shapes_table import load_shapes, shapes_by_id

SHAPES = shapes_by_id(load_shapes(REPO_ROOT / "config" / "shapes.yaml"))
STRESS = ["stress-1xw-n64-c256-1x301-g256", "stress-oddw-n32-c144-57x13-g144",
          "stress-tiny-n1-c32-7x7-g32", "cpg4-oddw-n32-c128-19x19-g32",
          "stress-depth-multiplier-n16-c32to64-56x56-g32", "resnext50-32x4d-n32-c1024-7x7-g32"]


@pytest.fixture(scope="module")
def launcher(tmp_path_factory, gpu_session):
    """Every kernel compiled for this GPU, without tuning tables (k5 takes its untuned rule)."""
    return compiled_launcher(gpu_session, tmp_path_factory.mktemp("cubins"), KERNELS)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("shape_id", STRESS)
def test_kernel_correct_on_stress_shape(kernel, shape_id, launcher):
    from groupconv.verify import verify_one

    shape = SHAPES[shape_id]
    if not support(kernel, shape)[0]:
        pytest.skip(f"{kernel} declares {shape_id} unsupported")
    first = verify_one(launcher, kernel, shape, 1, TOLERANCE_FACTOR, 256)
    second = verify_one(launcher, kernel, shape, 1, TOLERANCE_FACTOR, 256)
    assert first["status"] == "correct", first["reason"]
    assert first["unwritten_elements"] == 0
    assert first["error_to_tolerance_fp64"] < 0.1
    assert first["max_abs_error"] == second["max_abs_error"], "error moved between runs: a race"


@pytest.mark.gpu
def test_every_k5_variant_is_correct_and_the_tuner_chooses_one(launcher):
    from groupconv.timing import TimingConfig
    from groupconv.tuning import tune_kernel

    # A short timing plan: this checks the tuner's choice, not the measurement.
    cfg = TimingConfig(batches=2, samples_per_batch=3, seed=3, warmup_launches=2,
                       graph_min_replay_us=50.0, graph_max_replay_us=2000.0,
                       graph_max_launches=50, l2_policy="warm", clock_flag_fraction=0.9)
    shapes = [SHAPES[s] for s in STRESS]
    tuning = tune_kernel(launcher, "k5", shapes, cfg, seed=3, factor=TOLERANCE_FACTOR,
                         n_points=256, progress=lambda _msg: None)
    bad = [(t["shape_id"], t["entry"], t["threads"]) for t in tuning["trials"]
           if t["status"] != "correct"]
    assert not bad, f"incorrect k5 variants: {bad}"
    assert set(tuning["choices"]) == set(STRESS)
    for shape_id, choice in tuning["choices"].items():
        timed = [t["median_us"] for t in tuning["trials"]
                 if t["shape_id"] == shape_id and t["median_us"] is not None]
        assert choice["median_us"] == min(timed)


# Depthwise geometries no table holds: a 1x1 map, one row (H = 1), one to five columns, 1, 3, 6,
# 10 and 12 channels (every vector width's remainder), N above 1.
ODD_DEPTHWISE = [(1, 1, 1, 1, 1, 1), (2, 3, 3, 1, 5, 3), (1, 6, 6, 2, 1, 6), (3, 6, 6, 3, 2, 6),
                 (2, 3, 3, 5, 3, 3), (1, 1, 1, 7, 5, 1), (2, 12, 12, 5, 5, 12),
                 (1, 10, 10, 3, 3, 10)]
# Depth multipliers likewise (one input channel, 2, 4 or 6 outputs per group; k9's (OVEC, 1)
# entries, k5 and k6): a 1x1 map with one group, one row, odd widths, 3 and 5 groups.
ODD_MULTIPLIERS = [(1, 1, 2, 1, 1, 1), (2, 3, 6, 1, 5, 3), (1, 3, 12, 5, 3, 3),
                   (2, 5, 30, 3, 2, 5), (1, 6, 12, 7, 9, 6)]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [k for k, spec in KERNELS.items() if spec.tuned])
def test_every_variant_of_a_tuned_kernel_is_correct_or_refused_on_odd_geometries(
        kernel, launcher):
    """Each variant the tuning stage would measure, verified (fresh seeded inputs, poisoned
    output, FP32 and FP64 references) by the tuner itself on depthwise and depth-multiplier
    geometries no table holds; a geometry the kernel refuses is skipped by name, never run."""
    from groupconv.shapes import geometry_shape
    from groupconv.timing import TimingConfig
    from groupconv.tuning import tune_kernel

    shapes = [geometry_shape(*g) for g in ODD_DEPTHWISE + ODD_MULTIPLIERS]
    supported = [s for s in shapes if support(kernel, s)[0]]
    if not supported:
        pytest.skip(f"{kernel} supports none of the odd depthwise and multiplier geometries")
    cfg = TimingConfig(batches=2, samples_per_batch=3, seed=5, warmup_launches=2,
                       graph_min_replay_us=20.0, graph_max_replay_us=500.0,
                       graph_max_launches=20, l2_policy="warm", clock_flag_fraction=0.9)
    tuning = tune_kernel(launcher, kernel, supported, cfg, seed=5, factor=TOLERANCE_FACTOR,
                         n_points=64, progress=lambda _msg: None)
    bad = [(t["shape_id"], t["entry"], t.get("threads"), t.get("reason"))
           for t in tuning["trials"] if t["status"] != "correct"]
    assert not bad, f"incorrect {kernel} variants: {bad}"
    # A geometry too small for every tile (k8 on a one-column map) has no variant: no choice.
    tuned = {s.id for s in supported if KERNELS[kernel].variants(s)}
    assert tuned and set(tuning["choices"]) == tuned
    # The untuned rule too, on every geometry the kernel supports: what a geometry no table holds
    # runs (this launcher has no tuning tables).
    from groupconv.verify import verify_one

    for shape in supported:
        row = verify_one(launcher, kernel, shape, 5, TOLERANCE_FACTOR, 64)
        assert row["status"] == "correct", (shape.id, row["reason"])

