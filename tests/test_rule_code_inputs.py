"""Every job lists the package modules it runs as `code` inputs, so that editing one reruns it.

The rules are read with Snakemake's own parser (its API, in a separate process), in replay mode
and in live mode (the GPU stages' rules exist only there; parsing needs no GPU); each rule's
script is then read with `ast`, and its imports of groupconv and groupconv_atlas are followed
through the packages, imports inside functions included (they run when the job calls them). A
module that runs but is not listed means an edit to it would leave the job's outputs stale."""
import ast
import functools
import json
import sys
from pathlib import Path

import pytest
from helpers import (OP_DIR, OPEN_WORKFLOW, PACKAGE_DIR, PACKAGES, ROOT, SOURCE_DIR, dotted_name,
                     import_from_base, module_file, run_guarded)

# Run by a fresh interpreter (helpers.OPEN_WORKFLOW): each rule's script and code inputs.
_DUMP_RULES = OPEN_WORKFLOW + r"""
    workflow = workflow_api._workflow
    rules = {}
    for rule in workflow.rules:
        if not rule.script:
            continue
        start, end = rule.input._names.get("code", (0, 0))
        code = rule.input[start:end] if end is not None else [rule.input[start]]
        rules[rule.name] = {
            "script": str((Path(rule.basedir.get_path_or_uri(secret_free=True))
                           / rule.script).resolve()),
            "code": [item if isinstance(item, str) else repr(item) for item in code],
        }
json.dump(rules, sys.stdout)
"""


@pytest.fixture(scope="module", params=["replay", "live"])
def rules(request) -> dict[str, dict]:
    res = run_guarded([sys.executable, "-c", _DUMP_RULES, str(ROOT), request.param], ROOT)
    if res.returncode != 0:
        pytest.fail(f"Snakemake could not parse the workflow:\n{res.stderr[-4000:]}")
    parsed = json.loads(res.stdout)
    assert parsed, "the workflow has no rule with a script"
    if request.param == "live":  # the GPU stages' rules are read too
        assert {"build_kernel", "time_job", "nsight_profile", "stage_times"} <= set(parsed), parsed
    return parsed


def modules_run_by_import(name: str) -> list[Path]:
    """Importing `a.b.c` runs a/__init__.py, a/b/__init__.py and a/b/c(.py|/__init__.py)."""
    parts = name.split(".")
    found = [module_file(".".join(parts[:i])) for i in range(1, len(parts) + 1)]
    return [f for f in found if f is not None]


def _imports_in(nodes, module: str | None, is_package: bool) -> set[str]:
    """Dotted names of the groupconv and groupconv_atlas modules imported anywhere in `nodes` (function
    bodies too); `from pkg import x` names pkg.x as well, which counts when x is a submodule.
    `module` is the file's own dotted name (None for a script), for relative imports."""
    names = set()
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom):
            base = import_from_base(node, module, is_package)
            if base is None:
                continue
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return names


def file_imports(path: Path, module: str | None,
                 is_package: bool) -> tuple[frozenset[str], frozenset[str]]:
    """(modules imported when the file runs or calls its functions, modules imported by its
    module-level __getattr__). The latter runs only when an importer asks the module for a name
    it does not define (PEP 562), so it is followed only then."""
    body = ast.parse(path.read_text(), str(path)).body
    lazy = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    eager = [n for n in body if n not in lazy]
    return (frozenset(_imports_in(eager, module, is_package)),
            frozenset(_imports_in(lazy, module, is_package)))


# Every rule's walk passes through most of the packages: each package file is parsed once per test
# run (parsing it again for every rule made the test take minutes). A job's script is parsed each
# time (a test rewrites one in place).
package_file_imports = functools.cache(file_imports)


def _dotted(file: Path) -> str:
    return dotted_name(file)[0]


def package_modules_run(script: Path) -> set[Path]:
    """Every package file that runs when `script` runs, following imports transitively."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        inside = PACKAGE_DIR in path.parents or OP_DIR in path.parents
        read = package_file_imports if inside else file_imports
        eager, _lazy = read(path, _dotted(path) if inside else None, path.name == "__init__.py")
        names = list(eager)
        while names:
            name = names.pop()
            files = modules_run_by_import(name)
            parent = module_file(name.rpartition(".")[0]) if "." in name else None
            if module_file(name) is None and parent is not None:
                # A name the module may serve from its __getattr__: follow what that imports.
                names.extend(package_file_imports(parent, _dotted(parent),
                                                  parent.name == "__init__.py")[1])
            for file in files:
                if file not in seen:
                    seen.add(file)
                    todo.append(file)
    return seen


def test_the_import_walk_follows_packages_relative_and_lazy_imports(tmp_path):
    # The report package: a script importing one name from it runs every module its
    # __init__ imports, and those modules' own relative imports (..statistics.stats) too.
    script = tmp_path / "job.py"
    script.write_text("def main():\n    from groupconv_atlas.study.report import esc\n")
    run = {f.relative_to(SOURCE_DIR).as_posix() for f in package_modules_run(script)}
    study = "groupconv_atlas/study"
    assert {"groupconv_atlas/__init__.py", f"{study}/__init__.py", f"{study}/report/__init__.py",
            f"{study}/report/html_blocks.py", f"{study}/report/figures.py",
            f"{study}/statistics/__init__.py", f"{study}/statistics/stats.py"} <= run, run
    script.write_text("import json\n")
    assert package_modules_run(script) == set()


def test_every_code_input_is_a_file(rules):
    missing = {name: [c for c in rule["code"] if not (ROOT / c).is_file()]
               for name, rule in sorted(rules.items())}
    missing = {name: files for name, files in missing.items() if files}
    assert not missing, ("code inputs that name no file (the job cannot run; rename them in "
                         f"the rule's code(...) list): {missing}")


# Jobs that deliberately list no code: an edit of the package must not rerun them.
NOT_RERUN_BY_AN_EDIT = {
    # It copies a live run into records/ once: rerun, it would rewrite a committed record.
    "snapshot_record",
    "snapshot_passes",
}


def test_every_module_a_job_runs_is_among_its_code_inputs(rules):
    unlisted = {}
    for name, rule in sorted(rules.items()):
        script = Path(rule["script"])
        if ROOT / "workflow" / "scripts" not in script.parents or name in NOT_RERUN_BY_AN_EDIT:
            continue
        listed = {(ROOT / c).resolve() for c in rule["code"]}
        run = package_modules_run(script)
        absent = sorted(f.relative_to(ROOT).as_posix() for f in run - listed)
        if absent:
            unlisted[f"{name} ({script.name})"] = absent
    assert not unlisted, ("modules a job imports but does not list as code inputs, so editing "
                          f"them would not rerun it: {json.dumps(unlisted, indent=1)}")
