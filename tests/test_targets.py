"""Where a target's library can run: its architecture, and on x86 the vector extensions its CPU name implies."""

from __future__ import annotations

import pytest

from modelbuild.recipe.targets import needed_features, why_not_run_here

AVX2_HOST = {"sse4_2", "avx", "avx2", "fma"}
AVX512_HOST = AVX2_HOST | {"avx512f", "avx512bw", "avx512vnni"}


@pytest.mark.parametrize("target, host, reason", [
    ({"kind": "llvm", "mcpu": "cascadelake"}, AVX2_HOST,
     "built for mcpu cascadelake (avx2, avx512f, avx512vnni); this CPU lacks avx512f, avx512vnni"),
    ({"kind": "llvm", "mcpu": "cascadelake"}, AVX512_HOST, None),
    ({"kind": "llvm", "mcpu": "haswell"}, AVX2_HOST, None),
    ({"kind": "llvm", "mcpu": "skylake-avx512"}, AVX512_HOST - {"avx512vnni"}, None),  # no VNNI before Cascade Lake
    ({"kind": "llvm", "mcpu": "x86-64", "mattr": ["+avx512f"]}, AVX2_HOST,
     "built for mcpu x86-64 (avx512f); this CPU lacks avx512f"),
    ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}, AVX512_HOST,
     "built for aarch64-linux-gnu; this machine is not that architecture"),
    ({"kind": "cuda", "arch": "sm_90"}, AVX512_HOST,
     "a cuda library needs that device; this machine runs llvm (CPU) libraries only"),
])
def test_a_library_runs_here_only_where_the_cpu_has_what_its_code_may_use(target, host, reason, monkeypatch):
    monkeypatch.setattr("modelbuild.recipe.targets.host_arch", lambda: "x86_64")
    assert why_not_run_here(target, {f.replace("_", "") for f in host}) == reason


def test_arm_targets_need_no_x86_extension():
    assert needed_features({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1"}) == []
