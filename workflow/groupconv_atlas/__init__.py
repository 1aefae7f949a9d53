"""GroupConv Atlas: which grouped 3x3 convolution shapes reward a custom CUDA kernel.

Stages, in the order data flows (a module imports only from stages before it):
shapes -> kernels (registry) -> build -> gpu (runtime) -> verify -> timing -> stats -> artifacts
-> records. Modules that need a GPU (gpu, parts of build/verify/timing) import PyCUDA and torch
lazily, so everything else imports on a machine without one.
"""

__version__ = "0.1.0"

# The public entry point lives in .conv, which imports torch; these names load it on first use,
# so the CPU stages import the package without torch.
_PUBLIC = ("conv2d", "GroupConv2d", "UnsupportedConv", "implementations", "support", "configure",
           "convert")


def __getattr__(name):
    if name == "convert":
        from .runtime.conversion import convert

        return convert
    if name in _PUBLIC:
        from .runtime import conv

        return getattr(conv, name)
    raise AttributeError(f"module 'groupconv_atlas' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])
