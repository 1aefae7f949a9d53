"""The atlas part of a run's plan (artifacts.smk, report.smk, compare.smk): what assemble_atlas
reads (the optional readings, the probes), the provenance it indexes, the report's pages and
figures, the cross-record page, and everything `atlas` makes. Built by RunPlan
(study/plans/run_plan.py), which it reads for the mode, the record, the jobs and the raw layer's
paths."""
from __future__ import annotations

import functools
from pathlib import Path

from groupconv.kernels import BASELINES
from groupconv.timing import BOUNDARIES
from ..records.committed import forward_records, nearest_same_code
from . import plan

# The probes of the public op (overhead.smk, networks.smk) that join atlas.json's `probes` section
# where there is something to read: a replay takes each probe whose raw samples its record holds,
# a live run the probes `probes.with_atlas` names (none by default: each has its own target).
# atlas.json says of every other probe that it was not measured, and why.
ATLAS_PROBES = {
    "overhead": {"snakemake_target": "overhead_probe", "raw": "overhead",
                 "files": ["samples.parquet", "host.parquet", "probe.json"],
                 "result": "overhead.json"},
    "unseen": {"snakemake_target": "unseen_probe", "raw": "probes/unseen",
               "files": ["samples.parquet", "probe.json"], "result": "probes/unseen.json"},
    "networks": {"snakemake_target": "network_probe", "raw": "probes/networks",
                 "files": ["samples.parquet", "probe.json"], "result": "probes/networks.json"},
    "epilogue": {"snakemake_target": "epilogue_probe", "raw": "probes/epilogue",
                 "files": ["samples.parquet", "verification.parquet", "probe.json"],
                 "result": "probes/epilogue.json"},
}

# The atlas's tables (assemble_atlas), beside its index and the index of everything it made.
ATLAS_TABLES = ["atlas.json", "map-details.json", "summary.parquet", "comparisons.parquet",
                "verification.parquet", "roofline.parquet", "current-evidence.md"]
# What the report renders on every run (report.smk): these, then a forest figure per comparison
# the timing jobs make and boundary, then the pages.
REPORT_FIGURES = ["atlas-map.html", "current-evidence.html", "glance.svg", "geomeans.svg",
                  "roofline.svg", "aa-calibration.svg", "boundaries.svg"]
REPORT_PAGES = ["comparisons-summary.html", "comparisons-per-shape.html", "verification.html",
                "shapes.html", "latency.html", "provenance.html", "session.html",
                "probes.html",  # the probes of the public op (report_probes)
                "landing-headline.rst"]  # the landing page's headline (report_landing)
# The cross-record comparison's folder: it reads records/ only, never a device's results.
COMPARISONS = "results/comparisons"


# torch_best (study/statistics/stats' derived reference), derived where both NCHW references were
# timed, from the strict-FP32 references (their names here: this layer is below the statistics).
TORCH_BEST, TORCH_BEST_NCHW_FROM = "torch_best", ("torch_tuned", "torch_default")
STRICT_REFERENCES = [b for b, spec in BASELINES.items() if not spec["tf32"]]


