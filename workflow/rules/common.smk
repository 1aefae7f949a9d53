# Configuration checks, the live/replay decision and the path helpers every rule uses.
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from groupconv_atlas.runtime import kernels as _kernels  # noqa: E402
from groupconv_atlas.study import plan as _plan  # noqa: E402

# Every job of this run imports the package of this checkout (a copy of the repository included),
# not whichever one is installed.
_plan.jobs_import_from(workflow.basedir)
from groupconv_atlas.runtime.files import find_record  # noqa: E402
from groupconv_atlas.study.shapes_table import ShapeError, load_shapes  # noqa: E402

from groupconv_atlas.study.config_check import config_errors as _config_errors  # noqa: E402
from groupconv_atlas.study.config_check import resolve_kernel_lists as _resolve_kernel_lists  # noqa: E402

# Errors that name the field first (and a misspelled key with the nearest known one); then
# Snakemake's own validation, which fills the schema's defaults.
_problems = _config_errors(config)
if _problems:
    raise WorkflowError("config " + "\nconfig ".join(_problems))
validate(config, schema="../schemas/config.schema.yaml")
_resolve_kernel_lists(config)  # `kernels: all` as the registry's list, the candidates from it

try:
    SHAPES = load_shapes(config["shapes"])
except (ShapeError, OSError) as _err:
    raise WorkflowError(f"{config['shapes']}: {_err}") from None


try:
    _plan.check_names(config)
except _plan.PlanError as _err:
    raise WorkflowError(str(_err)) from None


def gpu_available() -> bool:
    """Live measurement needs PyCUDA importable and a GPU that nvidia-smi lists."""
    if importlib.util.find_spec("pycuda") is None:
        return False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    return subprocess.run([smi, "-L"], capture_output=True, check=False).returncode == 0


MODE = config["mode"] if config["mode"] != "auto" else ("live" if gpu_available() else "replay")
DEVICE = config["device"]
RESULTS = f"results/{DEVICE}"
RECORD = None
if MODE == "replay":
    try:
        RECORD = str(find_record("records", config["record"], DEVICE))
    except LookupError as _err:
        raise WorkflowError(str(_err)) from None

# A job that measures time (tuning, ceilings, timing, the cross-check, the MobileNet probe,
# Nsight) takes every core of the run, so the scheduler runs it alone: no other job's GPU or CPU
# work beside its samples. Builds and verification share the machine with each other (up to the
# profile's `gpu` resource), which is what makes a run on many cores fast. On a cluster every job
# has its own machine, so one thread is enough.
def _run_cores() -> int:
    try:
        cores = workflow.cores
    except WorkflowError:  # a cluster run sets no total
        return 1
    return cores if isinstance(cores, int) and 0 < cores < 1024 else 1


RUN_CORES = _run_cores()
# measure_alone: false (the smoke config) lets measuring jobs share the machine: a quick run
# whose latencies check the pipeline; the timing records say so.
MEASURE_ALONE = bool(config.get("measure_alone", True))
MEASURE_THREADS = RUN_CORES if MEASURE_ALONE else 1

KERNELS = list(config["kernels"])
IMPLEMENTATIONS = [*KERNELS, *config["baselines"]]
PACKAGE = "workflow/groupconv_atlas"

if MODE == "replay":
    # A replay shows what its record measured: configured kernels the record lacks are named,
    # not invented.
    def _in_record(path):
        return Path(RECORD, "raw", path).is_file()

    _absent = [k for k in KERNELS if not _in_record(f"builds/{k}.json")]
    _absent += [b for b in config["baselines"] if not _in_record(f"verification/{b}.parquet")]
    if _absent:
        print(f"note: record {Path(RECORD).name} has no measurements for "
              f"{', '.join(sorted(_absent))}; the replay leaves them out (measure live on a GPU "
              "to include them)", file=sys.stderr)
    KERNELS = [k for k in KERNELS if k not in _absent]
    IMPLEMENTATIONS = [i for i in IMPLEMENTATIONS if i not in _absent]


def raw(path: str) -> str:
    """A raw-layer file: measured here (live) or read from the committed record (replay)."""
    return f"{RESULTS}/raw/{path}" if MODE == "live" else f"{RECORD}/raw/{path}"


