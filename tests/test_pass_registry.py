"""One registry keyed by (kernel, pass) (groupconv.kernels.REGISTRY): each kernel source is held
once under each pass it serves and under no other, the forward families whose cubins export
flipped entries (KernelFamily.flips) are the input gradient's kernels and only they are, the
views the op reads (KERNELS, BACKWARD_KERNELS) are the registry's own, the weight-gradient
kernels pass the checks every kernel source passes, and a weight-gradient kernel planted as one
class is found by everything that reads the weight_grad pass, with nothing else edited."""
from __future__ import annotations

import pytest
from registry_checks import check_source, plant_kernel

from groupconv import backward_plans
from groupconv.backward_kernels import WeightGradKernel
from groupconv.kernel_family import PASSES, KernelFamily
from groupconv.kernels import (BACKWARD_KERNELS, KERNELS, REGISTRY, flipped_launch, kernel_for,
                               kernels_of, register, registered_sources, source_of)
from groupconv.source_tables import SourceTable
from groupconv_atlas.study.plans.pass_plan import kernel_sources

WEIGHT_GRAD = sorted(kernels_of("weight_grad"))


@pytest.fixture
def restored_registry():
    """The registry as it was once the test ends, whatever the test registered."""
    saved = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(saved)


def test_each_kernel_and_pass_is_registered_once_under_exactly_its_passes():
    assert {pass_ for _, pass_ in REGISTRY} <= set(PASSES)
    assert len(REGISTRY) == sum(len(kernels_of(pass_)) for pass_ in PASSES)
    sources = registered_sources()
    # one source a name: the cubin cache files each cubin by its name alone
    assert len({spec.name for spec in sources}) == len(sources) == len({id(s) for s in sources})
    for spec in sources:
        assert [pass_ for name, pass_ in REGISTRY if name == spec.name] == list(spec.passes)
        for pass_ in spec.passes:
            assert kernel_for(spec.name, pass_) is spec is source_of(spec.name)
    # the op's backward keeps the registry's passes
    assert backward_plans.PASSES == PASSES


def _in_registry(pass_: str) -> dict:
    return {name: spec for (name, p), spec in REGISTRY.items() if p == pass_}


def test_every_pass_has_kernels_and_the_views_are_the_registrys():
    assert all(kernels_of(pass_) for pass_ in PASSES)
    for pass_ in PASSES:
        assert list(kernels_of(pass_).items()) == list(_in_registry(pass_).items()), pass_
    assert KERNELS == kernels_of("forward") and BACKWARD_KERNELS == kernels_of("weight_grad")
    with pytest.raises(TypeError):
        KERNELS["k_elsewhere"] = next(iter(KERNELS.values()))  # written only through REGISTRY
    assert all(isinstance(spec, KernelFamily) for spec in KERNELS.values())
    assert all(isinstance(spec, WeightGradKernel) for spec in BACKWARD_KERNELS.values())
    assert not set(KERNELS) & set(BACKWARD_KERNELS)


def test_the_flipping_families_are_the_input_gradients_kernels_and_only_they():
    flipping = [name for name, spec in KERNELS.items() if spec.flips]
    assert flipping and list(kernels_of("input_grad")) == flipping
    for name in flipping:
        assert kernel_for(name, "input_grad") is KERNELS[name]
    unflipped = next(name for name, spec in KERNELS.items() if not spec.flips)
    with pytest.raises(KeyError, match="no kernel .* for the input_grad pass"):
        kernel_for(unflipped, "input_grad")
    with pytest.raises(ValueError, match="no entries with flipped taps"):
        flipped_launch(unflipped, None)


