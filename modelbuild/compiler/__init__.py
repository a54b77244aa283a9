"""The TVM side: the phased compile pipeline, its IR figures, passes, the default schedule, kernels and the
tuning database. Never imports onnxruntime, nor the build system, the pipeline or the recipe."""
