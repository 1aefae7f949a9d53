"""Which convolutions of a model can take a custom kernel, and the walker that swaps them: the
runtime's own (groupconv.conversion), and the probe's chooser of one named kernel."""
from __future__ import annotations

from typing import Callable

from groupconv.conversion import (conv_input_shapes, conv_skip_reason, fusable_chains,  # noqa: F401
                                  substitute_convs)
from groupconv.kernels import KERNELS
from groupconv.shapes import Shape


def named_kernel(kernel: str) -> Callable[[Shape], tuple[str | None, str]]:
    """A chooser that always answers `kernel`, or declines where its support predicate does."""
    spec = KERNELS[kernel]

    def choose(shape: Shape) -> tuple[str | None, str]:
        ok, why = spec.supports(shape)
        if ok:
            return kernel, f"named kernel {kernel}"
        return None, f"named kernel {kernel} does not support this shape: {why}"

    return choose
