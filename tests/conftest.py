from __future__ import annotations

import textwrap
import time
import uuid
from pathlib import Path

import pytest

from modelbuild.pipeline import registry
from tests.helpers.fake_stages import FAKE_RECIPE, FAKE_STAGES, write_fake_model
from tests.helpers.object_store import s3, start_s3_server
from tests.helpers.processes import EMULATED_ARM64_KEY, free_port, serve_emulated_arm64


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


@pytest.fixture
def fake_stages(monkeypatch):
    """Swap the TVM stages for the fakes."""
    for name, stage in FAKE_STAGES.items():
        monkeypatch.setitem(registry.STAGES, name, stage)


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


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server in its own process on 127.0.0.1; yields its endpoint URL."""
    server, endpoint = start_s3_server()
    yield endpoint
    server.terminate()
    server.wait(10)


@pytest.fixture
def bucket(s3_server, monkeypatch):
    """A fresh bucket on the server, with the environment a CI job would set; yields the remote's URL."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server,
    }.items():
        monkeypatch.setenv(name, value)
    name = f"team-{uuid.uuid4().hex[:12]}"
    s3().mkdir(name)
    return f"s3://{name}/modelbuild"


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray cluster on 127.0.0.1, a head and two worker nodes of one CPU each (about 10 s to start), for the
    session: tests that kill a node start it again."""
    pytest.importorskip("ray", reason="ray is not installed here (pip install 'modelbuild[cluster]')")
    from tests.helpers.ray_cluster import RayCluster

    cluster = RayCluster.start()
    try:
        cluster.add_node("node1")
        cluster.add_node("node2")
        yield cluster
    finally:
        cluster.stop()
