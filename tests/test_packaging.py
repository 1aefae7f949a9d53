"""The two distributions as wheels: the op (groupconv, workflow/groupconv) and the study
(groupconv-atlas, the root), built from this tree and installed into a fresh virtual environment.
The op's wheel depends on torch and numpy alone outside its extras, holds the files it reads at
run time (the launch shim, the kernel sources, the launch tables), and imports every module with
the study's dependencies (snakemake, pandas, scipy, matplotlib, jsonschema, pytest, yaml,
pyarrow) and PyCUDA blocked; the study's wheel depends on groupconv, holds every subpackage and
imports every module outside the checkout, and `import groupconv_atlas` loads no part of the
study. An editable install (`pip install -e .`) reads the checkout and would hide a missing
subpackage: groupconv_atlas.mobilenet was once left out of the wheel this way."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from helpers import run_guarded

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "workflow" / "groupconv_atlas"
OP_DIR = ROOT / "workflow" / "groupconv"
# What a user of the op never needs: importing any of them from an op module fails the test.
STUDY_ONLY = ("snakemake", "pandas", "scipy", "matplotlib", "jsonschema", "pytest", "yaml",
              "pyarrow", "pycuda")

# Run by the fresh environment's interpreter, in a folder outside the checkout, with the
# study's dependencies and PyCUDA blocked (argv[1]: their names as JSON): every module of the op
# imports, and the public names resolve.
_OP_CHECK = r"""
import importlib, json, pkgutil, sys
blocked = set(json.loads(sys.argv[1]))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is blocked: the op must not need it")
sys.meta_path.insert(0, Block())
import groupconv
loaded = sorted(m for m in sys.modules if m.startswith("groupconv"))
modules = [m.name for m in pkgutil.walk_packages(groupconv.__path__, "groupconv.")]
for name in modules:
    importlib.import_module(name)
public = {n: getattr(groupconv, n).__module__ for n in ("conv2d", "GroupConv2d", "convert",
                                                        "configure", "table_source")}
from groupconv import kernels, launch, tuning, unseen
print(json.dumps({"file": groupconv.__file__, "loaded_by_import": loaded, "modules": modules,
                  "public": public, "blocked_loaded": sorted(
                      m for m in sys.modules if m.split(".")[0] in blocked),
                  "kernels_dir": str(kernels.KERNELS_DIR),
                  "kernel_sources": sorted(p.name for p in kernels.KERNELS_DIR.glob("*.cu*")),
                  "shim": str(launch.SHIM_SOURCE), "shim_found": launch.SHIM_SOURCE.is_file()}))
"""

# The same, of the study: every module imports (with its dependencies), and its public face
# serves the op's own objects.
_STUDY_CHECK = r"""
import importlib, json, pkgutil, sys
import groupconv_atlas
loaded = sorted(m for m in sys.modules if m.startswith("groupconv"))
conv2d = groupconv_atlas.conv2d
import groupconv
study = sorted(m for m in sys.modules if m.startswith("groupconv_atlas.study"))
modules = [m.name for m in pkgutil.walk_packages(groupconv_atlas.__path__, "groupconv_atlas.")]
for name in modules:
    importlib.import_module(name)
print(json.dumps({"file": groupconv_atlas.__file__, "loaded_by_import": loaded,
                  "study_after_conv2d": study, "conv2d": conv2d.__module__,
                  "same_object": conv2d is groupconv.conv2d, "modules": modules}))
