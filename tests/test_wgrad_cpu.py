"""The backward passes without a GPU: the weight-gradient kernels (kernels/wgrad_nchw.cu,
wgrad_nhwc.cu) compile for sm_90 with every entry, no spills and no local memory, their tables'
headers are the registry's; a numpy emulation of their index and reduction logic
(tests/wgrad_emulation.py) shows that every dW element receives each (n, h, w) contribution
exactly once, from the right X element, and that every workspace element is written once per
slice; the input gradient's weight gather matches the formula; and groupconv/backward.py's
interface (support, layouts, argument errors naming the field, conv2d's backward routing, which
falls back to aten where its table lacks a geometry) on CPU objects."""
from __future__ import annotations

import json
import re
import shutil
import types

import numpy as np
import pytest
import torch
from wgrad_emulation import check, check_reduce, emulate_nchw, emulate_nhwc, emulate_reduce

from groupconv import backward, backward_plans, conv
from groupconv.backward_kernels import (BLOCKS_PER_SM, DW_ROWS, DW_VEC, NHWC_BLOCKS_PER_SM,
                                        REDUCE_CHAINS, REDUCE_MAX_Y, REDUCE_X,
                                        transposed_weight_index, wgrad_plan)
from groupconv.build import compile_kernel_source
from groupconv.call_checks import UnsupportedConv
from groupconv.kernels import kernels_of
from groupconv.shapes import geometry_shape
from groupconv.source_tables import KERNELS_DIR

from emulation import Geometry, frozen_geometries  # noqa: E402  (tests/emulation.py)

# (N, C_in, C_out, H, W, groups): depthwise with W < 32, W % 4 != 0, N = 1, C % 4 != 0; a depth
# multiplier; grouped with C_in/groups != C_out/groups (3 in, 2 out); W > 32 with a column tail;
# groups of 8; a one-row map; a tall map that takes longer row segments on a small GPU.
GEOMETRIES = [(1, 32, 32, 7, 7, 32), (2, 8, 8, 9, 13, 8), (1, 6, 6, 5, 6, 6),
              (2, 4, 8, 5, 37, 4), (1, 9, 6, 7, 11, 3), (2, 16, 16, 6, 5, 2),
              (1, 3, 3, 1, 9, 3), (1, 4, 4, 20, 40, 4), (1, 12, 24, 4, 3, 2)]
SM_COUNTS = (132, 1)  # the H200, and a GPU so small that strips get longer and slices fewer
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@needs_nvcc
@pytest.mark.parametrize("kernel", list(kernels_of("weight_grad")))
def test_every_entry_compiles_without_spills_or_local_memory(kernel, tmp_path):
    spec = kernels_of("weight_grad")[kernel]
    assert spec.table.stale(spec.table_origin) is None
    record = compile_kernel_source(KERNELS_DIR / spec.source.split("/")[-1],
                                   tmp_path / f"{kernel}.cubin", arch="sm_90")
    assert "-arch=sm_90" in record["nvcc_flags"]
    assert set(spec.entry_names()) == set(record["functions"])
    for name, res in record["functions"].items():
        assert res["registers"] and res["registers"] <= 255, name
        assert (res["stack_frame_bytes"], res["spill_store_bytes"], res["spill_load_bytes"],
                res["local_bytes"]) == (0, 0, 0, 0), f"{name} uses local memory: {res}"


