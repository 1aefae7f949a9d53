"""The package files a job runs, for the rules' `code(...)` inputs (editing one reruns the job).

A rule names the modules its script imports, each inside its half (the op, groupconv: "kernels"; the
study, groupconv_atlas.study, by its room: "statistics/stats", "report/figures",
"probes/mobilenet/__init__"); the files are those modules and every module of either package they
import, transitively, read with ast: imports inside functions count (a job runs them when it calls
them), relative imports are resolved, and importing `a.b.c` runs a/__init__.py and a/b/__init__.py
too. A module-level `__getattr__` (PEP 562, the package's public face) runs only when an importer
asks the module for a name it does not define, so its imports are followed only then. A module split
in two therefore needs no rule edit. Each file is parsed once per process: the DAG asks for the same
modules in many rules."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from .plan import PlanError

# The two packages a job's code comes from, both top-level folders of workflow/ (the op, and
# the study with its public face), and the folder a rule's `code(...)` name is looked up in for
# each: "kernels" is groupconv.kernels, "statistics/stats" groupconv_atlas.study.statistics.stats.
PACKAGES = ("groupconv", "groupconv_atlas")
HALVES = ("groupconv", "groupconv_atlas.study")
# Where the packages sit in a checkout, as the rules name their files.
SOURCE_PATH = "workflow"

Import = tuple[str, tuple[str, ...]]  # (dotted module, names taken from it)


def code_files(root: str | Path, *modules: str) -> list[str]:
    """The files (paths from the checkout `root`, as rules list them) that importing `modules`
    runs: each named module's package __init__ files and its file first, then what they
    import, once each."""
    source = Path(root) / SOURCE_PATH
    files = []
    for name in modules:
        dotted = module_name(source, name)
        parts = dotted.split(".")
        opened = [_module_file(source, ".".join(parts[:depth]))
                  for depth in range(1, len(parts) + 1)]
        files += [_listed(source, f) for f in opened]
        files += [_listed(source, f) for f in _closure(source, dotted)]
    return list(dict.fromkeys(files))


def module_name(source: Path, name: str) -> str:
    """The dotted module of a name given inside its half: "kernels" is groupconv.kernels,
    "probes/mobilenet/__init__" groupconv_atlas.study.probes.mobilenet."""
    found = [h for h in HALVES
             if (source.joinpath(*h.split(".")) / f"{name}.py").is_file()]
    if len(found) != 1:
        folders = ",".join(h.replace(".", "/") for h in HALVES)
        raise PlanError(f"code({name!r}): {len(found)} modules of that name in "
                        f"{SOURCE_PATH}/{{{folders}}}/, not one")
    return ".".join([found[0], *name.split("/")]).removesuffix(".__init__")


def _listed(source: Path, path: Path) -> str:
    return f"{SOURCE_PATH}/{path.relative_to(source).as_posix()}"


def _module_file(source: Path, dotted: str) -> Path | None:
    """The file a dotted module of the packages runs, or None when it names no module."""
    parts = dotted.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = source.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)
def _closure(source: Path, dotted: str) -> tuple[Path, ...]:
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
            path = _module_file(source, prefix)
            if path is None or path in seen:
                continue
            seen.add(path)
            eager, _lazy, _defined = _parsed(path, prefix)
            todo += _targets(source, eager)
    return tuple(sorted(seen))


def _targets(source: Path, imports: tuple[Import, ...]) -> list[str]:
    """The modules a file's imports run: each module imported from, the submodules among the
    names taken, and, for a name its module neither defines nor holds as a submodule, what that
    module's __getattr__ imports to serve it."""
    targets = []
    for module, names in imports:
        targets.append(module)
        path = _module_file(source, module)
        for name in names:
            if _module_file(source, f"{module}.{name}") is not None:
                targets.append(f"{module}.{name}")
            elif path is not None:
                _eager, lazy, defined = _parsed(path, module)
                if name not in defined:
                    targets += _targets(source, lazy)
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
            found += [(a.name, ()) for a in node.names if a.name.split(".")[0] in PACKAGES]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package (or the module, if one)
                anchor = dotted.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base.split(".")[0] in PACKAGES:
                found.append((base, tuple(a.name for a in node.names if a.name != "*")))
    return tuple(found)
