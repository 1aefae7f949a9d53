"""GroupConv Atlas: which grouped 3x3 convolution shapes reward a custom CUDA kernel.

Two halves (workflow/ARCHITECTURE.md draws them, with who may import whom):
- runtime/: the PyTorch op a user imports: the kernel registry, builds and the cubin cache, the
  launch plan and launcher, the dispatcher, conv2d/GroupConv2d/convert, autotuning and the
  primitives it measures with (verify, tuning, timing), the files it reads. It imports nothing
  of the study.
- study/: the stages that measure the runtime, in the order data flows: shapes -> builds ->
  tuning -> verification -> timing -> statistics -> artifacts -> report; records and provenance
  run through it (a live run snapshots its raw layer into a record, a replay reads one, checked,
  in place of the GPU stages), and the probes join at artifacts and report.
Modules that need a GPU import PyCUDA and torch lazily, so everything else imports on a machine
without one; this module loads the runtime only when one of the names below is first used.
"""

__version__ = "0.1.0"

# The public entry point lives in .conv, which imports torch; these names load it on first use,
# so the CPU stages import the package without torch.
_PUBLIC = ("conv2d", "GroupConv2d", "UnsupportedConv", "implementations", "support", "configure",
           "convert", "table_source", "describe_choice")


def __getattr__(name):
    if name in ("table_source", "describe_choice"):  # where a choice comes from: no torch, no GPU
        from .runtime import choice_source

        return getattr(choice_source, name)
    if name == "convert":
        from .runtime.conversion import convert

        return convert
    if name == "GroupConv2d":
        from .runtime.layers import GroupConv2d

        return GroupConv2d
    if name in _PUBLIC:
        from .runtime import conv

        return getattr(conv, name)
    raise AttributeError(f"module 'groupconv_atlas' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])
