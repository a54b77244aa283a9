"""TVM target tables: which keys each kind accepts, and resolving `mcpu = "host"` to a real CPU name."""

from __future__ import annotations

import json
import os
import shutil
import sys
from functools import cache
from pathlib import Path

from modelbuild.errors import EnvironmentFailure, ModelbuildError, last_line
from modelbuild.fsutil import write_atomic
from modelbuild.hashing import digest_of
from modelbuild.host import gpus
from modelbuild.versions import dist_info_version, tool_version

_COMMON = ("kind", "keys", "tag", "device", "model", "libs", "host", "from_device", "target_device_type")

# The options TVM 0.27 accepts per target kind, copied from its own "Known options" error so that a typo
# is caught when the recipe loads, without importing TVM (which costs ~0.6 s on every no-op build).
TARGET_OPTIONS: dict[str, tuple[str, ...]] = {
    "llvm": _COMMON
    + (
        "mattr",
        "mcpu",
        "mtriple",
        "mfloat-abi",
        "mabi",
        "num-cores",
        "fast-math",
        "fast-math-nnan",
        "fast-math-ninf",
        "fast-math-nsz",
        "fast-math-arcp",
        "fast-math-contract",
        "fast-math-reassoc",
        "opt-level",
        "cl-opt",
        "jit",
        "vector-width",
    ),
    "c": _COMMON + ("mcpu", "march", "workspace-byte-alignment", "constants-byte-alignment"),
    "cuda": _COMMON
    + (
        "mcpu",
        "arch",
        "max_shared_memory_per_block",
        "max_threads_per_block",
        "thread_warp_size",
        "registers_per_block",
        "l2_cache_size_bytes",
        "max_num_threads",
    ),
    "rocm": _COMMON
    + (
        "mcpu",
        "mtriple",
        "mattr",
        "max_num_threads",
        "max_threads_per_block",
        "max_shared_memory_per_block",
        "thread_warp_size",
    ),
    "opencl": _COMMON
    + (
        "max_threads_per_block",
        "max_shared_memory_per_block",
        "max_num_threads",
        "thread_warp_size",
        "texture_spatial_limit",
        "texture_depth_limit",
        "max_function_args",
        "image_base_address_alignment",
    ),
}

# Keys modelbuild reads itself; they are stripped before the table becomes TVM's target JSON.
MODELBUILD_KEYS = ("cross-compiler", "rpc", "devices")
# a cuda target that also runs on the CPU: each operator placed on one of these (gpu/heterogeneous.py)
HETEROGENEOUS = ["cuda", "llvm"]
LINKER = "linker"  # added by resolve_target, never written in a recipe: what links the .so, and its version
CUDA_COMPILER = "cuda-compiler"  # added by resolve_target to a cuda target: what compiles its kernels
ADDED_KEYS = (LINKER, CUDA_COMPILER)
RPC_TRACKER_ENV = "MODELBUILD_RPC_TRACKER"
RPC_TIMEOUT_SECONDS = 60

HOST = "host"


def host_arch() -> str:
    """The host's architecture as LLVM triples spell it (x86_64, aarch64)."""
    machine = os.uname().machine.lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def target_arch(target: dict) -> str:
    """The architecture an llvm target builds for: its mtriple's, else this machine's."""
    triple = target.get("mtriple")
    return triple.split("-")[0] if triple else host_arch()


def known_cpus(arch: str) -> tuple[str, ...] | None:
    """The CPU names the LLVM inside the pinned TVM accepts for `arch`, or None where modelbuild has no list.

    Read from llvm_cpus.json (written from tvm.target.codegen.llvm_get_cpu_archlist, and checked against it
    by the tests), so a typo in mcpu is caught when the recipe loads without importing TVM."""
    data = json.loads((Path(__file__).parent / "llvm_cpus.json").read_text())
    family = "arm" if arch.startswith(("armv", "thumb")) else arch
    cpus = data["cpus"].get(family)
    return tuple(cpus) if cpus else None


def runs_on_host(target: dict) -> bool:
    """Whether a library for this target can be loaded and run on this machine."""
    if target.get("kind") != "llvm":
        return False
    triple = target.get("mtriple")
    return not triple or triple.split("-")[0] == host_arch()


