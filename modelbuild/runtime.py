"""Load a library that modelbuild built and call it by its signature.

    lib = Library("build/text_cls/x86")
    scores = lib(x=image)             # or lib(image); a dict by output name where there are several
    lib.benchmark().p99_ms

The build folder's library.json (modelbuild.manifest) says which file to load, the inputs in argument order,
the outputs by name, the inputs bound at build time and the threads the target runs on. This module imports
numpy and TVM's runtime only: a program that runs a library needs none of onnx, onnxruntime, pydantic or rich.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modelbuild import cuda_binaries
from modelbuild import manifest as manifests
from modelbuild.signature import Signature
from modelbuild.validation import metrics

THREADS_ENV, SPIN_ENV = "TVM_NUM_THREADS", "TVM_THREAD_POOL_SPIN_COUNT"
_BIG_CORES = 1  # TVM's ThreadGroup::AffinityMode kBig: its workers on the fastest cores
_said: set[str] = set()  # warnings already given in this process: each is said once
_pool_sized_by_us = False  # TVM_NUM_THREADS was set here, not by the user


class SignatureError(ValueError):
    """The arguments do not match the library's signature; the message names the expected signature."""


@dataclass(frozen=True)
class Timing:
    """Latency of the library's calls as the validate stage summarises them (nearest-rank percentiles)."""

    p50_ms: float
    p99_ms: float
    mean_ms: float
    runs: int
    throughput: float  # calls per second of timed time

    @classmethod
    def of(cls, seconds: list[float]) -> Timing:
        summary = metrics.timing_summary(seconds)
        return cls(summary["median"], summary["p99"], summary["mean"], summary["runs"], summary["throughput"])


class Library:
    """A built library, loaded with its manifest and called with numpy arrays by input name or position."""

    def __init__(self, path: str | os.PathLike, *, threads: int | None = None, spin_count: int | None = None):
        """`path`: the build folder (build/<model>/<target>) or the library file in it. `threads`: TVM's
        threads for this library's calls (default: TVM_NUM_THREADS where the user set it, else the target's
        num-cores). `spin_count`: how long TVM's idle workers spin before they sleep; 0 on a machine other
        processes share (default: TVM's own)."""
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        try:
            self.manifest = manifests.read(folder)
        except ValueError as err:
            raise FileNotFoundError(str(err)) from None
        self.signature: Signature = self.manifest.signature
        self.threads = threads or _threads_from_environment() or self.manifest.threads
        _prepare_thread_pool(self.threads, spin_count)
        self._configured = threading.local()
        self._main, self._device, self._empty = _load(folder / self.manifest.library, self.manifest)
        self._configure_this_thread()
        self._names = list(self.signature.inputs)
        self._outputs = list(self.signature.outputs)
        self._specs = [(np.dtype(s["dtype"]), tuple(s["shape"])) for s in self.signature.inputs.values()]
        self._tensor_specs = [(shape, str(dtype)) for dtype, shape in self._specs]

    def __call__(self, *args, **kwargs) -> np.ndarray | dict[str, np.ndarray]:
        """The outputs for these inputs: one array where the model has one output, else a dict by name."""
        if not getattr(self._configured, "done", False):
            self._configure_this_thread()
        arrays = self._arrays(args, kwargs)
        # tvm.runtime.tensor(a) is this, less the dtype and shape it reads off each array again: much of a
        # small library's call (bench/runtime_overhead.py)
        device, empty = self._device, self._empty
        tensors = [empty(shape, dtype, device).copyfrom(a) for a, (shape, dtype) in zip(arrays, self._tensor_specs)]
        result = self._main(*tensors)
        if len(self._outputs) == 1:
            return (result if hasattr(result, "numpy") else result[0]).numpy()
        return {name: value.numpy() for name, value in zip(self._outputs, result)}

    def _arrays(self, args: tuple, kwargs: dict):
        """The arguments in order, checked: arrays of the signature's dtypes and shapes go through as they
        are (the common call, kept to a few comparisons); anything else is bound, converted or refused by
        bind()."""
        if kwargs:
            if args or len(kwargs) != len(self._names) or any(name not in kwargs for name in self._names):
                return bind(self.signature, args, kwargs)
            args = tuple(kwargs[name] for name in self._names)
        if len(args) != len(self._specs):
            return bind(self.signature, args, kwargs)
        for value, (dtype, shape) in zip(args, self._specs):
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
                return bind(self.signature, args, {})
        return args

    def benchmark(self, *args, runs: int = 50, warmup: int = 10, min_seconds: float = 1.0, **kwargs) -> Timing:
        """Warm up, then time calls until `runs` and `min_seconds` are both reached, as the validate stage
        times a library (its defaults); on the inputs given, else on zeros and random floats."""
        arrays = bind(self.signature, args, kwargs) if args or kwargs else example_inputs(self.signature)
        return Timing.of(
            metrics.time_calls(lambda: self(*arrays), warmup=warmup, min_runs=runs, min_seconds=min_seconds)
        )

    def _configure_this_thread(self) -> None:
        """TVM keeps one thread pool per calling thread: size this thread's to the library's threads."""
        used = _configure_pool(self.threads)
        if used != self.threads:
            _say_once(
                f"threads-{used}",
                f"TVM's thread pool in this process holds {used} threads, so this library runs on {used}, "
                f"not {self.threads}: a TVM kernel ran before the pool could be sized (create the Library, "
                f"or set {THREADS_ENV}={self.threads}, before running any other TVM code)",
            )
        self._configured.done = True

    def __repr__(self) -> str:
        inputs = ", ".join(describe(name, spec) for name, spec in self.signature.inputs.items())
        return f"Library({self.manifest.library}: ({inputs}) -> {', '.join(self._outputs)}, threads={self.threads})"


