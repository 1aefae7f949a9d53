"""The kernel list is written once, in the registry (groupconv.kernels.KERNELS):
no text file of the workflow, its configuration, tools or docs spells out a run of three or more
kernel names (the list, or a slice of it: `[k4, k5, k6]`, `"k0", "k1", "k2"`, a YAML list, `k1, k2
and k3`), except the registry and the few lists below that are data of their own. records/ and
tests/ are not read: they hold what a record measured and fixtures, where a list is data. The
detector itself is checked on planted copies and on texts that only mention kernels."""
import re
import subprocess
from pathlib import Path

from helpers import ROOT

from groupconv.kernels import KERNELS

SCOPES = ("workflow", "config", "tools", "Snakefile", "Makefile", "README.md")
REGISTRY = "workflow/groupconv/kernels.py"
# (file, the run of names) -> why that list is not a copy of the registry's.
DATA = {
    ("workflow/groupconv/verify.py", ("k0", "k1", "k2", "k3", "k4")):
        "SEED_ORDER: the seed slots of the implementations measured before slots followed the "
        "registry, so an older record's seeds stay valid; it is history, not the registry's order",
    ("config/config.yaml", ("k1", "k2", "k3")):
        "the Nsight study of k1, k2 and k3 on shapes where all three apply: a choice of kernels",
    ("config/lean-run.yaml", ("k1", "k2", "k4")):
        "the kernels a shorter live run leaves out of the registry's: a choice of kernels",
    ("workflow/groupconv_atlas/study/probes/nsight.py", ("k1", "k2", "k3")):
        "the same Nsight study's default, for a configuration without an nsight section",
}
_NAME = re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(KERNELS, key=len,
                                                                    reverse=True))))
# What may stand between two names of one list: quotes, brackets, commas, bars, slashes, YAML's
# "- " on the next line, whitespace, and a closing "and" or "or" in prose.
_BETWEEN = re.compile(r"""[\s"',|/\-\[\]]*(?:\b(?:and|or)\b[\s"']*)?""")


def kernel_runs(text: str, least: int = 3) -> list[tuple[int, tuple[str, ...]]]:
    """(line, names) of every run of at least `least` kernel names of the registry in `text`
    with nothing but list punctuation between them."""
    found, run = [], []
    for match in _NAME.finditer(text):
        if run and not _BETWEEN.fullmatch(text[run[-1].end():match.start()]):
            found.append(run)
            run = []
        run.append(match)
    found.append(run)
    return [(text.count("\n", 0, r[0].start()) + 1, tuple(m.group() for m in r))
            for r in found if len(r) >= least]


def scanned_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *SCOPES], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [rel for rel in listed if (ROOT / rel).is_file() and not (ROOT / rel).is_symlink()
            and rel != REGISTRY]


def copies_in(root: Path, files: list[str]) -> list[str]:
    """`file:line: names` of every run of kernel names in `files` (paths under `root`) that DATA
    does not explain."""
    copies = []
    for rel in files:
        try:
            text = (root / rel).read_text()
        except UnicodeDecodeError:
            continue
        copies += [f"{rel}:{line}: {', '.join(run)}" for line, run in kernel_runs(text)
                   if (rel, run) not in DATA]
    return copies


def test_no_file_copies_the_kernel_list():
    copies = copies_in(ROOT, scanned_files())
    assert not copies, ("the kernel list spelled out outside the registry (groupconv/kernels.py "
                        "KERNELS; config: `kernels: all`):\n" + "\n".join(copies))


def test_the_data_lists_are_still_there():
    # An entry of DATA whose list is gone is stale: drop it. (Seed slots of kernels SEED_ORDER
    # does not hold follow from the registry: tests/test_verify_cpu.py.)
    for (rel, run) in DATA:
        assert run in [r for _, r in kernel_runs((ROOT / rel).read_text())], (rel, run)


def test_the_detector_finds_planted_copies(tmp_path):
    planted = {
        "yaml flow list": "kernels: [k4, k5, k6]\n",
        "python list": 'ours = ns[ns.implementation.isin(["k4", "k5", "k6", "k7"])]\n',
        "yaml block list": "candidates:\n  - k0\n  - k1\n  - k2\n",
        "tuple over lines": 'ORDER = ("k3", "k4",\n         "k5")\n',
        "prose": "the register tiles k4, k5 and k6 share a header\n",
        "alternation": 'kernel="k7|k8|k9"\n',
    }
    for what, text in planted.items():
        assert [run for _, run in kernel_runs(text)], what
    assert kernel_runs(planted["yaml block list"]) == [(2, ("k0", "k1", "k2"))]
    # Planted in a checkout's config beside the Nsight study's list (data): the copy alone is
    # reported, with its file and line.
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(
        "device: h200\n" + planted["yaml flow list"] + "nsight:\n  implementations: [k1, k2, k3]\n")
    assert copies_in(tmp_path, ["config/config.yaml"]) == ["config/config.yaml:2: k4, k5, k6"]


def test_the_detector_leaves_mentions_alone():
    for text in ("k0-k9 and the references", "k5–k9 are tuned per shape", "k6 and k7 stage rows",
                 "k8 (nhwc) on 29, k5 (nchw) on 20, k4 (nchw) on 1",
                 '"k5": KernelSpec("k5", ...), "k6": KernelSpec("k6", ...)',
                 "aa_implementation: k5\nblock_kernel: k3\ndefault_kernel: k3\n",
                 "k13, k14 and k15 are not in the registry"):
        assert kernel_runs(text) == [], text


def test_every_scope_exists():
    assert all((ROOT / scope).exists() for scope in SCOPES)
    assert Path(ROOT / REGISTRY).is_file()
