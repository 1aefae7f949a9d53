from datetime import date

from groupconv_atlas.runtime.files import INDEX as _RECORD_INDEX
from groupconv_atlas.study.record_check import drift_warning as _drift_warning
from groupconv_atlas.study.record_mixing import mixing_error as _mixing_error
from groupconv_atlas.study.record_check import recorded_sources as _recorded_sources
from groupconv_atlas.study.records import record_files as _record_files
from groupconv_atlas.study.records import replay_arguments as _replay_arguments
from groupconv_atlas.study.record_check import shape_set_difference as _shape_set_difference
from groupconv_atlas.study.record_check import source_drift as _source_drift

# Records: a replay checks the committed record's hashes first; a live run can be snapshotted
# into records/<device>-<date>/ to be committed.

# One record's outputs per results folder: while the workflow is read, before any job runs (and in
# a dry run too), a replay into a folder that holds another record's replay (its record-check.json
# names the record) or a live run's measurements (raw/), and a live run into a replayed folder, are
# refused, saying what the folder holds and the arguments that go on with it.
_mixing = _mixing_error(RESULTS, MODE, record=RECORD and Path(RECORD).name,
                        nsight_record=NSIGHT_RECORD and Path(NSIGHT_RECORD).name,
                        setting=config["record"], device=DEVICE)
if _mixing:
    raise WorkflowError(_mixing)

if MODE == "replay":
    # Checked while the DAG is built, so a record that cannot replay this shape set stops the run
    # before any job starts and before any artifact is deleted.
    _difference = _shape_set_difference(RECORD, SHAPES)
    if _difference:
        try:
            _arguments = " ".join(_replay_arguments("records", Path(RECORD).name))
            _how = (f"replay it with `make replay RECORD={Path(RECORD).name}` "
                    f"(snakemake atlas {_arguments})")
        except LookupError:
            _how = "set `shapes:` to the set it measured"
        raise WorkflowError(f"config shapes={config['shapes']}: {_difference}. A replay shows "
                            f"only what its record measured: {_how}, or measure live on a GPU.")
    # Editing a kernel changes nothing in a replay: say so on every run, not only in the evidence.
    _drift = _drift_warning(Path(RECORD).name, _source_drift(RECORD, workflow.basedir))
    if _drift:
        print(f"warning: {_drift}", file=sys.stderr)

    rule check_record:
        input:
            **record_check_inputs(RECORD),
        output:
            check=f"{RESULTS}/record-check.json",
            prov=prov("check_record"),
        log:
            f"{RESULTS}/logs/check_record.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/check_record.py"

    if NSIGHT_RECORD != RECORD:

        rule check_nsight_record:
            """The record the Nsight captures replay from, when it is not the main one."""
            input:
                **record_check_inputs(NSIGHT_RECORD),
            output:
                check=f"{RESULTS}/nsight-record-check.json",
                prov=prov("check_nsight_record"),
            log:
                f"{RESULTS}/logs/check_nsight_record.log",
            conda:
                "../../envs/cpu.yaml"
            script:
                "../scripts/check_record.py"


if MODE == "live":
    SNAPSHOT = f"records/{DEVICE}-{config.get('record_name') or date.today().isoformat()}"

    rule snapshot_record:
        """Copy this live run's raw layer and job provenance into records/ (then commit it)."""
        input:
            atlas=f"{RESULTS}/atlas.json",
            artifacts=ATLAS_ARTIFACTS,
            mobilenet=f"{RESULTS}/mobilenet/mobilenet.json",
            optional=snapshot_optional_stages,
        output:
            f"{SNAPSHOT}/record.json",
        params:
            # The results folder the run wrote: the one holding its atlas.json.
            results=lambda wildcards, input: str(Path(input.atlas).parent),
            device=DEVICE,
            # How to replay the record: the config files this run layered on config/config.yaml,
            # entered in records/INDEX.json (`make replay RECORD=<name>` reads them).
            replay=[a for f in workflow.overwrite_configfiles
                    if Path(f).resolve() != Path("config/config.yaml").resolve()
                    for a in ("--configfile", str(Path(f).resolve().relative_to(Path.cwd())
                                                  if Path(f).resolve().is_relative_to(Path.cwd())
                                                  else f))],
        log:
            f"{RESULTS}/logs/snapshot_record.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/snapshot_record.py"

else:

    rule snapshot_record:
        """In a replay: says that a snapshot needs a live run (see the live rule above)."""
        input:
            snapshot_needs_a_live_run,
