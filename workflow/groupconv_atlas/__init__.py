"""GroupConv Atlas: which grouped 3x3 convolution shapes reward a custom CUDA kernel.

Two packages (workflow/ARCHITECTURE.md draws them, with who may import whom):
- groupconv (workflow/groupconv/, a distribution of its own): the PyTorch op a user imports: the
  kernel registry, builds and the cubin cache, the launch plan and launcher,
  conv2d/GroupConv2d/convert, autotuning and the primitives it measures with (verify, tuning,
  timing), the files it reads. It imports nothing of this package.
- groupconv_atlas.study: the stages that measure the op, in the order data flows: shapes -> builds ->
  tuning -> verification -> timing -> statistics -> artifacts -> report; records and provenance
  run through it (a live run snapshots its raw layer into a record, a replay reads one, checked,
  in place of the GPU stages), and the probes join at artifacts and report.
Modules that need a GPU import PyCUDA and torch lazily, so everything else imports on a machine
without one; this module loads the op only when one of its names is first used.
"""

__version__ = "0.1.0"


# The op's public names, served by the op's own package (the same objects: groupconv_atlas.conv2d
# is groupconv.conv2d), so the study's users keep one spelling and the op keeps one definition.
def __getattr__(name):
    import groupconv

    if name in groupconv.PUBLIC:
        return getattr(groupconv, name)
    raise AttributeError(f"module 'groupconv_atlas' has no attribute {name!r}")


def __dir__():
    import groupconv

    return sorted([*globals(), *groupconv.PUBLIC])
