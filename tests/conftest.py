from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from modelbuild.engine.stage import Stage
from modelbuild.pipeline import registry

REPO = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items) -> None:
    """The one rule of the tiers: a test builds with the real TVM, and runs in the slow tier, where its file
    is named *_tvm.py or it takes the `tvm` fixture (a TVM test in a file of fast ones)."""
    for item in items:
        if item.path.stem.endswith("_tvm") or "tvm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.tvm)


@pytest.fixture
def tvm():
    """TVM itself, imported when a test asks for it: the fast tier never loads it."""
    import tvm as module

    return module


@pytest.fixture(autouse=True, scope="session")
def timing_lock_of_the_tests(tmp_path_factory):
    """The machine's timing lock in the test session's own folder: builds run beside the tests neither wait
    for theirs nor make them wait, and the tests leave no lock in TMPDIR."""
    from modelbuild.engine.locks import TIMING_LOCK_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TIMING_LOCK_ENV, str(tmp_path_factory.mktemp("timing") / "timing.lock"))
        yield


# fast fakes that run the same way as the TVM stages, in worker processes
FAKE_STAGES = {
    "import": Stage("import", "tests.fake_stages:import_", ("onnx",), "fake", outputs=("ir.json", "signature.json")),
    "compile": Stage(
        "compile",
        "tests.fake_stages:compile_",
        ("tvm",),
        "fake",
        outputs=("{library}", "analysis.json", "library.json"),
    ),
}


@pytest.fixture
def fake_stages(monkeypatch):
    """Swap the TVM stages for the fakes."""
    for name, stage in FAKE_STAGES.items():
        monkeypatch.setitem(registry.STAGES, name, stage)


def write_fake_model(path: Path, graph: list[str], **extra) -> Path:
    path.write_text(json.dumps({"graph": graph, **extra}))
    return path


FAKE_RECIPE = """
[models.a]
path = "a.json"
inputs.x = {{ shape = {shape_a}, dtype = "float32" }}

[models.b]
path = "b.json"
inputs.x = {{ shape = [1, 4], dtype = "float32" }}

[targets.cpu]
kind = "llvm"
mcpu = "skylake"
num-cores = {cores}

[validation]
enabled = false  # these recipes test the build core; validation has its own tests

[[builds]]
model = "a"
targets = ["cpu"]

[[builds]]
model = "b"
targets = ["cpu"]
"""


@pytest.fixture
def fake_project(tmp_path, fake_stages):
    """A two-model recipe over fake JSON models; returns a writer to edit it."""
    write_fake_model(tmp_path / "a.json", ["conv", "relu"])
    write_fake_model(tmp_path / "b.json", ["matmul"])

    def write(shape_a="[1, 3, 8, 8]", cores=2) -> Path:
        recipe = tmp_path / "deploy.toml"
        recipe.write_text(textwrap.dedent(FAKE_RECIPE.format(shape_a=shape_a, cores=cores)))
        return recipe

    write()
    return tmp_path, write


@pytest.fixture
def stage_tmpdir(tmp_path_factory, monkeypatch) -> Path:
    """An empty TMPDIR for the stage workers a build spawns (they read it when they start): whatever is left
    in it after the build, a stage leaked into every user's /tmp."""
    folder = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def left_in(folder: Path) -> list[str]:
    """What a build left in its TMPDIR, but onnxruntime's `.ses` (one file of a fixed name, its session id,
    rewritten by every session)."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".ses")


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_group(command: list[str]) -> subprocess.Popen:
    """A server in a process group of its own, quiet; end it with `stop_group`. TVM's tracker and RPC server
    serve from popen_worker children, which outlive a killed parent (orphans under pid 1 after every run)."""
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in open(f"/proc/{pid}/task/{task}/children").read().split():
            found += [int(child), *descendants(int(child))]
    return found


def stop_group(process: subprocess.Popen, timeout: float = 10) -> None:
    """End the group `start_group` started: SIGTERM (a server may clean up), SIGKILL after `timeout`."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30) -> None:
    """Until a server started as `process` accepts connections on 127.0.0.1:port; fails if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None, f"nothing came to listen on {port}"
            time.sleep(0.1)


EMULATED_ARM64_KEY = "rpi4"
EMULATED_ARM64_NEEDS = ("qemu-aarch64-static", "aarch64-linux-gnu-gcc", "apt-get", "dpkg")


def serve_emulated_arm64(key: str, tracker: str) -> subprocess.Popen:
    """scripts/emulated_arm64.py serving device `key` and a tracker at `tracker` (127.0.0.1:PORT), once the
    tracker answers (the device registers about 10 s later); skips where the emulator's tools are missing."""
    missing = [tool for tool in EMULATED_ARM64_NEEDS if shutil.which(tool) is None]
    if missing:  # .ci/run installs them
        pytest.skip(f"needs {', '.join(missing)} (Debian: apt-get install qemu-user-static gcc-aarch64-linux-gnu)")
    import sys

    server = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "scripts/emulated_arm64.py"),
            "serve",
            "--key",
            key,
            "--tracker",
            tracker,
            "--port",
            str(free_port()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the first run downloads the environment (about 200 MB) before it starts the tracker
    wait_for_port(int(tracker.rpartition(":")[2]), server, timeout=600)
    return server


@pytest.fixture(scope="session")
def classifier_store(tmp_path_factory) -> Path:
    """One store for the tests that build the bundled classifier from a shipped recipe or its like, shared as
    a team's builds share one: the stages whose inputs agree (the import, the fp32 x86 compile, the int8 x86
    quantize and compile) run once a session; each recipe's own stages still run in its test."""
    return tmp_path_factory.mktemp("classifier-store")


@pytest.fixture(scope="session")
def arm64_tracker():
    """An emulated Arm device (scripts/emulated_arm64.py, key EMULATED_ARM64_KEY) and a tracker (the script
    starts one where none listens); yields 'host:port'. One for the whole session: it takes about 20 s to
    start, TVM importing under qemu."""
    address = f"127.0.0.1:{free_port()}"
    server = serve_emulated_arm64(EMULATED_ARM64_KEY, address)
    from tvm import rpc

    port = int(address.rpartition(":")[2])
    deadline = time.monotonic() + 120
    while EMULATED_ARM64_KEY not in rpc.connect_tracker("127.0.0.1", port).text_summary():
        assert server.poll() is None, f"the emulated device stopped: {server.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "the emulated device never registered with the tracker"
        time.sleep(1)
    yield address
    server.terminate()
    server.wait(timeout=30)


def run_on_read_only(folder: Path, command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run `command` with `folder` read-only: by permissions for a normal user; for root, whom permissions do
    not stop, by a read-only bind mount in a private mount namespace (skipped where the machine refuses one)."""
    if os.getuid() != 0:
        folders = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
        for each in folders:
            each.chmod(0o555)
        try:
            return subprocess.run(command, capture_output=True, text=True, **kwargs)
        finally:
            for each in folders:
                each.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare(1): cannot make a read-only folder")
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(folder), *command], capture_output=True, text=True, **kwargs
    )
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"root, but this machine refuses a private read-only mount: {done.stderr.strip()}")
    return done
