"""What a GPU build adds to the CPU pipeline: its kernels compiled while it is built, and a model split between
the GPU and the CPU."""
