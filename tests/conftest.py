"""Test set-up: GPU tests skipped with a reason off the GPU machine. The package comes from the
install (`pip install -e .`, which `make test` does) or PYTHONPATH=workflow on the GPU machine."""
import importlib.util

import pytest


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("pycuda") is None:
        return "needs PyCUDA and an NVIDIA GPU (pip install '.[gpu]'); run on the GPU machine"
    try:
        import torch
    except ImportError:
        return "needs torch with CUDA"
    if not torch.cuda.is_available():
        return "needs an NVIDIA GPU visible to torch; run on the GPU machine"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpu_session():
    from groupconv.sessions import GpuSession

    return GpuSession()


@pytest.fixture(scope="session")
def smoke_replay(tmp_path_factory):
    """One replay of the committed smoke record per test run, with its report built
    (`snakemake --report`): every test that reads a replay reads this one; a test that changes
    it works on helpers.copy_replayed of it. Under pytest-xdist the workers share it: the first
    to get the lock builds it in the run's common temporary folder, the others wait for it (the
    pattern pytest-xdist documents for a session fixture that must run once)."""
    import os

    from filelock import FileLock
    from helpers import SMOKE, copy_checkout, snakemake

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder every worker's own temporary folder sits in
    folder = base / "smoke-replay"
    with FileLock(str(base / "smoke-replay.lock")):
        if not (folder / "built").is_file():
            root = copy_checkout(folder / "repo")
            snakemake(root, "atlas", *SMOKE)
            snakemake(root, *SMOKE, "--report", "reports/atlas.html")
            (folder / "built").write_text("one replay of the smoke record, its report built\n")
    return folder / "repo"


# Headless Chromium for the browser tests (test_atlas_map_*.py, test_report_browser.py):
# Debian's /usr/bin/chromium driven by Playwright for Python; never `playwright install`, which
# downloads a browser of its own.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="session")
def browser():
    """One Chromium per test run (per worker under pytest-xdist); each test opens its own
    context, a fresh profile. Skipped, saying what to install, without Chromium or Playwright."""
    import os

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"needs Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs Playwright for Python (pip install playwright)")
    with sync_api.sync_playwright() as p:
        # A fresh profile per launch (Playwright makes a temporary user-data-dir).
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
