"""The timing workers' messages (study/measuring/timing_messages): every kind crosses a
multiprocessing.connection (the pickling the coordinator's socket uses) as the same named message;
the coordinator's `_expect` returns the message it waited for and refuses any other kind, naming
both; and a worker started as the coordinator starts it (`python -m`, so its module is
`__main__`) reads the job's settings and answers with a message the coordinator resolves."""
from multiprocessing import Pipe

import pytest

from groupconv.shapes import Shape
from groupconv.timing import TimingConfig
from groupconv_atlas.study.measuring import timing_messages as messages
from groupconv_atlas.study.measuring.timing_workers import WorkerError, _expect, time_job

SHAPE = Shape("depthwise", "", 2, 32, 32, 14, 14, 32)
CFG = TimingConfig(batches=2, samples_per_batch=3, seed=1, warmup_launches=2,
                   graph_min_replay_us=20.0, graph_max_replay_us=1e4, graph_max_launches=50,
                   l2_policy="warm", clock_flag_fraction=0.9)

# One of each kind, with fields as a job fills them.
EXAMPLES = [
    messages.Settings(timing={"seed": 1, "l2_policy": "cold"}, launcher_args={"builds": {}},
                      floor_cubin=None, pass_="forward", wgrad_tunings=["tuning/k0.json"]),
    messages.Started(max_sm_clock_mhz=1980.0, l2_bytes=52428800,
                     precision={"api": "per call", "tf32": False},
                     environment={"gpu_uuid": "GPU-0", "torch": "2.4.0"}),
    messages.PrepareShape(index=3, shape=SHAPE, impls=["k0", "torch_tuned"], launches=None),
    messages.Ready(launches=7, estimates={"k0": 12.5, "torch_tuned": 20.25},
                   details={"torch_tuned": {"cudnn_benchmark": True, "kernels": ["a", "b"]}}),
    messages.TimeBatch(batch=1, order=["torch_tuned", "k0"]),
    messages.Rows(rows=[("k0", "graph_device", 1, 0, 12.5, 1980.0, 51.0, 7, 1)]),
    messages.Release(),
    messages.Released(),
    messages.Stop(),
    messages.Failed(traceback="Traceback (most recent call last):\n..."),
]


def test_every_kind_has_an_example_and_a_kind_of_its_own():
    assert [type(m) for m in EXAMPLES] == list(messages.MESSAGES)
    kinds = [m.kind for m in messages.MESSAGES]
    assert len(set(kinds)) == len(kinds), kinds


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.kind)
def test_a_message_crosses_the_connection_as_the_same_named_message(message):
    sender, receiver = Pipe()
    sender.send(message)
    got = receiver.recv()
    assert type(got) is type(message) and got == message
    assert got.kind == message.kind
    with pytest.raises(AttributeError):  # frozen: a message read is the message sent
        got.kind_of_mine = 1


def test_expect_returns_the_message_it_waits_for():
    sender, receiver = Pipe()
    sender.send(EXAMPLES[3])
    ready = _expect(receiver, messages.Ready, 0)
    assert ready.details["torch_tuned"]["kernels"] == ["a", "b"] and ready.launches == 7


@pytest.mark.parametrize("sent, named", [(messages.Rows(rows=[]), "'rows'"),
                                         (("ready", 1, {}, {}), "'tuple'")])
def test_expect_refuses_another_kind_naming_both(sent, named):
    sender, receiver = Pipe()
    sender.send(sent)
    with pytest.raises(WorkerError) as caught:
        _expect(receiver, messages.Ready, 2)
    assert str(caught.value) == f"timing worker 2: expected 'ready', got {named}"


def test_expect_raises_a_worker_s_failure_with_its_traceback():
    sender, receiver = Pipe()
    sender.send(messages.Failed(traceback="Traceback: boom"))
    with pytest.raises(WorkerError, match="timing worker 1 failed:\nTraceback: boom"):
        _expect(receiver, messages.Started, 1)


def test_a_started_worker_reads_its_settings_and_its_failure_reaches_the_coordinator():
    # Launcher arguments no launcher takes: the worker fails before timing anything, here at
    # its GPU session (no GPU) or on a GPU machine at the launcher, and sends Failed.
    with pytest.raises(WorkerError) as caught:
        time_job([SHAPE], {SHAPE.id: ["torch_tuned"]}, CFG, 1, {"no_such_argument": 1},
                 progress=lambda _: None)
    text = str(caught.value)
    assert text.startswith("timing worker 0 failed:\nTraceback (most recent call last):"), text
    assert "in _worker" in text, text  # raised inside the worker's loop, past its settings
