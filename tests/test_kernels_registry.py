"""Support predicates and launch configurations (no GPU): every claimed shape gets a launch that
covers its whole output, and k2 declines what it cannot hold with a reason."""
import pytest

from groupconv_atlas.kernels import (IMPLEMENTATIONS, KERNELS, K4_TILES, base_implementation,
                                     entries, k4_tile, support, twin_name)
from groupconv_atlas.provenance import REPO_ROOT
from groupconv_atlas.shapes import load_shapes

SHAPES = load_shapes(REPO_ROOT / "config" / "shapes.yaml")


def test_k2_supports_exactly_1_2_4_channels_per_group():
    for s in SHAPES:
        ok, reason = support("k2", s)
        assert ok == (s.cin_per_group in (1, 2, 4)), s.id
        assert reason
        if not ok:
            assert str(s.cin_per_group) in reason


def test_general_kernels_and_baselines_support_everything():
    for impl in ("k0", "k1", "k3", "k4", "torch_default", "torch_tuned", twin_name("k0")):
        assert all(support(impl, s)[0] for s in SHAPES), impl


def test_unknown_implementation_is_an_error():
    with pytest.raises(KeyError, match="k9"):
        support("k9", SHAPES[0])


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_launch_covers_every_output(kernel):
    for s in SHAPES:
        if not support(kernel, s)[0]:
            continue
        launch = KERNELS[kernel].launch(s)
        threads = launch.grid[0] * launch.block[0] * launch.block[1]
        assert launch.entry in entries(kernel)
        assert launch.block[0] * launch.block[1] <= 1024
        assert launch.grid[0] < 2**31
        if kernel == "k0":  # grid-stride: fewer threads than outputs is fine, none is not
            assert threads >= min(s.output_elems, 256)
        elif kernel == "k3":
            assert threads >= s.n * s.c_out * s.h * -(-s.w // 4)
        elif kernel == "k4":
            rows, cob = k4_tile(s)
            assert s.cout_per_group % cob == 0
            assert threads >= s.n * (s.c_out // cob) * -(-s.h // rows) * -(-s.w // 4)
        else:
            bx, by = launch.block[0], launch.block[1]
            assert launch.grid[0] == s.n * s.c_out * -(-s.h // by) * -(-s.w // bx)
        assert launch.scalars[:6] == (s.n, s.c_in, s.c_out, s.h, s.w, s.groups)


def test_k4_tiles_keep_channel_blocks_inside_a_group():
    for s in SHAPES:
        rows, cob = k4_tile(s)
        assert (rows, cob) in K4_TILES
        assert s.cout_per_group % cob == 0


def test_twin_names_round_trip():
    assert base_implementation(twin_name("k3")) == "k3"
    assert set(IMPLEMENTATIONS) >= {"k0", "k1", "k2", "k3", "k4", "torch_default", "torch_tuned"}
