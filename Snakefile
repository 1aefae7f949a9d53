# GroupConv Atlas: which grouped 3x3 convolution shapes reward a custom CUDA kernel, and under
# which clock. Stages, in the order data flows: shapes -> builds -> verification -> timing ->
# statistics -> artifacts -> report. README.md says how to run it.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "reports/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/shapes.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/tuning.smk"
include: "workflow/rules/verify.smk"
include: "workflow/rules/ceilings.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/statistics.smk"
include: "workflow/rules/artifacts.smk"
include: "workflow/rules/nsight.smk"
include: "workflow/rules/mobilenet.smk"
include: "workflow/rules/overhead.smk"
include: "workflow/rules/networks.smk"
include: "workflow/rules/epilogue.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/records.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/live.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/bench.smk"


rule atlas:
    """Verify, time and classify every shape (live on a GPU, else replay the newest record), and
    render what `snakemake --report` shows."""
    default_target: True
    input:
        PLAN.atlas.artifacts,
        PLAN.atlas.report_assets,
        PLAN.atlas.optional_report_assets,
        PLAN.atlas.comparison_assets,


rule backward_passes:
    """The backward passes alone (`passes` in the configuration): their verification, timing,
    statistics, tables and (live) dispatch table, without the forward's jobs; `atlas` makes them
    too, with their page. A replay of a record without them has nothing to do."""
    input:
        PLAN.passes.artifacts(),
        PLAN.passes.backward_dispatch(),
