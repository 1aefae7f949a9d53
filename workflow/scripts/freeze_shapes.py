"""Snakemake job: validate and freeze the shape set with every implementation's support verdict."""
from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.plans.shapes_table import frozen_shapes, load_shapes
from groupconv_atlas.study.records.provenance import write_json, write_parquet

job = Job(snakemake, "freeze_shapes.py")  # noqa: F821
shapes = load_shapes(snakemake.input.shapes)  # noqa: F821
table, document = frozen_shapes(shapes, snakemake.params.implementations)  # noqa: F821
write_parquet(snakemake.output.parquet, table)  # noqa: F821
write_json(snakemake.output.json, document)  # noqa: F821
job.progress(f"froze {len(shapes)} shapes, sha256 {document['sha256']}")
job.finish({"shape_set_sha256": document["sha256"]})
