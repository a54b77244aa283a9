"""A cuda library's kernels carried in its source: the comment line, and which binary a GPU is given."""

from __future__ import annotations

import json

import pytest

from modelbuild import cuda_binaries
from modelbuild.cuda_binaries import Prebuilt, choose, embed, embedded, kernels_for

SOURCE = 'extern "C" __global__ void add(float* a) { a[0] += 1; }\n'


def prebuilt(arch="sm_80"):
    return Prebuilt(arch, "nvrtc 12.9.86", b"\x7fELF cubin \x00\xff", b"//\n// ptx\n.target sm_80\n")


def test_the_kernels_ride_in_one_comment_line_and_come_back_whole():
    carried = embed(SOURCE, prebuilt())
    assert carried.startswith(SOURCE) and carried.count("\n") == SOURCE.count("\n") + 2
    assert carried.splitlines()[-1].startswith("// modelbuild:prebuilt {")
    assert embedded(carried) == prebuilt()


def test_a_source_without_kernels_or_edited_after_the_build_has_none():
    assert embedded(SOURCE) is None
    carried = embed(SOURCE, prebuilt())
    assert embedded(carried.replace("+= 1", "+= 2")) is None  # another source: its kernels must be compiled
    assert embedded(SOURCE + "// modelbuild:prebuilt {not json\n") is None
    fields = json.loads(carried.splitlines()[-1].removeprefix(cuda_binaries.MARKER))
    damaged = carried.replace(fields["cubin"], fields["cubin"][:-8] + "AAAAAAAA")
    assert embedded(damaged) is None  # compiled where it loads, as if it carried nothing


def test_the_carried_line_is_smaller_than_the_kernels():
    ptx = b"//\n// ptx\n" + b"\tld.global.f32 %f1, [%rd1];\n" * 2000
    carried = embed(SOURCE, Prebuilt("sm_80", "nvrtc 12.9.86", bytes(range(256)) * 40, ptx))
    assert len(carried) - len(SOURCE) < (10240 + len(ptx)) / 2


@pytest.mark.parametrize(
    ("arch", "capability", "kind"),
    [
        ("sm_80", (8, 0), "cubin"),
        ("sm_80", (8, 6), "cubin"),  # a cubin runs on its family's newer members
        ("sm_80", (9, 0), "ptx"),  # a newer family: the driver translates the PTX
        ("sm_86", (8, 9), "cubin"),
        ("sm_90a", (9, 0), "cubin"),
    ],
)
def test_each_gpu_is_given_the_cubin_of_its_family_else_the_ptx(arch, capability, kind):
    given, binary = choose(prebuilt(arch), capability)
    assert given == kind
    assert binary == (prebuilt().cubin if kind == "cubin" else prebuilt().ptx + b"\0")


@pytest.mark.parametrize(
    ("arch", "capability", "says"),
    [("sm_80", (7, 5), "8.0 or newer"), ("sm_86", (8, 0), "8.6 or newer"), ("sm_90a", (10, 0), "9.0a only")],
)
def test_an_older_gpu_or_another_for_an_arch_specific_build_is_refused_with_the_fix(arch, capability, says):
    with pytest.raises(ValueError, match=f"{says}.*this GPU is {capability[0]}.{capability[1]}: build for its arch"):
        choose(prebuilt(arch), capability)


def test_loading_compiles_nothing_where_the_library_carries_its_kernels(monkeypatch):
    monkeypatch.setattr(cuda_binaries, "loaded", [])

    def compile_here(code):
        raise AssertionError("a compiler ran at load")

    assert kernels_for(embed(SOURCE, prebuilt()), (8, 0), compile_here) == prebuilt().cubin
    assert kernels_for(SOURCE, (8, 0), lambda code: b"compiled " + code.encode()) == b"compiled " + SOURCE.encode()
    assert cuda_binaries.loaded == [
        "prebuilt cubin for sm_80 (nvrtc 12.9.86)",
        "compiled here by NVRTC (the library carries no kernels)",
    ]
