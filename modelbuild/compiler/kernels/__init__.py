"""Hand-written kernels: how quantized convs and matmuls are legalised per target (the x86 VNNI and Arm sdot
tensorised kernels), and a row-by-row softmax; the default schedule recognises each by its blocks."""
