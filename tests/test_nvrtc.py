"""Where TVM's NVRTC callback is told to find CUDA's headers: pip's nvidia packages, where no toolkit is."""

from __future__ import annotations

from modelbuild.host.nvrtc import toolkit_environment


def pip_layout(site, runtime="cuda_runtime", cccl="cuda_cccl/include"):
    """The files that matter of pip's nvidia-cuda-runtime and nvidia-cuda-cccl packages, under `site`."""
    (site / "nvidia" / runtime / "include").mkdir(parents=True)
    (site / "nvidia" / runtime / "include" / "cuda_runtime.h").write_text("")
    (site / "nvidia" / cccl / "cuda" / "std").mkdir(parents=True)
    return site


def test_without_a_toolkit_the_headers_come_from_pips_packages(tmp_path):
    site = pip_layout(tmp_path / "site-packages")
    found = toolkit_environment({}, [str(tmp_path / "elsewhere"), str(site)], None, toolkit=tmp_path / "cuda")
    assert found == {
        "CUDA_PATH": str(site / "nvidia/cuda_runtime"),
        "TVM_CUDA_NVRTC_EXTRA_OPTS": f"-I{site / 'nvidia/cuda_cccl/include'}",
    }


def test_a_cuda_13_layout_keeps_cccl_beside_the_runtime_headers(tmp_path):
    site = pip_layout(tmp_path / "site-packages", runtime="cu13", cccl="cu13/include/cccl")
    assert toolkit_environment({}, [str(site)], None, toolkit=tmp_path / "cuda") == {
        "CUDA_PATH": str(site / "nvidia/cu13"),
        "TVM_CUDA_NVRTC_EXTRA_OPTS": f"-I{site / 'nvidia/cu13/include/cccl'}",
    }


def test_a_toolkit_tvm_finds_itself_or_a_users_choice_is_left_alone(tmp_path):
    site = str(pip_layout(tmp_path / "site-packages"))
    toolkit = tmp_path / "cuda"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    (toolkit / "bin").mkdir()
    assert toolkit_environment({"CUDA_PATH": "/opt/cuda"}, [site], None, toolkit=tmp_path / "none") == {}
    assert toolkit_environment({}, [site], str(toolkit / "bin" / "nvcc"), toolkit=tmp_path / "none") == {}
    assert toolkit_environment({}, [site], None, toolkit=toolkit) == {}
    options = {"TVM_CUDA_NVRTC_EXTRA_OPTS": "-I/mine"}
    assert toolkit_environment(options, [site], None, toolkit=tmp_path / "none") == {
        "CUDA_PATH": str(tmp_path / "site-packages/nvidia/cuda_runtime")
    }
    assert toolkit_environment({}, [str(tmp_path / "empty")], None, toolkit=tmp_path / "none") == {}


def test_an_nvcc_wrapper_outside_its_toolkit_does_not_hide_pips_headers(tmp_path):
    site = str(pip_layout(tmp_path / "site-packages"))
    (tmp_path / "local" / "bin").mkdir(parents=True)  # /usr/local/bin/nvcc: TVM would look in /usr/local
    found = toolkit_environment({}, [site], str(tmp_path / "local" / "bin" / "nvcc"), toolkit=tmp_path / "none")
    assert found["CUDA_PATH"] == str(tmp_path / "site-packages/nvidia/cuda_runtime")
