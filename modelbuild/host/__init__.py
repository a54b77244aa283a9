"""Probes of the machine modelbuild runs on: its CPU quota (cgroup), its GPUs, and where NVRTC and the CUDA
headers are. They read the host, never the recipe."""
