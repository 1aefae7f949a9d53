"""Planted faults in the weight gradient's kernels (tests/mutants.py BACKWARD_MUTANTS): each
mutant compiles and each of its shapes' plans has what the fault needs (CPU); the weight_grad
pass's own verification (study/measuring/pass_verify.verify_pass_one, as the verify_pass rule runs
it) marks it incorrect on every one of its shapes (GPU)."""
import pytest
from mutants import BACKWARD_MUTANTS, MUTANTS, verdicts_of

from gpu_helpers import TOLERANCE_FACTOR

from groupconv.backward_kernels import cut_keywords, reduce_lanes, wgrad_plan
from groupconv.build import compile_kernel_source
from groupconv.files import REPO_ROOT
from groupconv.kernels import BACKWARD_KERNELS
from groupconv_atlas.study.plans.shapes_table import load_shapes, shapes_by_id

SHAPES = shapes_by_id(load_shapes(REPO_ROOT / "config" / "shapes.yaml"))
H200_SMS = 132  # the SM count of the GPU the records were measured on


def _plan(mutant, shape):
    """The plan verification launches for the mutant's shape: its cut, else the rule's."""
    layout = BACKWARD_KERNELS[mutant.kernel].layout
    return wgrad_plan(shape, layout, H200_SMS, 16, **cut_keywords(mutant.variant or {}))


# What a fault needs of a shape's plan in order to show.
BACKWARD_NEEDS = {
    # the window slides along w only between the columns of one strip
    "segment_over_1": lambda m, s: _plan(m, s).choice["seg_cols"] >= 2,
    # the last row of strip lanes (threadIdx.y = blockDim.y - 1) holds a strip of some slice
    "last_strip_row_busy": lambda m, s: _plan(m, s).stage1.block[1] > 1
    and _plan(m, s).choice["strips_per_slice"] >= _plan(m, s).stage1.block[1],
    "groups_over_1": lambda m, s: s.groups > 1,
    # stage 2 runs with several slice lanes, the last of which sums at least one slice
    "slice_lanes_over_1": lambda m, s: _plan(m, s).reduce is not None
    and 2 <= reduce_lanes(_plan(m, s).slices) <= _plan(m, s).slices,
}


def test_mutant_names_are_unique_across_the_forward_and_the_backward():
    names = [m.name for m in (*MUTANTS, *BACKWARD_MUTANTS)]
    assert len(names) == len(set(names))


def test_every_weight_gradient_kernel_has_planted_faults():
    for kernel in BACKWARD_KERNELS:
        assert sum(m.kernel == kernel for m in BACKWARD_MUTANTS) >= 3, kernel


@pytest.mark.parametrize("mutant", BACKWARD_MUTANTS, ids=lambda m: m.name)
def test_backward_mutant_compiles_every_entry(mutant, tmp_path):
    source = mutant.write(tmp_path)  # the pattern is found exactly once, or this raises
    # sm_90: the architecture of the H200 the committed records were measured on
    record = compile_kernel_source(source, tmp_path / "m.cubin", arch="sm_90")
    missing = set(BACKWARD_KERNELS[mutant.kernel].entry_names()) - set(record["functions"])
    assert not missing, f"{mutant.name}: the mutated source lacks {sorted(missing)}"


@pytest.mark.parametrize("mutant", BACKWARD_MUTANTS, ids=lambda m: m.name)
def test_backward_mutant_shapes_have_what_the_fault_needs(mutant):
    for sid in mutant.shapes:
        shape = SHAPES[sid]
        for need in mutant.needs:
            assert BACKWARD_NEEDS[need](mutant, shape), f"{mutant.name}: {sid} lacks {need}"
        if mutant.variant is not None:  # a cut the rule does not take: the fault is the cut's
            rule = wgrad_plan(shape, BACKWARD_KERNELS[mutant.kernel].layout, H200_SMS, 16)
            assert _plan(mutant, shape).stage1.entry != rule.stage1.entry, (mutant.name, sid)


# Each mutant is verified in a process of its own (mutants.verdicts_of).
VERIFY_PROGRAM = r"""
import json, sys
from groupconv.sessions import GpuSession
from groupconv.shapes import Shape
from groupconv_atlas.study.measuring.pass_runs import backward_module, pass_runtime
from groupconv_atlas.study.measuring.pass_verify import verify_pass_one

kernel, cubin, layout, shapes, factor, cut = json.loads(sys.argv[1])
session = GpuSession()
for index, fields in enumerate(shapes):
    shape = Shape(**fields)
    # the pass's runtime with the mutant's cubin, and its cut as the tuning stage's choice for
    # this geometry
    runtime = pass_runtime(session, "weight_grad",
                           {(layout, tuple(shape.geometry)): cut} if cut else None,
                           cubins={kernel: cubin})
    try:
        row = verify_pass_one(session, backward_module(), "weight_grad", kernel, shape,
                              777 + index, factor, runtime)
        verdict = [shape.id, row["status"], row["reason"]]
    except Exception as exc:  # a crashing launch is caught: it cannot pass verification
        verdict = [shape.id, "incorrect", f"launch failed: {type(exc).__name__}: {exc}"]
        print(json.dumps(verdict), flush=True)
        break  # the context is gone
    print(json.dumps(verdict), flush=True)
"""


@pytest.mark.gpu
@pytest.mark.parametrize("mutant", BACKWARD_MUTANTS, ids=lambda m: m.name)
def test_weight_grad_verification_marks_mutant_incorrect(mutant, tmp_path, gpu_session):
    source = mutant.write(tmp_path)
    cubin = tmp_path / f"{mutant.name}.cubin"
    compile_kernel_source(source, cubin)
    shapes = [SHAPES[sid].to_dict() for sid in mutant.shapes]
    verdicts = verdicts_of(mutant.name, VERIFY_PROGRAM, [
        mutant.kernel, str(cubin), BACKWARD_KERNELS[mutant.kernel].layout, shapes,
        TOLERANCE_FACTOR, mutant.variant])
    # A crash ends the process after its first verdict, which is then already incorrect.
    assert all(status == "incorrect" for _, status, _ in verdicts), verdicts
