"""Running a library on a device through TVM's RPC tracker, for measure.py: a session from the tracker, the
library uploaded and loaded there, its outputs brought back, its latency timed on the device itself.

Every way of not getting a device is a DeviceUnavailable with one line saying which and what to check, and
ends within the recipe's timeout: a tracker that does not answer, a key no device registered, every device
of the key busy, a device that drops mid-run.
"""

from __future__ import annotations

# TVM is imported in the functions that use it: validate.py imports this module for its exit code alone
import json
import os
import signal
import socket
from functools import partial

from modelbuild.validation import metrics

DEVICE_UNAVAILABLE = 75  # measure.py's exit code for these (EX_TEMPFAIL): the validate stage reports exit 4
CONNECT_SECONDS = 5
DESCRIBE = "modelbuild.device_info"  # a device server's function returning JSON: machine, os, emulated


class DeviceUnavailable(Exception):
    pass


def load(library: str, device: dict, baseline: str | None = None):
    """(run, timer, described) for the library on a device of `device["key"]`: run(arrays) -> outputs as
    numpy arrays; timer(arrays, warmup, min_runs, ...) -> seconds of each run, measured on the device, or with
    a `baseline` library (baseline.timed_together), uploaded to the same device, (this library's seconds, the
    baseline's), the two run in turns; described: what the device says of itself (machine, os, emulated),
    {} where its server says nothing."""
    session = connect(device)
    described = _described(session)
    vm = _loaded(session, library, device, "model")
    dev = session.cpu()
    guard = partial(_guarded, device)
    other = _loaded(session, baseline, device, "baseline") if baseline else None
    timer, together = clocked_on_device(vm, dev, guard, other)
    return vm_runner(vm, dev, guard), together or timer, described


def vm_runner(vm, dev, guard=lambda call: call()):
    """run(arrays) -> the VM's outputs as numpy arrays, its inputs copied to `dev` first."""
    import tvm

    def run(arrays):
        result = guard(lambda: vm["main"](*[tvm.runtime.tensor(a, dev) for a in arrays]))
        values = [result] if hasattr(result, "numpy") else list(result)
        return [v.numpy() for v in values]

    return run


def clocked_on_device(vm, dev, guard=lambda call: call(), other=None, inputs_on=None):
    """(timer, together) for a VM on `dev`, timed by the device's own clock (TVM's time_evaluator) with its
    inputs already there (or on `inputs_on`, where the library takes them: a split library's CPU): a host
    clock would count an RPC link's round trips, or a GPU's copies.

    timer(arrays, warmup, min_runs, ...) -> seconds of each run; together(...) -> (this VM's seconds, the
    `other` VM's) run in turns, or None without `other`."""
    import tvm

    def timer(
        arrays, *, warmup: int, min_runs: int, min_seconds: float, max_seconds: float = float("inf"), **_
    ) -> list[float]:
        args = [tvm.runtime.tensor(a, inputs_on or dev) for a in arrays]
        for _ in range(warmup):
            guard(lambda: vm["main"](*args))
        once = guard(lambda: vm.time_evaluator("main", dev, number=1, repeat=1)(*args).results[0])
        wanted = max(min_runs, int(min_seconds / once) + 1 if once > 0 else min_runs)
        runs = max(1, min(wanted, int(max_seconds / once) if once > 0 else wanted))
        return list(guard(lambda: vm.time_evaluator("main", dev, number=1, repeat=runs)(*args).results))

    def together(
        arrays, *, warmup: int, min_runs: int, min_seconds: float, max_seconds: float = float("inf"), **_
    ) -> tuple[list[float], list[float]]:
        args = [tvm.runtime.tensor(a, inputs_on or dev) for a in arrays]
        for _ in range(warmup):
            guard(lambda: (vm["main"](*args), other["main"](*args)))
        ours, theirs = (m.time_evaluator("main", dev, number=1, repeat=1) for m in (vm, other))
        return metrics.in_turns(
            lambda: guard(lambda: ours(*args).results[0]),
            lambda: guard(lambda: theirs(*args).results[0]),
            min_runs=min_runs,
            min_seconds=min_seconds,
            max_seconds=max_seconds,
        )

    return timer, together if other is not None else None