@pytest.mark.parametrize("sm_count", SM_COUNTS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_emulated_nchw_takes_every_contribution_once(geometry, sm_count):
    shape = geometry_shape(*geometry)
    plan = wgrad_plan(shape, "nchw", sm_count)
    found, writes = emulate_nchw(plan, plan.choice["cob"], plan.choice["cib"])
    check(shape, found, writes, plan.slices)


@pytest.mark.parametrize("alignment", (16, 4))
@pytest.mark.parametrize("sm_count", SM_COUNTS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_emulated_nhwc_takes_every_contribution_once(geometry, sm_count, alignment):
    shape = geometry_shape(*geometry)
    plan = wgrad_plan(shape, "nhwc", sm_count, alignment)
    found, writes = emulate_nhwc(plan, plan.choice)
    check(shape, found, writes, plan.slices)


def test_the_emulation_catches_a_wrong_window():
    shape = geometry_shape(2, 8, 8, 9, 13, 8)
    plan = wgrad_plan(shape, "nchw", 132)
    found, writes = emulate_nchw(plan, 1, 1)
    e, pix, xi = found[0]
    found[0] = (e, pix, np.where(xi >= 0, xi + 1, xi))  # one tap a column off
    with pytest.raises(AssertionError, match="wrong X element"):
        check(shape, found, writes, plan.slices)
    with pytest.raises(AssertionError, match="exactly once"):
        check(shape, found[1:], writes, plan.slices)


def test_the_emulation_covers_every_kind_of_launch():
    plans = [wgrad_plan(geometry_shape(*g), layout, sm, align) for g in GEOMETRIES
             for sm in SM_COUNTS for layout, align in (("nchw", 16), ("nhwc", 16), ("nhwc", 4))]
    nchw = [p for p in plans if p.stage1.entry.startswith("wg_nchw")]
    assert {p.choice["wt"] for p in nchw} >= {8, 16, 32}
    assert any(p.choice["seg_rows"] > 1 for p in nchw) and any(p.slices > 1 for p in plans)
    entries = {p.stage1.entry for p in plans}
    # the depthwise rule: 2-channel vectors where C and the alignment allow, else 1; 8 rows where
    # H holds them, else the most it holds (4-channel vectors only as a knob, below)
    assert {"wg_nhwc_dw_v2_r8", "wg_nhwc_dw_v1_r8", "wg_nhwc_dw_v2_r4", "wg_nhwc_dw_v1_r1"} <= entries
    assert any(re.fullmatch(r"wg_nhwc_o\d_i\d_r\d_v1", e) for e in entries)
    assert any(p.choice.get("cob", 1) > 1 and p.choice.get("cib", 1) > 1 for p in plans)


FROZEN = frozen_geometries(lambda g: True)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_stage_two_adds_every_slice_once_in_an_order_set_by_the_slice_count(layout):
    """Emulated wg_reduce on every frozen shape's plan: each dW element takes each slice exactly
    once, every element takes them in one order, and that order is a function of the slice count
    (so of the geometry: bit-identical across runs). Its blocks stay within the kernel's bounds,
    and many slices are spread over several lanes per element (the reason for the design)."""
    orders = {}
    for shape_id, g in FROZEN.items():
        plan = wgrad_plan(g.shape, layout, 132)
        if plan.reduce is None:
            continue
        launch = plan.reduce
        assert launch.scalars == (g.shape.weight_elems, plan.slices), shape_id
        rx, ry, rz = launch.block
        assert (rx, rz) == (REDUCE_X, 1) and 1 <= ry <= REDUCE_MAX_Y, (shape_id, launch.block)
        assert ry >= min(REDUCE_MAX_Y, -(-plan.slices // REDUCE_CHAINS)), (shape_id, ry)
        first = check_reduce(emulate_reduce(launch, REDUCE_CHAINS), *launch.scalars)
        assert orders.setdefault(plan.slices, first) == first, f"{shape_id}: order not the count's"
    # several lanes per element somewhere, each with a loop tail (slices not a multiple)
    assert max(orders) > 2 * REDUCE_CHAINS, "no plan with many slices: lanes never split"
    assert any(s % (REDUCE_CHAINS * 2) for s in orders if s > 2 * REDUCE_CHAINS)


def test_the_reduce_check_catches_a_lost_slice_and_an_order_by_element():
    launch = wgrad_plan(geometry_shape(32, 32, 32, 112, 112, 32), "nhwc", 132).reduce
    elems, slices = launch.scalars
    assert slices > 100 and launch.block[1] == REDUCE_MAX_Y
    order = emulate_reduce(launch, REDUCE_CHAINS)
    lost = {e: o[:-1] for e, o in order.items()}
    with pytest.raises(AssertionError, match="every slice exactly once"):
        check_reduce(lost, elems, slices)
    turned = {**order, 5: order[5][::-1]}
    with pytest.raises(AssertionError, match="order differs"):
        check_reduce(turned, elems, slices)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_every_frozen_shape_has_a_valid_plan_that_fills_the_gpu(layout):
    for shape_id, g in FROZEN.items():
        shape = g.shape
        plan = wgrad_plan(shape, layout, 132)
        grid = plan.stage1.grid
        assert grid[1] <= 65535 and grid[0] < 2**31 and plan.choice["strips"] < 2**31, shape_id
        assert plan.workspace_floats == (0 if plan.slices == 1 else
                                         plan.slices * shape.weight_elems), shape_id
        assert (plan.reduce is None) == (plan.slices == 1), shape_id
        blocks = grid[0] * grid[1]
        # several blocks per SM where the work has them: at least 2 strips per lane group
        assert blocks >= min(132, grid[0] * max(1, plan.choice["strips"] // 64)), \
            (shape_id, plan.choice, grid)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("geometry", [(1, 6, 6, 3, 3, 6), (1, 12, 24, 3, 3, 4),
                                      (1, 9, 6, 3, 3, 3), (1, 64, 64, 3, 3, 1)], ids=str)
def test_the_transposed_weight_is_the_formula(geometry, layout):
    n, c_in, c_out, h, w, groups = geometry
    cig, cog = c_in // groups, c_out // groups
    weight = np.random.default_rng(3).standard_normal((c_out, cig, 3, 3))
    want = np.empty((c_in, cog, 3, 3))
    for j in range(c_in):
        g, i = divmod(j, cig)
        for o in range(cog):
            want[j, o] = weight[g * cog + o, i, ::-1, ::-1]
    got = np.take(weight, transposed_weight_index(c_out, cig, groups, layout))
    if layout == "nhwc":  # OHWI memory: the (C_in, cog, 3, 3) tensor in channels_last
        got = got.reshape(c_in, 3, 3, cog).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    # torch.take reads a channels_last weight by its logical order too
    t = torch.from_numpy(weight).contiguous(memory_format=torch.channels_last)
    index = torch.from_numpy(transposed_weight_index(c_out, cig, groups, "nchw"))
    np.testing.assert_array_equal(torch.take(t, index).reshape(want.shape).numpy(), want)


def test_names_and_layouts_of_the_interface():
    assert backward.PASSES == ("forward", "input_grad", "weight_grad")
    assert backward.CUSTOM_BACKWARD == {"input_grad": ("ig_nchw", "ig_nhwc"),
                                        "weight_grad": ("wg_nchw", "wg_nhwc")}
    refs = ("torch_default", "torch_tuned", "torch_default_nhwc", "torch_tuned_nhwc")
    assert backward.backward_implementations("weight_grad") == ("wg_nchw", "wg_nhwc", *refs)
    assert backward.backward_implementations("input_grad") == ("ig_nchw", "ig_nhwc", *refs)
    assert backward.backward_implementations("forward")[-4:] == refs
    assert [backward.backward_layout(i) for i in ("wg_nchw", "ig_nhwc", "torch_tuned",
                                                  "torch_default_nhwc", "k8")] == \
        ["nchw", "nhwc", "nchw", "nhwc", "nhwc"]
    with pytest.raises(UnsupportedConv, match="^implementation: unknown 'wg_x'"):
        backward.backward_layout("wg_x")
    with pytest.raises(UnsupportedConv, match="^pass_: 'grad'"):
        backward.backward_implementations("grad")


def test_support_answers_and_names_the_field():
    from groupconv.shapes import Shape

    shape = Shape("s", "", 2, 8, 16, 9, 13, 8)
    for given in (shape, Geometry(2, 8, 16, 9, 13, 8), (2, 8, 16, 9, 13, 8)):
        for pass_, impls in backward.CUSTOM_BACKWARD.items():
            for impl in (*impls, "torch_tuned_nhwc"):
                ok, why = backward.backward_support(pass_, impl, given)
                assert ok, (pass_, impl, why)
    assert backward.backward_support("forward", "k8", (1, 8, 8, 7, 7, 8))[0]
    cases = {("weight_grad", "wg_nchw", (2, 8, 16, 9, 13, 3)): "^groups: 3",
             ("weight_grad", "wg_nchw", (0, 8, 16, 9, 13, 8)): "^n: 0",
             ("weight_grad", "wg_nchw", (2, 8, 16, 9, 1.5, 8)): "^w: 1.5",
             ("weight_grad", "ig_nchw", (2, 8, 16, 9, 13, 8)): "^implementation: unknown",
             ("grad", "wg_nchw", (2, 8, 16, 9, 13, 8)): "^pass_: 'grad'",
             ("input_grad", "ig_nchw", "2x8"): "^shape: '2x8'"}
    for (pass_, impl, given), pattern in cases.items():
        ok, why = backward.backward_support(pass_, impl, given)
        assert not ok and re.search(pattern, why), (pass_, impl, given, why)


def _t(*size, fmt=torch.contiguous_format, dtype=torch.float32):
    return torch.zeros(size, dtype=dtype).contiguous(memory_format=fmt)


@pytest.mark.parametrize("call, pattern", [
    (lambda: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 8, "wg_x"),
     "^implementation: unknown 'wg_x'"),
    (lambda: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 3, "wg_nchw"), "^groups: 3"),
    (lambda: backward.weight_grad(_t(2, 16, 9, 13, dtype=torch.float64), _t(2, 8, 9, 13), 8,
                                  "wg_nchw"), "^grad_y: dtype torch.float64"),
    (lambda: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 12), 8, "wg_nchw"), "^x: sizes"),
    (lambda: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 8, "wg_nhwc"),
     "^grad_y: strides .* channels_last"),
    (lambda: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 8, "wg_nchw"),
     "^grad_y: on cpu, must be on a CUDA GPU"),
    (lambda: backward.input_grad(_t(2, 16, 9, 13), _t(16, 1, 3, 3), 8, "ig_nchw"),
     "^grad_y: on cpu"),
    (lambda: backward.input_grad(_t(2, 16, 9, 13), _t(8, 1, 3, 3), 8, "ig_nchw"),
     "^weight: 8 output channels"),
    (lambda: backward.input_grad(_t(2, 16, 9, 13), _t(16, 1, 5, 5), 16, "ig_nchw"),
     "^weight: kernel"),
    (lambda: backward.input_grad(_t(2, 16, 9, 13), "w", 16, "ig_nchw"), "^weight: str"),
])
def test_argument_errors_name_the_field(call, pattern):
    with pytest.raises(UnsupportedConv, match=pattern):
        call()


