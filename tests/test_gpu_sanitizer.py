"""compute-sanitizer over every kernel (GPU): memcheck (out-of-bounds and misaligned accesses) and
racecheck (shared-memory hazards) report nothing when a small program runs every kernel, each of
k2's entries and several tiles of every tuned kernel (k5 and the others with launch variants)
through the public conv2d and its launcher on a few small geometries. Two planted
faults from tests/mutants.py show that each tool, as run here, does report what it checks."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_guarded
from mutants import MUTANTS

from groupconv.build import compile_kernel
from groupconv.kernels import KERNELS, support
from groupconv.files import REPO_ROOT
from groupconv.shapes import geometry_shape

# (N, C_in, C_out, H, W, groups), small because racecheck is slow: depthwise with W % 4 != 0 and
# a W spanning two of k2's 32-wide tiles; 4 and 2 input channels per group (k2's other entries);
# a depth multiplier with W % 4 == 2 (k5's 8-byte path). H > 8 gives every tile several row blocks.
# Then depthwise with C % 4 != 0 (k8's one-channel loads). k9 (grouped, channels_last) takes the
# second (16-byte vectors of 4 input and output channels), the third (8-byte vectors: 2 input
# channels per group), the depth multiplier (its one input channel read for 2 outputs) and the
# last: 3 input and 2 output channels per group, C_out < C_in (single floats).
GEOMETRIES = ((2, 8, 8, 19, 37, 8), (2, 16, 16, 10, 12, 4), (1, 8, 16, 11, 10, 4),
              (1, 4, 8, 9, 14, 4), (1, 6, 6, 9, 13, 6), (1, 9, 6, 7, 11, 3))
TUNED_KERNELS = [k for k, spec in KERNELS.items() if spec.tuned]
VARIANTS_PER_GEOMETRY = 3
TIMEOUT_S = 300

PROGRAM = r'''
"""Run kernels through groupconv_atlas.conv2d under compute-sanitizer; print what ran."""
import json
import sys

import torch

import groupconv_atlas as g
from groupconv.conv import configure, runtime
from groupconv.kernels import layout_of
from groupconv.shapes import geometry_shape

plan = json.loads(sys.argv[1])
if plan["cubins"]:
    configure(cubins=plan["cubins"])
gen = torch.Generator(device="cuda").manual_seed(1)
for geometry in plan["geometries"]:
    n, c_in, c_out, h, w, groups = geometry
    x = torch.randn((n, c_in, h, w), generator=gen, device="cuda")
    weight = torch.randn((c_out, c_in // groups, 3, 3), generator=gen, device="cuda")
    for kernel in plan["kernels"]:
        if not g.support(kernel, *geometry)[0]:
            continue
        # each kernel on tensors in its own layout (k8, k9: channels_last)
        fmt = torch.channels_last if layout_of(kernel) == "nhwc" else torch.contiguous_format
        y = g.conv2d(x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt),
                     groups, implementation=kernel)
        torch.cuda.synchronize()
        print("ran", json.dumps([kernel, geometry]), flush=True)
    launcher = runtime().launcher
    shape = geometry_shape(*geometry)
    for kernel, variants in plan["variants"].items():
        for variant in variants.get(json.dumps(geometry), []):
            y = torch.empty((n, c_out, h, w), device="cuda")
            torch.cuda.synchronize()
            launcher.bind(kernel, shape, x, weight, y, variant=variant).run()
            launcher.session.synchronize()
            print("ran", json.dumps([kernel, geometry, variant]), flush=True)
'''


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer")
    if found is None:
        cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        candidate = Path(cuda_home) / "bin" / "compute-sanitizer"
        found = str(candidate) if candidate.is_file() else None
    if found is None:
        pytest.skip("needs compute-sanitizer (CUDA toolkit) on PATH or in $CUDA_HOME/bin")
    return found


def variant_plan() -> dict[str, dict[str, list[dict]]]:
    """A few launch variants of every tuned kernel per geometry it supports: the first, a middle
    one and the last of its variant list."""
    plan: dict[str, dict[str, list[dict]]] = {}
    for kernel in TUNED_KERNELS:
        for geometry in GEOMETRIES:
            shape = geometry_shape(*geometry)
            if not support(kernel, shape)[0]:
                continue
            variants = KERNELS[kernel].variants(shape)
            picks = sorted({0, len(variants) // 2, len(variants) - 1})
            plan.setdefault(kernel, {})[json.dumps(list(geometry))] = [
                variants[i] for i in picks][:VARIANTS_PER_GEOMETRY]
    return plan


def run_sanitized(tool: str, tmp_path: Path, kernels: list[str], geometries, variants: dict,
                  cubins: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    program = tmp_path / "sanitized_program.py"
    program.write_text(PROGRAM)
    plan = {"geometries": [list(gm) for gm in geometries], "kernels": kernels,
            "variants": variants, "cubins": cubins}
    env = {**os.environ,
           # Every tensor its own cudaMalloc: memcheck then knows each tensor's exact bounds
           # (the caching allocator's large blocks would hide an overrun inside them).
           "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "workflow"),
                                          os.environ.get("PYTHONPATH", "")])}
    # API errors are left out: the check is of the kernels' accesses, and PyTorch's start-up
    # probes return expected CUDA errors that are no defect of theirs.
    cmd = [sanitizer(), "--tool", tool, "--error-exitcode", "1",
           "--target-processes", "application-only", "--report-api-errors", "no",
           sys.executable, str(program), json.dumps(plan)]
    return run_guarded(cmd, None, env=env)


def reported_errors(output: str) -> list[int]:
    """Error counts from the tool's summary lines (memcheck: ERROR SUMMARY: n errors; racecheck:
    RACECHECK SUMMARY: h hazards displayed (n errors, m warnings))."""
    counts = [int(m) for m in re.findall(r"ERROR SUMMARY: (\d+) error", output)]
    counts += [int(e) + int(w) for e, w in
               re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, "
                          r"(\d+) warnings?\)", output)]
    return counts


def ran_lines(output: str) -> list[list]:
    return [json.loads(line[4:]) for line in output.splitlines() if line.startswith("ran ")]


@pytest.fixture(scope="module")
def warm_cubins():
    """Compile every kernel once in this process (the cache is shared with the program), so nvcc
    never runs under the sanitizer's clock."""
    import torch

    from groupconv.cubin_cache import built_cubins

    major, minor = torch.cuda.get_device_capability()
    cubins = built_cubins(f"sm_{major}{minor}")  # the cache the program's conv2d reads
    assert set(cubins) == set(KERNELS)


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_every_kernel_runs_clean_under_the_sanitizer(tool, tmp_path, warm_cubins):
    plan = variant_plan()
    res = run_sanitized(tool, tmp_path, list(KERNELS), GEOMETRIES, plan)
    output = res.stdout + res.stderr
    counts = reported_errors(output)
    assert res.returncode == 0 and counts and not any(counts), output[-6000:]
    if tool == "memcheck":
        assert "ERROR SUMMARY: 0 errors" in output, output[-3000:]
    ran = ran_lines(res.stdout)
    expected = [[k, list(gm)] for gm in GEOMETRIES for k in KERNELS
                if support(k, geometry_shape(*gm))[0]]
    assert [r for r in ran if len(r) == 2] == expected, ran
    expected_variants = [[k, json.loads(gm), v] for k, per_geometry in plan.items()
                         for gm, variants in per_geometry.items() for v in variants]
    ran_variants = [r for r in ran if len(r) == 3]
    assert sorted(map(json.dumps, ran_variants)) == sorted(map(json.dumps, expected_variants))