# The x86 CPUs whose code may use AVX-512 (VNNI too where listed) or AVX2: a library built for one dies of an
# illegal instruction on a CPU without them, so it is not validated there. Names as LLVM spells them.
_AVX512_VNNI = {
    "cascadelake",
    "cooperlake",
    "icelake-client",
    "icelake_client",
    "icelake-server",
    "icelake_server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "graniterapids-d",
    "graniterapids_d",
    "diamondrapids",
    "znver4",
    "znver5",
}
_AVX512 = _AVX512_VNNI | {
    "skylake-avx512",
    "skylake_avx512",
    "skx",
    "cannonlake",
    "knl",
    "knm",
    "mic_avx512",
    "x86-64-v4",
}
# and AMX's int8 tiles, which the int8 convs use where the target has them (compiler/kernels/amx_conv.py)
_AMX_INT8 = {"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "graniterapids_d", "diamondrapids"}
_AVX2 = _AVX512 | {
    "haswell",
    "broadwell",
    "skylake",
    "alderlake",
    "raptorlake",
    "meteorlake",
    "arrowlake",
    "arrowlake-s",
    "arrowlake_s",
    "lunarlake",
    "pantherlake",
    "gracemont",
    "sierraforest",
    "grandridge",
    "clearwaterforest",
    "core-avx2",
    "core_4th_gen_avx",
    "core_4th_gen_avx_tsx",
    "core_5th_gen_avx",
    "core_5th_gen_avx_tsx",
    "znver1",
    "znver2",
    "znver3",
    "bdver4",
    "x86-64-v3",
}


# Each level builds on the one before: taking one away (mattr "-avx2") takes away those after it, as LLVM does.
_VECTOR_LEVELS = (("avx2", _AVX2), ("avx512f", _AVX512), ("avx512vnni", _AVX512_VNNI))


def needed_features(target: dict) -> list[str]:
    """The x86 vector extensions an llvm target's code may use, by its mcpu and its +mattr (as /proc/cpuinfo
    names them, less underscores: avx2, avx512f, avx512vnni, amxint8); [] for other architectures."""
    if target.get("kind") != "llvm" or target_arch(target) != "x86_64":
        return []
    mcpu = str(target.get("mcpu", ""))
    needed = [name for name, cpus in (*_VECTOR_LEVELS, ("amxint8", _AMX_INT8)) if mcpu in cpus]
    levels = [name for name, _ in _VECTOR_LEVELS]
    mattr = target.get("mattr") or []
    for attr in mattr if isinstance(mattr, list) else [mattr]:
        name = str(attr).lstrip("+-").replace("_", "").replace("-", "")
        if str(attr).startswith("+") and name.startswith(("avx", "amx")) and name not in needed:
            needed.append(name)
        elif str(attr).startswith("-"):  # taken away from what the mcpu implies, with what builds on it
            gone = levels[levels.index(name) :] if name in levels else [name]
            needed = [n for n in needed if n not in gone]
    return needed


def host_features() -> set[str]:
    """This CPU's feature flags, less underscores (avx512_vnni -> avx512vnni)."""
    info = _cpuinfo()
    return {flag.replace("_", "") for flag in (info.get("flags") or info.get("Features", "")).split()}


def why_not_run_here(target: dict, features: set[str] | None = None) -> str | None:
    """Why a library for this target cannot run on this machine; None when it can."""
    if target.get("kind") == "cuda":
        return gpus.why_not_on_gpu(target, *gpus.local_gpus())
    if target.get("kind") != "llvm":
        return f"a {target.get('kind')} library needs that device; this machine runs llvm (CPU) libraries only"
    if not runs_on_host(target):
        return f"built for {target.get('mtriple')}; this machine is not that architecture"
    missing = [f for f in needed_features(target) if f not in (host_features() if features is None else features)]
    if missing:
        return (
            f"built for mcpu {target.get('mcpu')} ({', '.join(needed_features(target))}); this CPU lacks "
            f"{', '.join(missing)}"
        )
    return None


def device_of(target: dict) -> dict | None:
    """The device a target is validated on through TVM's RPC tracker: {tracker, key, timeout}; None for this
    machine. MODELBUILD_RPC_TRACKER gives the tracker where the recipe names only the key (CI sets it)."""
    rpc = target.get("rpc")
    if rpc is None:
        return None
    tracker = os.environ.get(RPC_TRACKER_ENV) or rpc.get("tracker")
    return {"tracker": tracker, "key": rpc["key"], "timeout": rpc.get("timeout", RPC_TIMEOUT_SECONDS)}


def tvm_target(target: dict) -> dict:
    """The part of a recipe target table that TVM reads."""
    return {k: v for k, v in target.items() if k not in MODELBUILD_KEYS and k not in ADDED_KEYS}


def host_machine() -> dict:
    """The CPU model and core count of this machine, as reports show them."""
    return {"cpu": _cpuinfo().get("model name", "unknown"), "cores": os.cpu_count()}


def validating_machine(target: dict) -> dict:
    """The machine a target's library is validated on here, as reports show it: this CPU, and for a cuda
    target also the GPU it runs on (host_machine's alone where there is none)."""
    found, _ = gpus.local_gpus() if target.get("kind") == "cuda" else ((), "")
    return {**host_machine(), **found[0].describe()} if found else host_machine()


def _cpu_fingerprint() -> dict:
    """What identifies this CPU for LLVM: model name and feature flags, read from /proc/cpuinfo."""
    identity = ("model name", "flags", "Features", "CPU part")
    return {
        "machine": os.uname().machine,
        "tvm": tool_version("tvm"),
        **{key: value for key, value in _cpuinfo().items() if key in identity},
    }


@cache
def _cpuinfo() -> dict[str, str]:
    """/proc/cpuinfo's fields, the first core's value of each, read once per process (every plan asks)."""
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _ask_llvm_for_host_cpu() -> str:
    import subprocess  # here: only the first build on a machine asks; a no-op build reads the memo

    code = "import tvm.target.codegen as c; print(c.llvm_get_system_cpu())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ModelbuildError(
            'cannot resolve mcpu = "host": TVM failed to name this CPU '
            f"({last_line(proc.stderr or 'no output')}); set mcpu to a CPU name instead"
        )
    return proc.stdout.strip().splitlines()[-1]


