"""Stand-ins for the GPU side of a launch, for tests of the call plan on a machine without a GPU:
a launch plan that records its launches instead of calling the driver, a stage's session with a
known stream handle, and the patches that let a plan be made on CPU tensors."""
from __future__ import annotations

import contextlib

import torch

STAGE_STREAM = 0xCAFE  # a stage session's stream handle
CALLER_STREAM = 0xBEEF  # the caller's current stream, as the op reads it


class RecordingPlan:
    """A LaunchPlan's face: what the call plan reads (entry, grid, block) and launch3, which
    appends (stream, x, w, y) to `calls`."""

    grid, block = (1, 1, 1), (128, 1, 1)

    def __init__(self, calls: list, entry: str = "recorded"):
        self.calls, self.entry = calls, entry

    def launch3(self, stream, x, w, y):
        self.calls.append((stream, x, w, y))


class StageSession:
    """What the launcher asks of a stage's session: torch, the SM count and the stream."""

    torch = torch
    sm_count = 132

    class stream:  # noqa: N801 - the attribute a session has
        handle = STAGE_STREAM


def plan_on_cpu(monkeypatch, call_plan) -> None:
    """Let call_plan make plans for CPU tensors: no CUDA device to make current, the device
    index a CPU tensor has, and CALLER_STREAM as the caller's current stream."""
    monkeypatch.setattr(call_plan.torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(call_plan, "_current_device", lambda: None)
    monkeypatch.setattr(call_plan, "_raw_stream", lambda index: CALLER_STREAM)
