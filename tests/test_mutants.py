"""Planted faults: each mutant compiles (CPU) and verification marks it incorrect (GPU)."""
import pytest
from mutants import MUTANTS

from groupconv_atlas.build import compile_kernel
from groupconv_atlas.kernels import support
from groupconv_atlas.shapes import load_shapes, shapes_by_id
from groupconv_atlas.provenance import REPO_ROOT

SHAPES = shapes_by_id(load_shapes(REPO_ROOT / "config" / "shapes.yaml"))


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_compiles_and_targets_supported_shapes(mutant, tmp_path):
    source = mutant.write(tmp_path)
    record = compile_kernel(mutant.kernel, tmp_path / "m.cubin", source=source)
    assert record["cubin_bytes"] > 0
    for sid in mutant.shapes:
        assert support(mutant.kernel, SHAPES[sid])[0], f"{mutant.name}: {sid} is unsupported"


def test_unwritten_tail_mutant_needs_w_not_multiple_of_4():
    (mutant,) = [m for m in MUTANTS if m.name == "k3_unwritten_tail"]
    assert all(SHAPES[s].w % 4 for s in mutant.shapes)


@pytest.mark.gpu
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_verification_marks_mutant_incorrect(mutant, tmp_path, gpu_session):
    from groupconv_atlas.verify import verify_one

    source = mutant.write(tmp_path)
    cubin = tmp_path / f"{mutant.name}.cubin"
    compile_kernel(mutant.kernel, cubin, source=source)
    verdicts = []
    for index, sid in enumerate(mutant.shapes):
        row = verify_one(gpu_session, mutant.kernel, SHAPES[sid], 777 + index,
                         {mutant.kernel: str(cubin)}, factor=16.0, n_points=256)
        verdicts.append((sid, row["status"], row["reason"]))
    print(mutant.name, verdicts)
    if mutant.name == "k2_missing_syncthreads":
        # A race shows where warps overtake each other: it must show on at least one shape.
        assert any(status == "incorrect" for _, status, _ in verdicts), verdicts
    else:
        assert all(status == "incorrect" for _, status, _ in verdicts), verdicts
