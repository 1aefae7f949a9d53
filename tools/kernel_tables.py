"""Write each registered kernel's generated table header (kernels/<source>_table.cuh) from its
registry entry's table (KERNELS[kernel].table, and BACKWARD_KERNELS[kernel].table for the
weight-gradient kernels: the #defines and tile tables the source shares with its launch rule):
    python tools/kernel_tables.py [--check]
With --check nothing is written: it prints each header that differs and exits 1. The build
refuses a kernel whose header differs (groupconv/build), and tests/test_kernel_tables.py checks
them all, so an edit of a table reaches the kernel only through this tool."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# This checkout's package, whatever else is installed: the headers go to this tree's kernels/.
sys.path.insert(0, str(REPO / "workflow"))

from groupconv.backward_kernels import BACKWARD_KERNELS  # noqa: E402
from groupconv.kernels import KERNELS, KERNELS_DIR  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale = 0
    for spec in [*KERNELS.values(), *BACKWARD_KERNELS.values()]:
        if spec.table is None or (why := spec.table.stale(spec.table_origin)) is None:
            continue
        if args.check:
            print(why)
            stale += 1
        else:
            (KERNELS_DIR / Path(spec.table.header).name).write_text(
                spec.table.header_text(spec.table_origin))
            print(f"wrote {spec.table.header}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
