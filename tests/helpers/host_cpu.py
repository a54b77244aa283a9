"""This machine's CPU as TVM sees a `mcpu = "host"` target: LLVM's name for it, less what its flags say it cannot
run here (a VM may hide AVX-512 from a CPU whose name implies it), so a kernel test runs code only where it can."""

from __future__ import annotations


def host_target():
    import tvm
    from tvm.target import codegen

    from modelbuild.recipe.targets import host_extensions, host_features

    cpu = codegen.llvm_get_system_cpu()
    extensions = host_extensions(cpu, host_features())
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, **({"mattr": extensions} if extensions else {})})


def host_has(*features: str) -> bool:
    from tvm.target import codegen

    host = host_target()
    return all(codegen.target_has_features(feature, host) for feature in features)