def optional_raw(path: str) -> list[str]:
    """A raw file that older records may lack: always made live, used in replay if present."""
    if MODE == "live" or Path(raw(path)).is_file():
        return [raw(path)]
    return []


def crosscheck_reading() -> list[str]:
    """The timer cross-check joins atlas.json when configured (live) or recorded (replay); an
    empty crosscheck.shapes leaves it out of a live run (a repeat measurement session)."""
    if MODE == "live" and not config.get("crosscheck", {}).get("shapes"):
        return []
    return optional_raw("crosscheck.json")


def recorded_probe(path: str, result: str, target: str):
    """An input function: the probe's result, or in a replay whose record lacks the probe's raw
    samples, an error that says so (rather than a missing-file trace)."""

    def needed(wildcards):
        if MODE == "replay" and not Path(raw(path)).is_file():
            raise WorkflowError(f"snakemake {target}: record {Path(RECORD).name} holds no "
                                f"{path}; measure it live on a GPU, or replay a record that "
                                "has it (records/INDEX.json lists them)")
        return result

    return needed


def snapshot_needs_a_live_run(wildcards):
    """snapshot_record's input in a replay: an error that says what the rule needs."""
    raise WorkflowError("snakemake snapshot_record: copies a live run's raw layer into "
                        "records/, and this run replays a committed record (mode: replay, or "
                        "auto without PyCUDA and a GPU); run it on a GPU machine after "
                        "`snakemake atlas --config mode=live`")


def mobilenet_readings() -> list[str]:
    """The MobileNet probe's readings join atlas.json when measured (live) or recorded."""
    if MODE == "live" or Path(raw("mobilenet/probe.json")).is_file():
        return [f"{RESULTS}/mobilenet/mobilenet.json"]
    return []


def prov(rule_name: str, *wildcards: str) -> str:
    """Where a job's provenance record goes; one per job."""
    suffix = "".join(f"-{w}" for w in wildcards)
    return f"{RESULTS}/provenance/{rule_name}{suffix}.json"


# The package's two halves (workflow/ARCHITECTURE.md); no module name appears in both.
HALVES = ("runtime", "study")
# The modules of groupconv_atlas.study.report, read off its folder. Its __init__ imports every one
# of them, so each job that imports the package lists them all: an edit to any of them reruns every
# report job.
REPORT_PACKAGE_MODULES = tuple(f"report/{p.stem}" for p in
                               sorted(Path(PACKAGE, "study", "report").glob("*.py")))


def code(*modules: str) -> list[str]:
    """Package modules a job imports, listed as inputs so editing one reruns its jobs. A module is
    named inside its half ("kernels", "report/figures"); the package's and the half's __init__
    come with it."""
    files = [f"{PACKAGE}/__init__.py"]
    for m in modules:
        found = [h for h in HALVES if Path(PACKAGE, h, f"{m}.py").is_file()]
        if len(found) != 1:
            raise WorkflowError(f"code({m!r}): {len(found)} modules of that name in "
                                f"{PACKAGE}/{{{','.join(HALVES)}}}/, not one")
        files += [f"{PACKAGE}/{found[0]}/__init__.py", f"{PACKAGE}/{found[0]}/{m}.py"]
    return list(dict.fromkeys(files))


# The kernel registry and the modules it is built from (each kernel's launch geometry): a job
# that imports the registry lists them all.
KERNEL_MODULES = ("kernels", "source_tables", "nchw_tile_kernels", "nchw_row_kernels",
                  "nhwc_strip_kernels")
# What the public conv2d runs (a job that calls it lists these): the op, its launch path, its
# launch tables and its choice for unseen geometries (autotuning verifies and times).
RUNTIME_MODULES = ("conv", *KERNEL_MODULES, "shapes", "gpu", "launch", "files", "unseen", "tuning",
                   "verify", "timing", "build", "conversion", "call_checks", "call_plans",
                   "launch_tables", "cubin_cache", "torch_fallback")


def recorded_jobs(record: str | None = None) -> dict[str, dict[str, list[str]]]:
    """The jobs a record (default: the one replayed) measured, with their roles."""
    return _plan.recorded_jobs(record or RECORD)