def _ctx(x, weight, groups, needs=(True, True)):
    return types.SimpleNamespace(saved_tensors=(x, weight), needs_input_grad=(*needs, False, False),
                                 groups=groups)


def _stage_runtime(**kwargs):
    """An op runtime built without a GPU: a stage's, over a launcher the backward never reads."""
    from groupconv.op_runtime import Runtime

    return Runtime(launcher=object(), **kwargs)


def test_conv2d_backward_falls_back_to_aten_where_the_table_lacks_the_pass_and_layout(
        monkeypatch):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 8, 9, 13, generator=gen, requires_grad=True)
    weight = torch.randn(16, 1, 3, 3, generator=gen, requires_grad=True)
    grad = torch.randn(2, 16, 9, 13, generator=gen)
    y = torch.nn.functional.conv2d(x, weight, None, 1, 1, 1, 8)
    want_x, want_w = torch.autograd.grad(y, (x, weight), grad)
    # a table measured on the other layout only: no pass of an NCHW call has a choice to go by
    other = {("weight_grad", "nhwc", (2, 8, 16, 9, 14, 8)): "wg_nhwc",
             ("input_grad", "nhwc", (2, 8, 16, 9, 13, 8)): "ig_nhwc"}
    for table in ({}, other):
        monkeypatch.setattr(conv, "_RUNTIME", _stage_runtime(backward_dispatch=table))
        got_x, got_w, *_ = conv._conv2d_backward(_ctx(x.detach(), weight.detach(), 8), grad)
        assert torch.equal(got_x, want_x) and torch.equal(got_w, want_w)
    # the default runtime before it is built: an empty table, every pass aten's
    monkeypatch.setattr(conv, "_RUNTIME", conv._Unbuilt())
    got_x, got_w, *_ = conv._conv2d_backward(_ctx(x.detach(), weight.detach(), 8), grad)
    assert torch.equal(got_x, want_x) and torch.equal(got_w, want_w)
    # a geometry the table names goes to that implementation (here refusing CPU tensors), the
    # other pass still to aten
    table = {("weight_grad", "nchw", (2, 8, 16, 9, 13, 8)): "wg_nchw"}
    monkeypatch.setattr(conv, "_RUNTIME", _stage_runtime(backward_dispatch=table))
    with pytest.raises(UnsupportedConv, match="^grad_y: on cpu"):
        conv._conv2d_backward(_ctx(x.detach(), weight.detach(), 8), grad)
    got_x, got_w = backward_plans.routed_backward(
        _stage_runtime(backward_dispatch=table), grad, x.detach(), weight.detach(), 8,
        (True, False))
    assert got_w is None and torch.equal(got_x, want_x)