def torch_best_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(candidate, torch_best) for every candidate timed against a strict-FP32 reference, where
    the jobs timed both NCHW references (else no torch_best is derived): the per-shape figure
    against the reference the headline reads."""
    if not set(TORCH_BEST_NCHW_FROM) <= {b for _, b in pairs}:
        return []
    candidates = dict.fromkeys(c for c, b in pairs
                               if b in STRICT_REFERENCES and c not in STRICT_REFERENCES)
    return [(c, TORCH_BEST) for c in candidates]


class AtlasPlan:
    """What `atlas` makes and reads beyond the raw layer. `run` is the RunPlan this belongs to;
    the notes it has to print join the run's."""

    def __init__(self, run, notes: list[str]):
        self.run = run
        results = run.results
        self.tables = [f"{results}/{t}" for t in ATLAS_TABLES]
        self.index = f"{results}/provenance.json"
        self.provenance_complete = f"{results}/provenance-complete.json"
        self.artifacts = [*self.tables, self.index, self.provenance_complete]
        self.probe_plan = {name: self._probe_plan(name, probe, notes)
                           for name, probe in ATLAS_PROBES.items()}
        # The probe outputs the atlas (assemble_atlas, and through atlas.json the report) waits
        # for.
        self.probe_results = [e["result"] for e in self.probe_plan.values() if e["result"]]
        self.comparisons = COMPARISONS

        self.report_dir = f"{results}/report"
        # Optional stages' tables, made by their own targets (mobilenet_probe, nsight).
        self.mobilenet_report = f"{results}/mobilenet/mobilenet.json"
        self.nsight_table = f"{results}/nsight.parquet"
        self.machine_code_table = f"{results}/machine_code.parquet"
        # (candidate, baseline, boundary) of every forest figure: each pair a timing job compares
        # (not the A/A one; in a replay, the jobs the record measured), at each boundary.
        pairs = plan.comparison_pairs(run.jobs)
        self.forest_figures = [(cand, base, boundary) for cand, base in
                               [*pairs, *torch_best_pairs(pairs)] for boundary in BOUNDARIES]
        self.report_assets = [*(f"{self.report_dir}/{f}" for f in REPORT_FIGURES),
                              *(self.forest_figure(*f) for f in self.forest_figures),
                              *(f"{self.report_dir}/{p}" for p in REPORT_PAGES)]

    # ---- what assemble_atlas reads ----

    def crosscheck_reading(self) -> list[str]:
        """The timer cross-check joins atlas.json when configured (live) or recorded (replay); an
        empty crosscheck.shapes leaves it out of a live run (a repeat measurement session)."""
        run = self.run
        if run.measures_on_gpu and not run.config.get("crosscheck", {}).get("shapes"):
            return []
        return run.optional_raw("crosscheck.json")

    def mobilenet_readings(self) -> list[str]:
        """The MobileNet probe's readings join atlas.json when measured (live) or recorded."""
        run = self.run
        if run.measures_on_gpu or run.at(run.raw("mobilenet/probe.json")).is_file():
            return [self.mobilenet_report]
        return []

    def epilogue_map_inputs(self) -> dict[str, list[str]]:
        """The atlas map's epilogue entry (its table, made beside probes/epilogue.json, and the
        axis's verification) where atlas.json holds the axis; empty lists otherwise, so a map
        without it is as it was."""
        result = self.probe_plan["epilogue"]["result"]
        if not result:
            return {"epilogue_table": [], "epilogue_verification": []}
        return {"epilogue_table": [result.replace(".json", ".parquet")],
                "epilogue_verification": [self.run.probes.raw("epilogue",
                                                              "verification.parquet")]}

    def _probe_plan(self, name: str, probe: dict, notes: list[str]) -> dict:
        """What assemble_atlas reads for one probe: its output JSON (`result`), or none and why."""
        run = self.run
        entry = {"snakemake_target": probe["snakemake_target"], "raw": run.raw(probe["raw"]),
                 "result": None, "reason": None}
        result = f"{run.results}/{probe['result']}"
        if run.measures_on_gpu:
            if name in (run.config.get("probes") or {}).get("with_atlas", []):
                return {**entry, "result": result}
            return {**entry, "reason": f"not measured by this live run: probes.with_atlas does "
                                       f"not name {name} (snakemake {probe['snakemake_target']} "
                                       "measures it on its own)"}
        missing = [f for f in probe["files"]
                   if not run.at(run.raw(f"{probe['raw']}/{f}")).is_file()]
        if not missing:
            return {**entry, "result": result}
        if len(missing) < len(probe["files"]):
            notes.append(f"record {run.record_name} holds only part of raw/{probe['raw']}/ (no "
                         f"{', '.join(missing)}); atlas.json names the {name} probe as not "
                         "measured")
            held = f"holds raw/{probe['raw']}/ without {', '.join(missing)}"
        else:
            held = f"holds no raw/{probe['raw']}/"
        # The probe's own target replays it from another record where one holds it (ProbePlan).
        elsewhere = run.probes.record_name(name) if run.probes.borrows(name) else None
        how = (f"snakemake {probe['snakemake_target']} replays it from record {elsewhere}, the "
               "newest that holds it" if elsewhere else
               f"snakemake {probe['snakemake_target']} measures it live on a GPU")
        return {**entry, "reason": f"not measured in record {run.record_name}: it {held} "
                                   f"({how})"}

    @functools.cached_property
    def agreement_pair(self) -> dict | None:
        """The replayed record's nearest same-code session (records.nearest_same_code, from the
        records' build hashes), which its headline's agreement is read against; None live (the
        run is no committed record yet) or where no other record ran any of its code."""
        run = self.run
        if not run.replays_record:
            return None
        pair = nearest_same_code(run.at("records"), run.record_name)
        return None if pair is None else {"record": run.record_name, "nearest": pair["record"],
                                          "same_code": pair["same_code"],
                                          "kernels": pair["kernels"]}

    @property
    def session_agreement(self) -> dict[str, str]:
        """The session_agreement job's outputs (compare.smk)."""
        base = f"{self.run.results}/session-agreement"
        return {"table": f"{base}.parquet", "pair": f"{base}.json"}

    def session_agreement_input(self, wildcards=None) -> list[str]:
        """What assemble_atlas reads for the headline's session agreement: the record set beside
        its nearest same-code session, cell by cell, and which session that is."""
        return list(self.session_agreement.values()) if self.agreement_pair else []

    def session_agreement_records(self, wildcards=None) -> dict[str, list[str]]:
        """The session_agreement job's inputs: both records' manifests and raw files."""
        pair = self.agreement_pair
        if pair is None:
            raise plan.PlanError("session_agreement: a replayed record with a same-code session "
                                 "is needed (records.nearest_same_code)")
        return plan.compare_inputs([pair["record"], pair["nearest"]], str(self.run.at("records")))

    # ---- provenance ----

    def all_jobs_provenance(self) -> list[str]:
        """Provenance of every job this mode runs for the atlas (replay adds the record's own)."""
        run, prov = self.run, self.run.prov
        jobs = [prov("freeze_shapes"), prov("assemble_atlas")]
        jobs += [prov("session_agreement")] if self.agreement_pair else []
        jobs += [prov("compare_job", j) for j in run.timing_jobs]
        jobs += [prov("compare_pass", j) for j in run.passes.jobs]
        jobs += [prov("assemble_passes")] if run.passes.on else []
        if run.measures_on_gpu:
            jobs += [prov("ceilings")] + [prov("crosscheck") for _ in self.crosscheck_reading()]
            jobs += [prov("dispatch_table")] if run.jobs_of(["dispatch"]) else []
            jobs += [prov("mobilenet_measure"), prov("mobilenet_stats")]
            jobs += [prov("build_kernel", k) for k in run.kernels]
            jobs += [prov("tune_kernel", k) for k in run.tuned_kernels]
            jobs += [prov("verify", i) for i in run.implementations]
            jobs += [prov("time_job", j) for j in run.timing_jobs]
            jobs += [prov("tune_wgrad", Path(t).stem.removeprefix("wg_"))
                     for t in run.passes.wgrad_tunings()]
            jobs += [prov("verify_pass", p) for p in run.passes.passes]
            jobs += [prov("time_pass", j) for j in run.passes.jobs]
            jobs += [prov("backward_dispatch_table")] if run.passes.on else []
        else:
            jobs += [prov("check_record")]
            jobs += [prov("mobilenet_stats")] if self.mobilenet_readings() else []
        return jobs

    def gpu_job_provenance(self) -> list[str]:
        """The provenance of one GPU job of the run (a verification job): it names the GPU."""
        run = self.run
        if run.measures_on_gpu:
            return [run.prov("verify", run.implementations[0])]
        found = sorted(run.at(run.record, "provenance").glob("verify-*.json"))
        return [f"{run.record}/provenance/{found[0].name}"] if found else []

    def record_provenance(self) -> list[str]:
        """The measuring jobs' provenance, as committed in the record (replay only)."""
        run = self.run
        if not run.replays_record:
            return []
        return sorted(f"{run.record}/provenance/{p.name}"
                      for p in run.at(run.record, "provenance").glob("*.json"))

    # ---- the report and what `atlas` makes ----

    def forest_figure(self, candidate: str, baseline: str, boundary: str) -> str:
        return f"{self.report_dir}/forest/{plan.figure_stem(candidate, baseline, boundary)}.svg"

    def stage_ready(self, table: str, raw_inputs: list[str]) -> bool:
        """An optional stage joins the report when the raw files its table is made from exist: a
        replay rebuilds the table from the record, a live run reports the stage once it has run."""
        run = self.run
        if not raw_inputs or not all(run.at(f).exists() for f in raw_inputs):
            return False
        return run.replays_record or run.at(table).exists()

    def optional_report_assets(self, wildcards=None) -> list[str]:
        """Pages of the optional stages whose inputs are there when the DAG is built."""
        run, report, assets = self.run, self.report_dir, []
        if self.stage_ready(self.mobilenet_report, [run.raw("mobilenet/samples.parquet"),
                                                    run.raw("mobilenet/probe.json")]):
            assets += [f"{report}/mobilenet.svg", f"{report}/mobilenet.html"]
        if self.stage_ready(self.nsight_table, run.nsight.captures):
            assets.append(f"{report}/nsight.html")
        if self.stage_ready(self.machine_code_table,
                            [run.raw(f"builds/{k}.cubin") for k in run.kernels]):
            assets.append(f"{report}/machine-code.html")
        if self.tuned_build_records():
            assets.append(f"{report}/tuning.html")
        return assets

    def tuned_build_records(self, wildcards=None) -> list[str]:
        """The tuning records of the tuned kernels (k5); older records kept the tuning stage's
        output inside the kernel's build record, which then stands in."""
        run, records = self.run, []
        for kernel in run.tuned_kernels:
            records += run.tuning_records([kernel]) or [run.raw(f"builds/{kernel}.json")]
        return records

    def snapshot_optional_stages(self, wildcards=None) -> list[str]:
        """Nsight captures join a snapshot when this run made them (`snakemake nsight` first): a
        run without `snakemake nsight` leaves them out, and its replay says so."""
        made = any(self.run.at(c).is_file() for c in self.run.nsight.captures)
        return [self.nsight_table] if made else []

    def compare_inputs(self, wildcards=None) -> dict[str, list[str]]:
        """compare_records' inputs: the configured records' manifests and raw files; refuses
        (LookupError) an unknown record or fewer than two."""
        return plan.compare_inputs((self.run.config.get("compare") or {}).get("records"),
                                   str(self.run.at("records")))

    def comparison_assets(self, wildcards=None) -> list[str]:
        """The cross-record page joins `atlas` (and the report) when compare.records names two or
        more committed records: flips between sessions are the atlas's most important caveat."""
        if not (self.run.config.get("compare") or {}).get("with_atlas", True):
            return []
        try:
            self.compare_inputs()
        except LookupError:
            return []
        return [f"{COMPARISONS}/records.html"]

    def device_records(self) -> dict[str, Path]:
        """{device: its newest forward record}, for the map on each GPU (compare_devices)."""
        return forward_records(self.run.at("records"))

    def device_inputs(self, wildcards=None) -> dict[str, list[str]]:
        """compare_devices' inputs: each device's newest forward record's manifest and raw files;
        refuses (LookupError) fewer than two devices."""
        names = [Path(r).name for r in self.device_records().values()]
        if len(names) < 2:
            raise LookupError("compare_devices needs committed forward records of two or more "
                              f"GPUs; found {', '.join(names) or 'none'}")
        return plan.compare_inputs(names, str(self.run.at("records")))

    def device_assets(self, wildcards=None) -> list[str]:
        """The map on each GPU joins `atlas` (and the report) where two or more GPUs have a
        forward record: how the map changes with the GPU."""
        if not (self.run.config.get("compare") or {}).get("with_atlas", True):
            return []
        return [f"{COMPARISONS}/devices.html"] if len(self.device_records()) >= 2 else []

    def complete_targets(self, wildcards=None) -> list[str]:
        """Everything `atlas` makes besides provenance-complete.json: its tables, the report's
        pages and figures, the optional stages' pages and the cross-record page. The jobs behind
        them (tables, SASS, Nsight, tuning records) are found from their job records."""
        passes = self.run.passes  # the backward passes' tables, pages and dispatch table
        return [*self.tables, *self.report_assets, *self.optional_report_assets(),
                *self.comparison_assets(), *self.device_assets(), *passes.artifacts(), *passes.report_assets(),
                *passes.backward_dispatch()]