JOBS = _plan.configured_jobs(config["timing"]) if MODE == "live" else recorded_jobs()
TIMING_JOBS = list(JOBS)


def job_implementations(job: str) -> list[str]:
    """What a timing job measures: its candidates, then its references (or the A/A twin)."""
    return _plan.implementations(JOBS[job])


def job_roles(job: str) -> dict[str, list[str]]:
    return JOBS[job]


def jobs_of(candidates) -> list[str]:
    """The timing jobs (not the A/A one) that time any of `candidates` as a candidate."""
    return _plan.jobs_of(JOBS, candidates)


def job_timing_torch_tuned() -> str:
    """A timing job that measured tuned PyTorch (the cross-check compares against it)."""
    return next(job for job in JOBS if "torch_tuned" in job_implementations(job))


def job_implementations_param(wildcards) -> list[str]:
    return job_implementations(wildcards.job)


def timing_params() -> dict:
    """The timing settings a job uses (not the job lists, which have their own params)."""
    skip = ("candidates", "reference_groups", "aa_implementation", "dispatch", "processes")
    return {k: v for k, v in config["timing"].items() if k not in skip}


def dispatch_inputs(wildcards) -> dict:
    """The dispatcher's timing job also needs its table and every kernel it may dispatch to."""
    if "dispatch" not in job_implementations(wildcards.job):
        return {}
    return {"dispatch_table": raw("dispatch/table.json"),
            "all_builds": [raw(f"builds/{k}.json") for k in KERNELS],
            "all_tunings": tuning_records(KERNELS)}


def job_kernels(job: str) -> list[str]:
    return _plan.job_kernels(JOBS[job])


def job_verification(wildcards) -> list[str]:
    bases = sorted({_kernels.base_implementation(i) for i in job_implementations(wildcards.job)})
    return [raw(f"verification/{b}.parquet") for b in bases]


def record_shapes() -> list[str]:
    """In replay, the frozen shape set the record measured (compared with the configured one)."""
    return [raw("shapes.json")] if MODE == "replay" else []


def record_check() -> list[str]:
    """In replay every consumer of the record waits for its hashes to be checked."""
    return [f"{RESULTS}/record-check.json"] if MODE == "replay" else []


def kernel_sources(wildcards) -> list[str]:
    return _kernels.KERNELS[wildcards.kernel].inputs


TUNED_KERNELS = [k for k in KERNELS if _kernels.KERNELS[k].variants is not None]


def tuning_records(kernels) -> list[str]:
    """The tuning stage's records of the tuned kernels among `kernels` (raw/tuning/<k>.json);
    older records kept k5's tuning inside its build record, so replay lists only what exists."""
    return [p for k in kernels if k in TUNED_KERNELS
            for p in ([raw(f"tuning/{k}.json")] if MODE == "live"
                      else optional_raw(f"tuning/{k}.json"))]


def tuning_settings() -> dict:
    """What the tuning stage uses: its own seed and sample counts, the verification tolerance
    and the timing protocol's other settings."""
    return {**config["tuning"], "tolerance_factor": config["verification"]["tolerance_factor"],
            "fp64_points": config["verification"]["fp64_points"], "timing": timing_params()}


def verification_builds(wildcards) -> list[str]:
    if wildcards.impl not in _kernels.KERNELS:
        return []
    return [raw(f"builds/{wildcards.impl}.json"), *tuning_records([wildcards.impl])]


def timing_builds(wildcards) -> list[str]:
    return [raw(f"builds/{k}.json") for k in job_kernels(wildcards.job)]


def timing_tunings(wildcards) -> list[str]:
    return tuning_records(job_kernels(wildcards.job))


def all_jobs_provenance() -> list[str]:
    """Provenance of every job this mode runs for the atlas (replay adds the record's own)."""
    jobs = [prov("freeze_shapes"), prov("assemble_atlas")]
    jobs += [prov("compare_job", j) for j in TIMING_JOBS]
    if MODE == "live":
        jobs += [prov("ceilings")] + [prov("crosscheck") for _ in crosscheck_reading()]
        jobs += [prov("dispatch_table")] if jobs_of(["dispatch"]) else []
        jobs += [prov("mobilenet_measure"), prov("mobilenet_stats")]
        jobs += [prov("build_kernel", k) for k in KERNELS]
        jobs += [prov("tune_kernel", k) for k in TUNED_KERNELS]
        jobs += [prov("verify", i) for i in IMPLEMENTATIONS]
        jobs += [prov("time_job", j) for j in TIMING_JOBS]
    else:
        jobs += [prov("check_record")]
        jobs += [prov("mobilenet_stats")] if mobilenet_readings() else []
    return jobs


