"""Planted faults: each mutant is a real kernel file with one textual change, so mutants follow
the kernels as they evolve. Verification must mark every one of them incorrect: MUTANTS the
forward kernels' (groupconv/kernels.KERNELS, the atlas's verification), BACKWARD_MUTANTS the weight
gradient's (groupconv/kernels.BACKWARD_KERNELS, the weight_grad pass's verification).

A fault is planted either in the kernel's own .cu file or in a header it includes (k4 and k5 share
kernels/register_tile.cuh). A header mutant is written beside an unchanged copy of the kernel
source: a quoted #include searches the including file's folder before `-I kernels`, so the copy
compiles against the mutated header."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from groupconv.files import REPO_ROOT
from groupconv.kernels import source_of

REGISTER_TILE = "kernels/register_tile.cuh"


@dataclass(frozen=True)
class Mutant:
    name: str
    kernel: str
    find: str
    replace: str
    shapes: tuple[str, ...]  # atlas shape ids on which the fault must show
    file: str | None = None  # repository path the fault is planted in; None: the kernel's source
    # Shape properties the fault needs in order to show (checked on CPU by tests/test_mutants.py):
    # "w_mod4_nonzero", "w_mod4_is_2", "channel_block_over_1", ... (tests/test_mutants.py NEEDS).
    needs: tuple[str, ...] = ()
    # The launch variant verified (a tuned kernel's fault in a variant its untuned rule never
    # takes; for a weight-gradient kernel, the wgrad_plan keywords of a tuning stage's cut);
    # None: the untuned rule.
    variant: dict | None = None
    # The kernel's flipped entries verified (KernelFamily.flips: the taps turned 180 degrees, the
    # depthwise input gradient), against the convolution with the weight turned around.
    flip: bool = False

    @property
    def kernel_source(self) -> str:
        """The kernel's own .cu file (a forward kernel's or a weight-gradient kernel's)."""
        return source_of(self.kernel).source

    @property
    def target(self) -> str:
        return self.file or self.kernel_source

    def source(self) -> str:
        """The mutated text of the target file."""
        text = (REPO_ROOT / self.target).read_text()
        count = text.count(self.find)
        if count != 1:
            raise AssertionError(f"mutant {self.name}: pattern found {count} times in "
                                 f"{self.target}; update the mutant")
        return text.replace(self.find, self.replace)

    def write(self, folder: Path) -> Path:
        """Write the mutant into `folder`; return the .cu file to compile."""
        path = folder / f"{self.name}.cu"
        kernel_source = self.kernel_source
        if self.target == kernel_source:
            path.write_text(self.source())
            return path
        header = Path(self.target).name
        kernel_text = (REPO_ROOT / kernel_source).read_text()
        if f'#include "{header}"' not in kernel_text:
            raise AssertionError(f"mutant {self.name}: {kernel_source} does not include "
                                 f'"{header}"; the fault would not reach {self.kernel}')
        (folder / header).write_text(self.source())
        path.write_text(kernel_text)
        return path


def verdicts_of(name: str, program: str, args: list) -> list[list[str]]:
    """Run a verification `program` (python -c, `args` as its one JSON argument) in a process of
    its own and return its verdicts, [shape id, status, reason] per line it printed. A fault that
    reads or writes out of bounds kills the CUDA context, which must not take the other mutants'
    verdicts (or tests) with it; the program prints each verdict as it comes and stops after a
    failed launch, whose verdict is incorrect."""
    from helpers import run_guarded

    res = run_guarded([sys.executable, "-c", program, json.dumps(args)], None)
    verdicts = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("[")]
    print(name, verdicts, res.stderr[-2000:])
    assert verdicts, f"{name}: the verification process gave no verdict: {res.stderr}"
    return verdicts