def test_a_family_registered_with_flips_serves_the_input_gradient(restored_registry):
    base = type(next(spec for spec in KERNELS.values() if not spec.flips))
    flipping = type("Flipping", (base,), {"name": "kflip_planted", "flips": True})()
    plain = type("Plain", (base,), {"name": "kplain_planted"})()
    register(flipping)
    register(plain)
    assert list(kernels_of("input_grad"))[-1] == "kflip_planted"
    assert "kplain_planted" in KERNELS and "kplain_planted" not in kernels_of("input_grad")
    assert list(KERNELS)[-2:] == ["kflip_planted", "kplain_planted"]
    del REGISTRY[("kflip_planted", "input_grad")]
    assert "kflip_planted" not in kernels_of("input_grad") and "kflip_planted" in KERNELS


def test_the_registry_refuses_a_name_twice_and_an_unknown_pass(restored_registry):
    spec = next(iter(BACKWARD_KERNELS.values()))
    with pytest.raises(ValueError, match="registered already"):
        register(spec)
    odd = type("Odd", (WeightGradKernel,), {"name": "wg_odd", "source": "kernels/wg_odd.cu",
                                            "passes": ("sideways",)})()
    with pytest.raises(ValueError, match="passes"):
        register(odd)
    with pytest.raises(KeyError, match="sideways"):
        kernels_of("sideways")


@pytest.mark.parametrize("kernel", WEIGHT_GRAD)
def test_each_weight_gradient_kernel_passes_the_source_checks(kernel):
    spec = kernel_for(kernel, "weight_grad")
    check_source(spec)
    assert spec.table is not None and spec.table_origin == (
        f'BACKWARD_KERNELS["{kernel}"].table (groupconv.backward_kernels)')


# A weight-gradient-like source: two entries from its table, then its reduction.
TOY_NAME = "wg_toy"
TOY_SOURCE = """#include "common.cuh"
#include "wgrad_toy_table.cuh"

#define WG_TOY_ENTRY(COB) \\
    extern "C" __global__ void wg_toy_o##COB(const float* dy, const float* x, float* ws) {}
WG_TOY_TILES(WG_TOY_ENTRY)
extern "C" __global__ void wg_reduce(const float* ws, float* dw, long long elems, int slices) {}
"""


class ToyWeightGrad(WeightGradKernel):
    name, source, layout = TOY_NAME, "kernels/wgrad_toy.cu", "nchw"
    table = SourceTable("kernels/wgrad_toy.cu", defines={"WG_TOY_THREADS": 128},
                        lists={"WG_TOY_TILES": ((1,), (2,))})

    def entry_names(self):
        return [*(f"wg_toy_o{cob}" for (cob,) in self.table.lists["WG_TOY_TILES"]), "wg_reduce"]


def test_a_planted_weight_gradient_kernel_is_found_by_its_pass(tmp_path, monkeypatch):
    spec = ToyWeightGrad()
    plant_kernel(monkeypatch, tmp_path / "kernels", spec, TOY_SOURCE)
    assert list(kernels_of("weight_grad"))[-1] == TOY_NAME
    assert kernel_for(TOY_NAME, "weight_grad") is spec and BACKWARD_KERNELS[TOY_NAME] is spec
    assert TOY_NAME not in KERNELS and TOY_NAME not in kernels_of("input_grad")
    assert spec in registered_sources()  # the table tool writes its header
    check_source(spec)
    assert spec.headers == ("kernels/common.cuh", "kernels/wgrad_toy_table.cuh")
    # what a backward pass's jobs rebuild on (study/plans/pass_plan) takes its files from the pass
    assert set(spec.inputs) <= set(kernel_sources([]))


def test_a_planted_source_with_an_entry_named_twice_fails_the_checks(tmp_path, monkeypatch):
    # the source checks can fail: the same kernel naming its reduction twice
    spec = ToyWeightGrad()
    plant_kernel(monkeypatch, tmp_path / "kernels", spec, TOY_SOURCE)
    monkeypatch.setattr(spec, "entry_names", lambda: [*ToyWeightGrad.entry_names(spec),
                                                      "wg_reduce"])
    with pytest.raises(AssertionError, match=TOY_NAME):
        check_source(spec)
