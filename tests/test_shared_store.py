"""Builds that share one store: locks, leftovers of killed builds, workers of a killed build, clean and gc
during a build. Real processes and real flock(2) locks, with the fake stages."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from modelbuild.engine.events import NodeProgress, NodeWaiting, Status
from modelbuild.engine.scheduler import Options
from modelbuild.pipeline.project import open_project
from tests.helpers.cli import run_cli
from tests.helpers.fake_stages import write_fake_model
from tests.helpers.paths import REPO
from tests.helpers.processes import run_on_read_only


def in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def paused_model(root: Path, acks: Path) -> None:
    """Model a's import reports one step of progress, then waits until the test touches acks/step-1."""
    write_fake_model(root / "a.json", ["conv", "relu"], progress=1, acks=str(acks))


def test_two_builds_of_one_recipe_build_each_key_once_and_the_second_says_whom_it_waits_for(
    fake_project, tmp_path_factory
):
    root, _ = fake_project
    acks = tmp_path_factory.mktemp("acks")
    paused_model(root, acks)
    first_running, runs, waited = threading.Event(), {}, []

    def first_reporter(event):
        if isinstance(event, NodeProgress) and event.node == "import:a":
            first_running.set()

    def second_reporter(event):
        if isinstance(event, NodeWaiting):
            waited.append(event)
            (acks / "step-1").touch()  # the first build may finish once the second is seen waiting

    first = in_thread(
        lambda: runs.setdefault("first", open_project(root / "deploy.toml").run([], Options(), first_reporter))
    )
    assert first_running.wait(60)
    second = in_thread(
        lambda: runs.setdefault("second", open_project(root / "deploy.toml").run([], Options(), second_reporter))
    )
    first.join(120), second.join(120)
    built = [(name, node) for name, run in runs.items() for node, r in run.results.items() if r.status is Status.BUILT]
    assert sorted(node for _, node in built) == ["compile:a@cpu", "compile:b@cpu", "import:a", "import:b"]
    assert runs["second"].results["import:a"].status is Status.CACHED
    assert waited[0].node == "import:a" and waited[0].holder.startswith(f"pid {os.getpid()} on ")
    assert not list((root / ".cache/tmp").iterdir())


def exclusive(project, node_id: str):
    from dataclasses import replace

    project.plan.nodes[node_id] = replace(project.plan.nodes[node_id], exclusive=True)
    return project


def letting_go_when_waited(lock, events: list):
    """A reporter that keeps every event and lets go of `lock`, which stands for another build's, once the
    build says it waits for it."""

    def reporter(event):
        events.append(event)
        if isinstance(event, NodeWaiting):
            lock.release()

    return reporter


def test_a_stage_that_times_waits_for_other_builds_stages_on_this_machine(fake_project):
    """Another build's running stage holds the machine's timing lock shared (whatever its store); a stage that
    times here takes it exclusively, so it waits, and says why, until that stage ends (here: the test lets go
    of the lock when told). The stages that do not time run beside the other build's."""
    from modelbuild.engine.events import NodeStarted
    from modelbuild.engine.locks import timing_lock

    root, _ = fake_project
    other_build = timing_lock(exclusive=False)
    assert other_build.try_acquire()
    events = []
    run = exclusive(open_project(root / "deploy.toml"), "import:a").run(
        [], Options(jobs=2), letting_go_when_waited(other_build, events)
    )
    assert {r.status for r in run.results.values()} == {Status.BUILT}
    waited = [e for e in events if isinstance(e, NodeWaiting)]
    assert waited == [NodeWaiting("import:a", "", "timing")]
    started = {e.node: i for i, e in enumerate(events) if isinstance(e, NodeStarted)}
    assert started["import:b"] < events.index(waited[0]) < started["import:a"]


def test_a_stage_waiting_to_time_goes_before_the_next_stages_of_other_builds(fake_project):
    """flock prefers no one: a stream of another build's stages, each taking the timing lock shared, could keep
    a timing waiting for ever. While it waits it holds the timing queue, and no stage of any build starts."""
    from modelbuild.engine.locks import timing_lock, timing_queue

    root, _ = fake_project
    other_build = timing_lock(exclusive=False)
    assert other_build.try_acquire()
    refused = []

    def reporter(event):
        if isinstance(event, NodeWaiting) and event.why == "timing":
            next_stage = timing_queue(waiting=False)  # the other build's next stage, as it would start
            refused.append(not next_stage.try_acquire())
            next_stage.release()
            other_build.release()

    run = exclusive(open_project(root / "deploy.toml"), "import:a").run([], Options(jobs=2), reporter)
    assert {r.status for r in run.results.values()} == {Status.BUILT}
    assert refused == [True]
    after = timing_queue(waiting=False)
    assert after.try_acquire()  # the run let go of the queue
    after.release()