@pytest.mark.gpu
@pytest.mark.parametrize("tool, mutant_name, geometry, report", [
    # reads up to 3 floats past each row, so past the input's end on its last row; memcheck
    # aborts the launch, so the program itself fails after the report
    ("memcheck", "k4_missing_scalar_column_guard", (1, 8, 8, 9, 37, 8),
     r"Invalid __global__ read[\s\S]*register_tile"),
    # no barrier between staging the shared tile and reading it
    ("racecheck", "k2_missing_syncthreads", (1, 8, 8, 16, 64, 8),
     r"([Rr]ace reported|[Hh]azard)[\s\S]*k2_shared_halo"),
])
def test_the_sanitizer_reports_a_planted_fault(tool, mutant_name, geometry, report, tmp_path):
    (mutant,) = [m for m in MUTANTS if m.name == mutant_name]
    cubin = tmp_path / f"{mutant.name}.cubin"
    compile_kernel(mutant.kernel, cubin, source=mutant.write(tmp_path))
    res = run_sanitized(tool, tmp_path, [mutant.kernel], [geometry], {},
                        cubins={mutant.kernel: str(cubin)})
    output = res.stdout + res.stderr
    assert res.returncode != 0, output[-3000:]
    assert any(reported_errors(output)), output[-3000:]
    assert re.search(report, output), output[-3000:]


# ------------------------------------------------------------------------ CPU, no GPU needed

def test_geometries_cover_every_k2_entry_and_every_access_width():
    shapes = [geometry_shape(*gm) for gm in GEOMETRIES]
    assert {s.cin_per_group for s in shapes if support("k2", s)[0]} == {1, 2, 4}
    assert {s.w % 4 for s in shapes} >= {0, 1, 2}  # 16-byte, scalar and 8-byte paths
    assert any(s.c_out != s.c_in for s in shapes)
    assert all(s.input_elems <= 20_000 for s in shapes), "racecheck is slow: keep them small"


def test_geometries_cover_every_vector_width_of_k9():
    from groupconv.nhwc_strip_kernels import k9_vectors

    shapes = [geometry_shape(*gm) for gm in GEOMETRIES]
    k9 = [s for s in shapes if support("k9", s)[0]]
    assert {k9_vectors(s) for s in k9} == {(4, 4), (2, 2), (1, 1), (2, 1)}
    assert any(s.cin_per_group % 4 for s in k9) and any(s.c_out < s.c_in for s in k9)


def test_variant_plan_takes_several_tiles_of_every_tuned_kernel():
    plan = variant_plan()
    assert "k5" in plan and set(plan) == set(TUNED_KERNELS)
    assert len(plan["k5"]) == len(GEOMETRIES)
    for kernel, per_geometry in plan.items():
        for geometry, variants in per_geometry.items():
            assert 2 <= len(variants) <= VARIANTS_PER_GEOMETRY, (kernel, geometry, variants)
            assert len({json.dumps(v, sort_keys=True) for v in variants}) == len(variants)


def test_summary_parsing_reads_both_tools():
    assert reported_errors("========= ERROR SUMMARY: 0 errors") == [0]
    assert reported_errors("========= ERROR SUMMARY: 3 errors") == [3]
    assert reported_errors("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, "
                           "1 warning)") == [2]
    assert reported_errors("no summary") == []


@pytest.mark.parametrize("mutant_name", ["k4_missing_scalar_column_guard",
                                         "k2_missing_syncthreads"])
def test_planted_faults_the_sanitizer_must_report_exist(mutant_name):
    assert [m.name for m in MUTANTS].count(mutant_name) == 1
