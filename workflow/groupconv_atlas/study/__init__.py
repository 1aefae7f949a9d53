"""The study that measures the runtime: the shape set, the stages' tables, statistics, artifacts,
the headline and evidence, records and provenance, the report (report/) and the probes
(mobilenet/, networks, overhead, crosscheck, ceilings, nsight, sass). It uses the runtime
(groupconv_atlas.runtime); nothing in the runtime imports the study."""
