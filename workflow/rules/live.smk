from groupconv.kernels import KERNELS as _KERNELS
from groupconv_atlas.study.live import live_run as _live_run
from groupconv_atlas.study.live import rerun_check as _rerun_check

# A live run on a GPU machine as one Snakemake call: `snakemake live_record --config mode=live`
# (study/live/live_run.py). Its GPU tests run first (gpu_tests); a kernel named by `gate_kernel`
# whose tests fail is left out of every kernel list by the plan, which reads the result when the
# workflow is read. So the measuring part (`live_atlas`: the atlas, the extra targets, the stage
# times, the snapshot) is a Snakemake call of its own (live_run), made once the tests have
# spoken, with this call's configuration files and --config entries. Then, with `rerun_check`,
# what a one-line kernel edit reruns, in a scratch copy of the tree.

LIVE = _live_run.settings(config)
LIVE_DIR = f"{PLAN.results}/live"  # the live run's own reports (not the raw layer: no record)
LIVE_TESTS = [_live_run.result_path(PLAN.results, s) for s in _live_run.test_suites(config)]


def live_args() -> list[str]:
    """This call's cores and configuration, for the Snakemake calls the live run makes."""
    return ["--cores", str(PLAN.run_cores),
            *_live_run.snakemake_args(workflow.overwrite_configfiles,
                                      dict(workflow.config_settings.config), Path.cwd())]


def gpu_test_inputs(wildcards) -> list[str]:
    """A gate's kernel sources (an edit reruns its tests) and the test files named as files."""
    sources = _KERNELS[wildcards.suite].inputs if wildcards.suite in _KERNELS else []
    return [*sources, *(p for p in LIVE["gpu_test_paths"] if Path(p).is_file())]


def gpu_test_command(wildcards) -> list[str]:
    return _live_run.pytest_command(config, wildcards.suite)


def refuse_in_a_replay(target: str):
    """The input of a live-only target in a replay: a refusal that says what it needs."""

    def refusal(wildcards):
        raise WorkflowError(f"snakemake {target}: a live run on a GPU machine, and this run "
                            "replays a committed record (mode: replay, or auto without PyCUDA "
                            f"and a GPU); there: snakemake {target} --config mode=live")

    return refusal


if PLAN.measures_on_gpu:

    rule gpu_tests:
        """The GPU tests (`pytest -m gpu`) of gpu_test_paths: suite `all` (gpu_tests), or a gate
        kernel's own (`-k <kernel>`). The job succeeds whatever the tests say: its result
        (counts, exit status, the log's end) is what decides."""
        input:
            tests=gpu_test_inputs,
            code=code("records/jobs", "live/live_run", "records/provenance"),
        output:
            result=_live_run.result_path(PLAN.results, "{suite}"),
            prov=PLAN.prov("gpu_tests", "{suite}"),
        params:
            pytest=gpu_test_command,
        wildcard_constraints:
            suite="|".join([_live_run.ALL_TESTS, *_KERNELS]),
        threads: PLAN.run_cores
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/gpu_tests-{{suite}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/gpu_tests.py"

    rule live_atlas:
        """The measuring part of a live run: the atlas, the extra targets, the stage times and
        (snapshot: true) the snapshot into records/, made last."""
        input:
            PLAN.atlas.artifacts,
            PLAN.atlas.report_assets,
            PLAN.atlas.optional_report_assets,
            PLAN.atlas.comparison_assets,
            live_extra_inputs,
            PLAN.raw("stage_times.json"),
            [f"{SNAPSHOT}/record.json"] if LIVE["snapshot"] else [],

    rule live_run:
        """`snakemake live_atlas` once the GPU tests have run, so that the workflow is read
        with their results (a failed gate leaves its kernel out); its output and wall time."""
        input:
            tests=LIVE_TESTS,
            code=code("records/provenance"),
        output:
            run=f"{LIVE_DIR}/live-atlas.json",
        params:
            args=live_args(),
            record=f"{SNAPSHOT}/record.json" if LIVE["snapshot"] else None,
        threads: PLAN.run_cores
        log:
            f"{LIVE_DIR}/live-atlas.log",
        script:
            "../scripts/live_run.py"

    rule live_record:
        """A whole live run: the GPU tests, then `live_atlas` (ending in the snapshot), then
        with rerun_check the timed rerun after a kernel edit, in a scratch copy."""
        input:
            LIVE_TESTS,
            f"{LIVE_DIR}/live-atlas.json",
            [f"{LIVE_DIR}/rerun-check.json"] if LIVE["rerun_check"] else [],

else:

    rule live_record:
        """In a replay: says that a live run needs a GPU machine (see the live rule above)."""
        input:
            refuse_in_a_replay("live_record"),

    rule live_atlas:
        """In a replay: says that a live run needs a GPU machine (see the live rule above)."""
        input:
            refuse_in_a_replay("live_atlas"),


rule rerun_check:
    """After a run: in a scratch copy of the tree, one line appended to a kernel source, the
    jobs `snakemake atlas` would rerun there (a dry run) and, live, that rerun, timed. The
    checkout is only read. In a replay the dry run alone: an edit reruns the record check
    (which warns that a replay ignores it) and what reads it."""
    input:
        run=(f"{LIVE_DIR}/live-atlas.json" if PLAN.measures_on_gpu
             else PLAN.atlas.provenance_complete),
        code=code("records/provenance", "live/rerun_check"),
    output:
        report=f"{LIVE_DIR}/rerun-check.json",
    params:
        edited=_rerun_check.EDITED,
        targets=["atlas"],
        args=live_args(),
        live=PLAN.measures_on_gpu,
    threads: PLAN.run_cores
    log:
        f"{LIVE_DIR}/rerun-check.log",
    script:
        "../scripts/rerun_check.py"
