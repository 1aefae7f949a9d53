"""Comments say why, not which record or date (issue 47, item 5): a comment or docstring of the
project's Python (workflow/, tools/, the Snakefile and its rule files) that justifies a choice
by a record's name (`h200-2026-12-03-passes`, `records/h200-...`) or a calendar date goes stale
as records come; history lives in git and in the records. It says the measured reason in words
instead ("the tuning stage's most frequent choice on the 49 depthwise shapes").

Only what a reader reads as prose is checked: comments (found by `tokenize`) and string
statements (docstrings and bare strings standing as comments, found by `ast`). A string the code
uses is data, not a comment, and may name a record: a record the code reads, a format table's
first record (groupconv/record_formats.UPGRADES), a CLI help's example. The check itself is run
on planted texts, so a walk that finds nothing cannot pass by finding nothing to look at."""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize

import pytest
from helpers import ROOT

SCOPES = ("workflow", "tools", "Snakefile")
# A record's name holds its date (h200-2026-12-03, h200-smoke-2026-11-29, h200-2026-12-04b-passes),
# so one pattern finds a record's name, a path into records/ and a bare date alike.
CITATION = re.compile(r"\b(?:h\d{3}-(?:[a-z0-9]+-)*?)?20\d{2}-[01]\d-[0-3]\d[a-z]?(?:-[a-z0-9]+)*")


def _citations_in(text: str) -> list[str]:
    return [m.group() for m in CITATION.finditer(text)]


def comment_citations(source: str) -> list[tuple[int, str]]:
    """(line, what) of every record name or date in a comment of `source` (Python tokens: also
    a Snakemake rule file's)."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found += [(token.start[0], cited) for cited in _citations_in(token.string)]
    return found


def docstring_citations(source: str) -> list[tuple[int, str]]:
    """(line, what) of every record name or date in a string statement of `source`: a module's,
    class's or function's docstring, or a bare string standing as a comment. A string the code
    uses (an assignment, an argument, a table) is data and not read."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            text = node.value.value
            for match in CITATION.finditer(text):
                found.append((node.lineno + text.count("\n", 0, match.start()), match.group()))
    return found


def citations(source: str, python: bool = True) -> list[tuple[int, str]]:
    """Every record name or date in the comments of `source` and, where it is Python (not a
    Snakemake rule file, which `ast` cannot parse), in its string statements."""
    found = comment_citations(source)
    if python:
        found += docstring_citations(source)
    return sorted(found)


def scanned_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *SCOPES], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [rel for rel in listed
            if (rel.endswith((".py", ".smk")) or rel == "Snakefile")
            and (ROOT / rel).is_file() and not (ROOT / rel).is_symlink()]


def file_citations(rel: str) -> list[tuple[int, str]]:
    return citations((ROOT / rel).read_text(), python=rel.endswith(".py"))


# ---- the check, on planted texts ----

PLANTED = {
    "a comment naming a record":
        ("x = 1  # per record h200-2026-12-03-passes\n", [(1, "h200-2026-12-03-passes")]),
    "a comment naming a record with a suffix":
        ("# the sweep (h200-2026-12-04b-passes) put it there\nx = 1\n",
         [(1, "h200-2026-12-04b-passes")]),
    "a comment naming a smoke record":
        ("# as h200-smoke-2026-11-29 shows\nx = 1\n", [(1, "h200-smoke-2026-11-29")]),
    "a comment pointing into records/":
        ("x = 1\n# see records/h100-2026-12-06/raw/tuning/k11.json\n",
         [(2, "h100-2026-12-06")]),
    "a comment citing a date":
        ("# 1.6 times the convolution (an H100, 2026-12-06)\nx = 1\n", [(1, "2026-12-06")]),
    "a function's docstring":
        ('def f():\n    """The cut.\n\n    Why: record h200-2026-12-02 says so."""\n',
         [(4, "h200-2026-12-02")]),
    "a module's docstring":
        ('"""Per h200-2026-12-01-c."""\nimport os\n', [(1, "h200-2026-12-01-c")]),
    "a bare string standing as a comment":
        ('x = 1\n"""x: measured in h200-2026-12-03."""\n', [(2, "h200-2026-12-03")]),
    "a record's name the code reads (data)":
        ('RECORD = "h200-2026-12-03"\nrows = {"since": "h200-2026-12-01"}\n', []),
    "a format table's first record (data)":
        ('UPGRADES = (("what", "change", "h200-2026-12-01-b"),)\n', []),
    "a CLI help's example (data)":
        ('parser.add_argument("--record", help="e.g. h200-smoke-2026-11-29")\n', []),
    "a comment that says why":
        ("# the tuning stage's most frequent choice on the 49 depthwise shapes\nx = 1\n", []),
    "a comment naming the records folder only":
        ("# copy the raw layer into records/<device>-<date>/\nx = 1\n", []),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_the_check_finds_citations_in_comments_and_docstrings_only(case):
    source, expected = PLANTED[case]
    assert citations(source) == expected


def test_a_rule_file_is_checked_by_its_comments():
    rule = ('rule tune:\n    # the cut of h200-2026-12-04b-passes\n    input: "a"\n'
            '    shell: "echo {input}"\n')
    assert citations(rule, python=False) == [(2, "h200-2026-12-04b-passes")]


# ---- the project's files ----

def test_no_comment_or_docstring_names_a_record_or_date():
    files = scanned_files()
    assert len(files) > 100  # the walk found the project's modules and rule files
    assert any(f.endswith(".smk") for f in files) and "Snakefile" in files
    found = {rel: cited for rel in files if (cited := file_citations(rel))}
    assert found == {}, ("a comment or docstring names a record or date: say the measured reason "
                         f"in words instead (history lives in git and the records): {found}")

