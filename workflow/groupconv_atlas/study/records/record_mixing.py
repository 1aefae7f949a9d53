"""One record's outputs per results folder: what a folder's outputs come from (a live run's
measurements, the records a replay checked), and the refusal, while the workflow is read, of a
run that would mix another record's outputs, or a live run's, with them."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from groupconv.files import ATLAS_RECORD, INDEX, find_record
from .committed import replay_arguments

# The files a replay's record checks write first (records.smk): each names the record it checked.
RECORD_CHECK = "record-check.json"
NSIGHT_RECORD_CHECK = "nsight-record-check.json"
NSIGHT_CAPTURES = "raw/nsight/*.ncu-rep"


def results_sources(results_dir: str | Path) -> dict:
    """What a results folder's outputs come from: a live run's measurements (raw/, which only a
    live run writes) and the records a replay checked (record-check.json and, where the Nsight
    captures came from another record, nsight-record-check.json); None where a file is absent
    or unreadable (no evidence either way)."""
    results_dir = Path(results_dir)

    def checked(name: str) -> str | None:
        try:
            record = json.loads((results_dir / name).read_text()).get("record")
        except (OSError, ValueError, AttributeError):
            return None
        return record if isinstance(record, str) and record else None

    return {"live": (results_dir / "raw").is_dir(), "record": checked(RECORD_CHECK),
            "nsight_record": checked(NSIGHT_RECORD_CHECK)}


def _continue_arguments(records_dir: Path, held: dict,
                        device: str) -> tuple[list[str], bool] | None:
    """The snakemake arguments that go on with what a folder holds (the configuration
    records/INDEX.json names for its record), and whether they are `make replay`'s; None where
    no configuration replays what is there any more."""
    try:
        args = replay_arguments(records_dir, held["record"])
    except LookupError:
        return None
    nsight = held["nsight_record"]
    if not nsight or nsight == held["record"]:
        return args, True
    # Only record=newest takes the Nsight captures from another record: the folder was made that
    # way, and can still be while its record is the newest of its device.
    try:
        if (find_record(records_dir, "newest", device, having=ATLAS_RECORD).name != held["record"]
                or find_record(records_dir, "newest", device, having=NSIGHT_CAPTURES).name
                != nsight):
            return None
    except LookupError:
        return None
    return ["record=newest" if a == f"record={held['record']}" else a for a in args], False


def mixing_error(results_dir: str | Path, mode: str, record: str | None = None,
                 nsight_record: str | None = None, setting: str = "newest", device: str = "",
                 records_dir: str | Path = "records") -> str | None:
    """None when this run (`mode`; in a replay, `record`, chosen by config `record: setting`, and
    the record its Nsight captures come from) writes into a results folder that holds nothing
    else; else one paragraph naming what the folder holds, what this run would add, and what to
    do. A folder holds one record's outputs: a replay of another record, a replay over a live
    run's measurements and a live run over a replay would mix them."""
    results_dir, records_dir = Path(str(results_dir).rstrip("/")), Path(records_dir)
    held = results_sources(results_dir)
    clean = ("empty the folder with `make clean` (it removes results/*/ and .snakemake) and run "
             "this command again")
    if mode == "live":
        if held["record"] is None:
            return None
        return (f"{results_dir}/ holds the outputs of a replay of record {held['record']} "
                f"({results_dir / RECORD_CHECK}), and this run measures live into the same folder "
                "(config mode: live, or auto with PyCUDA and a GPU): its measurements would mix "
                "with the replay's outputs, and `snakemake snapshot_record` would copy the "
                f"replay's job records into the new record. To measure live, {clean}, or measure "
                "under another device name (`--config device=<name>`).")
    nsight_record = nsight_record or record
    how = (f"config record=newest: the newest record of device {device}" if setting == "newest"
           else f"config record={setting}")
    if held["live"]:
        return (f"{results_dir}/ holds a live run's measurements ({results_dir}/raw/), and this "
                f"run would replay record {record} into the same folder ({how}): the replay's "
                "outputs would mix with the live run's, and `snakemake snapshot_record` would "
                "copy them into a new record. Snapshot the live run first (`snakemake "
                f"snapshot_record`, on the GPU machine); then, to replay {record}, {clean}; or go "
                "on measuring live (`--config mode=live`).")
    if held["record"] in (None, record):
        # Nothing replayed here yet (or a run stopped before its record check), or this record:
        # also with or without another record's Nsight captures (record=newest borrows them, a
        # named record does not), so `make atlas` and `make replay RECORD=<the newest>`, the two
        # ways of replaying the newest record, may follow each other.
        return None

    def source(main: str, nsight: str | None) -> str:
        if nsight is None or nsight == main:
            return f"record {main}"
        return f"record {main} with the Nsight captures of {nsight}"

    there, ours = source(held["record"], held["nsight_record"]), source(record, nsight_record)
    found = _continue_arguments(records_dir, held, device)
    if found:
        args, from_make = found
        go_on = (f"To go on with {there}, give every command the arguments that replay it, "
                 f"e.g. `{shlex.join(['snakemake', 'verify_provenance', *args])}` (the same "
                 "after any other target" + (f"; `make replay RECORD={held['record']}` for the "
                                             "atlas" if from_make else "")
                 + f"); to replay {record} instead, {clean}.")
    else:
        go_on = (f"No configuration in {records_dir / INDEX} replays what is there any more: to "
                 f"replay {record}, {clean}.")
    return (f"{results_dir}/ holds the outputs of a replay of {there} "
            f"({results_dir / RECORD_CHECK}), and this run "
            f"would replay {ours} into the same folder ({how}): the outputs of two records would "
            "mix there, and `snakemake verify_provenance` would then find files that no longer "
            f"match their index. {go_on}")