def gpu_job_provenance() -> list[str]:
    """The provenance of one GPU job of the run (a verification job): it names the GPU."""
    if MODE == "live":
        return [prov("verify", IMPLEMENTATIONS[0])]
    found = sorted(Path(RECORD, "provenance").glob("verify-*.json"))
    return [str(found[0])] if found else []


def record_provenance() -> list[str]:
    """The measuring jobs' provenance, as committed in the record (replay only)."""
    if MODE != "replay":
        return []
    return sorted(str(p) for p in Path(RECORD, "provenance").glob("*.json"))

# ---- helpers for Nsight captures (nsight.smk) ----
from groupconv_atlas.study import nsight as _nsight
from groupconv_atlas.runtime.kernels import KERNELS as _NSIGHT_KERNELS

# Checked here, so an unknown or unsupported pair fails before any job runs.
NSIGHT_PAIRS = _nsight.nsight_pairs(SHAPES, config["nsight"]["shapes"],
                                    config["nsight"]["implementations"],
                                    config["nsight"].get("pairs", []))


# A live run may skip Nsight: replaying "newest", the captures then come
# from the newest record of this device that has them, checked and named like the main record.
NSIGHT_RECORD = RECORD
if MODE == "replay" and config["record"] == "newest" and not any(
        Path(RECORD, "raw", "nsight").glob("*.ncu-rep")):
    try:
        NSIGHT_RECORD = str(find_record("records", "newest", DEVICE, having="raw/nsight/*.ncu-rep"))
        print(f"note: record {Path(RECORD).name} has no Nsight captures; the nsight table replays "
              f"those of {Path(NSIGHT_RECORD).name}", file=sys.stderr)
    except LookupError:
        pass


def nsight_raw(path: str) -> str:
    return raw(path) if MODE == "live" else f"{NSIGHT_RECORD}/raw/{path}"


def nsight_record_check() -> list[str]:
    """The other record's hashes are checked too when the captures come from it."""
    return [f"{RESULTS}/nsight-record-check.json"] if NSIGHT_RECORD != RECORD else []


def _nsight_capture(pair):
    return nsight_raw(f"nsight/{_nsight.capture_stem(*pair)}.ncu-rep")


def _nsight_jobs() -> dict[str, list[str]]:
    jobs = JOBS if NSIGHT_RECORD == RECORD else recorded_jobs(NSIGHT_RECORD)
    return {job: _plan.implementations(roles) for job, roles in jobs.items()}


if MODE == "replay":
    # As for the atlas, a replay shows what its record captured and names what it lacks.
    _absent_captures = [p for p in NSIGHT_PAIRS if not Path(_nsight_capture(p)).is_file()]
    if _absent_captures:
        # One short line: it prints on every Snakemake call (the config's nsight section names
        # every pair; the record's raw/nsight/ holds what was captured).
        print(f"note: record {Path(NSIGHT_RECORD).name} lacks {len(_absent_captures)} of the "
              f"{len(NSIGHT_PAIRS)} configured Nsight captures (first: "
              f"{_absent_captures[0][0]}, {_absent_captures[0][1]}); the nsight table leaves "
              "them out and shows the captures the record holds", file=sys.stderr)
    NSIGHT_PAIRS = [p for p in NSIGHT_PAIRS if p not in _absent_captures]
    # Captures the record holds beyond the configured pairs (a run that layered another nsight
    # section, e.g. config/nsight-nhwc.yaml) join the table too: the replay shows what was
    # captured, checked like every configured pair.
    _recorded = sorted(tuple(c.stem.split("__", 1)) for c in
                       Path(nsight_raw("nsight")).glob("*__*.ncu-rep"))
    NSIGHT_PAIRS += _nsight.nsight_pairs(
        SHAPES, [], [], [p for p in _recorded if p not in NSIGHT_PAIRS])
