"""The house drawn in workflow/ARCHITECTURE.md, checked: every import of the two packages (inside
functions too, read with ast) goes where the page's layer table allows, nothing in the op
(groupconv) imports the study, there are no import cycles, and every import of the package anywhere in the
tree (job scripts, tests, tools, code run in subprocesses) names a module and a name that exist,
so a path only a GPU machine runs cannot import what moved away. The table is read from the page
itself: moving a module is an edit of the page, and a module the page does not place fails."""
import ast
import re
import subprocess
from pathlib import Path

from helpers import (OP, OP_DIR, PACKAGE, PACKAGE_DIR, PACKAGES, ROOT, dotted_name,
                     import_from_base, module_file, package_files)

PAGE = ROOT / "workflow" / "ARCHITECTURE.md"
# The page's halves: the op, its own package (groupconv), and the study (groupconv_atlas.study).
HALVES = ("groupconv", "study")
HALF_PACKAGES = {"groupconv": OP, "study": f"{PACKAGE}.study"}
HALF_DIRS = {"groupconv": OP_DIR, "study": PACKAGE_DIR / "study"}
FACE = "the public face"  # groupconv_atlas/__init__.py


def layer_table(text: str) -> dict[tuple[str, str], int]:
    """{(half, module): layer} from the page's table rows `| half | layer | `a`, `b/` | ... |`; a
    name ending in / is a subpackage, whose modules hold its layer."""
    table = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] in HALVES and cells[1].isdigit():
            for name in re.findall(r"`([\w/]+)`", cells[2]):
                table[(cells[0], name.rstrip("/"))] = int(cells[1])
    return table


LAYERS = layer_table(PAGE.read_text())


def place(module: str) -> tuple[str, float] | None:
    """(half, layer) of a dotted module of the packages: (FACE, 0) for groupconv_atlas itself,
    (half, inf) for a half's own __init__ (it may gather its half), None where the page places
    nothing."""
    if module == PACKAGE:
        return FACE, 0
    for half, package in HALF_PACKAGES.items():
        if module == package:
            return half, float("inf")
        if module.startswith(package + "."):
            name = module[len(package) + 1:].split(".")[0]
            layer = LAYERS.get((half, name))
            return None if layer is None else (half, layer)
    return None


def package_imports(source: str, module: str | None,
                    is_package: bool) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names taken from it) for every import of the package in `source`,
    at any depth; `from pkg import sub` counts as an import of pkg.sub. `module` is the file's own
    dotted name (None outside the package: relative imports are then not the package's)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names
                      if a.name.split(".")[0] in PACKAGES]
        elif isinstance(node, ast.ImportFrom):
            base = import_from_base(node, module, is_package)
            if base is None:
                continue
            names = []
            for alias in node.names:
                if alias.name != "*" and module_file(f"{base}.{alias.name}"):
                    found.append((node.lineno, f"{base}.{alias.name}", []))
                else:
                    names.append(alias.name)
            if names:
                found.append((node.lineno, base, names))
    return found


def violations(module: str, source: str, is_package: bool = False, where: str = "") -> list[str]:
    """Each import in `source` (the module `module`) against the page's rules, as messages naming
    the file and line."""
    where = where or module
    me = place(module)
    if me is None:
        return [f"{where}: {module} is not placed in {PAGE.name}'s layer table"]
    problems = []
    for line, target, _ in package_imports(source, module, is_package):
        to = place(target)
        what = f"{where}:{line}: {module} imports {target}"
        if to is None:
            problems.append(f"{what}, which {PAGE.name}'s layer table does not place")
        elif me[0] == FACE:
            if to[0] != "groupconv":
                problems.append(f"{what}: the public face loads the op alone")
        elif to[0] == FACE:
            problems.append(f"{what}: nothing inside the package imports its public face")
        elif me[0] == "groupconv" and to[0] == "study":
            problems.append(f"{what}: the op imports nothing of the study")
        elif me[0] == to[0] and to[1] > me[1]:
            problems.append(f"{what}: {me[0]} layer {me[1]} imports layer {to[1]}, above it")
    return problems