def test_an_unseen_geometry_s_backward_takes_the_nearest_measured_choice(caplog):
    """A pass on a geometry the backward table lacks takes the choice of the nearest geometry
    measured for the same pass and layout whose implementation supports it (a PyTorch reference
    included), made once per key and logged; nothing measured for the pass and layout: None,
    PyTorch's backward."""
    from groupconv.unseen import distance, nearest_backward

    seen = (32, 96, 96, 56, 56, 96)  # depthwise, as the call below
    table = {("weight_grad", "nhwc", seen): "torch_tuned_nhwc",
             ("weight_grad", "nhwc", (32, 256, 256, 56, 56, 32)): "wg_nhwc",
             ("weight_grad", "nchw", (32, 96, 96, 56, 56, 96)): "wg_nchw",
             ("input_grad", "nhwc", (8, 96, 96, 28, 28, 96)): "ig_nhwc"}
    call = (16, 96, 96, 56, 56, 96)
    assert distance(call, seen) < distance(call, (32, 256, 256, 56, 56, 32))
    everything = lambda impl, geometry: True  # noqa: E731
    assert nearest_backward("weight_grad", "nhwc", call, table, everything)[0] == \
        "torch_tuned_nhwc"
    assert nearest_backward("weight_grad", "nchw", call, table, everything)[0] == "wg_nchw"
    assert nearest_backward("input_grad", "nhwc", call, table, everything)[0] == "ig_nhwc"
    assert nearest_backward("input_grad", "nchw", call, table, everything)[0] is None
    # the nearest's implementation does not support the geometry: the next nearest's
    no_reference = lambda impl, geometry: not impl.startswith("torch")  # noqa: E731
    impl, why = nearest_backward("weight_grad", "nhwc", call, table, no_reference)
    assert impl == "wg_nhwc" and "(32, 256, 256, 56, 56, 32)" in why, why
    # the runtime: the table's own where it holds the geometry, else the nearest, once per key
    runtime = _stage_runtime(backward_dispatch=table)
    assert runtime.backward_choice("weight_grad", "nchw", (32, 96, 96, 56, 56, 96)) == "wg_nchw"
    with caplog.at_level("WARNING", logger="groupconv"):
        for _ in range(2):
            assert runtime.backward_choice("weight_grad", "nhwc", call) == "torch_tuned_nhwc"
    assert [r.getMessage().count("not in the backward table") for r in caplog.records] == [1]
    assert runtime.backward_choices == {("weight_grad", "nhwc", call): "torch_tuned_nhwc"}
    assert runtime.backward_choice("input_grad", "nchw", call) is None


