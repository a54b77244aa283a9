"""modelbuild search: the fastest configuration of a quantized build that passes its gates."""
