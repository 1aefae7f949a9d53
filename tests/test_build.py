"""Every kernel compiles for sm_90 with nvcc (CI has no GPU but has nvcc), exports its entry
points with no spills (a fused entry at most FUSED_SPILL_BYTES, below), and the resource report
is parsed."""
import shutil

import pytest

from groupconv.build import compile_kernel, nvcc_flags, parse_resource_usage
from groupconv.epilogues import EPILOGUE_INFIX
from groupconv.kernels import KERNELS, entries

FUSED_SPILL_BYTES = 8
FUSED_STACK_BYTES = 64  # the frame those spills live in
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@needs_nvcc
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_kernel_compiles_for_sm90(kernel, tmp_path):
    record = compile_kernel(kernel, tmp_path / f"{kernel}.cubin", arch="sm_90")
    assert "-arch=sm_90" in record["nvcc_flags"]
    assert (tmp_path / f"{kernel}.cubin").stat().st_size == record["cubin_bytes"] > 0
    assert set(entries(kernel)) <= set(record["functions"])
    for name, res in record["functions"].items():
        assert res["registers"] and res["registers"] <= 255, name
        # A fused entry bounded to two blocks per SM may spill a few bytes (k11's widest tiles
        # with SiLU: 4 to 8 bytes): on an H100 that cost less than the half occupancy of the
        # unbounded entry (worst fused / plain time 1.56 against 2.22, records/h100-2026-12-06/
        # device-logs/after-the-record/fused-epilogues/NOTES.md). Every other entry spills none.
        allowed = FUSED_SPILL_BYTES if EPILOGUE_INFIX in name else 0
        assert res["spill_store_bytes"] <= allowed, f"{name} spills"
        assert res["spill_load_bytes"] <= allowed, f"{name} spills: {res}"
        assert res["stack_frame_bytes"] <= (FUSED_STACK_BYTES if allowed else 0), \
            f"{name} has a stack frame: {res}"
        # no local memory at all: register arrays indexed only by compile-time constants
        assert res["local_bytes"] == 0, f"{name} uses local memory: {res}"


def test_parse_resource_usage_reads_ptxas_lines():
    text = """ptxas info    : Compiling entry function 'k2_x' for 'sm_90'
ptxas info    : Function properties for k2_x
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 31 registers, used 1 barriers, 5440 bytes smem, 380 bytes cmem[0]
"""
    res = parse_resource_usage(text)["k2_x"]
    assert res == {"registers": 31, "stack_frame_bytes": 16, "spill_store_bytes": 8,
                   "spill_load_bytes": 4, "shared_bytes": 5440, "local_bytes": 0,
                   "constant_bytes": 380}
    assert "--resource-usage" in nvcc_flags("sm_90")
    assert "-arch=sm_90" in nvcc_flags("sm_90")