def test_no_stage_starts_while_another_build_times_on_this_machine(fake_project):
    from modelbuild.engine.events import NodeStarted
    from modelbuild.engine.locks import timing_lock

    root, _ = fake_project
    other_build = timing_lock(exclusive=True)
    assert other_build.try_acquire()
    events = []
    run = open_project(root / "deploy.toml").run([], Options(jobs=2), letting_go_when_waited(other_build, events))
    assert {r.status for r in run.results.values()} == {Status.BUILT}
    first = next(e for e in events if isinstance(e, (NodeWaiting, NodeStarted)))
    assert isinstance(first, NodeWaiting) and first.why == "timed"
    assert first.holder.startswith(f"pid {os.getpid()} on ")


def test_clean_refuses_while_a_build_runs_and_works_after(fake_project, tmp_path_factory, capsys):
    root, _ = fake_project
    acks = tmp_path_factory.mktemp("acks")
    paused_model(root, acks)
    running, runs = threading.Event(), {}
    build = in_thread(
        lambda: runs.setdefault(
            "run",
            open_project(root / "deploy.toml").run(
                [], Options(), lambda e: isinstance(e, NodeProgress) and running.set()
            ),
        )
    )
    assert running.wait(60)
    code, _, err = run_cli(capsys, root, "clean", "--all")
    assert code == 4 and err.strip().startswith("error: a build is running on the cache")
    code, _, err = run_cli(capsys, root, "cache", "gc", "--max-size", "0")
    assert code == 4 and "modelbuild cache gc` when it has finished" in err
    (acks / "step-1").touch()
    build.join(120)
    assert all(r.status is Status.BUILT for r in runs["run"].results.values())
    assert run_cli(capsys, root, "clean", "--all")[0] == 0


def test_the_next_build_removes_what_killed_builds_left_and_stats_never_count_it(fake_project, capsys):
    root, _ = fake_project
    open_project(root / "deploy.toml").run([], Options())
    store = root / ".cache"
    left = [store / "tmp/compile-dead1/out", store / "objects/ab/.abcd.x1.tmp", store / "actions/cd/.cd.json.y2.tmp"]
    for path in left:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("half")
    stats = json.loads(run_cli(capsys, root, "cache", "stats", "--json")[1])
    assert stats["entries"] == 4 and stats["bytes"] == sum(p.stat().st_size for p in store.glob("objects/*/[!.]*"))
    open_project(root / "deploy.toml").run([], Options())
    assert not any(p.exists() for p in left) and not (store / "tmp/compile-dead1").exists()


KILLED_PARENT = """
import sys
from tests.helpers.fake_stages import FAKE_STAGES
from modelbuild.pipeline import registry
registry.STAGES.update(FAKE_STAGES)
from modelbuild.engine.scheduler import Options
from modelbuild.pipeline.project import open_project
open_project(sys.argv[1]).run(["a@cpu"], Options())
"""


def test_workers_end_when_their_build_is_killed_alone(fake_project, tmp_path_factory):
    root, _ = fake_project
    acks, pidfile = tmp_path_factory.mktemp("acks"), root / "worker.pid"
    write_fake_model(root / "a.json", ["conv"], progress=1, acks=str(acks), pidfile=str(pidfile))
    parent = subprocess.Popen([sys.executable, "-c", KILLED_PARENT, str(root / "deploy.toml")], cwd=REPO)
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), "the worker to start its stage")
        worker = int(pidfile.read_text())
        parent.send_signal(signal.SIGKILL)  # as an OOM killer does: no handler runs in the parent
        parent.wait(10)
        wait_until(lambda: not alive(worker), "the orphaned worker to exit", timeout=5)
    finally:
        parent.kill()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended; it only waits for its parent to reap it
        return stat.read().split(") ")[-1][0] != "Z"


INTERRUPTED_CLI = """
import sys
from tests.helpers.fake_stages import FAKE_STAGES
from modelbuild.pipeline import registry
registry.STAGES.update(FAKE_STAGES)
from modelbuild.cli import main
sys.exit(main(["build", "a@cpu", "-f", sys.argv[1]]))
"""


