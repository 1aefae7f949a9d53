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
from groupconv_atlas.runtime import kernels, launch
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


def test_a_wheel_in_a_fresh_environment_holds_and_imports_every_module(tmp_path):
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
    res = run_guarded([python, "-c", _CHECK], elsewhere, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    found = json.loads(res.stdout.splitlines()[-1])
    # The wheel's package, not the checkout's.
    assert Path(found["file"]).is_relative_to(venv), found["file"]
    assert found["loaded_by_import"] == ["groupconv_atlas"], found["loaded_by_import"]
    assert found["study_after_conv2d"] == [], found["study_after_conv2d"]
    assert found["conv2d"] == "groupconv_atlas.runtime.conv"
    assert set(found["modules"]) == checkout_modules(), \
        sorted(set(found["modules"]) ^ checkout_modules())
    assert Path(found["kernels_dir"]).is_relative_to(venv)
    assert found["kernel_sources"] == sorted(p.name for p in (ROOT / "kernels").glob("*.cu*"))
    assert found["shim_found"] and Path(found["shim"]).is_relative_to(venv), found["shim"]