def _loaded(session, library: str, device: dict, name: str):
    """The library uploaded under its own name (a baseline's model.so must not overwrite the build's, which
    the device has loaded) and loaded into a VM there."""
    from tvm import relax

    uploaded = f"{name}{os.path.splitext(library)[1]}"
    try:
        session.upload(library, target=uploaded)
        return relax.VirtualMachine(session.load_module(uploaded), session.cpu())
    except Exception as err:  # TVM raises its own errors for a device that drops or cannot load the file
        raise DeviceUnavailable(
            f"the {device['key']} device failed while loading the library: "
            f"{str(err).splitlines()[-1] if str(err) else type(err).__name__}"
        ) from None


def _described(session) -> dict:
    """The device's own description, from the function scripts/emulated_arm64.py's server registers. TVM's
    stock RPC server has none, and nothing else tells a board from an emulator, so its absence is {}."""
    try:
        return json.loads(session.get_function(DESCRIBE)())
    except Exception:  # noqa: BLE001  (TVM raises its own error type for a function the server lacks)
        return {}


def connect(device: dict):
    """An RPC session with a free device of `device["key"]`, or DeviceUnavailable within its timeout."""
    tracker, _ = _tracker(device)
    return _within(
        device["timeout"],
        lambda: tracker.request(device["key"], priority=1, session_timeout=0),
        f"no {device['key']} device came free within {device['timeout']:g} s at the RPC tracker "
        f"{device['tracker']} (raise rpc.timeout, or add devices)",
    )


def count(device: dict) -> int:
    """How many devices registered `device["key"]` at its tracker, busy or free (at least one, or
    DeviceUnavailable): tuning measures on each."""
    _, servers = _tracker(device)
    return max(1, servers.count(device["key"]))


def _tracker(device: dict):
    """(the tracker, the key of each server registered there), or DeviceUnavailable saying why not."""
    from tvm import rpc

    host, _, port = device["tracker"].rpartition(":")
    try:  # TVM's own connect retries for a minute: ask the socket first, briefly
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as err:
        raise DeviceUnavailable(
            f"cannot reach the RPC tracker at {device['tracker']} ({err.strerror or err}): "
            "is it running? (fix: python -m tvm.exec.rpc_tracker --port PORT --port-end "
            "PORT+1, or set MODELBUILD_RPC_TRACKER)"
        ) from None
    tracker = rpc.connect_tracker(host, int(port))
    summary = tracker.summary()
    servers = [str(s.get("key", "")).removeprefix("server:") for s in summary.get("server_info", [])]
    keys = set(summary.get("queue_info", {})) | set(servers)
    if device["key"] not in keys:
        raise DeviceUnavailable(
            f"no device with key {device['key']!r} at the RPC tracker {device['tracker']} "
            f"(its keys: {', '.join(sorted(keys)) or 'none'}): start an RPC server with "
            f"--key {device['key']}, or fix the recipe's rpc.key"
        )
    return tracker, servers


def _within(seconds: float, call, message: str):
    """`call()`, or DeviceUnavailable(message) once `seconds` have passed (SIGALRM: measure.py's main thread)."""

    def expired(signum, frame):
        raise DeviceUnavailable(message)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _guarded(device: dict, call):
    try:
        return call()
    except DeviceUnavailable:
        raise
    except Exception as err:  # the connection dropped: TVM says so in its own words
        raise DeviceUnavailable(
            f"the {device['key']} device dropped mid-run: "
            f"{str(err).splitlines()[-1] if str(err) else type(err).__name__}"
        ) from None
