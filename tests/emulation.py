"""What the k6 and k7 emulations share (tests/test_k6_compile.py, tests/test_k7_compile.py): a
convolution's geometry, the markers of what a shared-memory word holds, the frozen shapes the
emulations run on, and a kernel source's ptxas report."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml
from groupconv.shapes import Shape, geometry_shape

REPO = Path(__file__).resolve().parents[1]
# What a shared-memory word holds when it holds no element of x: a zero-filled or masked word, or
# a word no copy wrote.
ZERO = -1
UNSTAGED = -2


@dataclass(frozen=True)
class Geometry:
    n: int
    c_in: int
    c_out: int
    h: int
    w: int
    groups: int

    @property
    def mult(self) -> int:
        return self.c_out // self.groups

    @property
    def tall_rows(self) -> int:
        return self.n * self.c_in * self.h

    @property
    def shape(self) -> Shape:
        """The host's Shape of this geometry, for its sizing functions."""
        return geometry_shape(self.n, self.c_in, self.c_out, self.h, self.w, self.groups)


def frozen_geometries(keep: Callable[[Geometry], bool]) -> dict[str, Geometry]:
    """The frozen shapes' geometries (config/shapes.yaml) that `keep` accepts, by shape id."""
    doc = yaml.safe_load((REPO / "config" / "shapes.yaml").read_text())
    out = {}
    for s in doc["shapes"]:
        g = Geometry(s["n"], s["c_in"], s["c_out"], s["h"], s["w"], s["groups"])
        if keep(g):
            out[s["id"]] = g
    return out


def ptxas_report(source: Path, cubin: Path) -> tuple[str, list[tuple[str, ...]], dict[str, str]]:
    """nvcc's report on compiling `source` for sm_90: the whole text, (entry, stack frame, spill
    stores, spill loads) per entry, and each entry's shared memory in bytes."""
    res = subprocess.run(["nvcc", "-cubin", "-O3", "-arch=sm_90", "--resource-usage",
                          "-I", str(REPO / "kernels"), str(source), "-o", str(cubin)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    report = res.stdout + res.stderr
    entries = re.findall(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, "
                         r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    smem = dict(re.findall(r"Compiling entry function '(\S+)'.*?(\d+) bytes smem", report, re.S))
    return report, entries, smem
