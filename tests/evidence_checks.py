"""What a replay's current-evidence.md must hold, for the tests that read one
(tests/test_evidence_page.py on synthetic documents and replays; the README's `make atlas` run in
tests/test_readme_commands_run.py): at most LINES lines, none over evidence.LINE_LIMIT
characters, the layouts the record built, what it did not measure said."""
import json
import re
from pathlib import Path

from groupconv.kernels import layout_of
from groupconv_atlas.study.artifacts.evidence import LINE_LIMIT
from groupconv_atlas.study.artifacts.evidence_facts import NOT_MEASURED

LINES = 149  # "under 150 lines"


def section(text: str, title: str) -> str:
    """The lines under `## title`, up to the next section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {title!r} in:\n{text}"
    return match.group(1)


def items(block: str) -> list[str]:
    """The bullets of a block, each with its wrapped lines joined."""
    return [" ".join(b.split()) for b in re.split(r"^- ", block, flags=re.M)[1:]]


def assert_readable(text: str, where: str) -> None:
    lines = text.splitlines()
    long = [f"{len(line)}: {line[:80]}" for line in lines if len(line) > LINE_LIMIT]
    assert len(lines) <= LINES, f"{where}: {len(lines)} lines (at most {LINES})"
    assert not long, f"{where}: lines over {LINE_LIMIT} characters:\n" + "\n".join(long)


def layout_bullet(text: str, title: str) -> str:
    found = [i for i in items(section(text, "Layouts measured")) if i.startswith(f"**{title}**")]
    assert len(found) == 1, (title, section(text, "Layouts measured"))
    return found[0]


def check_replayed_page(results: Path) -> None:
    """The page a replay wrote: within the limits, and its layouts those of the record's own
    builds and timed dispatchers."""
    text = (results / "current-evidence.md").read_text()
    atlas = json.loads((results / "atlas.json").read_text())
    assert_readable(text, str(results))
    layouts = {layout_of(k) for k in atlas["builds"]}
    timed = {c["candidate"] for c in atlas["comparisons"]}
    for layout, title in (("nchw", "contiguous NCHW"), ("nhwc", "channels_last (NHWC)")):
        kernels = sorted(k for k in atlas["builds"] if layout_of(k) == layout)
        if not kernels:  # its references may still have run in it
            continue
        bullet = layout_bullet(text, title)
        for kernel in kernels:
            assert re.search(rf"\b{kernel}\b", bullet), (kernel, bullet)
        for dispatcher, its_layout in {"dispatch": "nchw", "dispatch_nhwc": "nhwc"}.items():
            if its_layout == layout and dispatcher in timed:
                assert f"dispatcher {dispatcher} " in bullet, bullet
    if layouts == {"nchw"}:
        assert "no channels_last implementation ran" in " ".join(text.split())
    notes = {" ".join(n.split()).rstrip(".") for n in atlas["evidence"].get("amendments", [])}
    if notes:
        assert len(items(section(text, "Amendments to the record"))) == len(notes)
    beyond = items(section(text, "Beyond the forward atlas"))
    if not atlas.get("passes"):
        assert f"Backward passes: {NOT_MEASURED}." in beyond
    if not atlas.get("crosscheck"):
        assert f"Independent timer cross-check: {NOT_MEASURED}." in beyond


def check_committed_page(results: Path, record: Path) -> None:
    """check_replayed_page, and the Nsight bullet saying whether `record` holds captures."""
    check_replayed_page(results)
    text = (results / "current-evidence.md").read_text()
    nsight = any((record / "raw" / "nsight").glob("*.ncu-rep"))
    beyond = items(section(text, "Beyond the forward atlas"))
    assert any(b.startswith("Nsight Compute captures: ") and (NOT_MEASURED in b) != nsight
               for b in beyond), beyond
