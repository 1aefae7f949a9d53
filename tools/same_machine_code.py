"""Whether this tree's kernel sources compile to the machine code a record measured:
    python tools/same_machine_code.py [--record NAME | newest] [--device h200] [--kernel k7 ...]
                                      [--vouch]
Prints one line per kernel, "identical", "extends" (the record's functions identical, others
added that it never ran) or "differs" with the first differing function and what differs there
(groupconv_atlas.study.probes.machine_code_identity compares SASS, resources and attributes), and
exits 1 when any kernel differs, 2 when the comparison cannot say (another nvcc than the record's,
other flags, a missing cubin). With --vouch and every kernel identical (or extending), the tree's
source hashes are written into the record as an amendment, so that a replay no longer warns that the
sources changed. Needs nvcc and cuobjdump, no GPU."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# This checkout's package, whatever else is installed: KERNELS_DIR must be this tree's kernels/.
sys.path.insert(0, str(REPO / "workflow"))

from groupconv import kernels  # noqa: E402
from groupconv.files import find_record, nvcc_version  # noqa: E402
from groupconv_atlas.study.probes import machine_code_identity as identity  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", default="newest",
                        help="record folder name under --records-dir, or newest (default)")
    parser.add_argument("--device", default="h200", help="the device whose newest record")
    parser.add_argument("--records-dir", type=Path, default=REPO / "records")
    parser.add_argument("--kernel", action="append", help="compare only this kernel (repeatable)")
    parser.add_argument("--vouch", action="store_true",
                        help="when every kernel is identical, write the tree's source hashes "
                             "into the record")
    args = parser.parse_args(argv)
    if kernels.KERNELS_DIR.resolve() != (REPO / "kernels").resolve():
        print(f"the package imported builds {kernels.KERNELS_DIR}, not {REPO / 'kernels'}",
              file=sys.stderr)
        return 2
    try:
        record = find_record(args.records_dir, args.record, args.device,
                             having="raw/builds/*.cubin")
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"record {record.name}: its cubins against kernels/ of {REPO}")
    results = identity.compare_record(record, REPO, args.kernel)
    for r in results:
        what = (f"identical ({r['functions']} function{'s' if r['functions'] != 1 else ''})"
                if r["verdict"] == "identical" else
                r["detail"] if r["verdict"] == "absent" else f"{r['verdict']}: {r['detail']}")
        print(f"{r['kernel']}: {what}")
    status = identity.exit_status(results)
    if args.vouch:
        if status != 0:
            print("--vouch: a kernel differs or cannot be compared; the record is left as it was",
                  file=sys.stderr)
            return status
        identity.vouch(record, results, nvcc_version())
        print(f"vouched: record {record.name}'s {identity.SAME_MACHINE_CODE} holds the tree's "
              "source hashes")
    return status


if __name__ == "__main__":
    sys.exit(main())
