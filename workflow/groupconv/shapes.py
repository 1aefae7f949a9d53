"""A convolution shape and the quantities derived from it (the frozen set's loading and
validation are the study's, in study/plans/shapes_table.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

KERNEL_SIZE, STRIDE, PADDING, DILATION = 3, 1, 1, 1
BYTES_PER_FLOAT = 4


@dataclass(frozen=True)
class Shape:
    id: str
    source: str
    n: int
    c_in: int
    c_out: int
    h: int
    w: int
    groups: int

    @property
    def cin_per_group(self) -> int:
        return self.c_in // self.groups

    @property
    def cout_per_group(self) -> int:
        return self.c_out // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.c_in

    @property
    def h_out(self) -> int:
        return (self.h + 2 * PADDING - DILATION * (KERNEL_SIZE - 1) - 1) // STRIDE + 1

    @property
    def w_out(self) -> int:
        return (self.w + 2 * PADDING - DILATION * (KERNEL_SIZE - 1) - 1) // STRIDE + 1

    @property
    def accumulation_length(self) -> int:
        """Products summed into one output: 9 * C_in/groups."""
        return KERNEL_SIZE * KERNEL_SIZE * self.cin_per_group

    @property
    def input_elems(self) -> int:
        return self.n * self.c_in * self.h * self.w

    @property
    def output_elems(self) -> int:
        return self.n * self.c_out * self.h_out * self.w_out

    @property
    def weight_elems(self) -> int:
        return self.c_out * self.cin_per_group * KERNEL_SIZE * KERNEL_SIZE

    @property
    def min_bytes(self) -> int:
        """Fewest bytes any implementation must move: input, weights and output once each."""
        return BYTES_PER_FLOAT * (self.input_elems + self.weight_elems + self.output_elems)

    @property
    def flops(self) -> int:
        """One multiply and one add per product."""
        return 2 * self.output_elems * self.accumulation_length

    @property
    def geometry(self) -> tuple[int, int, int, int, int, int]:
        """(N, C_in, C_out, H, W, groups): what a launch depends on; ids are only names."""
        return (self.n, self.c_in, self.c_out, self.h, self.w, self.groups)

    def to_dict(self) -> dict:
        return asdict(self)


def geometry_shape(n: int, c_in: int, c_out: int, h: int, w: int, groups: int,
                   source: str = "runtime call") -> Shape:
    """A Shape for a geometry met at run time (not one of the frozen set); its id says so."""
    return Shape(f"runtime-n{n}-ci{c_in}-co{c_out}-{h}x{w}-g{groups}", source, n, c_in, c_out,
                 h, w, groups)
