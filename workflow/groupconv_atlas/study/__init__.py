"""The study that measures the op: the shape set, the stages' tables, statistics, artifacts,
the headline and evidence, records and provenance, the report (report/) and the probes
(mobilenet/, networks, overhead, crosscheck, ceilings, nsight, sass). It uses the op
(groupconv, a distribution of its own); nothing in the op imports the study."""