def test_with_autotuning_on_an_unseen_backward_pass_is_measured_once_and_kept(
        monkeypatch, tmp_path, caplog):
    """Autotuning on (a GPU no table names): a pass on a geometry the backward table lacks is
    measured on real tensors outside a capture (backward_autotune, planted here), kept in the
    autotune cache under its pass and read back by a later runtime without measuring; where it
    may not measure (`measure` False: a capture or a traced backward) or measuring fails, the
    nearest measured geometry's choice, or PyTorch's with none."""
    from groupconv import op_runtime

    monkeypatch.setenv("GROUPCONV_CACHE", str(tmp_path))
    monkeypatch.setattr(op_runtime.torch.cuda, "get_device_name", lambda: "Planted GPU")
    cubin = tmp_path / "wg.cubin"
    cubin.write_bytes(b"planted cubin")
    measured = []

    def planted(runtime, pass_, layout, shape, progress):
        measured.append((pass_, layout, shape.geometry))
        return {"implementation": f"wg_{layout}", "median_us": 1.0, "trials": {}, "custom": {}}

    monkeypatch.setattr(op_runtime, "autotune_backward", planted)

    def runtime(table=None):
        built = op_runtime.Runtime(launcher=types.SimpleNamespace(cubins={}), autotune=True,
                                   backward_dispatch=table,
                                   cubins={"wg_nchw": cubin, "wg_nhwc": cubin})
        assert built.routes_backward
        return built

    geometry = (4, 32, 32, 20, 20, 32)
    first = runtime()
    with caplog.at_level("WARNING", logger="groupconv"):
        assert first.backward_choice("weight_grad", "nhwc", geometry, measure=True) == "wg_nhwc"
    assert measured == [("weight_grad", "nhwc", geometry)]
    assert "autotuned now" in caplog.text
    cached = json.loads((tmp_path / "autotune.json").read_text())
    assert [k.split("|")[2] for k in cached] == ["weight_grad/nhwc"]
    # a later process's runtime reads it back, measuring nothing
    second = runtime()
    assert second.backward_choice("weight_grad", "nhwc", geometry, measure=True) == "wg_nhwc"
    assert len(measured) == 1
    # no measuring allowed: the nearest measured geometry's choice, else PyTorch's
    table = {("weight_grad", "nchw", (8, 32, 32, 20, 20, 32)): "torch_tuned"}
    unmeasured = runtime(table)
    assert unmeasured.backward_choice("weight_grad", "nchw", geometry) == "torch_tuned"
    assert runtime().backward_choice("weight_grad", "nchw", geometry) is None
    assert len(measured) == 1
    # not kept: the geometry's first call on real tensors measures it
    assert unmeasured.backward_choices == {}
    assert unmeasured.backward_choice("weight_grad", "nchw", geometry, measure=True) == "wg_nchw"
    assert measured[-1] == ("weight_grad", "nchw", geometry)
    measured.pop()

    def failing(*args, **kwargs):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(op_runtime, "autotune_backward", failing)
    caplog.clear()
    with caplog.at_level("WARNING", logger="groupconv"):
        assert runtime(table).backward_choice("weight_grad", "nchw", (4, 32, 32, 21, 20, 32),
                                              measure=True) == "torch_tuned"
    assert "planted failure" in caplog.text and "nothing kept" in caplog.text


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_a_traced_backward_holds_one_op_whatever_the_table_says(monkeypatch, layout):
    """conv2d's backward traced on fake tensors (as torch.compile traces the compiled backward):
    the graph holds the backward op, with the gradients' shapes and layouts, and neither a pass
    of its own nor aten's convolution_backward, so nothing launches at trace time; and it is the
    same graph whether the backward table routes the geometry, routes nothing, or there is no
    table at all, since torch.compile caches compiled graphs under keys that know nothing of
    the table. A pass not asked for is no output."""
    from torch.fx.experimental.proxy_tensor import make_fx

    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    routed = (2, 8, 16, 9, 13, 8)
    table = {("weight_grad", layout, routed): f"wg_{layout}",
             ("input_grad", layout, routed): f"ig_{layout}"}

    def traced(runtime, needs=(True, True)):
        monkeypatch.setattr(conv, "_RUNTIME", runtime)
        n, c_in, c_out, h, w, groups = routed

        def step(grad, x, weight):
            return conv._conv2d_backward(_ctx(x, weight, groups, needs), grad)[:2]

        args = (torch.randn(n, c_out, h, w).contiguous(memory_format=fmt),
                torch.randn(n, c_in, h, w).contiguous(memory_format=fmt),
                torch.randn(c_out, c_in // groups, 3, 3))
        graph = make_fx(step, tracing_mode="fake")(*args)
        nodes = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
        outputs = [node for node in graph.graph.nodes if node.op == "output"][0].args[0]
        return nodes, [o if o is None else o.meta["val"] for o in outputs]

    nodes, (grad_x, grad_w) = traced(_stage_runtime(backward_dispatch=table))
    assert "groupconv.conv2d_backward.default" in nodes, nodes
    assert not any("convolution_backward" in n or "_grad.default" in n for n in nodes), nodes
    assert grad_x.shape == (2, 8, 9, 13) and grad_x.is_contiguous(memory_format=fmt)
    assert grad_w.shape == (16, 1, 3, 3) and grad_w.is_contiguous()
    assert traced(_stage_runtime(backward_dispatch={}))[0] == nodes
    assert traced(conv._Unbuilt())[0] == nodes
    nodes, (grad_x, grad_w) = traced(_stage_runtime(backward_dispatch=table), (False, True))
    assert grad_x is None and grad_w.shape == (16, 1, 3, 3)


def test_every_op_a_compiled_graph_holds_takes_the_layout_inductor_gives_it():
    """The forward ops and the traced backward's op carry torch.Tag.flexible_layout: inductor's
    layout optimisation keeps a network's activations channels_last around cuDNN's convolutions,
    and an op without the tag has its inputs copied back to the layout eager tracing saw (a
    converted NCHW MobileNetV2's compiled train step ran its backward in NCHW behind layout
    copies, 0.90x the original's device time on an H100; with the tag 1.02x)."""
    for op in (torch.ops.groupconv.conv2d, torch.ops.groupconv.conv2d_fused,
               torch.ops.groupconv.conv2d_backward):
        assert torch.Tag.flexible_layout in op.default.tags, op


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_backward_op_routes_on_the_runtime_as_it_is_when_it_runs(layout):
    """What the op computes when it runs (backward_ops.run_backward): the passes as the runtime's
    table names them then (here a custom weight gradient, which refuses CPU tensors by name),
    aten's for a pass the table lacks, each gradient asked for in its tensor's layout with the
    strides the fake promised, an empty tensor for one not asked for."""
    from groupconv.backward_ops import _conv2d_backward_fake, run_backward

    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    geometry = (2, 8, 16, 9, 13, 8)
    x = torch.randn(2, 8, 9, 13).contiguous(memory_format=fmt)
    weight = torch.randn(16, 1, 3, 3)
    grad = torch.randn(2, 16, 9, 13).contiguous(memory_format=fmt)
    want_x, want_w, _ = torch.ops.aten.convolution_backward(
        grad, x, weight, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 8, [True, True, False])
    table = {("weight_grad", layout, geometry): f"wg_{layout}"}
    with pytest.raises(UnsupportedConv, match="^grad_y: on cpu"):
        run_backward(_stage_runtime(backward_dispatch=table), grad, x, weight, 8, True, True)
    runtime = _stage_runtime(backward_dispatch=table)
    runtime.backward_dispatch = {}  # as configure(backward_dispatch={}) leaves it
    got_x, got_w = run_backward(runtime, grad, x, weight, 8, True, True)
    fake_x, fake_w = _conv2d_backward_fake(grad, x, weight, 8, True, True)
    assert torch.equal(got_x, want_x) and torch.equal(got_w, want_w)
    assert got_x.stride() == fake_x.stride() and got_w.stride() == fake_w.stride()
    got_x, got_w = run_backward(runtime, grad, x, weight, 8, False, True)
    assert got_x.numel() == 0 and torch.equal(got_w, want_w)


def test_configure_sets_the_backward_table_without_a_gpu(monkeypatch):
    monkeypatch.setattr(conv, "_RUNTIME", conv._Unbuilt())
    table = {("weight_grad", "nhwc", (2, 8, 16, 9, 13, 8)): "wg_nhwc"}
    tunings = {("nhwc", (2, 8, 16, 9, 13, 8)): {"vec": 2}}
    conv.configure(launcher=object(), backward_dispatch=table, cubins={"wg_nchw": "/x.cubin"},
                   wgrad_tunings=tunings)
    runtime = conv.runtime()  # the configured one: nothing built anew
    assert runtime is conv._RUNTIME and isinstance(runtime, conv.Runtime)
    assert runtime.backward_dispatch == table and runtime.backward_dispatch is not table
    assert runtime.backward.cubin("wg_nchw") == "/x.cubin"
    assert runtime.wgrad_tunings == runtime.backward.wgrad_tunings == tunings


def test_two_runtimes_keep_their_own_backward_tables_cuts_and_plans():
    """A stage's runtime and the op's default share nothing: each has its backward table, its
    weight gradient's cuts, cubins and plan cache, so building or using one leaves the other as
    it was."""
    table = {("weight_grad", "nchw", (2, 8, 16, 9, 13, 8)): "wg_nchw"}
    cuts = {("nhwc", (2, 8, 16, 9, 13, 8)): {"vec": 2}}
    one = _stage_runtime(backward_dispatch=table, wgrad_tunings=cuts,
                         cubins={"wg_nchw": "/one.cubin", "k5": "/k5.cubin"})
    other = _stage_runtime()
    assert one.backward is not other.backward
    assert (one.backward_dispatch, other.backward_dispatch) == (table, {})
    assert (one.wgrad_tunings, other.wgrad_tunings) == (cuts, {})
    assert one.backward._cubins == {"wg_nchw": "/one.cubin"}  # the forward's cubins left out
    assert other.backward._cubins == {}
    # a plan made on one is in its cache alone
    one.backward._plans[("weight_grad", "planted")] = "a plan"
    assert other.backward._plans == {}
    other.backward.wgrad_tunings[("nchw", (1, 4, 4, 4, 4, 4))] = {}
    assert one.wgrad_tunings == cuts
    # the default is another runtime again: configuring a stage's installs nothing
    assert conv._RUNTIME is not one and conv._RUNTIME is not other


def test_a_backward_call_takes_the_runtime_it_is_given(monkeypatch):
    """groupconv/backward.py's calls on a stage's runtime plan in that runtime's backward, never
    the default's (here the default cannot even be built: no GPU)."""
    seen = []

    class Backward:
        def weight_grad(self, grad_y, x, groups, implementation):
            seen.append(("weight_grad", implementation))
            return "dW"

        def input_grad(self, grad_y, weight, groups, implementation, runtime):
            seen.append(("input_grad", implementation, runtime))
            return "dX"

        def input_grad_plan(self, grad_y, weight, groups, implementation, runtime):
            seen.append(("input_grad_plan", implementation, runtime))
            return types.SimpleNamespace(route={"via": "planted"})

    runtime = _stage_runtime()
    runtime.backward = Backward()
    monkeypatch.setattr(conv, "_RUNTIME", conv._Unbuilt())
    monkeypatch.setattr(conv.torch.cuda, "is_available", lambda: False)
    assert backward.weight_grad(None, None, 8, "wg_nchw", runtime) == "dW"
    assert backward.input_grad(None, None, 8, "ig_nhwc", runtime=runtime) == "dX"
    assert backward.input_grad_route(None, None, 8, "ig_nchw", runtime) == {"via": "planted"}
    assert seen == [("weight_grad", "wg_nchw"), ("input_grad", "ig_nhwc", runtime),
                    ("input_grad_plan", "ig_nchw", runtime)]
    assert not conv._RUNTIME  # the default was not built
    # without a runtime, a call on a machine without a GPU names its own argument error first
    with pytest.raises(UnsupportedConv, match="^grad_y: on cpu"):
        backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 8, "wg_nchw")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        conv.runtime()


@pytest.mark.parametrize("call, pattern", [
    (lambda r: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 3, "wg_nchw", r),
     "^groups: 3"),
    (lambda r: backward.weight_grad(_t(2, 16, 9, 13), _t(2, 8, 9, 13), 8, "wg_nhwc", r),
     "^grad_y: strides .* channels_last"),
    (lambda r: backward.input_grad(_t(2, 16, 9, 13), _t(8, 1, 3, 3), 8, "ig_nchw", r),
     "^weight: 8 output channels"),
    (lambda r: backward.input_grad_route(_t(2, 16, 9, 13), "w", 16, "ig_nchw", r),
     "^weight: str"),
])
def test_a_stage_s_runtime_checks_the_arguments_as_the_default_does(call, pattern):
    with pytest.raises(UnsupportedConv, match=pattern):
        call(_stage_runtime())


