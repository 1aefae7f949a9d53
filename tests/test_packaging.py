"""The package as a wheel: built from this tree, installed into a fresh virtual environment, it
holds every subpackage and the files the runtime reads at run time (the launch shim, the kernel
sources), imports every module outside the checkout, and `import groupconv_atlas` loads no part of
the study. An editable install (`pip install -e .`) reads the checkout and would hide a missing
subpackage: groupconv_atlas.mobilenet was once left out of the wheel this way."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import run_guarded

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "workflow" / "groupconv_atlas"

# Run by the fresh environment's interpreter, in a folder outside the checkout.
_CHECK = r"""
import importlib, json, pkgutil, sys
import groupconv_atlas
loaded = sorted(m for m in sys.modules if m.startswith("groupconv_atlas"))
conv2d = groupconv_atlas.conv2d
study = sorted(m for m in sys.modules if m.startswith("groupconv_atlas.study"))
modules = [m.name for m in pkgutil.walk_packages(groupconv_atlas.__path__, "groupconv_atlas.")]
for name in modules:
    importlib.import_module(name)
from groupconv import kernels, launch
print(json.dumps({"file": groupconv_atlas.__file__, "loaded_by_import": loaded,
                  "study_after_conv2d": study, "conv2d": conv2d.__module__, "modules": modules,
                  "kernels_dir": str(kernels.KERNELS_DIR),
                  "kernel_sources": sorted(p.name for p in kernels.KERNELS_DIR.glob("*.cu*")),
                  "shim": str(launch.SHIM_SOURCE), "shim_found": launch.SHIM_SOURCE.is_file()}))
"""


def checkout_modules() -> set[str]:
    modules = set()
    for path in PACKAGE_DIR.rglob("*.py"):
        dotted = ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        modules.add(dotted.removesuffix(".__init__"))
    return modules - {"groupconv_atlas"}


def copy_sources(dest: Path) -> None:
    """What the wheel is built from (tracked files and new ones git does not ignore), links kept
    as links: pyproject.toml, the README and licence it names, the package, the kernels."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "pyproject.toml",
                             "README.md", "LICENSE*", "workflow/groupconv_atlas", "kernels"],
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


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, Path, dict]:
    """(its interpreter, the fresh environment, a folder outside the checkout, the environment
    variables without PYTHONPATH) of a wheel built from this tree and installed with --no-deps."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source, wheels, venv, elsewhere = (tmp_path / n for n in ("src", "wheels", "venv", "elsewhere"))
    copy_sources(source)
    built = run_guarded([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                         "--no-index", "-q", "-w", str(wheels), str(source)], tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel, = wheels.glob("groupconv_atlas-*.whl")
    # --system-site-packages lends a system interpreter's packages (torch, pandas, ...); a
    # virtual environment's own are not among them, so this interpreter's site-packages join
    # through a .pth line, after the fresh environment's own (whose groupconv_atlas comes first).
    made = run_guarded([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                        str(venv)], tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    installed = run_guarded([sys.executable, "-m", "pip", "--python", str(python), "install",
                             "--no-deps", "--no-index", "-q", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return python, venv, elsewhere, env


def test_a_wheel_in_a_fresh_environment_holds_and_imports_every_module(installed):
    python, venv, elsewhere, env = installed
    res = run_guarded([python, "-c", _CHECK], elsewhere, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    found = json.loads(res.stdout.splitlines()[-1])
    # The wheel's package, not the checkout's.
    assert Path(found["file"]).is_relative_to(venv), found["file"]
    assert found["loaded_by_import"] == ["groupconv_atlas"], found["loaded_by_import"]
    assert found["study_after_conv2d"] == [], found["study_after_conv2d"]
    assert found["conv2d"] == "groupconv.conv"
    assert set(found["modules"]) == checkout_modules(), \
        sorted(set(found["modules"]) ^ checkout_modules())
    assert Path(found["kernels_dir"]).is_relative_to(venv)
    assert found["kernel_sources"] == sorted(p.name for p in (ROOT / "kernels").glob("*.cu*"))
    assert found["shim_found"] and Path(found["shim"]).is_relative_to(venv), found["shim"]


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
import groupconv_atlas as g
from groupconv import op_runtime
torch.cuda.get_device_name = lambda *args: sys.argv[1]
class Session:
    capability = (9, 0)
op_runtime.CallerSession = Session
runtime = op_runtime._Runtime(cubins={"k5": "not compiled on the CPU"})
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
    packaged = json.loads((PACKAGE_DIR / "runtime" / "tables" / "nvidia-h200.json").read_text())
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
