"""The backward passes on the GPU (study/measuring/pass_verify, study/measuring/pass_runs through
the timing workers): every implementation of groupconv/backward.py and PyTorch's references verified
against FP64 on two shapes in both layouts, a planted wrong result caught, and a pass's timing job
sampled by the forward's worker loop at both boundaries."""
import numpy as np
import pytest

from groupconv.shapes import Shape

pytestmark = pytest.mark.gpu

SHAPES = [Shape("depthwise", "", 2, 32, 32, 14, 14, 32),
          Shape("grouped-oddw", "", 2, 64, 64, 9, 13, 16)]
PASSES = ("input_grad", "weight_grad")


@pytest.mark.parametrize("pass_", PASSES)
def test_every_implementation_of_a_pass_is_verified_or_says_why(gpu_session, pass_):
    from groupconv_atlas.study.measuring.pass_runs import (STRICT_REFERENCES, backward_module,
                                                           pass_runtime)
    from groupconv_atlas.study.measuring.pass_verify import verify_pass

    # the pass's own runtime, as its verification job builds it
    rows = verify_pass(gpu_session, pass_, SHAPES, 123, 16.0, progress=lambda _: None,
                       runtime=pass_runtime(gpu_session, pass_))
    customs = backward_module().backward_implementations(pass_)
    assert {r["implementation"] for r in rows} == {*customs, *STRICT_REFERENCES}
    assert len(rows) == len(SHAPES) * (len(customs) + len(STRICT_REFERENCES))
    for row in rows:
        assert row["status"] in ("correct", "unsupported"), row
        assert row["reason"], row
        if row["status"] == "correct":
            assert row["error_to_tolerance_fp64"] <= 1
    assert all(r["status"] == "correct" for r in rows if r["implementation"] in STRICT_REFERENCES)
    assert len({r["seed"] for r in rows}) == len(rows)  # fresh inputs per check


@pytest.mark.parametrize("pass_", PASSES)
def test_a_wrong_result_is_caught(gpu_session, pass_, monkeypatch):
    import types

    from groupconv_atlas.study.measuring import pass_runs, pass_verify

    real = pass_runs.backward_module()
    custom = real.backward_implementations(pass_)[0]

    def shifted(fn):
        def call(grad_y, other, groups, impl, runtime=None):
            out = fn(grad_y, other, groups, impl, runtime)
            return out + 1e-2 * out.abs().max()  # an error far above the bound
        return call

    fake = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real)
                                    if not k.startswith("__")})
    setattr(fake, pass_, shifted(getattr(real, pass_)))
    monkeypatch.setattr(pass_verify, "backward_module", lambda: fake)
    rows = pass_verify.verify_pass(gpu_session, pass_, SHAPES[:1], 7, 16.0,
                                   progress=lambda _: None)
    (row,) = [r for r in rows if r["implementation"] == custom]
    assert row["status"] == "incorrect" and "FP64" in row["reason"], row


def test_a_pass_job_samples_both_boundaries_in_its_processes():
    from groupconv.launcher import launcher_inputs
    from groupconv.timing import TimingConfig
    from groupconv_atlas.study.measuring.pass_runs import backward_module
    from groupconv_atlas.study.measuring.timing_workers import time_job

    cfg = TimingConfig(batches=2, samples_per_batch=3, seed=1, warmup_launches=2,
                       graph_min_replay_us=20.0, graph_max_replay_us=1e4, graph_max_launches=50,
                       l2_policy="warm", clock_flag_fraction=0.9)
    backward = backward_module()
    customs = list(backward.backward_implementations("input_grad"))
    refs = ["torch_tuned", "torch_tuned_nhwc"]
    impls_for = {s.id: [*(c for c in customs if backward.backward_support("input_grad", c, s)[0]),
                        *refs] for s in SHAPES}
    samples, info = time_job(SHAPES, impls_for, cfg, 2, launcher_inputs(),
                             progress=lambda _: None, pass_="input_grad")
    assert set(samples["implementation"]) == {i for impls in impls_for.values() for i in impls}
    assert set(samples["implementation"]) - set(refs), "no custom implementation was timed"
    assert set(samples["boundary"]) == {"graph_device", "sync_api"}
    assert set(samples["process"]) == {0, 1}
    assert np.isfinite(samples["latency_us"]).all() and (samples["latency_us"] > 0).all()
    # cuDNN's kernels are named per process for the tuned references, as in the forward's jobs
    assert "torch_tuned" in info["shapes"][0]["reference_kernels"]
