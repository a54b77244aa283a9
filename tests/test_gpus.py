"""Which GPU a cuda library can run on, and what the CUDA driver of this machine says (no TVM)."""

from __future__ import annotations

import pytest

from modelbuild.host.gpus import Gpu, capability_of, local_gpus, why_not_on_gpu
from modelbuild.recipe.targets import validating_machine, why_not_run_here

H200 = Gpu("NVIDIA H200", (9, 0), "13.0")
A100 = Gpu("NVIDIA A100-SXM4-80GB", (8, 0), "12.4")
L4 = Gpu("NVIDIA L4", (8, 9), "12.4")


@pytest.mark.parametrize(
    "arch, expected",
    [
        ("sm_90", ((9, 0), False)),
        ("sm_90a", ((9, 0), True)),
        ("sm_80", ((8, 0), False)),
        ("sm_100", ((10, 0), False)),
        ("compute_86", ((8, 6), False)),
        ("sm_120f", ((12, 0), False)),
        ("gfx90a", None),
        ("sm", None),
    ],
)
def test_an_arch_names_the_compute_capability_it_needs(arch, expected):
    assert capability_of(arch) == expected


@pytest.mark.parametrize(
    "arch, gpu, reason",
    [
        ("sm_80", A100, None),
        ("sm_80", H200, None),  # compiled where it is loaded, for the GPU there: a newer GPU runs it
        ("sm_86", L4, None),
        ("sm_90", A100, "built for sm_90; this machine's GPU (NVIDIA A100-SXM4-80GB) is sm_80"),
        ("sm_90a", H200, None),
        ("sm_89a", H200, "built for sm_89a; this machine's GPU (NVIDIA H200) is sm_90"),  # `a`: that GPU alone
        ("", A100, None),
    ],
)
def test_a_cuda_library_runs_on_a_gpu_at_least_as_new_as_its_arch(arch, gpu, reason):
    target = {"kind": "cuda", **({"arch": arch} if arch else {})}
    assert why_not_on_gpu(target, (gpu, L4), "") == reason


def test_without_a_gpu_the_reason_is_the_drivers():
    assert why_not_on_gpu({"kind": "cuda", "arch": "sm_80"}, (), "no GPU, says the driver") == "no GPU, says the driver"


def test_a_machine_without_the_cuda_driver_says_so():
    assert local_gpus("libcuda-that-is-not-there.so.1") == (
        (),
        "no CUDA driver on this machine (libcuda-that-is-not-there.so.1 not found)",
    )


def test_this_machines_gpus_or_why_there_are_none():
    found, reason = local_gpus()
    assert bool(found) != bool(reason)
    for gpu in found:  # on a GPU machine: what the driver says, as the validate key and reports show it
        assert gpu.name and gpu.capability >= (3, 0) and gpu.driver.count(".") == 1
        assert Gpu.described(gpu.describe()) == gpu
    target = {"kind": "cuda", "arch": "sm_50"}
    assert why_not_run_here(target) == (None if found else reason)
    gpu = found[0].describe() if found else {}
    assert validating_machine(target) == {**validating_machine({"kind": "llvm"}), **gpu}
