"""The floor's copy on the GPU (kernels/floor_copy.cu through study/measuring/floors.bind_floor):
exact for every entry, for sizes that take the 16-byte entries and for those that do not (odd sizes,
an offset pointer, a depth multiplier's larger output, a smaller output), and timed by the
sampler."""
import numpy as np
import pytest

from groupconv.shapes import Shape

pytestmark = pytest.mark.gpu

SHAPES = [Shape("aligned", "", 2, 64, 64, 14, 14, 64),
          Shape("odd", "", 1, 3, 3, 7, 7, 3),
          Shape("multiplier", "", 2, 32, 64, 9, 9, 32),
          Shape("fewer-out", "", 1, 64, 32, 5, 5, 32),
          Shape("one-pixel", "", 3, 6, 6, 1, 1, 6)]


@pytest.fixture(scope="module")
def floor_cubin(tmp_path_factory):
    from groupconv.build import compile_kernel_source
    from groupconv.files import REPO_ROOT
    from groupconv_atlas.study.measuring.floors import FLOOR_SOURCE

    cubin = tmp_path_factory.mktemp("floor") / "floor_copy.cubin"
    compile_kernel_source(REPO_ROOT / FLOOR_SOURCE, cubin)
    return cubin


def _cfg():
    from groupconv.timing import TimingConfig

    return TimingConfig(batches=2, samples_per_batch=3, seed=1, warmup_launches=1,
                        graph_min_replay_us=20.0, graph_max_replay_us=1e4, graph_max_launches=50,
                        l2_policy="warm", clock_flag_fraction=0.9)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_every_entry_is_exact_and_the_floor_is_timed(gpu_session, floor_cubin, shape):
    from groupconv.timing import ClockReader, median_latencies
    from groupconv_atlas.study.measuring.floors import (FLOOR_COPY, FLOOR_LAUNCH, bind_floor,
                                                        copy_sizes)

    x, _ = gpu_session.random_inputs(shape, 5)
    clocks = ClockReader(gpu_session.torch)
    # bind_floor checks every entry bit for bit (NaN-poisoned output first) before it returns
    runs, details = bind_floor(gpu_session, floor_cubin, shape, x, _cfg(), clocks)
    n_in, n_out = copy_sizes(shape)
    assert details[FLOOR_COPY]["bytes"] == 4 * (n_in + n_out)
    out = runs[FLOOR_COPY]()
    gpu_session.synchronize()
    expected = x.reshape(-1).repeat(-(-n_out // n_in))[:n_out]
    assert gpu_session.torch.equal(out, expected)
    medians, _ = median_latencies(gpu_session, runs, _cfg(), np.random.default_rng(0))
    assert set(medians) == {FLOOR_COPY, FLOOR_LAUNCH}
    assert all(np.isfinite(v) and v > 0 for v in medians.values())


def test_an_offset_input_takes_the_scalar_entry(gpu_session, floor_cubin):
    from groupconv.timing import ClockReader
    from groupconv_atlas.study.measuring.floors import FLOOR_COPY, bind_floor

    shape = SHAPES[0]
    x, _ = gpu_session.random_inputs(Shape("wide", "", 2, 64, 64, 14, 14 * 64 + 1, 64), 6)
    view = x.reshape(-1)[1:1 + shape.n * shape.c_in * shape.h * shape.w]  # 4-byte aligned only
    runs, details = bind_floor(gpu_session, floor_cubin, shape, view, _cfg(),
                               ClockReader(gpu_session.torch))
    assert details[FLOOR_COPY]["entry"] == "floor_copy_scalar"
    out = runs[FLOOR_COPY]()
    gpu_session.synchronize()
    assert gpu_session.torch.equal(out, view)
