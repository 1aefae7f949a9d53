"""What every kernel's launch rule is built from: the kernel sources' own tables, read rather
than copied (`tile_table`, `kernel_define` over KERNELS_DIR), the `Launch` a rule returns, and the
block size and grid and 32-bit limits it works within. Pure Python: nothing here needs a GPU."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .files import REPO_ROOT

THREADS_PER_BLOCK = 256
MAX_GRID_X = 2**31 - 1
# The kernel sources: the checkout's kernels/, or in an installed wheel the copy it carries
# (runtime/kernel_sources, which in the checkout is a link to kernels/).
KERNELS_DIR = REPO_ROOT / "kernels"
if not KERNELS_DIR.is_dir():
    KERNELS_DIR = Path(__file__).resolve().parent / "kernel_sources"


@dataclass(frozen=True)
class Launch:
    """One launch: grid and block shapes, the PyCUDA prepared-call format and the scalars."""

    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arg_format: str
    scalars: tuple[int, ...]


def kernel_define(source: str, name: str) -> int:
    """The integer a kernel source #defines as `name`: the host reads the kernel's constants
    (padding, limits, array sizes) rather than copying them."""
    text = (KERNELS_DIR / Path(source).name).read_text()
    found = re.findall(rf"^#define {name} (\d+)\b", text, re.MULTILINE)
    if len(found) != 1:
        raise ValueError(f"{source}: expected one '#define {name} <integer>', found {len(found)}")
    return int(found[0])


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def included_headers(source: str, folder: Path | None = None) -> tuple[str, ...]:
    """The headers a kernel source includes with quotes, directly or through another header, as
    repository paths (kernels/<name>), sorted: what an edit must rebuild and what a build record
    hashes, read from the source rather than listed beside it (a list drifts from the #includes).
    They resolve in the kernels' folder, which is the build's -I."""
    folder = folder or KERNELS_DIR
    found: set[str] = set()
    pending = [Path(source).name]
    while pending:
        text = (folder / pending.pop()).read_text()
        for name in _QUOTED_INCLUDE.findall(text):
            if f"kernels/{name}" not in found:
                found.add(f"kernels/{name}")
                pending.append(name)
    return tuple(sorted(found))


def tile_table(source: str, macro: str, fields: int = 2) -> tuple[tuple[int, ...], ...]:
    """The tiles a kernel source instantiates with `macro(A, B, ...)`: the first `fields`
    integer arguments of each line, in source order (further arguments are not part of the tile).
    The .cu file is the one tile table, read here rather than copied."""
    text = (KERNELS_DIR / Path(source).name).read_text()
    leading = r",\s*".join([r"(\d+)"] * fields)
    tiles = tuple(tuple(int(v) for v in m) for m in
                  re.findall(rf"^{macro}\({leading}(?:,\s*\d+)*\)", text, re.MULTILINE))
    if not tiles:
        raise ValueError(f"{source}: no {macro}(...) lines with {fields} integer arguments: the "
                         "tile table is empty")
    return tiles


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(total_threads: int) -> int:
    return min(_ceil_div(total_threads, THREADS_PER_BLOCK), MAX_GRID_X)


INT32_LIMIT = 2**31