def test_the_page_places_every_module_and_only_modules():
    placed = {(half, name) for half, name in LAYERS}
    present = set()
    for half, folder in HALF_DIRS.items():
        for path in folder.rglob("*.py"):
            present.add((half, Path(path.relative_to(folder).parts[0]).stem))
    present -= {(half, "__init__") for half in HALVES}
    assert not present - placed, f"modules {PAGE.name} does not place: {sorted(present - placed)}"
    assert not placed - present, \
        f"{PAGE.name} places modules that do not exist: {sorted(placed - present)}"
    assert {p.name for p in PACKAGE_DIR.iterdir() if p.suffix == ".py"} == {"__init__.py"}, \
        "a module beside the study: put it in groupconv/ (the op) or study/"
    assert {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"} \
        == {"study"}, "groupconv_atlas holds the study alone; the op is workflow/groupconv"


def test_every_import_goes_where_the_page_allows():
    problems = []
    for path in package_files():
        module, is_package = dotted_name(path)
        problems += violations(module, path.read_text(), is_package,
                               str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_op_imports_nothing_of_the_study():
    problems = [f"{path.relative_to(ROOT)}:{line}: imports {target}"
                for path in sorted(OP_DIR.rglob("*.py"))
                for line, target, _ in package_imports(path.read_text(), *dotted_name(path))
                if target.split(".")[0] != OP]
    assert not problems, "the op imports the study:\n" + "\n".join(problems)


def test_a_planted_import_against_the_page_is_reported():
    # Inside a function, as a GPU-only path would have it: the op reaching for the study.
    planted = ("import json\n\n\ndef autotune():\n"
               "    from groupconv_atlas.study.statistics.stats import compare\n")
    found = violations(f"{OP}.unseen", planted, where="groupconv/unseen.py")
    assert found == [f"groupconv/unseen.py:5: {OP}.unseen imports "
                     f"{PACKAGE}.study.statistics.stats: the op imports nothing of the "
                     "study"], found
    # An import that runs back up a half's layers, and the public face loading the study.
    assert violations(f"{OP}.kernels", "from .conv import conv2d\n")[0].endswith(
        "groupconv layer 4 imports layer 9, above it")
    assert violations(f"{PACKAGE}.study.statistics.stats",
                      "from ..artifacts import atlas_document\n")[0].endswith(
        "study layer 3 imports layer 6, above it")
    assert "the public face loads the op alone" in violations(
        PACKAGE, "def __getattr__(name):\n    from .study import records\n", True)[0]
    # A module the page does not place, and ones it does, importing within the rules: a room's
    # modules, and those of a subpackage inside a room, hold the room's layer.
    assert "is not placed in ARCHITECTURE.md" in violations(f"{PACKAGE}.study.new_stage", "")[0]
    assert violations(f"{PACKAGE}.study.artifacts.atlas_document",
                      "from groupconv.conv import conv2d\nfrom ..statistics.stats import compare\n"
                      "from . import headline\n") == []
    assert violations(f"{PACKAGE}.study.probes.mobilenet.probe",
                      "from ...measuring.timing_workers import flag_batches\n") == []
    assert violations(f"{PACKAGE}.study.probes.mobilenet.probe",
                      "from ...artifacts import headline\n")[0].endswith(
        "study layer 5 imports layer 6, above it")


def test_no_import_cycles():
    graph = {}
    for path in package_files():
        module, is_package = dotted_name(path)
        graph[module] = {t for _, t, _ in package_imports(path.read_text(), module, is_package)}
    done, stack = set(), []

    def visit(module):
        if module in stack:
            cycle = [*stack[stack.index(module):], module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            visit(target)
        stack.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_no_module_name_is_in_both_halves():
    # The rules' code(...) finds a module's half by its name (study/plans/code_inputs.py).
    names = {half: {p.relative_to(folder).with_suffix("").as_posix()
                    for p in folder.rglob("*.py")} - {"__init__"}
             for half, folder in HALF_DIRS.items()}
    assert not names["groupconv"] & names["study"], names["groupconv"] & names["study"]


def defined_names(dotted: str) -> set[str]:
    """Names a module of the packages binds at its top level (star imports followed), and those
    its __getattr__ serves (the op's PUBLIC tuple, which groupconv_atlas's face serves too)."""
    path = module_file(dotted)
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "PUBLIC" for t in targets):
                names |= set(ast.literal_eval(node.value))
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            star = package_imports(ast.unparse(node), dotted, path.name == "__init__.py")
            for _, target, _ in star:
                names |= defined_names(target)
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    if dotted == PACKAGE:  # the public face serves the op's public names (its __getattr__)
        names |= set(ast.literal_eval(next(
            n.value for n in ast.parse(module_file(OP).read_text()).body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "PUBLIC"
                                                 for t in n.targets))))
    return names


def import_lines(text: str) -> str:
    """The single-line imports of the package in a text that is not a Python module (a rule file,
    a shell script, a program in a string), as Python source."""
    statements = []
    for line in text.splitlines():
        for piece in re.sub(r"^.*?-c '", "", line).split(";"):
            piece = piece.split("#")[0].strip()
            if re.match(rf"(from|import) .*\b({OP}|{PACKAGE})\b", piece):
                try:
                    ast.parse(piece)
                except SyntaxError:
                    continue
                statements.append(piece)
    return "\n".join(statements)


def tree_sources() -> list[tuple[str, str, str | None, bool, str]]:
    """(where, Python source, dotted module or None, is a package __init__, the text) of every
    Python file git knows (committed or not), of the programs in their strings that import the
    package, and of the imports in the Makefile, the rules and the shell scripts."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.smk",
                             "*.sh", "Makefile"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    sources = []
    for rel in listed:
        path = ROOT / rel
        if not path.is_file() or path == Path(__file__).resolve():  # this file plants faults
            continue
        # Committed records keep the scripts as they ran, naming the modules of their day; the
        # code_inputs test writes a package of its own in strings.
        if rel.startswith("records/") or rel == "tests/test_code_inputs.py":
            continue
        text = path.read_text()
        if path.suffix != ".py":
            sources.append((rel, import_lines(text), None, False, text))
            continue
        inside = PACKAGE_DIR in path.parents or OP_DIR in path.parents
        module, is_package = dotted_name(path) if inside else (None, False)
        sources.append((rel, text, module, is_package, text))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and OP in node.value:
                program = import_lines(node.value)
                if program:
                    sources.append((f"{rel}:{node.lineno} (a program in a string)", program, None,
                                    False, ""))
    return sources


def test_every_import_of_the_package_names_what_exists():
    problems = []
    for where, source, module, is_package, text in tree_sources():
        for line, target, names in package_imports(source, module, is_package):
            if module_file(target) is None:
                problems.append(f"{where}:{line}: no module {target}")
                continue
            missing = [n for n in names if n != "*" and n not in defined_names(target)]
            if missing:
                problems.append(f"{where}:{line}: {target} defines no {', '.join(missing)}")
        # `python -m groupconv_atlas.x` in the Makefile, tools and subprocess calls.
        for found in re.findall(rf"-m\"?,?\s*\"?({OP}[\w.]*)", text):
            if module_file(found) is None:
                problems.append(f"{where}: `-m {found}` names no module")
    assert not problems, "\n".join(problems)


def test_the_reference_check_sees_a_moved_name():
    source = "def on_the_gpu():\n    from groupconv.timing import tune_kernel\n"
    (line, target, names), = package_imports(source, None, False)
    assert (line, target, names) == (2, f"{OP}.timing", ["tune_kernel"])
    assert "tune_kernel" not in defined_names(target)
    assert "tune_kernel" in defined_names(f"{OP}.tuning")
    assert {"conv2d", "convert", "GroupConv2d"} <= defined_names(PACKAGE)



def test_shared_constants_are_defined_once():
    # One definition each, in the lowest layer that needs it; everything else imports it. A
    # module-level name bound to the same value elsewhere (a HEADLINE_BOUNDARIES) is a copy too.
    once = {"BOUNDARIES": "groupconv/timing.py", "DISPATCH": "groupconv/kernels.py",
            "REPO_ROOT": "groupconv/files.py"}
    values = {"('graph_device', 'sync_api')": "BOUNDARIES", "'dispatch'": "DISPATCH"}
    found = {name: set() for name in once}
    for path in package_files():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                for target in (t for t in node.targets if isinstance(t, ast.Name)):
                    name = target.id if target.id in once else values.get(ast.unparse(node.value))
                    if name:
                        found[name].add(f"{path.relative_to(OP_DIR.parent).as_posix()} ({target.id})")
    assert found == {name: {f"{where} ({name})"} for name, where in once.items()}, found


# A module a reader takes in at one sitting, and a common.smk that holds only the configuration
# checks and the plan (the DAG's decisions live in study/plans/run_plan, tested without Snakemake).
MODULE_LINE_LIMIT = 400
COMMON_SMK_LINE_LIMIT = 120


def oversized(paths, limit: int, root: Path = ROOT) -> list[str]:
    return [f"{p.relative_to(root)}: {n} lines" for p in paths
            if (n := len(p.read_text().splitlines())) > limit]


def test_no_package_module_is_over_the_limit_and_common_smk_stays_small():
    modules = package_files()
    assert len(modules) > 50
    assert oversized(modules, MODULE_LINE_LIMIT) == []
    assert oversized([ROOT / "workflow" / "rules" / "common.smk"], COMMON_SMK_LINE_LIMIT - 1) == []


def test_the_size_check_names_an_oversized_file(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * (MODULE_LINE_LIMIT + 1))
    assert oversized([big], MODULE_LINE_LIMIT, tmp_path) == [f"big.py: {MODULE_LINE_LIMIT + 1} lines"]
    big.write_text("x = 1\n" * MODULE_LINE_LIMIT)
    assert oversized([big], MODULE_LINE_LIMIT, tmp_path) == []