def host_extensions(cpu: str, features: set[str]) -> list[str]:
    """The extensions to add to or remove from LLVM's name for this CPU, as mattr, by its /proc/cpuinfo flags
    (less underscores). LLVM names a CPU from its model number, and a virtual machine's may say more or less
    than it can run: a Zen 4 whose hypervisor hides AVX-512 is "znver4" to LLVM, and its AVX-512 code dies
    of an illegal instruction there; a Sapphire Rapids VM with amx_tile and amx_int8 is "rocketlake"; and a
    Sapphire Rapids under a Linux older than 5.16 (RHEL 8's 4.18) cannot use the tiles its name implies (the
    kernel neither lists them nor grants them). As with clang's -march=native, "host" means what the CPU can
    run here; the int8 convs take the tiles where it has them (amx_conv.py)."""
    return [*_hidden_vectors(cpu, features), *_tiles(cpu, features)]


def _hidden_vectors(cpu: str, features: set[str]) -> list[str]:
    for name, cpus in _VECTOR_LEVELS:
        if cpu in cpus and name not in features:
            return [f"-{name}"]  # LLVM takes away the levels after it too
    return []


def _tiles(cpu: str, features: set[str]) -> list[str]:
    has_tiles = {"amxtile", "amxint8"} <= features
    if cpu in _AMX_INT8:
        return [] if has_tiles else ["-amx-tile", "-amx-int8"]
    return ["+amx-tile", "+amx-int8"] if has_tiles else []


def resolve_host_cpu(memo_path: Path) -> str:
    """LLVM's name for this machine's CPU, memoised per CPU and TVM version.

    It is computed in a subprocess so that the build process itself never imports TVM.
    """
    fingerprint = digest_of(_cpu_fingerprint())
    try:
        memo = json.loads(memo_path.read_text())
        if memo.get("fingerprint") == fingerprint:
            return memo["cpu"]
    except (OSError, ValueError, KeyError):
        pass
    cpu = _ask_llvm_for_host_cpu()
    try:
        write_atomic(memo_path, json.dumps({"fingerprint": fingerprint, "cpu": cpu}).encode())
    except OSError:
        pass  # a read-only cache: the next run asks LLVM again
    return cpu


