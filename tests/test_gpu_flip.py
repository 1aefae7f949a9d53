"""The flipped entries on the GPU (KernelFamily.flips: k11 and k12 with their taps turned 180
degrees, the depthwise input gradient's one launch): every variant the tuning stage may choose,
on odd depthwise geometries and atlas shapes, verified by the one verifier against the
convolution with the weight turned around; and their planted faults (tests/mutants.py, flip=True)
marked incorrect. The input gradient through them, against FP64 on every atlas shape, is
tests/test_gpu_backward.py's."""
import pytest
from gpu_helpers import TOLERANCE_FACTOR, compiled_launcher
from mutants import MUTANTS
from test_gpu_kernels import ODD_DEPTHWISE, SHAPES
from test_mutants import verification_marks_incorrect

from groupconv.kernels import KERNELS, support


FLIPPING = [k for k, spec in KERNELS.items() if spec.flips]
# Atlas depthwise shapes of both kinds the flipped entries serve: small maps at N = 1 (where the
# input gradient's gather cost most), a mid-size map, odd W and H.
FLIP_ATLAS = ["mobilenetv2-n1-c576-14x14-g576", "efficientnet-b0-n1-c1152-7x7-g1152",
              "stress-oddw-n32-c144-57x13-g144", "stress-1xw-n64-c256-1x301-g256"]


@pytest.fixture(scope="module")
def flipping_launcher(tmp_path_factory, gpu_session):
    """The kernels with flipped entries compiled for this GPU, without tuning tables."""
    return compiled_launcher(gpu_session, tmp_path_factory.mktemp("flipping"), FLIPPING)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", FLIPPING)
def test_every_flipped_variant_is_the_convolution_with_the_weight_turned_around(
        kernel, flipping_launcher):
    """The flipped entries (KernelFamily.flips, the depthwise input gradient's launch): each
    variant the tuning stage may choose, on the odd depthwise geometries and a few atlas shapes,
    verified by the one verifier against the convolution with the weight turned 180 degrees (a
    weight that is not symmetric, so the unflipped taps fail it), every output written; and the
    same verdict twice (a moving error is a race)."""
    from groupconv.shapes import geometry_shape
    from groupconv.verify import verify_one

    shapes = [geometry_shape(*g) for g in ODD_DEPTHWISE] + [SHAPES[s] for s in FLIP_ATLAS]
    supported = [s for s in shapes if support(kernel, s)[0]]
    assert len(supported) >= 8, [s.id for s in supported]
    checked, bad = 0, []
    for index, shape in enumerate(supported):
        for variant in [None, *KERNELS[kernel].variants(shape)]:
            row = verify_one(flipping_launcher, kernel, shape, 40 + index, TOLERANCE_FACTOR,
                             64, variant=variant, flip=True)
            checked += 1
            assert row["launch_entry"].endswith("_flip"), row["launch_entry"]
            if row["status"] != "correct" or row["unwritten_elements"]:
                bad.append((shape.id, variant, row["reason"]))
        first, again = (verify_one(flipping_launcher, kernel, shape, 40 + index,
                                   TOLERANCE_FACTOR, 64, flip=True) for _ in range(2))
        assert again["max_abs_error"] == first["max_abs_error"], f"{shape.id}: error moved"
    assert not bad, f"incorrect flipped {kernel} variants: {bad}"
    assert checked > len(supported)


@pytest.mark.gpu
@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.flip], ids=lambda m: m.name)
def test_verification_marks_a_flipped_entry_mutant_incorrect(mutant, tmp_path, gpu_session):
    """A flipped entry's fault, verified as the flipped entries are: against the convolution
    with the weight turned around."""
    verification_marks_incorrect(mutant, tmp_path)
