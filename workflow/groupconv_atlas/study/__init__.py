"""The study that measures the op, its modules in rooms by the stage they serve, in the order data
flows: shapes and plans (plans/), measuring jobs (measuring/), statistics (statistics/), artifacts
(artifacts/), records and provenance (records/), the probes (probes/), the report (report/) and
the live run (live/). It uses the op (groupconv, a distribution of its own); nothing in the op
imports the study."""
