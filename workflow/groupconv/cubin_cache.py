"""The op's cubin cache: every kernel compiled with nvcc on first use into GROUPCONV_CACHE
(default ~/.cache/groupconv), keyed by the GPU's architecture and the kernel sources' hash;
the autotuning cache lives in the same folder."""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from .kernels import BACKWARD_KERNELS, KERNELS, KERNELS_DIR

LOG = logging.getLogger("groupconv")


def cache_root() -> Path:
    return Path(os.environ.get("GROUPCONV_CACHE", Path.home() / ".cache" / "groupconv"))


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


def built_backward_cubins(arch: str) -> dict[str, str]:
    """The weight-gradient kernels (kernels.BACKWARD_KERNELS) compiled for `arch`, from
    the cache or now; a stale table header or a missing entry is refused, as for KERNELS."""
    from .build import BuildError, compile_kernel_source

    folder = cache_dir(arch)
    cubins = {}
    for name, spec in BACKWARD_KERNELS.items():
        path = folder / f"{name}.cubin"
        if not path.is_file():
            if stale := spec.table.stale(spec.table_origin, KERNELS_DIR):
                raise BuildError(f"{name}: {stale}")
            LOG.info("compiling %s for %s into %s", name, arch, folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            # written beside, then renamed: a concurrent reader never sees half a cubin
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            record = compile_kernel_source(KERNELS_DIR / Path(spec.source).name, tmp, arch)
            missing = set(spec.entry_names()) - set(record["functions"])
            if missing:
                tmp.unlink()
                raise BuildError(f"{name}: cubin lacks entry point(s) {', '.join(sorted(missing))}")
            os.replace(tmp, path)
        cubins[name] = str(path)
    return cubins
