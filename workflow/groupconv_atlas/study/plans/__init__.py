"""Shapes and plans: the frozen shape set (shapes_table), the configuration's checks
(config_check), the jobs a configuration asks for (plan) and the run's whole plan, decided before
any job runs (run_plan, with its parts for the atlas, the probes, the backward passes, the bench
and Nsight), and the package files each rule lists as its code inputs (code_inputs)."""
