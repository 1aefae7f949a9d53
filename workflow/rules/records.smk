import re
from datetime import date

from groupconv_atlas.study.records.record_check import drift_warning as _drift_warning
from groupconv_atlas.study.records.record_check import shape_set_difference as _shape_set_difference
from groupconv_atlas.study.records.record_check import source_drift as _source_drift
from groupconv_atlas.study.records.record_mixing import mixing_error as _mixing_error
from groupconv_atlas.study.records.committed import replay_arguments as _replay_arguments

# Records: a replay checks the committed record's hashes first; a live run can be snapshotted
# into records/<device>-<date>/ to be committed, with its wall time per stage (stage_times).

# One record's outputs per results folder: while the workflow is read, before any job runs (and in
# a dry run too), a replay into a folder that holds another record's replay (its record-check.json
# names the record) or a live run's measurements (raw/), and a live run into a replayed folder, are
# refused, saying what the folder holds and the arguments that go on with it.
_mixing = _mixing_error(PLAN.results, PLAN.mode, record=PLAN.record_name,
                        nsight_record=PLAN.nsight.record and Path(PLAN.nsight.record).name,
                        setting=config["record"], device=PLAN.device)
if _mixing:
    raise WorkflowError(_mixing)

if PLAN.replays_record:
    # Checked while the DAG is built, so a record that cannot replay this shape set stops the run
    # before any job starts and before any artifact is deleted.
    _difference = _shape_set_difference(PLAN.record, PLAN.shapes)
    if _difference:
        try:
            _arguments = " ".join(_replay_arguments("records", PLAN.record_name))
            _how = (f"replay it with `make replay RECORD={PLAN.record_name}` "
                    f"(snakemake atlas {_arguments})")
        except LookupError:
            _how = "set `shapes:` to the set it measured"
        raise WorkflowError(f"config shapes={config['shapes']}: {_difference}. A replay shows "
                            f"only what its record measured: {_how}, or measure live on a GPU.")
    # Editing a kernel changes nothing in a replay: say so on every run, not only in the evidence.
    _drift = _drift_warning(PLAN.record_name, _source_drift(PLAN.record, workflow.basedir))
    if _drift:
        print(f"warning: {_drift}", file=sys.stderr)

    rule check_record:
        input:
            **PLAN.record_check_inputs(PLAN.record),
        output:
            check=f"{PLAN.results}/record-check.json",
            prov=PLAN.prov("check_record"),
        log:
            f"{PLAN.results}/logs/check_record.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/check_record.py"

    if PLAN.nsight.borrows_record:

        rule check_nsight_record:
            """The record the Nsight captures replay from, when it is not the main one."""
            input:
                **PLAN.record_check_inputs(PLAN.nsight.record),
            output:
                check=f"{PLAN.results}/nsight-record-check.json",
                prov=PLAN.prov("check_nsight_record"),
            log:
                f"{PLAN.results}/logs/check_nsight_record.log",
            conda:
                "../../envs/cpu.yaml"
            script:
                "../scripts/check_record.py"

    if PLAN.probes.borrowed_records:

        rule check_probe_record:
            """A record a probe's own target replays from, when it is not the main one."""
            input:
                unpack(PLAN.probes.check_inputs),
                code=PLAN.record_check_inputs(PLAN.record)["code"],
            output:
                check=PLAN.probes.borrowed_check("{record}"),
                prov=PLAN.prov("check_probe_record", "{record}"),
            wildcard_constraints:
                record="|".join(re.escape(name) for name in PLAN.probes.borrowed_records),
            log:
                f"{PLAN.results}/logs/check_probe_record-{{record}}.log",
            conda:
                "../../envs/cpu.yaml"
            script:
                "../scripts/check_record.py"

    if PLAN.passes.borrows_record:

        rule check_passes_record:
            """The record the backward passes replay from, when it is not the main one."""
            input:
                **PLAN.record_check_inputs(PLAN.passes.record),
            output:
                check=PLAN.passes.borrowed_check,
                prov=PLAN.prov("check_passes_record"),
            log:
                f"{PLAN.results}/logs/check_passes_record.log",
            conda:
                "../../envs/cpu.yaml"
            script:
                "../scripts/check_record.py"


if PLAN.measures_on_gpu:

    rule stage_times:
        """Wall time per stage of this live run, into its raw layer (the snapshot carries it into
        the record): after the atlas, from every job's provenance and log in the results folder."""
        input:
            atlas_index=PLAN.atlas.provenance_complete,
            timing=[PLAN.raw(f"timing/{job}.parquet") for job in PLAN.timing_jobs],
            # The live run's extra targets (extra_targets) end before its times are taken, so
            # the snapshot after them carries their samples and times.
            extra=live_extra_inputs,
            code=code("records/jobs", "records/provenance", "live/stage_times"),
        output:
            times=PLAN.raw("stage_times.json"),
            prov=PLAN.prov("stage_times"),
        log:
            f"{PLAN.results}/logs/stage_times.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/stage_times.py"

    SNAPSHOT = f"records/{PLAN.device}-{config.get('record_name') or date.today().isoformat()}"

    rule snapshot_record:
        """Copy this live run's raw layer (its GPU tests' results in raw/gpu-tests/ too) and job
        provenance into records/ (then commit it)."""
        input:
            atlas=f"{PLAN.results}/atlas.json",
            artifacts=PLAN.atlas.artifacts,
            mobilenet=f"{PLAN.results}/mobilenet/mobilenet.json",
            optional=PLAN.atlas.snapshot_optional_stages,
            stage_times=PLAN.raw("stage_times.json"),
        output:
            f"{SNAPSHOT}/record.json",
        params:
            # The results folder the run wrote: the one holding its atlas.json.
            results=lambda wildcards, input: str(Path(input.atlas).parent),
            device=PLAN.device,
            # Kernels a failed gate left out (gate_kernel): the record says so in a caveat.
            gated_out=PLAN.gated_out,
            # How to replay the record: the config files this run layered on config/config.yaml,
            # entered in records/INDEX.json (`make replay RECORD=<name>` reads them).
            replay=[a for f in workflow.overwrite_configfiles
                    if Path(f).resolve() != Path("config/config.yaml").resolve()
                    for a in ("--configfile", str(Path(f).resolve().relative_to(Path.cwd())
                                                  if Path(f).resolve().is_relative_to(Path.cwd())
                                                  else f))],
        log:
            f"{PLAN.results}/logs/snapshot_record.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/snapshot_record.py"

    rule snapshot_passes:
        """Copy a live run of the backward passes alone (`snakemake backward_passes`) into
        records/<device>-<record_name>-passes/: their raw layer, their dispatch table and their
        jobs' provenance. A replay of the newest atlas record shows them beside its forward
        (study/plans/pass_plan); the record says it holds the passes alone."""
        input:
            artifacts=PLAN.passes.artifacts(),
            dispatch=PLAN.passes.backward_dispatch(),
        output:
            f"{SNAPSHOT}-passes/record.json",
        params:
            results=PLAN.results,
            device=PLAN.device,
        log:
            f"{PLAN.results}/logs/snapshot_passes.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/snapshot_passes.py"

else:

    rule snapshot_record:
        """In a replay: says that a snapshot needs a live run (see the live rule above)."""
        input:
            plan_input(PLAN.snapshot_in_a_replay),

    rule stage_times:
        """In a replay: says that stage times are a live run's (see the live rule above)."""
        input:
            plan_input(PLAN.stage_times_in_a_replay),
