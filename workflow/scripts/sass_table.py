"""Snakemake job: every built kernel's SASS, its opcode counts per function and ptxas resources,
into results/<device>/machine_code.parquet (the SASS text kept beside it)."""
import json
from pathlib import Path

from groupconv_atlas.study.records.jobs import Job
from groupconv_atlas.study.records.provenance import write_parquet, write_text
from groupconv_atlas.study.probes.sass import (
          check_record_matches,
          cuobjdump_version,
          dump_sass,
          find_cuobjdump,
          kernel_table,
          machine_code_table,
      )

job = Job(snakemake, "sass_table.py")  # noqa: F821
smk = snakemake  # noqa: F821
cuobjdump = find_cuobjdump()
tables, texts = [], []
for kernel, cubin, record_path in zip(smk.params.kernels, smk.input.cubins, smk.input.records):
    record = json.loads(Path(record_path).read_text())
    check_record_matches(kernel, cubin, record)
    texts.append(dump_sass(cubin, cuobjdump))
    tables.append(kernel_table(kernel, texts[-1], record))
table = machine_code_table(tables)  # every kernel parsed before anything is written
for path, text in zip(smk.output.sass, texts):
    write_text(path, text)
write_parquet(smk.output.table, table)
job.progress(f"{table['function'].nunique()} functions, {len(table)} mnemonic rows")
job.finish({"cuobjdump": cuobjdump, "cuobjdump_version": cuobjdump_version(cuobjdump)})
