"""Snakemake job (after a run): what a one-line kernel edit reruns, found in a scratch copy of
the tree, and live how long that rerun takes (groupconv_atlas.study.live.rerun_check); the checkout
is only read."""
from pathlib import Path

from groupconv_atlas.study.records.provenance import write_json
from groupconv_atlas.study.live.rerun_check import check

smk = snakemake  # noqa: F821
report = check(Path.cwd(), smk.params.edited, list(smk.params.targets), list(smk.params.args),
               live=smk.params.live, log=smk.log[0])
write_json(smk.output.report, report)
