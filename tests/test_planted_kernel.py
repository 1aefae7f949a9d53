"""Adding a kernel is its source and one registry entry: a copy of k3 planted under a new name
(its source and entry point renamed), with nothing added but its KernelSpec, builds with nvcc,
exports its entry, takes the next seed slot (every recorded kernel's slot unchanged), launches,
is accepted by the configuration check, and passes the registry's checks."""
import shutil
from dataclasses import replace

import pytest
from registry_checks import SHAPES, SM_COUNT, check_kernel, plant_kernel, preprocessed_entries

from groupconv import nchw_tile_kernels
from groupconv.build import compile_kernel
from groupconv.kernels import (KERNELS, KERNELS_DIR, KernelSpec, entries, launch_for,
                                             support)
from groupconv.verify import SEED_ORDER, check_seed, seed_slot
from groupconv_atlas.study.config_check import registry_errors

NAME = "k3x"
ENTRY = "k3x_four_wide"


def launch_k3x(s):
    return replace(nchw_tile_kernels.launch_k3(s), entry=ENTRY)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """k3's source as kernels/k3x_four_wide.cu exporting k3x_four_wide, and its one entry."""
    source = (KERNELS_DIR / "k3_four_wide.cu").read_text().replace("k3_four_wide", ENTRY)
    spec = KernelSpec(NAME, f"kernels/{ENTRY}.cu", "k3 planted under a new name",
                      nchw_tile_kernels.supports_every_shape, launch_k3x)
    return plant_kernel(monkeypatch, tmp_path / "kernels", spec, source)


def test_the_entry_alone_registers_it(planted):
    assert list(KERNELS)[-1] == NAME
    assert entries(NAME) == [ENTRY]
    assert KERNELS[NAME].headers == ("kernels/common.cuh",)
    check_kernel(NAME)
    assert registry_errors({"kernels": ["k0", NAME]}) == []


def test_it_takes_the_next_seed_slot_and_no_recorded_slot_moves(planted):
    # after SEED_ORDER and the kernels registered before it (k10, ...), the planted one last
    slot = len(SEED_ORDER) + len([k for k in KERNELS if k not in SEED_ORDER]) - 1
    assert seed_slot(NAME) == slot
    assert check_seed(100, 3, NAME) == 100 + 3000 + slot
    assert [seed_slot(impl) for impl in SEED_ORDER] == list(range(len(SEED_ORDER)))


def test_it_launches_as_k3_does_under_its_own_entry(planted):
    for s in SHAPES:
        assert support(NAME, s) == support("k3", s)
        ours, k3 = launch_for(NAME, s, sm_count=SM_COUNT), launch_for("k3", s, sm_count=SM_COUNT)
        assert ours == replace(k3, entry=ENTRY), s.id


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_it_builds_and_exports_its_entry(planted, tmp_path):
    assert preprocessed_entries(NAME, planted) == [ENTRY]
    record = compile_kernel(NAME, tmp_path / f"{NAME}.cubin", arch="sm_90")
    assert record["kernel"] == NAME and record["source"] == f"kernels/{ENTRY}.cu"
    assert list(record["functions"]) == [ENTRY]
    assert set(record["header_sha256"]) == {"kernels/common.cuh"}
    assert (tmp_path / f"{NAME}.cubin").stat().st_size == record["cubin_bytes"] > 0
