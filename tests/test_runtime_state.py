"""The op keeps its state in one object: conv.py's default runtime (op_runtime.Runtime: the launch
tables, cubins, plans and choices of the forward, the backward's table, cubins, tuned cuts and
plans, the eager-training choice). Read with `ast`, without importing: the op's modules bind no
other module-level name a function rebinds or fills in, so two runtimes (a stage's and the
op's default) cannot share state through a module, and a new global has to be named here."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

OP_DIR = Path(__file__).resolve().parents[1] / "workflow" / "groupconv"
# The one name each module may rebind after import.
STATE = {"conv": {"_RUNTIME"}, "backward_plans": set(), "op_runtime": set(), "backward": set(),
         "backward_ops": set()}
# Bound once at import and never changed after it: tables of names, the registered ops and the
# torch functions the hot path calls without an attribute lookup.
CONSTANTS = {
    "conv": {"_LIB", "_FUNCTION_APPLY", "_functorch_active", "_OP", "_ACTIVATION_BACKWARD",
             "_FUSED_OP", "_PLAIN_TENSORS", "_dispatch_modes", "_capturing", "_F_CONV2D",
             "_function_modes", "BACKWARD_OP"},
    "backward_plans": {"PASSES", "CUSTOM_BACKWARD", "REFERENCES", "OTHER", "FLIPPING",
                       "SUPPORT_SM_COUNT"},
    "op_runtime": {"LOG", "EAGER_TRAINING", "_Runtime"},
    "backward": {"__all__", "_FIELDS"},
    "backward_ops": set(),
}
# Methods that change a list, dict or set in place.
MUTATORS = {"append", "extend", "insert", "update", "clear", "pop", "popitem", "setdefault",
            "remove", "discard", "add", "sort", "reverse"}


def _targets(node) -> list[str]:
    """The plain names an assignment target binds (tuples unpacked)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _targets(elt)]
    return []


def module_names(tree: ast.Module) -> set[str]:
    """Names bound by module-level assignments (definitions and imports left out)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update(n for t in node.targets for n in _targets(t))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            names.update(_targets(node.target))
    return names


def changed_in_functions(tree: ast.Module, names: set[str]) -> set[str]:
    """Module-level names a function rebinds (`global`), assigns into (x[k] = v, x.a = v, del
    x[k]) or fills in through a mutating method (x.append(...), x.update(...))."""
    changed = set()
    functions = [n for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                changed.update(node.names)
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, (ast.Subscript, ast.Attribute)) \
                        and isinstance(target.value, ast.Name) and target.value.id in names:
                    changed.add(target.value.id)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in names:
                changed.add(node.func.value.id)
    return changed


def state_of(source: str) -> tuple[set[str], set[str]]:
    """(module-level names, those changed after import) of a module's source."""
    tree = ast.parse(source)
    names = module_names(tree)
    return names, changed_in_functions(tree, names)


@pytest.mark.parametrize("module", sorted(STATE))
def test_the_op_s_modules_hold_no_state_but_the_default_runtime(module):
    names, changed = state_of((OP_DIR / f"{module}.py").read_text())
    assert names - STATE[module] - CONSTANTS[module] == set(), \
        f"{module}.py binds module-level names this test does not know: a new global is state " \
        "the runtime should hold (op_runtime.Runtime), or a constant to list in CONSTANTS"
    assert names >= STATE[module] | CONSTANTS[module], "a listed name is gone: drop it here"
    assert changed == STATE[module], f"{module}.py changes module-level names after import"


@pytest.mark.parametrize("planted, caught", [
    ("_CACHE = {}\n", "_CACHE"),
    ("_X: dict = {}\n", "_X"),
    ("_A, _B = [], None\n", "_A"),
])
def test_a_planted_global_is_named(planted, caught):
    names, _ = state_of((OP_DIR / "backward_plans.py").read_text() + planted)
    assert caught in names - STATE["backward_plans"] - CONSTANTS["backward_plans"]


@pytest.mark.parametrize("planted", [
    "def f():\n    global FLIPPING\n    FLIPPING = {}\n",
    "def f(k):\n    FLIPPING[k] = 'k5'\n",
    "def f(k):\n    FLIPPING.update({k: 'k5'})\n",
    "class C:\n    def f(self):\n        OTHER.clear()\n",
])
def test_a_constant_changed_after_import_is_named(planted):
    _, changed = state_of((OP_DIR / "backward_plans.py").read_text() + planted)
    assert changed - STATE["backward_plans"], planted


def test_the_default_runtime_is_the_one_place_the_op_keeps_its_choices():
    """conv.py's state, imported: the default runtime (built or not yet), whose eager-training
    choice and backward table the op reads; the old globals are gone."""
    torch = pytest.importorskip("torch")  # noqa: F841
    from groupconv import backward_plans, conv

    for gone in ("_BACKWARD_DISPATCH", "_EAGER_TRAINING"):
        assert not hasattr(conv, gone), gone
    for gone in ("BACKWARD", "configure_backward", "use_wgrad_tunings"):
        assert not hasattr(backward_plans, gone), gone
    default = conv._RUNTIME
    assert default.eager_training in conv.EAGER_TRAINING
    if isinstance(default, conv._Unbuilt):  # not built yet (no call on a GPU in this process)
        assert not default and default.backward_dispatch == {}
    else:
        assert isinstance(default, conv.Runtime)
        assert isinstance(default.backward, backward_plans.BackwardRuntime)
    # the unbuilt default's empty table is no place to keep one
    with pytest.raises(TypeError):
        conv._Unbuilt.backward_dispatch[("weight_grad", "nchw", (1, 4, 4, 4, 4, 4))] = "wg_nchw"
