"""Adding a kernel family is its `.cu` and one class: a toy tuned family (tests/toy_kernel/
ktoy_direct.cu, one entry per block size of its table, and the class below), with nothing else
edited, is taken by the registry (its checks, seed slot, configuration check), the build (nvcc
preprocesses it to exactly the entries the class names, its table's header generated from the
class), the tuning stage (its variants by its keys, and a tuning record of its choices read as a
launch table), the run's plan (a tuned kernel: its tuning, verification and build jobs) and the
op's checks (implementations, support, layout, alignment)."""
import json
import shutil
from pathlib import Path

import pytest
from registry_checks import SHAPES, SM_COUNT, check_kernel, plant_kernel, preprocessed_entries

from groupconv.call_checks import implementations, support as op_support
from groupconv.kernel_family import KernelFamily
from groupconv.kernels import (KERNELS, entries, launch_for, layout_of, pointer_alignment,
                               support)
from groupconv.launch_tables import tuning_table
from groupconv.source_tables import Launch, SourceTable, _ceil_div
from groupconv.tuning import variant_name
from groupconv.verify import SEED_ORDER, check_seed, seed_slot
from groupconv_atlas.study.plans.config_check import registry_errors

NAME = "ktoy"
SOURCE = Path(__file__).parent / "toy_kernel" / "ktoy_direct.cu"


class Toy(KernelFamily):
    """The whole of the toy family's Python: one output per thread, block size tuned."""

    name, source = NAME, "kernels/ktoy_direct.cu"
    title = "toy: one output per thread, block size tuned per shape"
    table = SourceTable("kernels/ktoy_direct.cu", lists={"KTOY_BLOCKS": ((128,), (256,))})
    variant_keys = ("threads",)

    def variants(self, s):
        return [{"threads": t} for (t,) in self.table.lists["KTOY_BLOCKS"]]

    def default_variant(self, s, sm_count):
        return {"threads": 256}

    def launch(self, s, variant=None, *, sm_count):
        threads = int((variant or self.default_variant(s, sm_count))["threads"])
        return Launch(f"ktoy_direct_b{threads}", (_ceil_div(s.output_elems, threads), 1, 1),
                      (threads, 1, 1), "PPPiiiiii", (s.n, s.c_in, s.c_out, s.h, s.w, s.groups))

    def entry_names(self):
        return [f"ktoy_direct_b{t}" for (t,) in self.table.lists["KTOY_BLOCKS"]]


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """The toy registered and its source (with its generated table header) in a copy of the
    kernels' folder, for the test's length."""
    return plant_kernel(monkeypatch, tmp_path / "kernels", Toy(), SOURCE.read_text())


def test_the_registry_takes_it_and_holds_it_to_every_check(planted):
    assert list(KERNELS)[-1] == NAME and KERNELS[NAME].tuned
    assert entries(NAME) == ["ktoy_direct_b128", "ktoy_direct_b256"]
    assert KERNELS[NAME].headers == ("kernels/common.cuh", "kernels/ktoy_direct_table.cuh")
    assert KERNELS[NAME].table_origin == f'KERNELS["{NAME}"].table ({__name__})'
    check_kernel(NAME)  # every shape and variant: entry, block, grid, scalars, coverage, header
    assert registry_errors({"kernels": ["k0", NAME], "gate_kernel": NAME}) == []


def test_a_family_whose_launch_leaves_outputs_unwritten_fails_the_checks(planted, monkeypatch):
    # the check can fail: the same family launching half the blocks it needs
    def short(s, variant=None, *, sm_count):
        launch = Toy.launch(KERNELS[NAME], s, variant, sm_count=sm_count)
        return Launch(launch.entry, (max(1, launch.grid[0] // 2), 1, 1), launch.block,
                      launch.arg_format, launch.scalars)

    monkeypatch.setattr(KERNELS[NAME], "launch", short)
    with pytest.raises(AssertionError, match="threads for"):
        check_kernel(NAME)


def test_it_takes_the_next_seed_slot_and_no_recorded_slot_moves(planted):
    slot = len(SEED_ORDER) + len([k for k in KERNELS if k not in SEED_ORDER]) - 1
    assert seed_slot(NAME) == slot
    assert check_seed(100, 3, NAME) == 100 + 3000 + slot
    assert [seed_slot(impl) for impl in SEED_ORDER] == list(range(len(SEED_ORDER)))


def test_tuning_measures_its_variants_and_its_choices_read_as_a_launch_table(planted, tmp_path):
    s = SHAPES[0]
    variants = KERNELS[NAME].variants(s)
    assert [variant_name(v, KERNELS[NAME].variant_keys) for v in variants] == [
        "threads128", "threads256"]
    # what the tuning stage writes for its choice on a shape (groupconv.tuning.tune_kernel)
    chosen = launch_for(NAME, s, variants[0], sm_count=SM_COUNT)
    record = {"kernel": NAME, "choices": {s.id: {"geometry": list(s.geometry), "threads": 128,
                                                  "entry": chosen.entry, "median_us": 1.0}}}
    (tmp_path / f"{NAME}.json").write_text(json.dumps(record))
    assert tuning_table(tmp_path / f"{NAME}.json") == {tuple(s.geometry): {"threads": 128}}
    with pytest.raises(ValueError, match="not a tuned kernel"):
        launch_for("k0", s, variants[0], sm_count=SM_COUNT)


def test_the_runs_plan_tunes_verifies_and_builds_it(planted):
    from test_run_plan import a_gpu, config_of

    from groupconv.files import REPO_ROOT
    from groupconv_atlas.study.plans.run_plan import RunPlan

    plan = RunPlan.from_config(config_of(kernels=["k0", "k5", NAME]), REPO_ROOT, 2,
                               gpu_available=a_gpu)
    assert plan.kernels == ["k0", "k5", NAME] and plan.tuned_kernels == ["k5", NAME]
    assert plan.tuning_records([NAME]) == [plan.raw(f"tuning/{NAME}.json")]
    assert KERNELS[NAME].inputs == ["kernels/ktoy_direct.cu", "kernels/common.cuh",
                                    "kernels/ktoy_direct_table.cuh"]


def test_the_ops_checks_take_it(planted):
    assert NAME in implementations()
    ok, why = op_support(NAME, 2, 8, 16, 5, 7, 4)
    assert ok and why == KERNELS[NAME].supports(SHAPES[0])[1]
    assert op_support(NAME, 2, 8, 16, 5, 7, 3) == (
        False, "groups: 3 does not divide c_in=8 and c_out=16")
    assert layout_of(NAME) == "nchw" and pointer_alignment(NAME, SHAPES[0]) == (4, 4)
    assert all(support(NAME, s)[0] for s in SHAPES)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_it_builds_and_exports_exactly_the_entries_its_class_names(planted):
    assert preprocessed_entries(NAME, planted) == KERNELS[NAME].entry_names()