def resolve_target(target: dict, memo_path: Path) -> dict:
    """The target table as it enters cache keys: `mcpu = "host"` replaced by the real CPU name (with the tile
    extensions that name leaves out added, and the vector and tile extensions it implies that this machine
    lacks removed: host_extensions), the linker of its library with that linker's version (a new compiler
    links different bytes), and for a cuda target the compiler of its kernels with its version."""
    resolved = dict(target)
    if target.get("mcpu") == HOST:
        resolved["mcpu"] = resolve_host_cpu(memo_path)
        extensions = host_extensions(resolved["mcpu"], host_features())
        if extensions:
            mattr = target.get("mattr") or []
            mattr = mattr if isinstance(mattr, list) else [mattr]
            named = {str(attr).lstrip("+-") for attr in mattr}  # what the recipe says of an extension stands
            resolved["mattr"] = [*mattr, *(attr for attr in extensions if attr.lstrip("+-") not in named)]
    command = linker_command(target)
    if command:
        resolved[LINKER] = linker_identity(command, memo_path.parent / "linkers.json")
    if target.get("kind") == "cuda":
        resolved[CUDA_COMPILER] = cuda_compiler(memo_path.parent / "linkers.json")
    return resolved


def cuda_compiler(memo_path: Path | None, search_path: list[str] | None = None) -> dict:
    """{name, version} of what compiles a cuda target's kernels at build time (`cuda_compiler_here`); none is
    the environment's fault."""
    found = cuda_compiler_here(memo_path, search_path)
    if found is None:
        raise EnvironmentFailure(
            "a cuda target's kernels are compiled when it is built, and this machine has no CUDA compiler: "
            "pip install 'modelbuild[cuda]' (NVRTC), or put nvcc on the path"
        )
    return found


def cuda_compiler_here(memo_path: Path | None = None, search_path: list[str] | None = None) -> dict | None:
    """NVRTC where the `cuda` extra is installed (its version pinned with the package), else the nvcc on the
    path (its version memoised in `memo_path` where given), else None."""
    bindings = dist_info_version("cuda-bindings", search_path)
    nvrtc = dist_info_version("nvidia-cuda-nvrtc-cu12", search_path)
    if bindings and nvrtc:
        return {"name": "nvrtc", "version": nvrtc}
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    # "Cuda compilation tools, release 13.0, V13.0.88"
    release = linker_identity(nvcc, memo_path, line_with="release")["version"] if memo_path else None
    return {"name": "nvcc", "version": (release or _version_line(nvcc, "release")).rpartition(", ")[2]}


def linker_command(target: dict) -> str | None:
    """What links the target's .so: its cross-compiler, else this machine's C++ compiler where the library
    is for this machine or a GPU (as TVM picks it: $CXX, $CC, then the first of g++, gcc, clang++, clang,
    c++, cc on the path); None where only object files are written."""
    if target.get("cross-compiler"):
        return target["cross-compiler"]
    if target.get("kind") != "llvm" or runs_on_host(target):
        return (
            os.environ.get("CXX")
            or os.environ.get("CC")
            or next((name for name in ("g++", "gcc", "clang++", "clang", "c++", "cc") if shutil.which(name)), "g++")
        )
    return None


def linker_identity(command: str, memo_path: Path, line_with: str = "") -> dict:
    """{command, version}: the first line of `command --version` (the first holding `line_with`), memoised per
    executable (path, size, mtime) so that a no-op build runs no compiler. A linker not on the path is the
    environment's fault."""
    path = shutil.which(command)
    if path is None:
        package = f" (apt-get install gcc-{command.removesuffix('-gcc')})" if command.endswith("-linux-gnu-gcc") else ""
        raise EnvironmentFailure(
            f"the linker {command!r} is not on the path: install it{package}, or remove "
            "cross-compiler from the target to build object files (model.tar); "
            "`modelbuild doctor` lists the toolchains"
        )
    real = os.path.realpath(path)
    stat = os.stat(real)
    fingerprint = digest_of({"path": real, "size": stat.st_size, "mtime": stat.st_mtime_ns, "line": line_with})
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if fingerprint not in memo:
        memo[fingerprint] = _version_line(path, line_with)
        try:
            write_atomic(memo_path, json.dumps(memo).encode())
        except OSError:
            pass  # a read-only cache: the next run asks the compiler again
    return {"command": command, "version": memo[fingerprint]}


def _version_line(path: str, line_with: str = "") -> str:
    import subprocess  # here: only the first build with a new compiler asks it

    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unknown ({type(err).__name__})"
    lines = [line for line in (proc.stdout or proc.stderr).strip().splitlines() if line_with in line]
    return lines[0] if lines else "unknown"
