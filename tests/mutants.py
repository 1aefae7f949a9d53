"""Planted faults: each mutant is the real kernel source with one textual change, so mutants
follow the kernels as they evolve. Verification must mark every one of them incorrect."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from groupconv_atlas.kernels import KERNELS
from groupconv_atlas.provenance import REPO_ROOT


@dataclass(frozen=True)
class Mutant:
    name: str
    kernel: str
    find: str
    replace: str
    shapes: tuple[str, ...]  # atlas shape ids on which the fault must show

    def source(self) -> str:
        text = (REPO_ROOT / KERNELS[self.kernel].source).read_text()
        count = text.count(self.find)
        if count != 1:
            raise AssertionError(f"mutant {self.name}: pattern found {count} times in "
                                 f"{KERNELS[self.kernel].source}; update the mutant")
        return text.replace(self.find, self.replace)

    def write(self, folder: Path) -> Path:
        path = folder / f"{self.name}.cu"
        path.write_text(self.source())
        return path


MUTANTS = (
    Mutant("k2_wrong_halo_offset", "k2", "const int h0 = tile_h * K2_TILE_H - 1;",
           "const int h0 = tile_h * K2_TILE_H;", ("mobilenetv2-n1-c144-56x56-g144",)),
    Mutant("k1_missing_boundary_check", "k1",
           "                if (w_i < 0 || w_i >= W) continue;\n", "",
           ("mobilenetv2-n1-c144-56x56-g144",)),
    Mutant("k2_missing_syncthreads", "k2", "    __syncthreads();\n", "",
           ("mobilenetv2-n32-c144-56x56-g144", "resnext50-32x4d-n32-c128-56x56-g32",
            "stress-bighw-n2-c32-512x512-g32")),
    Mutant("k0_wrong_weight_index", "k0", "w_k[kh * 3 + kw]", "w_k[kw * 3 + kh]",
           ("resnext50-32x4d-n1-c128-56x56-g32",)),
    Mutant("k3_unwritten_tail", "k3", "if (w_first + o < W) out[w_first + o] = acc[o];",
           "if (w_first + 3 < W) out[w_first + o] = acc[o];", ("stress-oddw-n32-c64-33x33-g64",)),
)