KNOBS = [dict(blocks_per_sm=32, min_iters=1), dict(blocks_per_sm=2, min_iters=8),
         dict(rows=1), dict(rows=4, blocks_per_sm=16), dict(seg=3), dict(seg=64, rows=4),
         dict(vec=1, rows=8), dict(vec=4, rows=2), dict(vec=4, rows=8, blocks_per_sm=8)]


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize("geometry", GEOMETRIES[::2], ids=str)
def test_other_split_aims_and_rows_still_take_every_contribution_once(geometry, knobs):
    """The plan's knobs (what a sweep or a tuning stage varies) change how the work is cut, never
    what is summed: each contribution once, in both layouts."""
    shape = geometry_shape(*geometry)
    layouts = ["nhwc"] if {"rows", "vec"} & set(knobs) else ["nchw", "nhwc"]
    for layout in layouts:
        grouped = shape.cin_per_group * shape.cout_per_group != 1
        if grouped and ("vec" in knobs or knobs.get("rows", 1) > 2):
            # the grouped tiles have 1 or 2 rows and load runs of channels, not vectors
            with pytest.raises(ValueError, match="WG_NHWC_TILES|for the depthwise"):
                wgrad_plan(shape, layout, 132, **knobs)
            continue
        if knobs.get("vec", 1) > 1 and shape.c_in % knobs["vec"]:
            with pytest.raises(ValueError, match=f"vec = {knobs['vec']}: C = {shape.c_in}"):
                wgrad_plan(shape, layout, 132, **knobs)
            continue
        plan = wgrad_plan(shape, layout, 132, **knobs)
        for knob in ("rows", "vec"):
            if knob in knobs:
                assert plan.choice[knob] == knobs[knob]
        emulate = emulate_nchw if layout == "nchw" else emulate_nhwc
        found, writes = (emulate(plan, plan.choice["cob"], plan.choice["cib"])
                         if layout == "nchw" else emulate(plan, plan.choice))
        check(shape, found, writes, plan.slices)


