"""A kernel's headers (KernelFamily.headers) are read off its source's #includes, through other
headers too: they are what an edit must rebuild (the build rule's inputs) and what a build record
hashes (header_sha256, read by a replay's source-drift warning), so a header the source includes
and the registry omitted would be an edit neither noticed."""
from groupconv.kernels import KERNELS
from groupconv.source_tables import included_headers


def test_includes_are_followed_through_headers(tmp_path):
    (tmp_path / "top.cu").write_text('#include "a.cuh"\n#include <cuda_fp16.h>\n')
    (tmp_path / "a.cuh").write_text('#pragma once\n  #  include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text('#pragma once\n#include "a.cuh"\n')  # a cycle ends
    (tmp_path / "unused.cuh").write_text("")
    assert included_headers("kernels/top.cu", tmp_path) == ("kernels/a.cuh", "kernels/b.cuh")


def test_the_registry_hashes_and_rebuilds_on_every_included_header():
    # What the sources include today, so a header silently dropped from a kernel shows here.
    fused = ("kernels/channel_vec.cuh", "kernels/common.cuh", "kernels/epilogue.cuh")
    assert KERNELS["k4"].headers == (*fused, "kernels/k4_register_tile_table.cuh",
                                     "kernels/register_tile.cuh")
    assert KERNELS["k5"].headers == (*fused, "kernels/k5_tuned_tile_table.cuh",
                                     "kernels/register_tile.cuh")
    assert KERNELS["k6"].headers == ("kernels/common.cuh", "kernels/k6_depthwise_smem_table.cuh",
                                     "kernels/stage.cuh")
    assert KERNELS["k7"].headers == (*fused, "kernels/k7_grouped_smem_table.cuh",
                                     "kernels/stage.cuh")
    for spec in KERNELS.values():
        assert "kernels/common.cuh" in spec.headers, spec.name
        assert spec.inputs == [spec.source, *spec.headers]
