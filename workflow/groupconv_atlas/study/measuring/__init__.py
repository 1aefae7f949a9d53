"""Measuring jobs: the timing workers and their messages, the measured floor sampled beside them,
the GPU's ceilings, the backward passes' runs and verification, the weight gradient's tuning
stage, an independent timer's cross-check and the quick kernel bench's table. Most of it runs on
the GPU machine only."""