"""


def checkout_modules(package_dir: Path) -> set[str]:
    modules = set()
    for path in package_dir.rglob("*.py"):
        dotted = ".".join(path.relative_to(package_dir.parent).with_suffix("").parts)
        modules.add(dotted.removesuffix(".__init__"))
    return modules - {package_dir.name}


def copy_sources(dest: Path) -> None:
    """What the wheels are built from (tracked files and new ones git does not ignore), links kept
    as links: both pyproject.toml files, the README and licence the root one names, both
    packages, the kernels the op's kernel_sources links to."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "pyproject.toml",
                             "README.md", "LICENSE*", "workflow/groupconv_atlas",
                             "workflow/groupconv", "kernels"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in listed:
        src, target = ROOT / rel, dest / rel
        if not src.is_symlink() and not src.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def wheel_metadata(wheel: Path) -> tuple[list[str], list[str]]:
    """(the wheel's Requires-Dist lines, the files it holds)."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta, = [n for n in names if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(z.read(meta).decode())
    return message.get_all("Requires-Dist") or [], names


def required_names(requires: list[str]) -> set[str]:
    """The distribution names a wheel requires outside its extras."""
    import re

    return {re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower().replace("_", "-")
            for r in requires if "extra ==" not in r}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """{"op": its wheel, "study": its wheel}, built from a copy of this tree without build
    isolation or an index."""
    tmp_path = tmp_path_factory.mktemp("wheels")
    source, out = tmp_path / "src", tmp_path / "wheels"
    copy_sources(source)
    built = {}
    for kind, folder, pattern in (("op", source / "workflow" / "groupconv", "groupconv-*.whl"),
                                  ("study", source, "groupconv_atlas-*.whl")):
        res = run_guarded([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(out),
                           str(folder)], tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        built[kind], = out.glob(pattern)
    return built


@pytest.fixture(scope="module")
def installed(wheels, tmp_path_factory) -> tuple[Path, Path, Path, dict]:
    """(its interpreter, the fresh environment, a folder outside the checkout, the environment
    variables without PYTHONPATH) of both wheels installed with --no-deps."""
    tmp_path = tmp_path_factory.mktemp("venv")
    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    # --system-site-packages lends a system interpreter's packages (torch, pandas, ...); a
    # virtual environment's own are not among them, so this interpreter's site-packages join
    # through a .pth line, after the fresh environment's own (whose packages come first).
    made = run_guarded([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                        str(venv)], tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # Without PYTHONPATH: a checkout's workflow/ on it holds the egg-info a build of the study
    # leaves there, which pip then takes for the study installed and skips its wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = run_guarded([sys.executable, "-m", "pip", "--python", str(python), "install",
                       "--no-deps", "--no-index", "-q", str(wheels["op"]), str(wheels["study"])],
                      tmp_path, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    elsewhere.mkdir()
    return python, venv, elsewhere, env


def test_the_op_wheel_needs_torch_and_numpy_alone_and_holds_its_files(wheels):
    requires, names = wheel_metadata(wheels["op"])
    assert required_names(requires) == {"torch", "numpy"}, requires
    gpu = {r.split(";")[0].strip() for r in requires if "extra == \"gpu\"" in r}
    assert {g.split(">")[0] for g in gpu} == {"pycuda", "nvidia-ml-py"}, requires
    sources = sorted(p.name for p in (ROOT / "kernels").glob("*.cu*"))
    assert sources and sorted(n.rsplit("/", 1)[1] for n in names
                              if n.startswith("groupconv/kernel_sources/")) == sources
    tables = sorted(p.name for p in (OP_DIR / "tables").glob("*.json"))
    assert tables and sorted(n.rsplit("/", 1)[1] for n in names
                             if n.startswith("groupconv/tables/")) == tables
    assert "groupconv/launch_shim.c" in names
    assert not [n for n in names if n.startswith("groupconv_atlas")], "the study in the op's wheel"


def test_the_study_wheel_depends_on_the_op_and_holds_none_of_it(wheels):
    requires, names = wheel_metadata(wheels["study"])
    assert "groupconv" in required_names(requires), requires
    assert {"snakemake", "pandas", "scipy"} <= required_names(requires), requires
    assert not [n for n in names if n.startswith("groupconv/")], "the op in the study's wheel"


def test_the_requirement_reader_sees_an_extra_dependency():
    assert required_names(["torch>=2.4", "numpy>=1.26", "pandas>=2; extra == \"x\"",
                           "Scipy_x (>=1)"]) == {"torch", "numpy", "scipy-x"}


def test_the_op_imports_every_module_without_the_studys_dependencies_or_pycuda(installed):
    python, venv, elsewhere, env = installed
    res = run_guarded([python, "-c", _OP_CHECK, json.dumps(STUDY_ONLY)], elsewhere, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    found = json.loads(res.stdout.splitlines()[-1])
    assert Path(found["file"]).is_relative_to(venv), found["file"]
    assert found["loaded_by_import"] == ["groupconv"], found["loaded_by_import"]
    assert set(found["modules"]) == checkout_modules(OP_DIR), \
        sorted(set(found["modules"]) ^ checkout_modules(OP_DIR))
    assert found["blocked_loaded"] == []
    assert found["public"]["conv2d"] == "groupconv.conv"
    assert found["public"]["convert"] == "groupconv.conversion"
    assert Path(found["kernels_dir"]).is_relative_to(venv)
    assert found["kernel_sources"] == sorted(p.name for p in (ROOT / "kernels").glob("*.cu*"))
    assert found["shim_found"] and Path(found["shim"]).is_relative_to(venv), found["shim"]


def test_the_blocker_fails_an_op_module_that_imports_pandas(installed, tmp_path):
    """The check above can fail: a module importing pandas on import is refused."""
    python, venv, elsewhere, env = installed
    (tmp_path / "needs_pandas.py").write_text("import pandas\n")
    program = _OP_CHECK.replace("import groupconv\n", "import groupconv\nimport needs_pandas\n", 1)
    res = run_guarded([python, "-c", program, json.dumps(STUDY_ONLY)], elsewhere,
                      env={**env, "PYTHONPATH": str(tmp_path)})
    assert res.returncode != 0 and "pandas is blocked" in res.stderr, res.stdout + res.stderr


def test_the_study_wheel_imports_every_module_and_serves_the_ops_names(installed):
    python, venv, elsewhere, env = installed
    res = run_guarded([python, "-c", _STUDY_CHECK], elsewhere, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    found = json.loads(res.stdout.splitlines()[-1])
    # The wheel's package, not the checkout's.
    assert Path(found["file"]).is_relative_to(venv), found["file"]
    assert found["loaded_by_import"] == ["groupconv_atlas"], found["loaded_by_import"]
    assert found["study_after_conv2d"] == [], found["study_after_conv2d"]
    assert found["conv2d"] == "groupconv.conv" and found["same_object"]
    assert set(found["modules"]) == checkout_modules(PACKAGE_DIR), \
        sorted(set(found["modules"]) ^ checkout_modules(PACKAGE_DIR))


# Run by the installed package outside the checkout, on the CPU, torch.cuda's device name faked
# (argv[1]): where the tables and a `dispatch` call's choice on geometry argv[2] come from,
# through the public names and through the runtime's own default path (its GPU session faked,
# no cubin compiled), and every file opened and folder listed on the way.
_CHOICES = r"""
import json, os, sys
opened = set()
sys.addaudithook(lambda event, args: opened.add(str(args[0]))
                 if event in ("open", "os.listdir", "os.scandir") and args else None)
