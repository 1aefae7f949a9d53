"""Support predicates and launch configurations (no GPU): every claimed shape gets a launch that
covers its whole output, and k2 declines what it cannot hold with a reason."""
import pytest

from groupconv_atlas.runtime.kernels import (IMPLEMENTATIONS, K4_TILES, K5_BLOCKS, K5_TILES, KERNELS,
                                             base_implementation, entries, k4_tile, launch_for, k5_variants, support,
                                             twin_name)
from groupconv_atlas.runtime.files import REPO_ROOT
from groupconv_atlas.study.shapes_table import load_shapes

SM_COUNT = 132  # an H200's; the rule takes the count from the device at run time
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
        launch = launch_for(kernel, s, sm_count=SM_COUNT)
        threads = launch.grid[0] * launch.block[0] * launch.block[1]
        assert launch.entry in entries(kernel)
        assert launch.block[0] * launch.block[1] <= 1024
        assert launch.grid[0] < 2**31
        if kernel == "k0":  # grid-stride: fewer threads than outputs is fine, none is not
            assert threads >= min(s.output_elems, 256)
        elif kernel == "k3":
            assert threads >= s.n * s.c_out * s.h * -(-s.w // 4)
        elif kernel in ("k4", "k5"):  # k5 untuned falls back to k4's tile
            rows, cob = k4_tile(s, SM_COUNT)
            assert s.cout_per_group % cob == 0
            assert threads >= s.n * (s.c_out // cob) * -(-s.h // rows) * -(-s.w // 4)
        elif kernel in ("k6", "k7"):  # blocks stride over tiles: any grid covers every output
            assert launch.grid[0] >= 1  # (tests/test_k6_compile.py emulates the tiling)
        elif kernel == "k8":  # threads stride over work items; the grid gives one thread each
            for variant in [None, *KERNELS["k8"].variants(s)]:
                v = launch_for("k8", s, variant, sm_count=SM_COUNT)
                vec, rows, cols = (int(p[1:]) for p in v.entry.split("_")[3:])
                assert vec == (4 if s.c_in % 4 == 0 else 1)
                items = s.n * -(-s.h // rows) * -(-s.w // cols) * (s.c_in // vec)
                assert v.grid[0] * v.block[0] >= items and v.entry in entries("k8")
        else:
            bx, by = launch.block[0], launch.block[1]
            assert launch.grid[0] == s.n * s.c_out * -(-s.h // by) * -(-s.w // bx)
        assert launch.scalars[:6] == (s.n, s.c_in, s.c_out, s.h, s.w, s.groups)


def test_k4_tiles_keep_channel_blocks_inside_a_group():
    for s in SHAPES:
        rows, cob = k4_tile(s, SM_COUNT)
        assert (rows, cob) in K4_TILES
        assert s.cout_per_group % cob == 0


def test_twin_names_round_trip():
    assert base_implementation(twin_name("k3")) == "k3"
    assert set(IMPLEMENTATIONS) >= {"k0", "k1", "k2", "k3", "k4", "torch_default", "torch_tuned"}


def test_every_k5_variant_covers_every_output_and_stays_in_a_group():
    for s in SHAPES:
        variants = k5_variants(s)
        assert {"rows": 1, "cob": 1, "threads": 256} in variants  # always a fallback-sized tile
        for v in variants:
            assert (v["rows"], v["cob"]) in K5_TILES and v["threads"] in K5_BLOCKS
            assert s.cout_per_group % v["cob"] == 0, (s.id, v)
            launch = launch_for("k5", s, v, sm_count=SM_COUNT)
            assert launch.entry in entries("k5")
            assert launch.block == (v["threads"], 1, 1)
            assert launch.grid[0] * v["threads"] >= (
                s.n * (s.c_out // v["cob"]) * -(-s.h // v["rows"]) * -(-s.w // 4))


def test_k5_refuses_a_variant_that_does_not_fit_the_shape():
    grouped = next(s for s in SHAPES if s.cout_per_group == 4)
    with pytest.raises(ValueError, match="does not fit"):
        launch_for("k5", grouped, {"rows": 1, "cob": 8, "threads": 256}, sm_count=SM_COUNT)


def test_tile_tables_come_from_the_kernel_sources():
    """One tile table per kernel: the .cu file's ENTRY lines, read by Python, in source order."""
    from groupconv_atlas.runtime.kernels import KERNELS_DIR, tile_table

    k5_text = (KERNELS_DIR / "k5_tuned_tile.cu").read_text()
    assert K5_TILES == tile_table("kernels/k5_tuned_tile.cu", "K5_ENTRY")
    assert all(f"K5_ENTRY({r}, {c}," in k5_text for r, c in K5_TILES)
    assert set(K4_TILES) <= set(K5_TILES)  # k5 covers every k4 tile
    assert entries("k4") == [f"k4_register_tile_r{r}_c{c}" for r, c in K4_TILES]


def test_k4_rule_follows_the_sm_count():
    """The rule of thumb fills the GPU it runs on: fewer SMs never ask for a smaller tile."""
    for s in SHAPES:
        big, small = k4_tile(s, 132), k4_tile(s, 16)
        assert K4_TILES.index(small) <= K4_TILES.index(big), s.id


def test_the_host_reads_kernel_constants_from_the_source():
    """Padding, limits and array sizes come from the kernel's #defines, not from copies; a
    missing define is an error that names it."""
    from groupconv_atlas.runtime.kernels import K7_WEIGHT_FLOATS, kernel_define

    text = (REPO_ROOT / "kernels" / "k7_grouped_smem.cu").read_text()
    assert f"#define K7_WEIGHT_FLOATS {K7_WEIGHT_FLOATS}\n" in text
    with pytest.raises(ValueError, match="K7_NO_SUCH_DEFINE"):
        kernel_define("kernels/k7_grouped_smem.cu", "K7_NO_SUCH_DEFINE")
