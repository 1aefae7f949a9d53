"""The package files a rule's code(...) lists (groupconv_atlas.study.plans.code_inputs): the named
modules and, transitively, what they import, inside functions too, relative imports resolved, the
public face's lazy names followed only when asked for. tests/test_rule_code_inputs.py checks each
rule's list against its script independently."""
import pytest

from groupconv_atlas.study.plans.code_inputs import code_files
from groupconv_atlas.study.plans.plan import PlanError
from helpers import ROOT


def test_code_lists_what_the_named_modules_import_in_and_outside_functions():
    files = code_files(ROOT, "statistics/comparisons")
    assert files[:4] == ["workflow/groupconv_atlas/__init__.py",
                         "workflow/groupconv_atlas/study/__init__.py",
                         "workflow/groupconv_atlas/study/statistics/__init__.py",
                         "workflow/groupconv_atlas/study/statistics/comparisons.py"]
    assert "workflow/groupconv_atlas/study/statistics/stats.py" in files  # imported at the top
    # comparisons imports the kernel registry inside a function, and the registry imports shapes.
    assert {"workflow/groupconv/__init__.py",
            "workflow/groupconv/kernels.py",
            "workflow/groupconv/shapes.py"} <= set(files)
    assert not any("/report/" in f or f.endswith("/conv.py") for f in files)
    # An op module runs the op's package alone, nothing of the study.
    assert code_files(ROOT, "shapes") == ["workflow/groupconv/__init__.py",
                                          "workflow/groupconv/shapes.py"]
    report = code_files(ROOT, "report/__init__")
    modules = sorted(p.name for p in (ROOT / "workflow/groupconv_atlas/study/report").glob("*.py"))
    assert sorted(f.rsplit("/", 1)[1] for f in report if "/study/report/" in f) == modules
    with pytest.raises(PlanError, match=r"code\('nowhere'\): 0 modules of that name in "
                                        r"workflow/\{groupconv,groupconv_atlas/study\}/, not one"):
        code_files(ROOT, "nowhere")


def test_code_follows_relative_imports_and_a_public_face_only_for_names_it_serves(tmp_path):
    workflow = tmp_path / "workflow"
    sources = {
        "groupconv_atlas/__init__.py": "def __getattr__(name):\n    from groupconv import conv\n"
                                       "    return getattr(conv, name)\n",
        "groupconv/__init__.py": "",
        "groupconv/conv.py": "from .launch import plan\n",
        "groupconv/launch.py": "plan = 1\n",
        "groupconv/tables.py": "",
        "groupconv_atlas/study/__init__.py": "",
        "groupconv_atlas/study/stage.py": "import json\n\n\ndef run():\n"
                                          "    from groupconv import tables\n",
        "groupconv_atlas/study/probe.py": "from groupconv_atlas import conv2d\n",
        "groupconv_atlas/study/sub/__init__.py": "from .part import x\n",
        "groupconv_atlas/study/sub/part.py": "from groupconv.launch import plan\nx = plan\n",
    }
    for rel, text in sources.items():
        (workflow / rel).parent.mkdir(parents=True, exist_ok=True)
        (workflow / rel).write_text(text)
    study = "groupconv_atlas/study"
    assert code_files(tmp_path, "stage") == ["workflow/" + f for f in (
        "groupconv_atlas/__init__.py", f"{study}/__init__.py", f"{study}/stage.py",
        "groupconv/__init__.py", "groupconv/tables.py")]
    # conv2d is served by the package's __getattr__, which imports the op and what it imports.
    assert set(code_files(tmp_path, "probe")) == {"workflow/" + f for f in (
        "groupconv_atlas/__init__.py", f"{study}/__init__.py", f"{study}/probe.py",
        "groupconv/__init__.py", "groupconv/conv.py", "groupconv/launch.py")}
    assert set(code_files(tmp_path, "sub/__init__")) == {"workflow/" + f for f in (
        "groupconv_atlas/__init__.py", f"{study}/__init__.py", f"{study}/sub/__init__.py",
        f"{study}/sub/part.py", "groupconv/__init__.py", "groupconv/launch.py")}
    # An op module named by a rule runs the op alone.
    assert code_files(tmp_path, "conv") == ["workflow/" + f for f in (
        "groupconv/__init__.py", "groupconv/conv.py", "groupconv/launch.py")]