@pytest.mark.parametrize("presses", [1, 2, 5])
def test_ctrl_c_during_a_stage_ends_the_build_within_2_s_and_records_nothing(fake_project, tmp_path_factory, presses):
    root, _ = fake_project
    acks, pidfile = tmp_path_factory.mktemp("acks"), root / "worker.pid"
    write_fake_model(root / "a.json", ["conv"], progress=1, acks=str(acks), pidfile=str(pidfile))
    build = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_CLI, str(root / "deploy.toml")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), "the worker to start its stage")
        worker = int(pidfile.read_text())
        pressed = time.monotonic()
        for _ in range(presses):
            build.send_signal(signal.SIGINT)
            time.sleep(0.05)
        _, err = build.communicate(timeout=10)
        assert time.monotonic() - pressed < 2.0
    finally:
        build.kill()
    assert build.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "error: interrupted while import:a ran: those stages were stopped and nothing half-built was recorded"
    )
    wait_until(lambda: not alive(worker), "the stage's worker to end", timeout=2)
    assert not list((root / ".cache").glob("actions/*/*.json")) and not list((root / ".cache/tmp").iterdir())


READ_ONLY_CLI = """
import sys
from tests.helpers.fake_stages import FAKE_STAGES
from modelbuild.pipeline import registry
registry.STAGES.update(FAKE_STAGES)
from modelbuild.cli import main
for command in ("build", "status", "report", "cache"):
    code = main([command] + (["stats"] if command == "cache" else []) + ["-f", sys.argv[1]])
    print("exit", command, code, flush=True)
"""


def test_a_no_op_build_status_report_and_stats_work_on_a_read_only_cache_and_change_nothing(fake_project):
    root, _ = fake_project
    open_project(root / "deploy.toml").run([], Options())
    cache = root / ".cache"
    before = sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*"))
    done = run_on_read_only(cache, [sys.executable, "-c", READ_ONLY_CLI, str(root / "deploy.toml")], cwd=REPO)
    codes = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("exit ")]
    assert codes == [["build", "0"], ["status", "0"], ["report", "0"], ["cache", "0"]], done.stdout + done.stderr
    assert "note: the cache is read-only: this run's hits and misses are not added to its statistics" in done.stderr
    assert sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*")) == before


def test_six_concurrent_builds_of_one_recipe_all_finish_and_build_each_key_once(fake_project):
    root, _ = fake_project
    runs: list = []
    threads = [in_thread(lambda: runs.append(open_project(root / "deploy.toml").run([], Options()))) for _ in range(6)]
    for thread in threads:
        thread.join(120)
    assert len(runs) == 6
    built = sorted(node for run in runs for node, r in run.results.items() if r.status is Status.BUILT)
    assert built == ["compile:a@cpu", "compile:b@cpu", "import:a", "import:b"]
    assert all(r.status in (Status.BUILT, Status.CACHED) for run in runs for r in run.results.values())


KILLED_BUILD = """
import sys
from tests.helpers.fake_stages import FAKE_STAGES
from modelbuild.pipeline import registry
registry.STAGES.update(FAKE_STAGES)
from modelbuild.cli import main
sys.exit(main(["build", "-f", sys.argv[1]]))
"""


@pytest.mark.slow
def test_builds_killed_at_random_moments_leave_no_wrong_entry_and_the_next_build_leaves_no_leftovers(fake_project):
    from modelbuild.engine.housekeeping import verify
    from modelbuild.engine.store import Store

    root, write = fake_project
    rng = random.Random(0)
    command = [sys.executable, "-c", KILLED_BUILD, str(root / "deploy.toml")]
    started = time.monotonic()
    subprocess.run(command, cwd=REPO, capture_output=True, check=True)
    full = time.monotonic() - started
    reference = (root / "build/a/cpu/model.so").read_bytes()
    for round in range(12):
        write(cores=2 + round % 3)  # a new key for the compile stages, so every round has work to kill
        build = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, full))
        build.send_signal(signal.SIGKILL)
        build.wait()
        assert verify(Store(root / ".cache")) == [], f"round {round}"
    write()
    subprocess.run(command, cwd=REPO, capture_output=True, check=True)
    assert (root / "build/a/cpu/model.so").read_bytes() == reference
    left = [p for p in Store(root / ".cache").leftovers() if not p.name.endswith(".lock")]
    assert left == []


def test_a_timing_lock_that_cannot_be_made_is_one_line_naming_it_with_exit_code_4(fake_project, capsys, monkeypatch):
    from modelbuild.engine.locks import TIMING_LOCK_ENV

    root, _ = fake_project
    (root / "not-a-folder").write_text("")
    monkeypatch.setenv(TIMING_LOCK_ENV, str(root / "not-a-folder" / "timing.lock"))
    code, _, err = run_cli(capsys, root, "build")
    assert code == 4 and len(err.strip().splitlines()) == 1
    assert "not-a-folder" in err and "Traceback" not in err
    assert f"or set {TIMING_LOCK_ENV} to a file in one" in err
    assert not (root / ".cache" / "actions").exists() or not list((root / ".cache" / "actions").rglob("*.json"))