def test_knobs_outside_the_tables_are_refused_by_name():
    dw, grouped = geometry_shape(2, 8, 8, 9, 13, 8), geometry_shape(2, 16, 16, 9, 13, 2)
    with pytest.raises(ValueError, match="rows = 3: .*WG_NHWC_DW"):
        wgrad_plan(dw, "nhwc", 132, rows=3)
    with pytest.raises(ValueError, match="rows = 4: .*WG_NHWC_TILES"):
        wgrad_plan(grouped, "nhwc", 132, rows=4)
    with pytest.raises(ValueError, match="rows = 2: .*layout 'nhwc'"):
        wgrad_plan(dw, "nchw", 132, rows=2)
    with pytest.raises(ValueError, match="min_iters = 0"):
        wgrad_plan(dw, "nchw", 132, min_iters=0)
    with pytest.raises(ValueError, match="seg = 0"):
        wgrad_plan(dw, "nhwc", 132, seg=0)
    with pytest.raises(ValueError, match="vec = 4: C = 6 and 16-byte .* allow 2/1"):
        wgrad_plan(geometry_shape(1, 6, 6, 5, 6, 6), "nhwc", 132, vec=4)
    with pytest.raises(ValueError, match="vec = 2: the NCHW"):
        wgrad_plan(dw, "nchw", 132, vec=2)
    with pytest.raises(ValueError, match="vec = 1: for the depthwise"):
        wgrad_plan(grouped, "nhwc", 132, vec=1)
    assert wgrad_plan(dw, "nhwc", 132, vec=4).stage1.entry == "wg_nhwc_dw_v4_r8"
    assert wgrad_plan(dw, "nhwc", 132, vec=4, rows=2).stage1.entry == "wg_nhwc_dw_v4_r2"
    # A strip length is taken as given (up to the map's extent), whatever the aims would pick.
    assert wgrad_plan(dw, "nhwc", 132, seg=5).choice["seg_cols"] == 5
    assert wgrad_plan(dw, "nchw", 132, seg=64).choice["seg_rows"] == dw.h
    # The defaults are the module's rule: channels_last its own aims, depthwise its rows and
    # vectors; NCHW the rule from before the knobs existed.
    assert wgrad_plan(dw, "nhwc", 132) == wgrad_plan(
        dw, "nhwc", 132, rows=DW_ROWS, vec=DW_VEC, blocks_per_sm=NHWC_BLOCKS_PER_SM)
    assert wgrad_plan(grouped, "nhwc", 132) == wgrad_plan(  # its 4 x 4 tile has one row
        grouped, "nhwc", 132, rows=1, blocks_per_sm=NHWC_BLOCKS_PER_SM)
    assert wgrad_plan(dw, "nchw", 132) == wgrad_plan(dw, "nchw", 132, blocks_per_sm=BLOCKS_PER_SM)


@pytest.mark.parametrize("geometry", GEOMETRIES[::2], ids=str)
def test_every_tile_a_group_holds_still_takes_every_contribution_once(geometry):
    """A grouped geometry's every (COB, CIB) tile within its group (what tools/wgrad_sweep.py
    times), in both layouts: each contribution once; depthwise channels_last refuses a tile."""
    from groupconv.backward_kernels import TILES

    shape = geometry_shape(*geometry)
    cig, cog = shape.cin_per_group, shape.cout_per_group
    for layout in ("nchw", "nhwc"):
        if layout == "nhwc" and cig == cog == 1:
            with pytest.raises(ValueError, match=r"tile = \(1, 1\): the depthwise"):
                wgrad_plan(shape, layout, 132, tile=(1, 1))
            continue
        for tile in (t for t in TILES if t[0] <= cog and t[1] <= cig):
            plan = wgrad_plan(shape, layout, 132, tile=tile)
            assert (plan.choice["cob"], plan.choice["cib"]) == tile
            emulate = emulate_nchw if layout == "nchw" else emulate_nhwc
            found, writes = (emulate(plan, *tile) if layout == "nchw"
                             else emulate(plan, plan.choice))
            check(shape, found, writes, plan.slices)


def test_a_tile_the_kernels_lack_or_the_group_cannot_hold_is_refused_by_name():
    grouped = geometry_shape(2, 16, 16, 9, 13, 8)  # 2 channels per group
    with pytest.raises(ValueError, match=r"tile = \(3, 1\): must be one of"):
        wgrad_plan(grouped, "nchw", 132, tile=(3, 1))
    with pytest.raises(ValueError, match=r"tile = \(4, 1\): .*within the group's 2 output"):
        wgrad_plan(grouped, "nhwc", 132, tile=(4, 1))