MUTANTS = (
    Mutant("k2_wrong_halo_offset", "k2", "const int h0 = tile_h * K2_TILE_H - 1;",
           "const int h0 = tile_h * K2_TILE_H;", ("mobilenetv2-n1-c144-56x56-g144",)),
    Mutant("k1_missing_boundary_check", "k1",
           "                if (w_i < 0 || w_i >= W) continue;\n", "",
           ("mobilenetv2-n1-c144-56x56-g144",)),
    Mutant("k2_missing_syncthreads", "k2", "    __syncthreads();\n", "",
           ("mobilenetv2-n32-c144-56x56-g144", "resnext50-32x4d-n32-c128-56x56-g32",
            "stress-bighw-n2-c32-512x512-g32")),
    Mutant("k0_wrong_weight_index", "k0", "w_k[kh * 3 + kw]", "w_k[kw * 3 + kh]",
           ("resnext50-32x4d-n1-c128-56x56-g32",)),
    Mutant("k3_unwritten_tail", "k3", "if (w_first + o < W) out[w_first + o] = acc[o];",
           "if (w_first + 3 < W) out[w_first + o] = acc[o];", ("stress-oddw-n32-c64-33x33-g64",),
           needs=("w_mod4_nonzero",)),
    # k4 and k5 share the register tile; k4 takes its 16-byte and scalar paths, k5 also the
    # 8-byte one. Every fault below reads or writes only inside the tensors (an out-of-bounds
    # access could end the process instead of failing verification), except the missing guard,
    # which reads one element past a row: past the input's end only by 4 bytes on the last row,
    # inside the allocator's 512-byte rounding for its shape.
    Mutant("k4_wrong_right_halo_column", "k4",
           "win[r][5] = w_first + 4 < W ? __ldg(row + w_first + 4) : 0.0f;",
           "win[r][5] = w_first + 4 < W ? __ldg(row + w_first + 3) : 0.0f;",
           ("mobilenetv2-n1-c144-56x56-g144", "stress-oddw-n32-c64-33x33-g64"), REGISTER_TILE),
    Mutant("k4_wrong_channel_block_group", "k4", "const int g = c_o0 / cout_per_group;",
           "const int g = channel_block / cout_per_group;",
           ("resnext50-32x4d-n32-c128-56x56-g32",), REGISTER_TILE, ("channel_block_over_1",)),
    Mutant("k4_unwritten_scalar_tail", "k4",
           "if (w_first + o < W) out[w_first + o] = acc[c][r][o];",
           "if (w_first + 3 < W) out[w_first + o] = acc[c][r][o];",
           ("stress-oddw-n32-c64-33x33-g64",), REGISTER_TILE, ("w_mod4_nonzero",)),
    Mutant("k4_missing_scalar_column_guard", "k4",
           "win[r][j] = w_i < W ? __ldg(row + w_i) : 0.0f;", "win[r][j] = __ldg(row + w_i);",
           ("xception-n1-c728-19x19-g728",), REGISTER_TILE, ("w_mod4_nonzero",)),
    Mutant("k5_pair_tail_not_zero_padded", "k5", "win[r][3] = 0.0f;", "win[r][3] = lo.y;",
           ("mobilenetv2-n1-c384-14x14-g384",), REGISTER_TILE, ("w_mod4_is_2",)),
    Mutant("k5_pair_second_half_unwritten", "k5",
           "if (full_quad)\n                        *reinterpret_cast<float2*>(out + w_first + 2)",
           "if (false)\n                        *reinterpret_cast<float2*>(out + w_first + 2)",
           ("mobilenetv2-n32-c576-14x14-g576",), REGISTER_TILE, ("w_mod4_is_2",)),
    Mutant("k5_pair_load_wrong_offset", "k5",
           "__ldg(reinterpret_cast<const float2*>(row + w_first + 2))",
           "__ldg(reinterpret_cast<const float2*>(row + w_first))",
           ("mobilenetv2-n1-c384-14x14-g384",), REGISTER_TILE, ("w_mod4_is_2",)),
    Mutant("k5_wrong_weight_in_channel_block", "k5",
           "((long long)(c_o0 + c) * cin_per_group + ci) * 9",
           "((long long)c_o0 * cin_per_group + ci) * 9",
           ("resnext50-32x4d-n32-c128-56x56-g32",), REGISTER_TILE, ("channel_block_over_1",)),
    # k7 (untuned: its default tile): the 16-byte copies of a tile's second and later images read
    # the first image's planes; the chunked entry reads every chunk's weights from the first.
    Mutant("k7_later_images_read_the_first", "k7", "k7_plane_of(t, i, c) * t.plane + e), 16);",
           "(long long)c * t.plane + e), 16);", ("regnety-400mf-n32-c440-7x7-g55",),
           needs=("k7_images_over_1",)),
    Mutant("k7_every_chunk_gets_the_first_weights", "k7", "* t.cpg + c0 + ci) * 9 + tap);",
           "* t.cpg + ci) * 9 + tap);", ("resnext101-32x8d-n32-c1024-14x14-g32",),
           needs=("k7_chunked",)),
    # k8 (channels_last depthwise): the right edge's zero padding dropped (its last column reads
    # the next pixel row); every lane of a channel vector given the first channel's weights; the
    # 3x3 taps transposed.
    Mutant("k8_right_edge_not_zero_padded", "k8", "(w >= 0 && w < W) ?", "(w >= 0) ?",
           ("mobilenetv2-n1-c32-112x112-g32", "stress-oddw-n16-c96-127x127-g96")),
    Mutant("k8_vector_lanes_share_weights", "k8", "__ldg(wt + (long long)(c0 + i) * 9 + t)",
           "__ldg(wt + (long long)c0 * 9 + t)", ("mobilenetv2-n32-c144-56x56-g144",)),
    Mutant("k8_taps_transposed", "k8", "k[kh * 3 + kw]);", "k[kw * 3 + kh]);",
           ("mobilenetv1-n64-c1024-7x7-g1024",)),
    # k9 (channels_last grouped): the right edge's zero padding dropped (its last column reads
    # the next pixel row, the last image's past x's end); every group reads group 0's input
    # channels; the weight's 3x3 taps transposed; every output lane of a vector given the first
    # output channel's weights. Shapes: the vector widths of the atlas (2 x 2 for groups of 2,
    # 4 x 4, 2 x 1 for the depth multiplier), odd W, 7x7 maps, groups of 2 to 32.
    Mutant("k9_right_edge_not_zero_padded", "k9", "if (w >= 0 && w < W) {", "if (w >= 0) {",
           ("cpg2-n8-c256-14x14-g128", "resnext50-32x4d-n1-c128-56x56-g32")),
    Mutant("k9_every_group_reads_group_0", "k9", "const int ci_base = g * cin_pg;",
           "const int ci_base = 0;",
           ("regnety-400mf-n32-c104-28x28-g13", "cpg2-oddw-n16-c96-75x75-g48",
            "stress-depth-multiplier-n16-c32to64-56x56-g32")),
    Mutant("k9_taps_transposed", "k9", "(kh * 3 + kw) * cin_pg", "(kw * 3 + kh) * cin_pg",
           ("resnext50-32x4d-n32-c1024-7x7-g32", "cpg4-oddw-n32-c128-19x19-g32")),
    Mutant("k9_vector_lanes_share_weights", "k9", "w_co + o * w_out + ", "w_co + ",
           ("cpg4-oddw-n32-c128-19x19-g32", "cpg2-n32-c128-28x28-g64",
            "stress-depth-multiplier-n16-c32to64-56x56-g32"), needs=("k9_ovec_over_1",)),
    # k10 (channels_last depthwise walking rows): the right edge's zero padding dropped; every
    # channel block stages the first block's taps (shows where C exceeds a block's channels);
    # the middle row's taps transposed.
    Mutant("k10_right_edge_not_zero_padded", "k10", "(row_inside && w >= 0 && w < W) ?",
           "(row_inside && w >= 0) ?",
           ("mobilenetv2-n1-c32-112x112-g32", "stress-oddw-n16-c96-127x127-g96")),
    Mutant("k10_every_block_stages_the_first_taps", "k10",
           "__ldg(wt + (long long)c_begin * 9 + i)", "__ldg(wt + i)",
           ("mobilenetv2-n32-c576-14x14-g576", "mobilenetv1-n64-c1024-7x7-g1024")),
    Mutant("k10_middle_taps_transposed", "k10", "acc.fma(at[c + kw], k[3 + kw]);",
           "acc.fma(at[c + kw], k[1 + 3 * kw]);",
           ("mobilenetv2-n1-c144-56x56-g144", "stress-oddw-n16-c96-127x127-g96")),
    # k11 (channels_last depthwise, one thread per channel vector and pixel group): the right
    # edge's zero padding dropped; every thread given the first channels' taps; the taps
    # transposed; the image row taken for the map's row (one-row variants; shows from the second
    # image on).
    Mutant("k11_right_edge_not_zero_padded", "k11", "(hh >= 0 && hh < H && w >= 0 && w < W)",
           "(hh >= 0 && hh < H && w >= 0)",
           ("mobilenetv2-n1-c32-112x112-g32", "stress-oddw-n16-c96-127x127-g96")),
    Mutant("k11_every_thread_reads_the_first_taps", "k11", "k11_load_taps<VEC>(wt, c, tw);",
           "k11_load_taps<VEC>(wt, 0, tw);",
           ("mobilenetv2-n32-c576-14x14-g576", "stress-tiny-n1-c32-7x7-g32")),
    Mutant("k11_taps_transposed", "k11", "const int t = kh * 3 + kw;",
           "const int t = kw * 3 + kh;",
           ("mobilenetv2-n1-c144-56x56-g144", "xception-n1-c728-19x19-g728")),
    Mutant("k11_image_row_taken_for_the_map_row", "k11", "h = row % H;", "h = row;",
           ("mobilenetv2-n32-c144-56x56-g144", "stress-tiny-n64-c1024-4x4-g1024")),
    # k11 with rows: the window not slid down (the row below kept out of it), in a four-row
    # variant, on a map whose height is a multiple of four and on one whose last block is short.
    Mutant("k11_window_not_slid_down", "k11", "in[2][j] = next[j];", "in[2][j] = in[1][j];",
           ("mobilenetv2-n32-c144-56x56-g144", "stress-oddw-n16-c96-127x127-g96"),
           variant={"vec": 4, "pix": 1, "rows": 4, "threads": 128}),
    # k11's flipped entries (the depthwise input gradient): the taps not turned around (the
    # forward's read), and turned about one axis only (rows kept, 8 - t mirrors both).
    Mutant("k11_flip_taps_not_turned", "k11", "FLIP ? 8 - t : t", "FLIP ? t : t",
           ("mobilenetv2-n1-c576-14x14-g576", "stress-oddw-n16-c96-127x127-g96"), flip=True),
    Mutant("k11_flip_taps_turned_left_right_only", "k11", "FLIP ? 8 - t : t",
           "FLIP ? kh * 3 + 2 - kw : t",
           ("efficientnet-b0-n1-c1152-7x7-g1152", "mobilenetv2-n32-c144-56x56-g144"),
           flip=True),
    # k12 (NCHW depthwise, one thread per tile of a plane): the bottom edge's zero padding
    # dropped (the last row reads the next plane's first); every plane given the first
    # channel's taps; the taps transposed; the right edge's halo read from the next row.
    Mutant("k12_bottom_edge_not_zero_padded", "k12", "hh >= 0 && hh < H, in[r]",
           "hh >= 0, in[r]", ("mobilenetv2-n32-c576-14x14-g576", "stress-tiny-n1-c32-7x7-g32")),
    Mutant("k12_every_plane_reads_the_first_taps", "k12",
           "const float* taps = wt + (long long)(plane % C_in) * 9;", "const float* taps = wt;",
           ("mobilenetv2-n1-c144-56x56-g144", "efficientnet-b0-n32-c1152-7x7-g1152")),
    Mutant("k12_taps_transposed", "k12", "k[kh * 3 + kw]", "k[kw * 3 + kh]",
           ("xception-n1-c728-19x19-g728", "stress-oddw-n32-c144-57x13-g144")),
    Mutant("k12_right_edge_reads_the_next_row", "k12", "v[PIX + 1] = w0 + PIX < W ?",
           "v[PIX + 1] = w0 + PIX <= W ?",
           ("mobilenetv2-n1-c32-112x112-g32", "mobilenetv2-n32-c576-14x14-g576")),
    # k12's flipped entries: the taps not turned around; turned upside down only.
    Mutant("k12_flip_taps_not_turned", "k12", "__ldg(taps + (FLIP ? 8 - t : t))",
           "__ldg(taps + (FLIP ? t : t))",
           ("mobilenetv2-n1-c576-14x14-g576", "xception-n1-c728-19x19-g728"), flip=True),
    Mutant("k12_flip_taps_turned_upside_down_only", "k12", "__ldg(taps + (FLIP ? 8 - t : t))",
           "__ldg(taps + (FLIP ? (2 - t / 3) * 3 + t % 3 : t))",
           ("efficientnet-b0-n32-c1152-7x7-g1152", "stress-oddw-n32-c144-57x13-g144"),
           flip=True),
)