NSIGHT_CAPTURES = [_nsight_capture(p) for p in NSIGHT_PAIRS]
# The timing records holding each profiled implementation's graph_device samples; one that a
# record lacks leaves that latency null.
NSIGHT_TIMING = {
    impl: [nsight_raw(f"timing/{job}.parquet") for job in _nsight.timing_jobs_for(impl, _nsight_jobs())
           if MODE == "live" or Path(nsight_raw(f"timing/{job}.parquet")).is_file()]
    for impl in dict.fromkeys(impl for _, impl in NSIGHT_PAIRS)
}


def nsight_profile_inputs(wildcards):
    """A custom kernel's capture depends on its cubin and sources; a PyTorch one on neither."""
    inputs = {
        "shapes": f"{RESULTS}/shapes.json",
        "code": [*code("nsight", *KERNEL_MODULES, "shapes", "shapes_table", "gpu", "launch", "verify",
                       "nsight_reports", "provenance", "files", "jobs"), "workflow/scripts/nsight_capture.py"],
    }
    if wildcards.impl in _NSIGHT_KERNELS:
        inputs["cubin"] = raw(f"builds/{wildcards.impl}.cubin")
        inputs["sources"] = _NSIGHT_KERNELS[wildcards.impl].inputs
        if _NSIGHT_KERNELS[wildcards.impl].variants is not None:  # the tuning stage's choice
            inputs["tuning"] = raw(f"tuning/{wildcards.impl}.json")
    return inputs


def nsight_check_seed(wildcards):
    """Verification's seed for this pair, so the capture sees the inputs verification checked."""
    return _nsight.capture_seed(SHAPES, wildcards.shape, wildcards.impl,
                                config["verification"]["seed"])


# ---- helpers for the report (report.smk) ----

# From the runtime's timer and the planner, not the report package: building the DAG imports no
# renderer.
from groupconv_atlas.runtime.timing import BOUNDARIES as _REPORT_BOUNDARIES  # noqa: E402
from groupconv_atlas.study.plan import figure_stem as _figure_stem  # noqa: E402

REPORT = f"{RESULTS}/report"
# Optional stages' tables, made by their own targets (mobilenet_probe, nsight).
MOBILENET_REPORT = f"{RESULTS}/mobilenet/mobilenet.json"
NSIGHT_TABLE = f"{RESULTS}/nsight.parquet"
MACHINE_CODE_TABLE = f"{RESULTS}/machine_code.parquet"


def report_pairs() -> list[tuple[str, str]]:
    """(candidate, baseline) of every timing job this run compares, except the A/A one (in a
    replay, TIMING_JOBS holds only the jobs the record measured)."""
    return _plan.comparison_pairs({job: JOBS[job] for job in TIMING_JOBS})


FOREST_FIGURES = [(cand, base, boundary) for cand, base in report_pairs()
                  for boundary in _REPORT_BOUNDARIES]


def forest_outputs() -> list:
    return [report(f"{REPORT}/forest/{_figure_stem(cand, base, boundary)}.svg",
                   caption="../report/forest.rst", category="Comparisons",
                   subcategory="Per-shape ratios",
                   labels={"candidate": cand, "baseline": base, "boundary": boundary})
            for cand, base, boundary in FOREST_FIGURES]


def stage_ready(table: str, raw_inputs: list[str]) -> bool:
    """An optional stage joins the report when the raw files its table is made from exist: a
    replay rebuilds the table from the record, a live run reports the stage once it has run."""
    if not raw_inputs or not all(Path(f).exists() for f in raw_inputs):
        return False
    return MODE == "replay" or Path(table).exists()


def optional_report_assets(wildcards=None) -> list[str]:
    """Pages of the optional stages whose inputs are there when the DAG is built."""
    assets = []
    if stage_ready(MOBILENET_REPORT, [raw("mobilenet/samples.parquet"), raw("mobilenet/probe.json")]):
        assets += [f"{REPORT}/mobilenet.svg", f"{REPORT}/mobilenet.html"]
    if stage_ready(NSIGHT_TABLE, NSIGHT_CAPTURES):
        assets.append(f"{REPORT}/nsight.html")
    if stage_ready(MACHINE_CODE_TABLE, [raw(f"builds/{k}.cubin") for k in KERNELS]):
        assets.append(f"{REPORT}/machine-code.html")
    if tuned_build_records():
        assets.append(f"{REPORT}/tuning.html")
    return assets


