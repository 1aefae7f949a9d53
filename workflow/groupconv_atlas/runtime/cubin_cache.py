"""The op's cubin cache: every kernel compiled with nvcc on first use into GROUPCONV_CACHE
(default ~/.cache/groupconv_atlas), keyed by the GPU's architecture and the kernel sources' hash;
the autotuning cache lives in the same folder."""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from .kernels import KERNELS, KERNELS_DIR

LOG = logging.getLogger("groupconv_atlas")


def cache_root() -> Path:
    return Path(os.environ.get("GROUPCONV_CACHE", Path.home() / ".cache" / "groupconv_atlas"))


def cache_dir(arch: str) -> Path:
    base = cache_root()
    digest = hashlib.sha256()
    for path in sorted(KERNELS_DIR.glob("*.cu*")):
        digest.update(path.name.encode() + path.read_bytes())
    return base / arch / digest.hexdigest()[:16]


def built_cubins(arch: str) -> dict[str, str]:
    """Every kernel compiled for `arch`, from the cache or now (nvcc)."""
    from .build import compile_kernel

    folder = cache_dir(arch)
    cubins = {}
    for kernel in KERNELS:
        path = folder / f"{kernel}.cubin"
        if not path.is_file():
            LOG.info("compiling %s for %s into %s", kernel, arch, folder)
            compile_kernel(kernel, path, arch=arch)
        cubins[kernel] = str(path)
    return cubins
