"""Where a target's library can run: its architecture, and on x86 the vector extensions its CPU name implies."""

from __future__ import annotations

import pytest

from modelbuild.recipe.targets import needed_features, why_not_run_here
from tests.helpers.fake_stages import fake_compiler

AVX2_HOST = {"sse4_2", "avx", "avx2", "fma"}
AVX512_HOST = AVX2_HOST | {"avx512f", "avx512bw", "avx512vnni"}


@pytest.mark.parametrize(
    "target, host, reason",
    [
        (
            {"kind": "llvm", "mcpu": "cascadelake"},
            AVX2_HOST,
            "built for mcpu cascadelake (avx2, avx512f, avx512vnni); this CPU lacks avx512f, avx512vnni",
        ),
        ({"kind": "llvm", "mcpu": "cascadelake"}, AVX512_HOST, None),
        ({"kind": "llvm", "mcpu": "haswell"}, AVX2_HOST, None),
        ({"kind": "llvm", "mcpu": "skylake-avx512"}, AVX512_HOST - {"avx512vnni"}, None),  # no VNNI before Cascade Lake
        (
            {"kind": "llvm", "mcpu": "x86-64", "mattr": ["+avx512f"]},
            AVX2_HOST,
            "built for mcpu x86-64 (avx512f); this CPU lacks avx512f",
        ),
        (
            {"kind": "llvm", "mcpu": "sapphirerapids"},
            AVX512_HOST,  # an Ice Lake: no AMX tiles
            "built for mcpu sapphirerapids (avx2, avx512f, avx512vnni, amxint8); this CPU lacks amxint8",
        ),
        ({"kind": "llvm", "mcpu": "sapphirerapids"}, AVX512_HOST | {"amx_tile", "amx_int8"}, None),
        (
            {"kind": "llvm", "mcpu": "icelake-server", "mattr": ["+amx-int8"]},
            AVX512_HOST,
            "built for mcpu icelake-server (avx2, avx512f, avx512vnni, amxint8); this CPU lacks amxint8",
        ),
        ({"kind": "llvm", "mcpu": "sapphirerapids", "mattr": ["-amx-tile", "-amx-int8"]}, AVX512_HOST, None),
        ({"kind": "llvm", "mcpu": "znver4", "mattr": ["-avx512f"]}, AVX2_HOST, None),  # a VM hiding AVX-512
        ({"kind": "llvm", "mcpu": "znver4", "mattr": ["-avx2"]}, AVX2_HOST - {"avx2"}, None),
        (
            {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"},
            AVX512_HOST,
            "built for aarch64-linux-gnu; this machine is not that architecture",
        ),
        (
            {"kind": "rocm"},
            AVX512_HOST,
            "a rocm library needs that device; this machine runs llvm (CPU) libraries only",
        ),
    ],
)
def test_a_library_runs_here_only_where_the_cpu_has_what_its_code_may_use(target, host, reason, monkeypatch):
    monkeypatch.setattr("modelbuild.recipe.targets.host_arch", lambda: "x86_64")
    assert why_not_run_here(target, {f.replace("_", "") for f in host}) == reason


@pytest.mark.parametrize(
    "cpu, flags, extensions",
    [
        ("rocketlake", AVX512_HOST | {"amx_tile", "amx_int8", "amx_bf16"}, ["+amx-tile", "+amx-int8"]),  # a VM
        ("sapphirerapids", AVX512_HOST | {"amx_tile", "amx_int8"}, []),  # the name implies them
        ("rocketlake", AVX512_HOST | {"amx_tile"}, []),  # tiles without their int8 products
        ("sapphirerapids", AVX512_HOST, ["-amx-tile", "-amx-int8"]),  # a Linux that lists and grants no tiles
        ("icelake-server", AVX512_HOST, []),
        ("znver4", AVX2_HOST, ["-avx512f"]),  # a Zen 4 VM whose hypervisor hides AVX-512: SIGILL without it
        ("cascadelake", AVX512_HOST - {"avx512vnni"}, ["-avx512vnni"]),
        ("haswell", AVX2_HOST - {"avx2"}, ["-avx2"]),
        ("sapphirerapids", AVX2_HOST, ["-avx512f", "-amx-tile", "-amx-int8"]),
        ("znver3", AVX2_HOST, []),
    ],
)
def test_host_takes_away_or_adds_the_extensions_its_name_misstates_by_what_the_cpu_runs_here(cpu, flags, extensions):
    from modelbuild.recipe.targets import host_extensions

    assert host_extensions(cpu, {f.replace("_", "") for f in flags}) == extensions


def test_a_host_target_resolves_with_the_extensions_after_those_the_recipe_lists(tmp_path, monkeypatch):
    from modelbuild.recipe.targets import resolve_target

    monkeypatch.setattr("modelbuild.recipe.targets.resolve_host_cpu", lambda memo: "rocketlake")
    monkeypatch.setattr("modelbuild.recipe.targets.host_features", lambda: AVX512_HOST | {"amxtile", "amxint8"})
    resolved = resolve_target({"kind": "llvm", "mcpu": "host", "mattr": ["+avx512f"]}, tmp_path / "cpu.json")
    assert (resolved["mcpu"], resolved["mattr"]) == ("rocketlake", ["+avx512f", "+amx-tile", "+amx-int8"])
    assert needed_features(resolved) == ["avx2", "avx512f", "avx512vnni", "amxtile", "amxint8"]


def test_a_host_target_leaves_out_what_the_cpu_name_implies_and_a_vm_hides(tmp_path, monkeypatch):
    """A Zen 4 under a hypervisor that hides AVX-512: LLVM names it znver4, whose AVX-512 code dies of an
    illegal instruction there. Its library is built for AVX2 and validated here; the recipe's own word on an
    extension stands."""
    from modelbuild.recipe.targets import resolve_target

    monkeypatch.setattr("modelbuild.recipe.targets.resolve_host_cpu", lambda memo: "znver4")
    monkeypatch.setattr("modelbuild.recipe.targets.host_features", lambda: AVX2_HOST)
    resolved = resolve_target({"kind": "llvm", "mcpu": "host"}, tmp_path / "cpu.json")
    assert (resolved["mcpu"], resolved["mattr"], needed_features(resolved)) == ("znver4", ["-avx512f"], ["avx2"])
    assert why_not_run_here(resolved, AVX2_HOST) is None
    chosen = resolve_target({"kind": "llvm", "mcpu": "host", "mattr": ["+avx512f"]}, tmp_path / "cpu.json")
    assert chosen["mattr"] == ["+avx512f"]


def test_arm_targets_need_no_x86_extension():
    assert needed_features({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1"}) == []


def test_the_linker_and_its_version_enter_the_resolved_target_and_are_asked_once(tmp_path):
    from modelbuild.recipe.targets import resolve_target, tvm_target

    cc = fake_compiler(tmp_path / "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-gcc (Debian 12.2.0-14) 12.2.0")
    table = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "cross-compiler": str(cc)}
    first = resolve_target(table, tmp_path / "host-cpu.json")
    assert first["linker"] == {"command": str(cc), "version": "aarch64-linux-gnu-gcc (Debian 12.2.0-14) 12.2.0"}
    assert resolve_target(table, tmp_path / "host-cpu.json") == first
    assert (tmp_path / "aarch64-linux-gnu-gcc.calls").read_text().count("--version") == 1  # memoised
    assert "linker" not in tvm_target(first)
    fake_compiler(cc, "aarch64-linux-gnu-gcc (Debian 13.1.0-1) 13.1.0")  # an upgraded compiler
    assert resolve_target(table, tmp_path / "host-cpu.json")["linker"]["version"].endswith("13.1.0")


def test_a_target_that_writes_object_files_has_no_linker_and_a_missing_one_is_the_environments_fault(
    tmp_path, monkeypatch
):
    from modelbuild.errors import EnvironmentFailure
    from modelbuild.recipe.targets import resolve_target

    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    objects = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    assert "linker" not in resolve_target(objects, tmp_path / "host-cpu.json")
    with pytest.raises(
        EnvironmentFailure,
        match=r"'aarch64-linux-gnu-gcc' is not on the path: install it "
        r"\(apt-get install gcc-aarch64-linux-gnu\)",
    ):
        resolve_target({**objects, "cross-compiler": "aarch64-linux-gnu-gcc"}, tmp_path / "host-cpu.json")


def test_a_cuda_targets_kernel_compiler_enters_its_resolved_target_nvrtc_first_then_nvcc(tmp_path, monkeypatch):
    from modelbuild.errors import EnvironmentFailure
    from modelbuild.recipe.targets import cuda_compiler, resolve_target, tvm_target

    site = tmp_path / "site-packages"
    for dist in ("cuda_bindings-12.9.10", "nvidia_cuda_nvrtc_cu12-12.9.86"):
        (site / f"{dist}.dist-info").mkdir(parents=True)
    memo = tmp_path / "linkers.json"
    assert cuda_compiler(memo, [str(site)]) == {"name": "nvrtc", "version": "12.9.86"}
    tools = tmp_path / "bin"
    tools.mkdir()
    # nvcc names itself first and its version on a later line
    fake_compiler(
        tools / "nvcc", "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88"
    )
    monkeypatch.setenv("PATH", str(tools))
    assert cuda_compiler(memo, [str(tmp_path / "empty")]) == {"name": "nvcc", "version": "V13.0.88"}
    fake_compiler(tools / "g++", "g++ (Debian 12.2.0-14) 12.2.0")
    resolved = resolve_target({"kind": "cuda", "arch": "sm_80"}, tmp_path / "host-cpu.json")
    assert resolved["cuda-compiler"]["name"] in ("nvrtc", "nvcc") and "cuda-compiler" not in tvm_target(resolved)
    assert "cuda-compiler" not in resolve_target({"kind": "llvm", "mcpu": "znver3"}, tmp_path / "host-cpu.json")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(EnvironmentFailure, match=r"no CUDA compiler: pip install 'modelbuild\[cuda\]' \(NVRTC\)"):
        cuda_compiler(memo, [str(tmp_path / "empty")])
