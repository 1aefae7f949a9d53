from datetime import date

# Records: a replay checks the committed record's hashes first; a live run can be snapshotted
# into records/<device>-<date>/ to be committed.

if MODE == "replay":

    rule check_record:
        input:
            manifest=f"{RECORD}/record.json",
            code=code("records", "provenance"),
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
                manifest=f"{NSIGHT_RECORD}/record.json",
                code=code("records", "provenance"),
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
            ATLAS_ARTIFACTS,
            f"{RESULTS}/mobilenet/mobilenet.json",
            snapshot_optional_stages,
        output:
            f"{SNAPSHOT}/record.json",
        params:
            results=RESULTS,
            device=DEVICE,
        log:
            f"{RESULTS}/logs/snapshot_record.log",
        conda:
            "../../envs/cpu.yaml"
        script:
            "../scripts/snapshot_record.py"
