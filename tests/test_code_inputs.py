"""The package files a rule's code(...) lists (groupconv_atlas.study.code_inputs): the named
modules and, transitively, what they import, inside functions too, relative imports resolved, the
public face's lazy names followed only when asked for. tests/test_rule_code_inputs.py checks each
rule's list against its script independently."""
import pytest

from groupconv_atlas.study.code_inputs import code_files
from groupconv_atlas.study.plan import PlanError
from helpers import ROOT


def test_code_lists_what_the_named_modules_import_in_and_outside_functions():
    files = code_files(ROOT, "comparisons")
    assert files[:3] == ["workflow/groupconv_atlas/__init__.py",
                         "workflow/groupconv_atlas/study/__init__.py",
                         "workflow/groupconv_atlas/study/comparisons.py"]
    assert "workflow/groupconv_atlas/study/stats.py" in files  # imported at the top
    # comparisons imports the kernel registry inside a function, and the registry imports shapes.
    assert {"workflow/groupconv_atlas/runtime/__init__.py",
            "workflow/groupconv_atlas/runtime/kernels.py",
            "workflow/groupconv_atlas/runtime/shapes.py"} <= set(files)
    assert not any("/report/" in f or f.endswith("/conv.py") for f in files)
    report = code_files(ROOT, "report/__init__")
    modules = sorted(p.name for p in (ROOT / "workflow/groupconv_atlas/study/report").glob("*.py"))
    assert sorted(f.rsplit("/", 1)[1] for f in report if "/study/report/" in f) == modules
    with pytest.raises(PlanError, match=r"code\('nowhere'\): 0 modules of that name in "
                                        r"workflow/groupconv_atlas/\{runtime,study\}/, not one"):
        code_files(ROOT, "nowhere")


def test_code_follows_relative_imports_and_a_public_face_only_for_names_it_serves(tmp_path):
    package = tmp_path / "workflow" / "groupconv_atlas"
    sources = {
        "__init__.py": "def __getattr__(name):\n    from .runtime import conv\n"
                       "    return getattr(conv, name)\n",
        "runtime/__init__.py": "",
        "runtime/conv.py": "from .launch import plan\n",
        "runtime/launch.py": "plan = 1\n",
        "runtime/tables.py": "",
        "study/__init__.py": "",
        "study/stage.py": "import json\n\n\ndef run():\n    from ..runtime import tables\n",
        "study/probe.py": "from groupconv_atlas import conv2d\n",
        "study/sub/__init__.py": "from .part import x\n",
        "study/sub/part.py": "from ...runtime.launch import plan\nx = plan\n",
    }
    for rel, text in sources.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    prefix = "workflow/groupconv_atlas/"
    assert code_files(tmp_path, "stage") == [prefix + f for f in (
        "__init__.py", "study/__init__.py", "study/stage.py", "runtime/__init__.py",
        "runtime/tables.py")]
    # conv2d is served by the package's __getattr__, which imports the op and what it imports.
    assert set(code_files(tmp_path, "probe")) == {prefix + f for f in (
        "__init__.py", "study/__init__.py", "study/probe.py", "runtime/__init__.py",
        "runtime/conv.py", "runtime/launch.py")}
    assert set(code_files(tmp_path, "sub/__init__")) == {prefix + f for f in (
        "__init__.py", "study/__init__.py", "study/sub/__init__.py", "study/sub/part.py",
        "runtime/__init__.py", "runtime/launch.py")}