def tuned_build_records(wildcards=None) -> list[str]:
    """The tuning records of the tuned kernels (k5); older records kept the tuning stage's output
    inside the kernel's build record, which then stands in."""
    records = []
    for kernel in TUNED_KERNELS:
        tuning = tuning_records([kernel])
        records += tuning or [raw(f"builds/{kernel}.json")]
    return records


REPORT_ASSETS = [
    f"{REPORT}/atlas-map.html",
    f"{REPORT}/current-evidence.html",
    f"{REPORT}/geomeans.svg",
    f"{REPORT}/roofline.svg",
    f"{REPORT}/aa-calibration.svg",
    f"{REPORT}/boundaries.svg",
    *[f"{REPORT}/forest/{_figure_stem(*f)}.svg" for f in FOREST_FIGURES],
    f"{REPORT}/comparisons-summary.html",
    f"{REPORT}/comparisons-per-shape.html",
    f"{REPORT}/verification.html",
    f"{REPORT}/shapes.html",
    f"{REPORT}/latency.html",
    f"{REPORT}/provenance.html",
    f"{REPORT}/session.html",
    f"{REPORT}/probes.html",  # the probes of the public op (report_probes in report.smk)
    f"{REPORT}/landing-headline.rst",  # the landing page's headline (report_landing)
]


wildcard_constraints:
    kernel="|".join(_kernels.KERNELS),
    impl="|".join(_kernels.IMPLEMENTATIONS),
    job="|".join(re.escape(j) for j in TIMING_JOBS),


def snapshot_optional_stages(wildcards=None) -> list[str]:
    """Nsight captures join a snapshot when this run made them (`snakemake nsight` first): a
    run without `snakemake nsight` leaves them out, and its replay says so."""
    made = any(Path(_nsight_capture(p)).is_file() for p in NSIGHT_PAIRS)
    return [NSIGHT_TABLE] if made else []


def comparison_assets(wildcards=None) -> list[str]:
    """The cross-record page joins `atlas` (and the report) when compare.records names two or
    more committed records: flips between sessions are the atlas's most important caveat."""
    from groupconv_atlas.study.compare_records import compare_inputs

    if not (config.get("compare") or {}).get("with_atlas", True):
        return []
    try:
        compare_inputs((config.get("compare") or {}).get("records"))
    except LookupError:
        return []
    return ["results/comparisons/records.html"]


# ---- helpers for the artifacts, the record checks and the cross-record page ----

def complete_targets(wildcards=None) -> list[str]:
    """Everything `atlas` makes besides this index: its tables, the report's pages and figures,
    the optional stages' pages and the cross-record page. The jobs behind them (tables, SASS,
    Nsight, tuning records) are found from their job records."""
    return [*ATLAS_TABLES, *REPORT_ASSETS, *optional_report_assets(), *comparison_assets()]


def record_check_inputs(record: str) -> dict:
    """Every file of the record (so editing any of them reruns the check), the index that
    vouches for its manifest, and the kernel sources its builds compiled (for the warning)."""
    return {"manifest": f"{record}/record.json", "files": _record_files(record),
            "index": f"records/{_RECORD_INDEX}",
            "sources": _recorded_sources(record, workflow.basedir),
            "code": code("record_check", "provenance", "files", "jobs")}


def report_code() -> list[str]:
    """The report code the page is rendered with: the report package's modules, or the single
    report module of trees from before the package."""
    package = Path(PACKAGE, "study", "report")
    if package.is_dir():
        return sorted(str(p) for p in package.glob("*.py"))
    return [f"{PACKAGE}/report.py"]


def session_agreement_input(wildcards=None) -> list[str]:
    """The side-by-side cells assemble_atlas reads for the headline's session agreement, when
    the atlas includes the cross-record comparison (comparison_assets in common.smk)."""
    return [f"{COMPARISONS}/records.parquet"] if comparison_assets() else []
