"""groupconv: the grouped 3x3 convolution op a PyTorch user imports (conv2d, GroupConv2d, convert,
configure, autotuning). Its modules: the kernel registry (kernels) over each kernel's
launch geometry (nchw_tile_kernels, nchw_row_kernels, nhwc_strip_kernels) and the tables its
source includes as a generated header (source_tables), the Shape (shapes), nvcc builds (build), the launch plan and its C
shim (launch), the session and launcher (gpu), the dispatcher's table (dispatch), the public op
(conv: conv2d, GroupConv2d, configure; conversion: convert) with its argument checks
(call_checks), per-call plans (call_plan, op_runtime), launch tables (packaged_tables: the package's, by
the GPU's name; launch_tables: a checkout's record; choice_source: which, and where a choice
comes from), cubin cache (cubin_cache), PyTorch path (torch_fallback) and choice on an unseen
geometry (unseen), the
primitives autotuning measures through, which the study's stages use too (verify, tuning,
timing), and the files it reads (files: hashes, committed records checked). Nothing here imports
the study (groupconv_atlas.study), nor pandas, scipy or PyCUDA at import: PyCUDA is the GPU
extra (`pip install groupconv[gpu]`), loaded where a kernel is compiled or launched."""

__version__ = "0.1.0"

# The public entry point lives in .conv, which imports torch; these names load it on first use,
# so `import groupconv` needs neither torch nor a GPU.
PUBLIC = ("conv2d", "GroupConv2d", "UnsupportedConv", "implementations", "support", "configure",
          "convert", "table_source", "describe_choice")


def __getattr__(name):
    if name in ("table_source", "describe_choice"):  # where a choice comes from: no torch, no GPU
        from . import choice_source

        return getattr(choice_source, name)
    if name == "convert":
        from .conversion import convert

        return convert
    if name == "GroupConv2d":
        from .layers import GroupConv2d

        return GroupConv2d
    if name in PUBLIC:
        from . import conv

        return getattr(conv, name)
    raise AttributeError(f"module 'groupconv' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *PUBLIC])
