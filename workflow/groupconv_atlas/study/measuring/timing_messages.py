"""The messages between a timing job's coordinator and its worker processes
(study/measuring/timing_workers), one frozen dataclass per kind, each with its `kind` and named
fields.

They cross a multiprocessing.connection socket, which pickles them; pickle names a class by its
module, so they live here and not in timing_workers, which a worker runs as `__main__` (a class
defined there would reach the coordinator as `__main__.Ready`, a name it cannot resolve).

Coordinator -> worker: Settings once, then per shape PrepareShape, TimeBatch for each of the
worker's batches and Release; Stop ends the worker.
Worker -> coordinator: Started once, Ready for PrepareShape, Rows for TimeBatch, Released for
Release; Failed, with its traceback, in place of whichever answer was due.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from groupconv.shapes import Shape


@dataclass(frozen=True)
class Settings:
    """The job's settings, the worker's first message: TimingConfig as a dict (the worker
    rebuilds it), the launcher's arguments, the floor's cubin (None without floors), the timed
    pass and the weight gradient's tuning records."""
    kind: ClassVar[str] = "settings"
    timing: dict
    launcher_args: dict
    floor_cubin: str | None
    pass_: str
    wgrad_tunings: list[str]


@dataclass(frozen=True)
class Started:
    """The worker is up: what its GPU and software are, read once in its own process."""
    kind: ClassVar[str] = "started"
    max_sm_clock_mhz: float | None
    l2_bytes: int | None
    precision: dict
    environment: dict


@dataclass(frozen=True)
class PrepareShape:
    """Bind, warm up and prepare the sampler for a shape; `index` seeds its inputs, `launches`
    fixes its launches per graph replay (None: the sampler chooses)."""
    kind: ClassVar[str] = "shape"
    index: int
    shape: Shape
    impls: list[str]
    launches: int | None


@dataclass(frozen=True)
class Ready:
    """The shape is prepared: its launches per replay, the sampler's estimates and each
    implementation's details (launch, dispatch, cuDNN's kernels in this process)."""
    kind: ClassVar[str] = "ready"
    launches: int
    estimates: dict[str, float]
    details: dict[str, dict]


@dataclass(frozen=True)
class TimeBatch:
    """Sample one batch in the coordinator's seeded order."""
    kind: ClassVar[str] = "batch"
    batch: int
    order: list[str]


@dataclass(frozen=True)
class Rows:
    """A batch's samples, as the sampler's rows."""
    kind: ClassVar[str] = "rows"
    rows: list[tuple]


@dataclass(frozen=True)
class Release:
    """Free the shape's sampler and tensors."""
    kind: ClassVar[str] = "release"


@dataclass(frozen=True)
class Released:
    kind: ClassVar[str] = "released"


@dataclass(frozen=True)
class Stop:
    kind: ClassVar[str] = "stop"


@dataclass(frozen=True)
class Failed:
    """The worker raised; the coordinator re-raises with this traceback."""
    kind: ClassVar[str] = "error"
    traceback: str


MESSAGES = (Settings, Started, PrepareShape, Ready, TimeBatch, Rows, Release, Released, Stop,
            Failed)


def kind_of(message) -> str:
    """A message's kind; anything else (a stray object on the connection) by its type's name."""
    return message.kind if isinstance(message, MESSAGES) else type(message).__name__
