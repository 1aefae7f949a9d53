"""Planted faults: each mutant compiles (CPU) and verification marks it incorrect (GPU)."""
import shutil
import subprocess

import pytest
from mutants import MUTANTS, verdicts_of

from gpu_helpers import TOLERANCE_FACTOR

from groupconv.build import compile_kernel
from groupconv.kernels import KERNELS, support
from groupconv.nchw_row_kernels import K7, k7_chunk, k7_images
from groupconv.nchw_tile_kernels import k4_tile
from groupconv.nhwc_strip_kernels import k9_vectors
from groupconv.source_tables import THREADS_PER_BLOCK
from groupconv_atlas.study.plans.shapes_table import load_shapes, shapes_by_id
from groupconv.files import REPO_ROOT

SHAPES = shapes_by_id(load_shapes(REPO_ROOT / "config" / "shapes.yaml"))
# SM counts the default register tile is checked under: every GPU up to 256 SMs (H200: 132).
SM_COUNTS = range(1, 257)
NEEDS = {
    "w_mod4_nonzero": lambda s: s.w % 4 != 0,
    # the 8-byte path with a half quad at the row's end
    "w_mod4_is_2": lambda s: s.w % 4 == 2,
    # the untuned register tile (k4's rule, also k5's fallback) puts several output channels of
    # one group in a thread's channel block, whatever the GPU's SM count
    "channel_block_over_1": lambda s: s.cout_per_group > 1 and all(
        k4_tile(s, sm)[1] > 1 for sm in SM_COUNTS),
    # k7's untuned tile holds several images of the shape
    "k7_images_over_1": lambda s: k7_images(
        s, *(K7().default_variant(s, 132)[k] for k in ("tile_floats", "outs", "cob")),
        THREADS_PER_BLOCK) > 1,
    # k7 stages the shape's groups a chunk of input channels at a time
    "k7_chunked": lambda s: k7_chunk(s) < s.cin_per_group,
    # k9 stores vectors of several output channels (the weight of each lane its own)
    "k9_ovec_over_1": lambda s: k9_vectors(s)[0] > 1,
}


# A mutant of a kernel with fused entries compiles its whole source, seven entries per tile
# (k11: 4.6 s where it was 1.4 s before the epilogues): its thirteen mutants cost the fast set
# about 30 s, past its 5 minutes, so they run with the integration set (CI runs both).
def _fast_or_integration(mutant):
    slow = KERNELS[mutant.kernel].epilogues
    return pytest.param(mutant, marks=[pytest.mark.integration] if slow else [])


@pytest.mark.parametrize("mutant", [_fast_or_integration(m) for m in MUTANTS],
                         ids=lambda m: m.name)
def test_mutant_compiles_and_targets_supported_shapes(mutant, tmp_path):
    source = mutant.write(tmp_path)
    # sm_90: the architecture of the H200 the committed records were measured on
    record = compile_kernel(mutant.kernel, tmp_path / "m.cubin", source=source, arch="sm_90")
    assert record["cubin_bytes"] > 0
    for sid in mutant.shapes:
        assert support(mutant.kernel, SHAPES[sid])[0], f"{mutant.name}: {sid} is unsupported"
        if mutant.variant is not None:  # a variant the tuning stage would measure there
            assert mutant.variant in KERNELS[mutant.kernel].variants(SHAPES[sid]), (mutant, sid)


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.file], ids=lambda m: m.name)
def test_header_mutant_compiles_against_the_mutated_header(mutant, tmp_path):
    """nvcc's dependency list shows the header beside the copied source, not kernels/'s."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc on PATH")
    source = mutant.write(tmp_path)
    deps = subprocess.run([nvcc, "-M", "-I", str(REPO_ROOT / "kernels"), str(source)],
                          capture_output=True, text=True, check=True).stdout
    header = mutant.file.rsplit("/", 1)[-1]
    assert str(tmp_path / header) in deps, deps
    assert str(REPO_ROOT / mutant.file) not in deps, deps


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.needs], ids=lambda m: m.name)
def test_mutant_shapes_have_what_the_fault_needs(mutant):
    for need in mutant.needs:
        bad = [sid for sid in mutant.shapes if not NEEDS[need](SHAPES[sid])]
        assert not bad, f"{mutant.name}: shapes {bad} lack {need}; the fault would not show"


def test_every_register_tile_kernel_has_two_mutants():
    for kernel in ("k4", "k5"):
        assert sum(m.kernel == kernel for m in MUTANTS) >= 2, kernel


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))


# Each mutant is verified in a process of its own: a fault that reads or writes out of bounds
# kills the CUDA context, which must not take the other mutants' verdicts (or tests) with it.
VERIFY_PROGRAM = r"""
import json, sys
from groupconv.launcher import Launcher
from groupconv.sessions import GpuSession
from groupconv.shapes import Shape
from groupconv.verify import verify_one

kernel, cubin, shapes, factor, variant, flip = json.loads(sys.argv[1])
launcher = Launcher(GpuSession(), {kernel: cubin})
for index, shape in enumerate(shapes):
    try:
        row = verify_one(launcher, kernel, Shape(**shape), 777 + index, factor=factor,
                         n_points=256, variant=variant, flip=flip)
        verdict = [shape["id"], row["status"], row["reason"]]
    except Exception as exc:  # a crashing launch is caught: it cannot pass verification
        verdict = [shape["id"], "incorrect", f"launch failed: {type(exc).__name__}: {exc}"]
        print(json.dumps(verdict), flush=True)
        break  # the context is gone
    print(json.dumps(verdict), flush=True)
"""


@pytest.mark.gpu
@pytest.mark.parametrize("mutant", [m for m in MUTANTS if not m.flip], ids=lambda m: m.name)
def test_verification_marks_mutant_incorrect(mutant, tmp_path, gpu_session):
    """(The flipped entries' mutants: tests/test_gpu_flip.py.)"""
    verification_marks_incorrect(mutant, tmp_path)


def verification_marks_incorrect(mutant, tmp_path):
    source = mutant.write(tmp_path)
    cubin = tmp_path / f"{mutant.name}.cubin"
    compile_kernel(mutant.kernel, cubin, source=source)
    # No tuning table: k5 takes its untuned rule, the tile the shapes were chosen for; a mutant
    # that names a variant is verified in it.
    shapes = [SHAPES[sid].to_dict() for sid in mutant.shapes]
    verdicts = verdicts_of(mutant.name, VERIFY_PROGRAM, [mutant.kernel, str(cubin), shapes,
                                                         TOLERANCE_FACTOR, mutant.variant,
                                                         mutant.flip])
    if mutant.name == "k2_missing_syncthreads":
        # A race shows where warps overtake each other: it must show on at least one shape.
        assert any(status == "incorrect" for _, status, _ in verdicts), verdicts
    else:
        # A crash ends the process after its first verdict, which is then already incorrect.
        assert all(status == "incorrect" for _, status, _ in verdicts), verdicts
