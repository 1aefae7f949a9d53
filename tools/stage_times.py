"""Print the wall time per pipeline stage of a live run: python tools/stage_times.py FOLDER, where
FOLDER is a results folder (results/h200, after `snakemake stage_times --config mode=live`) or a
record (records/<name>). The document is raw/stage_times.json, a pipeline output (the
`stage_times` rule, groupconv_atlas.study.live.stage_times), which a snapshot carries into the
record."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from groupconv.record_formats import read_stage_times
from groupconv_atlas.study.live.stage_times import summary_lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tools/stage_times.py", description=__doc__)
    parser.add_argument("folder", type=Path,
                        help="a results folder (results/h200) or a record (records/<name>)")
    folder = parser.parse_args(argv[1:]).folder
    path = folder / "raw" / "stage_times.json"
    if not path.is_file():
        print(f"{path}: missing; a live run writes it with `snakemake stage_times --config "
              "mode=live` (records made before that rule hold it where measured)",
              file=sys.stderr)
        return 1
    print("\n".join(summary_lines(read_stage_times(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
