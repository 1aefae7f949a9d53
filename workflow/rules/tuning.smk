# Stage 2b (live only): the tuning stage of a tuned kernel (k5), after its build and before its
# verification: per frozen shape every launch variant is verified as the verification stage
# verifies a launch, the correct ones are timed with the atlas's graph_device sampler, and the
# fastest is that geometry's launch (raw/tuning/<kernel>.json, read by every later stage).

if PLAN.measures_on_gpu:

    rule tune_kernel:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            build=f"{PLAN.results}/raw/builds/{{kernel}}.json",
            cubin=f"{PLAN.results}/raw/builds/{{kernel}}.cubin",
            ceilings=f"{PLAN.results}/raw/ceilings.json",  # each shape's one launch count
            code=code("measuring/floors", "launcher", "sessions", "records/jobs",
                      "records/provenance", "plans/shapes_table", "timing", "tuning"),
        output:
            record=f"{PLAN.results}/raw/tuning/{{kernel}}.json",
            prov=PLAN.prov("tune_kernel", "{kernel}"),
        params:
            tuning=PLAN.tuning_settings(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/tune_kernel-{{kernel}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/tune_kernel.py"

    # The weight gradient's tuning stage (live, a run that measures that pass), before the pass is
    # verified and timed: per frozen shape every cut of its plan verified and the correct ones
    # timed by the atlas's sampler; the fastest is that geometry's cut
    # (raw/passes/tuning/wg_<layout>.json, read by the pass's jobs and exported with the
    # backward table).
    rule tune_wgrad:
        input:
            shapes=f"{PLAN.results}/shapes.json",
            ceilings=f"{PLAN.results}/raw/ceilings.json",  # each shape's one launch count
            code=PLAN.passes.code("measuring/floors", "records/jobs", "records/provenance",
                                  "plans/shapes_table", "timing", "tuning",
                                  "measuring/wgrad_tuning"),
        output:
            record=PLAN.passes.wgrad_tuning("{layout}"),
            prov=PLAN.prov("tune_wgrad", "{layout}"),
        wildcard_constraints:
            layout="nchw|nhwc",
        params:
            tuning=PLAN.tuning_settings(),
        threads: PLAN.measure_threads
        resources:
            gpu=1,
        log:
            f"{PLAN.results}/logs/tune_wgrad-{{layout}}.log",
        conda:
            "../../envs/gpu.yaml"
        script:
            "../scripts/tune_wgrad.py"