WGRAD_COMMON = "kernels/wgrad_common.cuh"

# The weight gradient's kernels (kernels/wgrad_nhwc.cu, wgrad_nchw.cu, and stage 2 in
# wgrad_common.cuh). tests/test_backward_mutants.py checks on the CPU that each shape's plan has
# what the fault needs (BACKWARD_NEEDS there) and on the GPU that the weight_grad pass's
# verification marks each one incorrect. A fault only in lanes the kernel throws away (a padded
# tile's channels past the group) changes no output and is no mutant.
BACKWARD_MUTANTS = (
    Mutant("wg_nhwc_dw_bottom_edge_not_zero_padded", "wg_nhwc",
           "win[r][c] = (h >= 0 && h < H && wc >= 0 && wc < W)",
           "win[r][c] = (h >= 0 && wc >= 0 && wc < W)",
           ("stress-oddw-n32-c64-33x33-g64", "mobilenetv2-n32-c192-28x28-g192")),
    Mutant("wg_nhwc_dw_taps_transposed", "wg_nhwc",
           "acc[kh * 3 + kw].fma(d, win[r + kh][kw]);",
           "acc[kw * 3 + kh].fma(d, win[r + kh][kw]);",
           ("mobilenetv2-n1-c144-56x56-g144",)),
    Mutant("wg_nhwc_dw_window_not_slid", "wg_nhwc",
           "for (int r = 0; r < ROWS + 2; ++r) win[r][0] = win[r][1], win[r][1] = win[r][2];",
           "for (int r = 0; r < ROWS + 2; ++r) win[r][0] = win[r][1];",
           ("efficientnet-b0-n32-c1152-7x7-g1152", "stress-1xw-n64-c256-1x301-g256"),
           needs=("segment_over_1",)),
    Mutant("wg_nhwc_dw_block_sum_drops_the_last_strip_row", "wg_nhwc",
           "for (int p = 1; p < (int)blockDim.y; ++p) sum += red[p * blockDim.x + lane][t];\n"
           "            ws[((long long)blockIdx.y * C + v * VEC + j) * 9 + t] = sum;",
           "for (int p = 1; p < (int)blockDim.y - 1; ++p) sum += red[p * blockDim.x + lane][t];\n"
           "            ws[((long long)blockIdx.y * C + v * VEC + j) * 9 + t] = sum;",
           ("mobilenetv2-n1-c144-56x56-g144",), needs=("last_strip_row_busy",)),
    # Only the 4-channel vectors' lanes 2 and 3 swapped in the block's sums: a fault of a cut the
    # tuning stage takes (4-channel vectors of 8 rows) and the rule never, so it shows only if
    # verification launches the tuned cut.
    Mutant("wg_nhwc_dw_v4_lanes_2_and_3_swapped", "wg_nhwc",
           "return j == 0 ? a.v.x : j == 1 ? a.v.y : j == 2 ? a.v.z : a.v.w;",
           "return j == 0 ? a.v.x : j == 1 ? a.v.y : j == 2 ? a.v.w : a.v.z;",
           ("mobilenetv2-n32-c192-28x28-g192",), file=WGRAD_COMMON,
           variant={"vec": 4, "rows": 8, "blocks_per_sm": 2}),
    Mutant("wg_nhwc_tile_every_group_reads_group_0", "wg_nhwc",
           "const float* x_n = x + (long long)n * H * W * C_in + g * cig + ci0;",
           "const float* x_n = x + (long long)n * H * W * C_in + ci0;",
           ("resnext50-32x4d-n1-c128-56x56-g32", "regnety-400mf-n32-c48-56x56-g6"),
           needs=("groups_over_1",)),
    Mutant("wg_nhwc_tile_right_edge_not_zero_padded", "wg_nhwc",
           "const bool ok = h >= 0 && h < H && wc >= 0 && wc < W;",
           "const bool ok = h >= 0 && h < H && wc >= 0;",
           ("resnext50-32x4d-n1-c128-56x56-g32", "stress-depth-multiplier-n16-c32to64-56x56-g32")),
    Mutant("wg_nchw_bottom_edge_not_zero_padded", "wg_nchw",
           "const bool row_ok = strip_ok && h >= 0 && h < H;",
           "const bool row_ok = strip_ok && h >= 0;",
           ("mobilenetv2-n1-c144-56x56-g144", "resnext50-32x4d-n1-c256-28x28-g32")),
    Mutant("wg_nchw_every_group_reads_group_0_dy", "wg_nchw",
           "__ldg(dy + ((long long)n * C_out + g * cog + co0 + o) * plane",
           "__ldg(dy + ((long long)n * C_out + co0 + o) * plane",
           ("resnext50-32x4d-n1-c256-28x28-g32", "stress-tiny-n1-c32-7x7-g32"),
           needs=("groups_over_1",)),
    Mutant("wg_nchw_butterfly_stops_early", "wg_nchw",
           "for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(WG_FULL_MASK, v, off);",
           "for (int off = 16; off > 1; off >>= 1) v += __shfl_xor_sync(WG_FULL_MASK, v, off);",
           ("regnety-400mf-n32-c48-56x56-g6",)),
    Mutant("wg_nchw_left_edge_reads_the_row_before", "wg_nchw",
           "if (w_local == 0) l = (ok && w > 0 && w - 1 < W)",
           "if (w_local == 0) l = (ok && w - 1 < W)",
           ("stress-tiny-n1-c32-7x7-g32", "resnext50-32x4d-n1-c256-28x28-g32")),
    # The staged grouped entry, as the tuning stage's cut (the rule never takes it). The first
    # fault is in its strip walk (wg_next_strip).
    Mutant("wg_nhwc_smem_rows_never_restaged", "wg_nhwc",
           "    if (!slide) {\n        stage(strip.n, strip.h - 1, strip.w0);",
           "    if (false) {\n        stage(strip.n, strip.h - 1, strip.w0);",
           ("resnext50-32x4d-n32-c1024-7x7-g32",), variant={"staged_co": 8}),
    Mutant("wg_nhwc_smem_top_and_middle_rows_swapped", "wg_nhwc",
           "const int top = (h + 2) % 3, mid = h % 3, bottom = (h + 1) % 3;  "
           "// rows h - 1, h, h + 1\n        // win[kh][kw]",
           "const int top = h % 3, mid = (h + 2) % 3, bottom = (h + 1) % 3;  "
           "// rows h - 1, h, h + 1\n        // win[kh][kw]",
           ("regnety-1-6gf-n32-c336-14x14-g14",), variant={"staged_co": 8}),
    Mutant("wg_nhwc_smem_right_halo_not_zero_padded", "wg_nhwc",
           "xs[slot][col][c] = (row_ok && ww >= 0 && ww < W && c < channels)",
           "xs[slot][col][c] = (row_ok && ww >= 0 && c < channels)",
           ("resnext101-32x8d-n32-c1024-14x14-g32",), variant={"staged_co": 8}),
    # Stage 2, in the header both kernels include: the last slice lane's partial left out.
    Mutant("wg_reduce_drops_the_last_slice_lane", "wg_nhwc",
           "for (int y = 1; y < ry; ++y) total += part[y][threadIdx.x];",
           "for (int y = 1; y < ry - 1; ++y) total += part[y][threadIdx.x];",
           ("resnext50-32x4d-n1-c128-56x56-g32", "stress-oddw-n32-c64-33x33-g64"),
           file=WGRAD_COMMON, needs=("slice_lanes_over_1",)),
)
