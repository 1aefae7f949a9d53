"""Artifacts: atlas.json and its parts (atlas_document), the headline and its sentences, the
current evidence, the probes' summaries, records compared side by side and their agreement, each
GPU's map (compare_records, agreement_lines, device_comparison), and the op's launch tables
exported from a record (table_export). The report renders them."""
