"""The checks every registered kernel passes whatever it computes (tests/test_kernels_registry.py
runs them on each kernel of the registry, tests/test_planted_kernel.py on a kernel planted with one
entry): check_source's on every kernel source, whichever pass it serves, and check_kernel's on a
forward family besides; and how a test plants a kernel: its class registered under each of its
passes, its source in a copy of the kernels' folder, both undone when the test ends."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from groupconv import source_tables
from groupconv.files import REPO_ROOT
from groupconv.kernel_family import KernelSource
from groupconv.kernels import KERNELS, REGISTRY, entries, launch_for, source_of, support
from groupconv.verify import SEED_SLOT_LIMIT, seed_slot
from groupconv_atlas.study.plans.shapes_table import load_shapes

SM_COUNT = 132  # an H200's; the rules take the count from the device at run time
SHAPES = load_shapes(REPO_ROOT / "config" / "shapes.yaml")
# What a cubin exports: extern "C" __global__ functions (the kernels' entries all are), as the
# preprocessor spells them (__global__ and __launch_bounds__ are macros of attributes).
_EXPORTED = re.compile(r'extern\s+"C"\s+__attribute__\(\(global\)\)\s+void\s+'
                       r"(?:__attribute__\(\(launch_bounds\([^)]*\)\)\)\s+)?(\w+)\s*\(")


def check_source(spec: KernelSource) -> None:
    """What the registry promises of every kernel source, whichever pass it serves: entries that
    are named once each, the files an edit must rebuild (its source and every header it
    includes, its table's header among them), and that header on disk its table's."""
    names = spec.entry_names()
    assert names and len(set(names)) == len(names), spec.name
    assert spec.inputs == [spec.source, *spec.headers]
    if spec.table is not None:
        assert spec.table.header in spec.headers, f"{spec.source} does not include its table"
        assert spec.table.stale(spec.table_origin) is None


def check_kernel(name: str) -> None:
    """What the registry promises of a forward kernel, checked on the frozen shapes: the
    source's checks (check_source), a launch on every supported shape (each tuned variant too,
    and the untuned one) that names one of its entries with a block and grid the GPU takes, no
    more threads a block than its variant asks for, the shape's scalars and every output covered
    (the family's own `uncovered`: the coverage its source's indexing relies on), and a seed slot
    of its own, and kernels/common.cuh among its headers."""
    spec = KERNELS[name]
    check_source(spec)
    names = entries(name)
    assert spec.tuned == bool(spec.variant_keys), name
    for s in SHAPES:
        ok, reason = support(name, s)
        assert reason, (name, s.id)
        if not ok:
            continue
        variants = spec.variants(s)
        assert spec.tuned or variants == [], name
        for variant in [None, *variants]:
            assert variant is None or set(variant) == set(spec.variant_keys), (name, variant)
            launch = launch_for(name, s, variant, sm_count=SM_COUNT)
            assert launch.entry in names, (name, s.id, variant)
            threads = launch.block[0] * launch.block[1] * launch.block[2]
            assert threads <= 1024, (name, s.id)
            assert variant is None or threads <= variant.get("threads", 1024), (name, variant)
            assert 1 <= launch.grid[0] < 2**31, (name, s.id, variant)
            assert max(launch.grid[1:]) <= 65535, (name, s.id, variant)
            assert launch.scalars[:6] == (s.n, s.c_in, s.c_out, s.h, s.w, s.groups), name
            assert spec.uncovered(s, launch) is None, (name, s.id, variant,
                                                       spec.uncovered(s, launch))
    slots = {other: seed_slot(other) for other in KERNELS}
    assert 0 <= slots[name] < SEED_SLOT_LIMIT
    assert [k for k, slot in slots.items() if slot == slots[name]] == [name]
    assert "kernels/common.cuh" in spec.headers, name


def preprocessed_entries(name: str, folder: Path) -> list[str]:
    """The functions the kernel's source exports after a real preprocessor pass (nvcc -E with the
    build's -I): what its cubin will hold, #if and macros applied."""
    spec = source_of(name)
    res = subprocess.run(["nvcc", "-E", "-arch=sm_90", "-I", str(folder),
                          str(folder / Path(spec.source).name)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return _EXPORTED.findall(res.stdout)


def use_kernels_folder(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Every module of the package that resolves kernel sources in KERNELS_DIR resolves them in
    `folder` until the test ends (the build, the registry's headers, the cubin cache)."""
    original = source_tables.KERNELS_DIR
    for module_name, module in list(sys.modules.items()):
        if module_name.partition(".")[0] in ("groupconv", "groupconv_atlas") and \
                getattr(module, "KERNELS_DIR", None) == original:
            monkeypatch.setattr(module, "KERNELS_DIR", folder)


def plant_kernel(monkeypatch: pytest.MonkeyPatch, folder: Path, spec: KernelSource,
                 source_text: str) -> Path:
    """`spec` added to the registry under each of its passes and its source written into a copy
    of the kernels' folder at `folder` (with its table's generated header, if it has a table),
    which the package then builds from; both last as long as the test. The registry's own
    kernels stay as they are."""
    shutil.copytree(source_tables.KERNELS_DIR, folder)
    (folder / Path(spec.source).name).write_text(source_text)
    if spec.table is not None:
        (folder / Path(spec.table.header).name).write_text(
            spec.table.header_text(spec.table_origin))
    use_kernels_folder(monkeypatch, folder)
    for pass_ in spec.passes:
        monkeypatch.setitem(REGISTRY, (spec.name, pass_), spec)
    return folder
