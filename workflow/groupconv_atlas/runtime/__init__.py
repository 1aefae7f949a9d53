"""The kernel runtime a PyTorch user imports: the kernel registry (kernels) over each kernel's
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
the study (groupconv_atlas.study)."""