def test_the_cuts_tried_are_the_rule_first_then_every_cut_the_tables_hold():
    from groupconv.backward_kernels import cut_keywords, wgrad_cuts
    from groupconv_atlas.study.measuring.wgrad_tuning import cut_name

    grouped, dw = geometry_shape(32, 64, 64, 14, 14, 16), geometry_shape(4, 32, 32, 9, 9, 32)
    listed = wgrad_cuts(grouped, "nhwc", [2, 4])
    assert listed[0] == {} and cut_name(listed[0]) == "rule"
    assert {"tile": (4, 4), "rows": 1, "blocks_per_sm": 4} in listed
    assert {"tile": (2, 2), "rows": 2, "blocks_per_sm": 2} in listed
    assert cut_name({"tile": (2, 2), "rows": 2, "blocks_per_sm": 2}) == "tile2x2_rows2_bpsm2"
    assert {"vec": 2, "rows": 8, "blocks_per_sm": 2} in wgrad_cuts(dw, "nhwc", [2])
    assert wgrad_cuts(dw, "nchw", [8]) == [{}, {"tile": (1, 1), "blocks_per_sm": 8}]
    names = [cut_name(c) for c in listed]
    assert len(set(names)) == len(names)  # one label per cut: the sampler's run names
    for keywords in listed[1:] + wgrad_cuts(grouped, "nchw", [8])[1:] + wgrad_cuts(dw, "nhwc",
                                                                                   [4])[1:]:
        shape = dw if "vec" in keywords or keywords.get("staged_co") == 1 else grouped
        layout = "nhwc" if {"rows", "staged_co"} & set(keywords) else "nchw"
        # every listed cut is a plan, also as read back from a JSON record (tile as a list)
        json_cut = {k: list(v) if k == "tile" else v for k, v in keywords.items()}
        assert wgrad_plan(shape, layout, 132, **cut_keywords(json_cut)) == wgrad_plan(
            shape, layout, 132, **keywords)
    with pytest.raises(ValueError, match="layout: 'nhcw'"):
        wgrad_cuts(dw, "nhcw")


def test_a_tuned_cut_is_taken_for_its_geometry_and_the_rule_elsewhere_or_where_ruled_out():
    from groupconv.backward_plans import tuned_wgrad_plan

    grouped, dw = geometry_shape(32, 64, 64, 14, 14, 16), geometry_shape(4, 32, 32, 9, 9, 32)
    tunings = {("nhwc", tuple(grouped.geometry)): {"tile": [2, 2], "rows": 2, "blocks_per_sm": 2},
               ("nhwc", tuple(dw.geometry)): {"vec": 4, "rows": 8, "blocks_per_sm": 2}}
    plan = tuned_wgrad_plan(tunings, grouped, "nhwc", 132, 16)
    assert (plan.choice["cob"], plan.choice["cib"], plan.choice["rows"]) == (2, 2, 2)
    assert tuned_wgrad_plan(tunings, grouped, "nchw", 132, 16) == wgrad_plan(grouped, "nchw", 132)
    assert tuned_wgrad_plan(tunings, dw, "nhwc", 132, 16).choice["vec"] == 4
    # 8-byte aligned pointers rule the tuned 4-channel vector out: the rule's cut, not an error
    assert tuned_wgrad_plan(tunings, dw, "nhwc", 132, 8) == wgrad_plan(dw, "nhwc", 132, 8)


def test_a_jobs_named_input_is_a_list_of_none_one_or_several_paths():
    """What the pass jobs and the network probe read their optional tuning records with."""
    from groupconv_atlas.study.records.jobs import Job

    class Inputs(dict):
        pass

    def job(**named):
        return types.SimpleNamespace(smk=types.SimpleNamespace(input=Inputs(named)))

    assert Job.input_files(job(), "tunings") == []
    assert Job.input_files(job(tunings=[]), "tunings") == []
    assert Job.input_files(job(tunings="a.json"), "tunings") == ["a.json"]
    assert Job.input_files(job(tunings=["a.json", "b.json"]), "tunings") == ["a.json", "b.json"]


def test_a_cut_that_fails_to_run_stops_the_tuning_stage_naming_it(monkeypatch):
    """A cut whose launch fails leaves the CUDA context unusable: the stage raises, naming the
    shape, the cut and its entry, and returns no record (its job then writes none)."""
    import contextlib
    import types

    from groupconv import backward_plans
    from groupconv_atlas.study.measuring import wgrad_tuning

    tensor = types.SimpleNamespace(device="cuda:0")

    class Session:  # what the stage touches up to the checks
        torch, sm_count = None, 132

        def random_inputs(self, shape, seed):
            return tensor, tensor

        def on_stream(self):
            return contextlib.nullcontext()

    class Runtime:
        def wgrad_runner(self, implementation, plan, shape, device):
            return plan

    def check_cut(session, plan, x, gy, refs):
        if plan.stage1.entry.startswith("wg_nhwc_smem"):
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
        return {"status": "correct", "reason": "", "error_to_tolerance": 0.1}

    monkeypatch.setattr(backward_plans, "BackwardRuntime", Runtime)
    monkeypatch.setattr(wgrad_tuning, "grad_output", lambda torch, shape, seed: tensor)
    monkeypatch.setattr(wgrad_tuning, "references", lambda *args: None)
    monkeypatch.setattr(wgrad_tuning, "in_pass_layout", lambda torch, layout, x, w, gy: (x, w, gy))
    monkeypatch.setattr(wgrad_tuning, "check_cut", check_cut)
    shape = geometry_shape(2, 64, 64, 9, 9, 4)
    with pytest.raises(RuntimeError, match=rf"wg_nhwc on {shape.id}: cut staged_co8_bpsm2 "
                       r"\(wg_nhwc_smem_o8\) failed to run \(RuntimeError: "
                       r"CUDA_ERROR_ILLEGAL_ADDRESS\).*writes no record"):
        wgrad_tuning.tune_weight_grad(Session(), "nhwc", [shape], None, 1, 16.0, blocks=(2,),
                                      progress=lambda line: None)
