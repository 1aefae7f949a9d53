"""Probes: measurements beside the atlas that test its claims elsewhere: whole networks and their
training step (networks, network_training, mobilenet/), the launch overhead, the gradient check
against FP64, Nsight Compute captures and their table, and the machine code (sass,
machine_code_identity). They join the atlas at its artifacts and report."""
