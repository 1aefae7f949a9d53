"""The probes' own targets (overhead.smk, networks.smk: overhead_probe, unseen_probe,
network_probe): the record each replays, its check, the raw files its statistics read, and the
line the target prints. Built by RunPlan (study/plans/run_plan.py) before AtlasPlan, which names in
atlas.json where a probe its record lacks replays from."""
from __future__ import annotations

import json
from pathlib import Path

from groupconv.files import find_record
from .atlas_plan import ATLAS_PROBES


class ProbePlan:
    """What each probe's own target (overhead_probe, unseen_probe, network_probe) reads. Live: the
    samples this run measures. In a replay: the replayed record's raw samples where it holds them;
    else, for a replay of the newest record (or of a record of the backward passes alone, which
    replays beside it), those of the newest record of the device that holds them, so the probe's
    target replays without another `make replay` that would replace the atlas's results. That
    record's hashes are checked as the main record's are, and the target's output goes where the
    atlas's replay writes none of its own (the atlas waits for a probe only where the main record
    holds it: AtlasPlan.probe_plan). A named record without the samples has nothing to replay.
    `run` is the RunPlan it belongs to."""

    def __init__(self, run):
        self.run = run
        # {probe: "records/<name>"} in a replay, None where no record can give the probe.
        self.records: dict[str, str | None] = {}
        if run.replays_record:
            self.records = {name: self._record_of(probe) for name, probe in ATLAS_PROBES.items()}

    def _record_of(self, probe: dict) -> str | None:
        run = self.run
        if _holds(run.at(run.record), probe):
            return run.record
        if run.config["record"] != "newest" and not run.pass_layer:
            return None
        try:
            found = find_record(run.at("records"), "newest", run.device,
                                having=f"raw/{probe['raw']}/{probe['files'][0]}",
                                where=lambda record: _holds(record, probe))
        except LookupError:
            return None
        return f"records/{found.name}"

    def record_name(self, name: str) -> str | None:
        """The record the probe replays (None live, or where no record gives it)."""
        record = self.records.get(name)
        return record and Path(record).name

    def borrows(self, name: str) -> bool:
        """A replay whose probe comes from another record than the one it replays."""
        return self.records.get(name) not in (None, self.run.record)

    @property
    def borrowed_records(self) -> list[str]:
        """The names of the records the probes borrow, each checked once (check_probe_record)."""
        return sorted({self.record_name(n) for n in self.records if self.borrows(n)})

    def borrowed_check(self, record_name: str) -> str:
        return f"{self.run.results}/probe-record-check/{record_name}.json"

    def check_inputs(self, wildcards) -> dict:
        """check_probe_record's inputs for the borrowed record `wildcards.record`, as the main
        record's check has them (RunPlan.record_check_inputs), less the code, which the rule
        lists itself (the same for every record)."""
        inputs = self.run.record_check_inputs(f"records/{wildcards.record}")
        del inputs["code"]
        return inputs

    def raw(self, name: str, file: str) -> str:
        """One of the probe's raw files: measured here (live), else in the record it replays (the
        replayed record's path where none holds it, so an explicit request names the file)."""
        path = f"{ATLAS_PROBES[name]['raw']}/{file}"
        record = self.records.get(name)
        return f"{record}/raw/{path}" if record and self.run.replays_record else self.run.raw(path)

    def ceilings(self, name: str) -> str:
        """The GPU's ceilings beside the probe's samples (their L2 size sizes the regions of time
        over floor): live, this run's; in a replay, the copy in the probe's raw folder where its
        record holds one (a probe measured after the record), else the record's own."""
        record = self.records.get(name)
        if not (record and self.run.replays_record):
            return self.run.raw("ceilings.json")
        own = self.raw(name, "ceilings.json")
        return own if self.run.at(own).is_file() else f"{record}/raw/ceilings.json"

    def record_check(self, name: str) -> list[str]:
        """What the probe's statistics wait for: the main record's check, which marks the
        results folder as that record's replay, and the borrowed record's own."""
        borrowed = [self.borrowed_check(self.record_name(name))] if self.borrows(name) else []
        return [*self.run.record_check(), *borrowed]

    def result(self, name: str) -> str | None:
        """The probe's output, or None where a replay has no record to read it from."""
        if self.run.replays_record and self.records.get(name) is None:
            return None
        return f"{self.run.results}/{ATLAS_PROBES[name]['result']}"

    def replayed_line(self, name: str) -> str | None:
        """The line the probe's target prints in a replay: the record it replays and, where that
        is not the replayed one, why; or why there is nothing to replay. None live."""
        run, probe = self.run, ATLAS_PROBES[name]
        target, held = probe["snakemake_target"], f"raw/{probe['raw']}/"
        if not run.replays_record:
            return None
        record = self.record_name(name)
        if record == run.record_name:
            return f"{target}: replays record {record}"
        if record is not None:
            return (f"{target}: replays record {record}, the newest record of device "
                    f"{run.device} that holds {held} (record {run.record_name}, which the "
                    "other targets replay, holds none; its results stay as they are)")
        if run.config["record"] != "newest" and not run.pass_layer:
            others = _records_holding(run, probe)
            return (f"{target}: nothing to replay: record {run.record_name} holds no {held} "
                    + (f"(records of device {run.device} that do: {', '.join(others)}; a "
                       "replay of the newest record, the default, replays the newest of them)"
                       if others else
                       f"and no record of device {run.device} does")
                    + "; measure it live on a GPU")
        return (f"{target}: nothing to replay: no record of device {run.device} holds {held}; "
                "measure it live on a GPU")


def _holds(record: Path, probe: dict) -> bool:
    return all((record / "raw" / probe["raw"] / f).is_file() for f in probe["files"])


def _records_holding(run, probe: dict) -> list[str]:
    """The committed records of the run's device that hold the probe's raw files, by name."""
    names = []
    for manifest in sorted(run.at("records").glob("*/record.json")):
        if json.loads(manifest.read_text()).get("device") == run.device and \
                _holds(manifest.parent, probe):
            names.append(manifest.parent.name)
    return names
