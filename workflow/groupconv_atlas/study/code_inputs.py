"""The package files a job runs, for the rules' `code(...)` inputs (editing one reruns the job).

A rule names the modules its script imports, each inside its half ("kernels", "report/figures",
"mobilenet/__init__"); the files are those modules and every module of the package they import,
transitively, read with ast: imports inside functions count (a job runs them when it calls them),
relative imports are resolved, and importing `a.b.c` runs a/__init__.py and a/b/__init__.py too.
A module-level `__getattr__` (PEP 562, the package's public face) runs only when an importer asks
the module for a name it does not define, so its imports are followed only then. A module split in
two therefore needs no rule edit. Each file is parsed once per process: the DAG asks for the same
modules in many rules."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from .plan import PlanError

PACKAGE = "groupconv_atlas"
# The package's two halves (workflow/ARCHITECTURE.md); no module name appears in both.
HALVES = ("runtime", "study")
# Where the package sits in a checkout, as the rules name its files.
PACKAGE_PATH = f"workflow/{PACKAGE}"

Import = tuple[str, tuple[str, ...]]  # (dotted module, names taken from it)


def code_files(root: str | Path, *modules: str) -> list[str]:
    """The files (paths from the checkout `root`, as rules list them) that importing `modules`
    runs: the package's __init__ first, then each named module's half __init__ and file, then
    what they import, once each."""
    package_dir = Path(root) / PACKAGE_PATH
    files = [f"{PACKAGE_PATH}/__init__.py"]
    for name in modules:
        dotted = module_name(package_dir, name)
        named = _module_file(package_dir, dotted)
        half = package_dir / dotted.split(".")[1] / "__init__.py"
        files += [_listed(package_dir, f) for f in (half, named)]
        files += [_listed(package_dir, f) for f in _closure(package_dir, dotted)]
    return list(dict.fromkeys(files))


def module_name(package_dir: Path, name: str) -> str:
    """The dotted module of a name given inside its half: "kernels" is
    groupconv_atlas.runtime.kernels, "mobilenet/__init__" groupconv_atlas.study.mobilenet."""
    found = [h for h in HALVES if (package_dir / h / f"{name}.py").is_file()]
    if len(found) != 1:
        raise PlanError(f"code({name!r}): {len(found)} modules of that name in "
                        f"{PACKAGE_PATH}/{{{','.join(HALVES)}}}/, not one")
    return ".".join([PACKAGE, found[0], *name.split("/")]).removesuffix(".__init__")


def _listed(package_dir: Path, path: Path) -> str:
    return f"{PACKAGE_PATH}/{path.relative_to(package_dir).as_posix()}"


def _module_file(package_dir: Path, dotted: str) -> Path | None:
    """The file a dotted module of the package runs, or None when it names no module."""
    parts = dotted.split(".")
    if parts[0] != PACKAGE:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def _closure(package_dir: Path, dotted: str) -> tuple[Path, ...]:
    """Every file of the package that importing `dotted` runs, calls into its functions included,
    sorted."""
    seen: set[Path] = set()
    todo = [dotted]
    done: set[str] = set()
    while todo:
        module = todo.pop()
        if module in done:
            continue
        done.add(module)
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):  # a.b.c runs a, a.b and a.b.c
            prefix = ".".join(parts[:depth])
            path = _module_file(package_dir, prefix)
            if path is None or path in seen:
                continue
            seen.add(path)
            eager, _lazy, _defined = _parsed(path, prefix)
            todo += _targets(package_dir, eager)
    return tuple(sorted(seen))


def _targets(package_dir: Path, imports: tuple[Import, ...]) -> list[str]:
    """The modules a file's imports run: each module imported from, the submodules among the
    names taken, and, for a name its module neither defines nor holds as a submodule, what that
    module's __getattr__ imports to serve it."""
    targets = []
    for module, names in imports:
        targets.append(module)
        path = _module_file(package_dir, module)
        for name in names:
            if _module_file(package_dir, f"{module}.{name}") is not None:
                targets.append(f"{module}.{name}")
            elif path is not None:
                _eager, lazy, defined = _parsed(path, module)
                if name not in defined:
                    targets += _targets(package_dir, lazy)
    return targets


@lru_cache(maxsize=None)
def _parsed(path: Path, dotted: str) -> tuple[tuple[Import, ...], tuple[Import, ...], frozenset]:
    """(imports of the package anywhere in the file but its module-level __getattr__, the imports
    in that __getattr__, the names the module binds at its top level)."""
    body = ast.parse(path.read_text(), str(path)).body
    lazy = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    eager = [n for n in body if n not in lazy]
    is_package = path.name == "__init__.py"
    defined = set()
    for node in eager:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return (_imports(eager, dotted, is_package), _imports(lazy, dotted, is_package),
            frozenset(defined))


def _imports(nodes: list[ast.AST], dotted: str, is_package: bool) -> tuple[Import, ...]:
    found = []
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            found += [(a.name, ()) for a in node.names if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package (or the module, if one)
                anchor = dotted.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base.split(".")[0] == PACKAGE:
                found.append((base, tuple(a.name for a in node.names if a.name != "*")))
    return tuple(found)
