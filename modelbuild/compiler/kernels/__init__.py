"""Integer kernels by target: how quantized convs are legalised, and the x86 VNNI tensorised kernels."""