import torch
import groupconv as g
from groupconv import op_runtime
torch.cuda.get_device_name = lambda *args: sys.argv[1]
class Session:
    capability = (9, 0)
op_runtime.CallerSession = Session
runtime = op_runtime.Runtime(cubins={"k5": "not compiled on the CPU"})
print(json.dumps({"table": g.table_source(), "choice": g.describe_choice(*json.loads(sys.argv[2])),
                  "runtime": [runtime.tables_source.kind, runtime.tables_source.record,
                              runtime.autotune, len(runtime.launcher.dispatch or {})],
                  "opened": sorted(opened)}))
"""


def test_the_installed_op_takes_its_tables_by_the_gpus_name_without_the_checkout(installed):
    """A faked H200 gets the packaged table (its record named); an unknown GPU autotunes on the
    first call; with GROUPCONV_AUTOTUNE=0 it takes the untuned rule; no run reads the checkout,
    a config.yaml or a record."""
    python, venv, elsewhere, env = installed
    packaged = json.loads((OP_DIR / "tables" / "nvidia-h200.json").read_text())
    geometry, implementation = packaged["tables"]["dispatch"]["__tuple_keys__"][0]
    runs = {}
    for name, gpu, extra in (("h200", "NVIDIA H200", {}), ("unknown", "NVIDIA Unknown GPU", {}),
                             ("opt-out", "NVIDIA Unknown GPU", {"GROUPCONV_AUTOTUNE": "0"})):
        res = run_guarded([python, "-c", _CHOICES, gpu, json.dumps(geometry)], elsewhere,
                          env={**env, "GROUPCONV_AUTOTUNE": "", **extra})
        assert res.returncode == 0, res.stdout + res.stderr
        runs[name] = json.loads(res.stdout.splitlines()[-1])
    h200 = runs["h200"]
    assert h200["table"]["source"] == "packaged table", h200["table"]
    assert h200["table"]["record"] == packaged["record"]
    assert Path(h200["table"]["file"]).is_relative_to(venv), h200["table"]["file"]
    assert h200["choice"]["implementation"] == implementation
    # The kernel sources the wheel carries are the code the tables were measured on.
    assert set(h200["table"]["kernel_sources"]) == set(packaged["builds"])
    assert set(h200["table"]["kernel_sources"].values()) <= {"measured", "vouched"}
    assert h200["choice"]["source"] == "packaged table"
    assert h200["runtime"] == ["packaged table", packaged["record"], False,
                               len(packaged["tables"]["dispatch"]["__tuple_keys__"])]
    unknown = runs["unknown"]
    assert unknown["table"]["source"] == unknown["choice"]["source"] == "autotune on first call"
    assert unknown["runtime"] == ["autotune on first call", None, True, 0]
    opt_out = runs["opt-out"]
    assert opt_out["table"]["source"] == opt_out["choice"]["source"] == "untuned rule"
    assert opt_out["runtime"] == ["untuned rule", None, False, 0]
    assert any(p.endswith("tables/nvidia-h200.json") for p in h200["opened"])
    # The environments this test lends the fresh one (torch and the rest) lie under the
    # checkout here; nothing else of it is opened or listed.
    lent = (ROOT / ".venv", Path(sys.prefix))
    for run in runs.values():
        read = [p for p in run["opened"] if (Path(p).is_relative_to(ROOT)
                                             and not any(Path(p).is_relative_to(e) for e in lent))
                or "/records/" in p or p.endswith("config.yaml")]
        assert read == [], read