def bind(signature: Signature, args: tuple, kwargs: dict) -> list[np.ndarray]:
    """The arrays in the library's argument order, from positional or named arguments; SignatureError
    names what is wrong and the signature expected."""
    names = list(signature.inputs)
    bound = [name for name in kwargs if name in signature.bound]
    if bound:
        values = ", ".join(f"{n} = {signature.bound[n]['value']}" for n in bound)
        raise SignatureError(f"bound at build time ({values}), so not an input of this library; {expected(signature)}")
    unknown = [name for name in kwargs if name not in signature.inputs]
    if unknown:
        raise SignatureError(f"no input named {', '.join(map(repr, unknown))}; {expected(signature)}")
    if len(args) > len(names):
        raise SignatureError(f"{len(args)} inputs given, the library takes {len(names)}; {expected(signature)}")
    given = dict(zip(names, args))
    twice = [name for name in kwargs if name in given]
    if twice:
        raise SignatureError(f"{', '.join(twice)} given by position and by name; {expected(signature)}")
    given |= kwargs
    missing = [name for name in names if name not in given]
    if missing:
        raise SignatureError(f"missing {', '.join(missing)}; {expected(signature)}")
    return [_checked(name, given[name], signature.inputs[name], signature) for name in names]


def _checked(name: str, value, spec: dict, signature: Signature) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.dtype(spec["dtype"]) or list(array.shape) != list(spec["shape"]):
        raise SignatureError(f"{name} is {array.dtype}{list(array.shape)}; {expected(signature)}")
    return array


def describe(name: str, spec: dict) -> str:
    """'x: float32[1, 3, 48, 192]'."""
    return f"{name}: {spec['dtype']}{list(spec['shape'])}"


def expected(signature: Signature) -> str:
    inputs = ", ".join(describe(name, spec) for name, spec in signature.inputs.items())
    return f"expected ({inputs})"


def example_inputs(signature: Signature, seed: int = 0) -> list[np.ndarray]:
    """Inputs a library can be timed on: floats at random, integers and booleans zero (indices in range)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in signature.inputs.values():
        dtype = np.dtype(spec["dtype"])
        shape = tuple(spec["shape"])
        floating = np.issubdtype(dtype, np.floating)
        arrays.append(rng.standard_normal(shape).astype(dtype) if floating else np.zeros(shape, dtype))
    return arrays


def _threads_from_environment() -> int | None:
    """The user's TVM_NUM_THREADS, if they set it (not this module)."""
    value = os.environ.get(THREADS_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 and not _pool_sized_by_us else None


def _prepare_thread_pool(threads: int, spin_count: int | None) -> None:
    """Set what TVM reads when it makes a thread pool: TVM_NUM_THREADS (the pool's size: without it TVM
    takes half the cores on x86, and a pool cannot grow once made) and the spin count, read once, when the
    process's first pool starts. Both take effect even with TVM imported, as long as no TVM kernel has run."""
    global _pool_sized_by_us
    if not os.environ.get(THREADS_ENV) or _pool_sized_by_us:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        wanted = max(threads, cores, int(os.environ.get(THREADS_ENV) or 0))
        os.environ[THREADS_ENV] = str(wanted)
        _pool_sized_by_us = True
    if spin_count is None or os.environ.get(SPIN_ENV) == str(spin_count):
        return
    if "tvm" in sys.modules:
        _say_once(
            "spin",
            f"TVM was imported before modelbuild.runtime set {SPIN_ENV}={spin_count}: it applies only if no "
            f"TVM kernel has run in this process yet (set it in the environment to be sure)",
        )
    os.environ[SPIN_ENV] = str(spin_count)


def _configure_pool(threads: int) -> int:
    """Size the calling thread's TVM pool; the threads it then runs on."""
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(_BIG_CORES, threads)
    return int(tvm.get_global_func("runtime.NumThreads")())


def _load(path: Path, manifest: manifests.Manifest):
    """(the VM's main function, the device, TVM's empty-tensor function) for the library at `path`."""
    import tvm
    from tvm import relax

    built_with = manifest.runtime.get("apache-tvm")
    if built_with and built_with != tvm.__version__:
        _say_once(
            "version",
            f"{path} was built with apache-tvm {built_with}; this process runs {tvm.__version__} "
            f"(fix: pip install apache-tvm=={built_with})",
        )
    device = devices = tvm.cpu()
    if manifest.target.get("kind") == "cuda":
        cuda_binaries.install_loader()  # the kernels the library carries, compiled when it was built
        device = devices = tvm.cuda(0)
        if manifest.devices:  # split between the GPU and this CPU, in the VM's order: inputs taken on the CPU
            devices, device = [tvm.cuda(0) if kind == "cuda" else tvm.cpu() for kind in manifest.devices], tvm.cpu()
    try:
        module = tvm.runtime.load_module(str(path))
    except Exception as err:  # noqa: BLE001  (TVM raises its own types; the message is what helps)
        triple = manifest.target.get("mtriple")
        hint = f" (it was built for {triple}: load it there)" if triple else ""
        raise OSError(f"cannot load {path}{hint}: {str(err).strip().splitlines()[-1]}") from None
    vm = relax.VirtualMachine(module, devices)
    return vm["main"], device, tvm.runtime.empty


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
