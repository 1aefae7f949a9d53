"""Write each registered kernel's generated table header (kernels/<source>_table.cuh) from its
registered source's table (groupconv.kernels.registered_sources(): the forward kernels' and the
weight-gradient kernels' tables, the #defines and tile tables each source shares with its launch
rule):
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

from groupconv.kernels import KERNELS_DIR, registered_sources  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale = 0
    for spec in registered_sources():
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
