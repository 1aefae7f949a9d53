"""tools/records_aside.sh: records set aside from git's index for a copy of the tree, and put back
exactly as committed."""
import shutil
import subprocess
from pathlib import Path

import pytest

from groupconv.files import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(),
                                reason="needs git and a git checkout")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


def aside(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """This checkout's script (not the clone's committed copy), run inside the clone."""
    return subprocess.run(["bash", str(REPO_ROOT / "tools" / "records_aside.sh"), *args],
                          cwd=repo, capture_output=True, text=True, check=False)


def _hook(repo: Path) -> Path:
    return repo / git(repo, "rev-parse", "--git-path", "hooks/pre-commit").strip()


def test_hide_keeps_one_record_without_captures_and_restore_puts_all_back(tmp_path):
    repo = tmp_path / "repo"
    git(tmp_path, "clone", "-q", "--local", str(REPO_ROOT), str(repo))
    before = git(repo, "ls-files", "records").splitlines()
    records = sorted({p.split("/")[1] for p in before if p.count("/") >= 2})
    assert len(records) >= 2
    exclude_before = (repo / ".git" / "info" / "exclude").read_text()

    res = aside(repo, "hide", records[0])
    assert res.returncode == 0, res.stderr
    kept = git(repo, "ls-files", "records").splitlines()
    assert kept and all(p == "records/INDEX.json" or p.startswith(f"records/{records[0]}/")
                        for p in kept)
    assert not any("/raw/nsight/" in p or "/device-logs/" in p for p in kept)
    # set aside, not deleted: the files stay, and git neither tracks nor lists them
    assert all((repo / p).exists() for p in before)
    assert git(repo, "status", "--porcelain", "--untracked-files=all", "--", "records").strip() \
        .splitlines() == [f"D  {p}" for p in sorted(set(before) - set(kept))]
    assert aside(repo, "hide").returncode == 1  # twice is refused
    assert "records_aside.sh" in _hook(repo).read_text()  # the guard against a commit

    res = aside(repo, "restore")
    assert res.returncode == 0, res.stderr
    assert git(repo, "ls-files", "records").splitlines() == before
    assert git(repo, "status", "--porcelain").strip() == ""
    assert (repo / ".git" / "info" / "exclude").read_text() == exclude_before
    assert not _hook(repo).exists()


def test_a_commit_made_while_records_are_aside_is_undone_by_restore(tmp_path):
    """The slip this guards: committing while records are set aside records them as deleted
    (their removal sits in the index). restore stages them again from the files on disk, byte
    for byte, and says so."""
    repo = tmp_path / "repo"
    git(tmp_path, "clone", "-q", "--local", str(REPO_ROOT), str(repo))
    git(repo, "config", "user.email", "test@example.invalid")
    git(repo, "config", "user.name", "test")
    before = git(repo, "ls-files", "-s", "records")
    records = sorted({p.split("/")[1] for p in git(repo, "ls-files", "records").splitlines()
                      if p.count("/") >= 2})
    assert aside(repo, "hide", records[0]).returncode == 0
    (repo / "unrelated.txt").write_text("a change committed by mistake while records are aside\n")
    git(repo, "add", "unrelated.txt")
    # The guard: hide's pre-commit hook refuses the commit, naming the way out.
    refused = subprocess.run(["git", "commit", "-q", "-m", "committed while records were aside"],
                             cwd=repo, capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "records_aside.sh restore" in refused.stderr
    # Past the guard (--no-verify), the slip restore repairs.
    git(repo, "commit", "-q", "--no-verify", "-m", "committed while records were set aside")
    assert git(repo, "ls-files", "-s", "records") != before  # the slip: records deleted in HEAD
    res = aside(repo, "restore")
    assert res.returncode == 0, res.stderr
    assert "deleted by a commit made while it was set aside" in res.stderr
    assert git(repo, "ls-files", "-s", "records") == before  # the same blobs, staged again
    assert not _hook(repo).exists()  # restore takes its guard away


def test_a_hook_of_the_checkouts_own_is_kept_and_the_missing_guard_said(tmp_path):
    repo = tmp_path / "repo"
    git(tmp_path, "clone", "-q", "--local", str(REPO_ROOT), str(repo))
    hook = _hook(repo)
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text("#!/bin/sh\nexit 0\n")
    records = sorted({p.split("/")[1] for p in git(repo, "ls-files", "records").splitlines()
                      if p.count("/") >= 2})
    res = aside(repo, "hide", records[0])
    assert res.returncode == 0 and "no guard against a commit" in res.stderr
    assert aside(repo, "restore").returncode == 0
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
