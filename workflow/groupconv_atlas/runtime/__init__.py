"""The kernel runtime a PyTorch user imports: the kernel registry and tile tables (kernels), the
Shape (shapes), nvcc builds and the cubin cache (build), the launch plan and its C shim (launch),
the session and launcher (gpu), the dispatcher's table (dispatch), the public op (conv: conv2d,
GroupConv2d, configure; conversion: convert) and its choice on an unseen geometry (unseen), with
the primitives autotuning measures through, which the study's stages use too (verify, tuning,
timing), and the files it reads (files: hashes, committed records checked). Nothing here imports
the study (groupconv_atlas.study)."""
