"""Build-system properties with fake stages: what reruns after each kind of edit, and failures."""

from __future__ import annotations

import json
import os
import shutil
import time

from modelbuild.engine.events import Status
from modelbuild.engine.scheduler import Options
from modelbuild.pipeline.project import open_project
from tests.helpers.cli import damage_keeping_mtime
from tests.helpers.fake_stages import write_fake_model


def build(root, **options):
    run = open_project(root / "deploy.toml").run([], Options(**options))
    return run, {node: r.status for node, r in run.results.items()}


def ran(statuses) -> set[str]:
    return {node for node, status in statuses.items() if status is Status.BUILT}


def test_first_build_runs_everything_and_publishes_artifacts(fake_project):
    root, _ = fake_project
    run, statuses = build(root)
    assert ran(statuses) == {"import:a", "compile:a@cpu", "import:b", "compile:b@cpu"}
    published = json.loads((root / "build/a/cpu/model.so").read_text())
    assert published["ir"]["graph"] == ["conv", "relu"]


def test_second_build_runs_nothing(fake_project):
    root, _ = fake_project
    build(root)
    run, statuses = build(root)
    assert set(statuses.values()) == {Status.CACHED}
    assert run.stats.hits == 4 and run.stats.misses == 0


def test_input_shape_edit_reruns_import_and_compile_of_that_model(fake_project):
    root, write = fake_project
    build(root)
    write(shape_a="[1, 3, 16, 16]")
    _, statuses = build(root)
    assert ran(statuses) == {"import:a", "compile:a@cpu"}


def test_num_cores_edit_reruns_only_compile(fake_project):
    root, write = fake_project
    build(root)
    write(cores=4)
    _, statuses = build(root)
    assert ran(statuses) == {"compile:a@cpu", "compile:b@cpu"}
    assert statuses["import:a"] is Status.CACHED


def test_touching_a_model_without_changing_bytes_reruns_nothing(fake_project):
    root, _ = fake_project
    build(root)
    later = time.time() + 5
    os.utime(root / "a.json", (later, later))
    _, statuses = build(root)
    assert ran(statuses) == set()


def test_changing_one_model_of_two_leaves_the_other_cached(fake_project):
    root, _ = fake_project
    build(root)
    write_fake_model(root / "b.json", ["matmul", "gelu"])
    _, statuses = build(root)
    assert ran(statuses) == {"import:b", "compile:b@cpu"}


def test_same_graph_saved_differently_cuts_off_early(fake_project):
    root, _ = fake_project
    build(root)
    write_fake_model(root / "a.json", ["conv", "relu"], producer="another exporter")
    _, statuses = build(root)
    assert ran(statuses) == {"import:a"}
    assert statuses["compile:a@cpu"] is Status.CACHED


def test_switching_back_to_an_earlier_recipe_is_a_cache_hit(fake_project):
    root, write = fake_project
    build(root)
    write(cores=4)
    build(root)
    write(cores=2)
    _, statuses = build(root)
    assert ran(statuses) == set()


def test_failed_stage_is_not_recorded_and_reruns_next_time(fake_project):
    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], fail="unsupported op")
    run, statuses = build(root, keep_going=True)
    assert statuses["import:a"] is Status.FAILED
    assert "unsupported op" in run.results["import:a"].error
    assert statuses["compile:a@cpu"] is Status.SKIPPED
    assert statuses["compile:b@cpu"] is Status.BUILT  # keep-going finished the other build
    _, again = build(root, keep_going=True)
    assert again["import:a"] is Status.FAILED  # never cached as a success


def test_without_keep_going_the_build_stops_after_a_failure(fake_project):
    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], fail="boom")
    _, statuses = build(root)
    assert statuses["import:a"] is Status.FAILED
    assert Status.BUILT not in {statuses.get("compile:a@cpu"), statuses.get("compile:b@cpu")}


def test_without_keep_going_a_failure_stops_the_other_models_imports_from_starting(fake_project):
    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], fail="boom")
    _, statuses = build(root, jobs=1)
    assert statuses["import:a"] is Status.FAILED
    assert statuses["import:b"] is Status.SKIPPED


def test_no_more_stages_run_at_once_than_jobs_allow(fake_project):
    from modelbuild.engine.events import NodeFinished, NodeStarted

    root, _ = fake_project
    running, most = set(), 0

    def reporter(event):  # "running" is said when a stage starts, not when it is queued behind another
        nonlocal most
        if isinstance(event, NodeStarted):
            running.add(event.node)
            most = max(most, len(running))
        elif isinstance(event, NodeFinished):
            running.discard(event.result.node)

    run = open_project(root / "deploy.toml").run([], Options(jobs=1), reporter)
    assert {r.status for r in run.results.values()} == {Status.BUILT} and most == 1


def test_an_exclusive_stage_runs_with_no_other_stage_beside_it_whatever_jobs_allow(fake_project):
    from dataclasses import replace

    from modelbuild.engine.events import NodeFinished, NodeStarted

    root, _ = fake_project
    project = open_project(root / "deploy.toml")
    project.plan.nodes["import:a"] = replace(project.plan.nodes["import:a"], exclusive=True)
    running, beside_it, started = set(), [], []

    def reporter(event):
        if isinstance(event, NodeStarted):
            started.append(event.node)
            running.add(event.node)
            if "import:a" in running and len(running) > 1:
                beside_it.append(sorted(running))
        elif isinstance(event, NodeFinished):
            running.discard(event.result.node)

    run = project.run([], Options(jobs=4), reporter)
    assert {r.status for r in run.results.values()} == {Status.BUILT}
    assert beside_it == []
    assert started.index("import:b") < started.index("import:a")  # the others first, though it came first


def test_a_cached_result_keeps_the_time_of_the_build_that_made_it(fake_project):
    root, _ = fake_project
    first, _ = build(root)
    again, _ = build(root)
    made = first.results["compile:a@cpu"]
    reused = again.results["compile:a@cpu"]
    assert reused.status is Status.CACHED and made.seconds > 0
    assert reused.built_seconds == made.seconds


def test_a_dry_run_does_not_publish_artifacts(fake_project):
    import shutil

    root, _ = fake_project
    build(root)
    shutil.rmtree(root / "build")
    _, statuses = build(root, dry_run=True)
    assert set(statuses.values()) == {Status.CACHED}
    assert not (root / "build").exists()


def test_a_crashed_worker_fails_its_stage_without_poisoning_the_cache(fake_project):
    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], crash=True)
    run, statuses = build(root, keep_going=True)
    assert statuses["import:a"] is Status.FAILED
    assert "worker process died" in run.results["import:a"].error
    write_fake_model(root / "a.json", ["conv"])
    _, statuses = build(root)
    assert statuses["import:a"] is Status.BUILT


def test_parallel_jobs_overlap_independent_stages(fake_project, tmp_path_factory):
    root, _ = fake_project
    meeting = tmp_path_factory.mktemp("meeting")
    write_fake_model(root / "a.json", ["conv"], meet={"folder": str(meeting), "me": "a", "other": "b"})
    write_fake_model(root / "b.json", ["matmul"], meet={"folder": str(meeting), "me": "b", "other": "a"})
    _, statuses = build(root, jobs=2)  # each import finishes only once it has seen the other one start
    assert statuses["import:a"] is Status.BUILT and statuses["import:b"] is Status.BUILT


def test_dry_run_runs_nothing_and_says_why(fake_project):
    root, write = fake_project
    build(root)
    write(shape_a="[1, 3, 4, 4]")
    run, statuses = build(root, dry_run=True)
    assert statuses["import:a"] is Status.STALE
    assert [str(r) for r in run.results["import:a"].reasons] == ["input x shape changed [1,3,8,8] -> [1,3,4,4]"]
    assert [str(r) for r in run.results["compile:a@cpu"].reasons] == ["upstream import:a will rerun"]
    _, after = build(root, dry_run=True)
    assert after["import:a"] is Status.STALE  # the dry run recorded nothing


def test_a_damaged_cache_object_is_caught_when_it_is_next_published_and_rebuilt(fake_project):
    root, _ = fake_project
    run, _ = build(root)
    digest = run.results["compile:a@cpu"].outputs["model.so"]
    damage_keeping_mtime(root / ".cache/objects" / digest[:2] / digest)
    _, statuses = build(root)
    assert statuses["compile:a@cpu"] is Status.CACHED  # build/ holds intact bytes: the object is not read
    shutil.rmtree(root / "build")
    run, statuses = build(root)
    assert statuses["compile:a@cpu"] is Status.BUILT
    assert [str(r) for r in run.results["compile:a@cpu"].reasons] == ["cached output missing or damaged"]
    assert json.loads((root / "build/a/cpu/model.so").read_text())["ir"]["graph"] == ["conv", "relu"]


def test_a_published_library_damaged_with_its_mtime_kept_is_replaced_by_the_next_build(fake_project):
    root, _ = fake_project
    build(root)
    published = root / "build/a/cpu/model.so"
    intact = published.read_bytes()
    damage_keeping_mtime(published)
    _, statuses = build(root)
    assert set(statuses.values()) == {Status.CACHED} and published.read_bytes() == intact


def test_a_damaged_upstream_output_is_rebuilt_before_the_stage_that_reads_it(fake_project):
    root, write = fake_project
    run, _ = build(root)
    digest = run.results["import:a"].outputs["ir.json"]
    damage_keeping_mtime(root / ".cache/objects" / digest[:2] / digest)
    write(cores=4)  # compile must run, and reads import's output
    run, statuses = build(root)
    assert statuses["import:a"] is Status.BUILT and statuses["compile:a@cpu"] is Status.BUILT
    assert [str(r) for r in run.results["import:a"].reasons] == ["cached output missing or damaged"]


def test_a_running_stage_reports_its_progress(fake_project, tmp_path_factory):
    from modelbuild.engine.events import NodeProgress

    root, _ = fake_project
    acks = tmp_path_factory.mktemp("acks")
    write_fake_model(root / "a.json", ["conv"], progress=4, acks=str(acks))
    seen = []

    def reporter(event):  # the stage moves to its next step only once the build has shown this one
        if isinstance(event, NodeProgress) and event.node == "import:a":
            seen.append(event.fields["step"])
            (acks / f"step-{event.fields['step']}").touch()

    run = open_project(root / "deploy.toml").run(["a@cpu"], Options(), reporter)
    assert run.results["import:a"].status is Status.BUILT
    assert seen == [1, 2, 3, 4]  # every step, in order, each once


def test_editing_a_stage_helper_reruns_that_stage_only(fake_project, monkeypatch, tmp_path_factory):
    from dataclasses import replace

    from modelbuild import sources
    from modelbuild.pipeline import registry

    lib = tmp_path_factory.mktemp("lib")
    (lib / "mb_helper_under_test.py").write_text("FACTOR = 1\n")
    monkeypatch.syspath_prepend(str(lib))
    helped = replace(registry.STAGES["compile"], also_runs=("mb_helper_under_test",))
    monkeypatch.setitem(registry.STAGES, "compile", helped)
    root, _ = fake_project
    sources.source_digest.cache_clear()  # one process builds twice here; a CLI run is a fresh process
    build(root)
    (lib / "mb_helper_under_test.py").write_text("FACTOR = 2\n")
    sources.source_digest.cache_clear()
    run, statuses = build(root, dry_run=True)
    assert {n for n, s in statuses.items() if s is Status.STALE} == {"compile:a@cpu", "compile:b@cpu"}
    assert [str(r) for r in run.results["compile:a@cpu"].reasons] == ["stage code changed"]


def test_changing_only_the_arm_targets_mcpu_rebuilds_only_that_target(tmp_path, fake_stages):
    write_fake_model(tmp_path / "a.json", ["conv", "relu"])

    def write(mcpu: str) -> None:
        (tmp_path / "deploy.toml").write_text(
            '[models.a]\npath = "a.json"\ninputs.x = { shape = [1, 3, 8, 8], dtype = "float32" }\n\n'
            '[targets.x86]\nkind = "llvm"\nmcpu = "skylake"\n\n'
            f'[targets.pi]\nkind = "llvm"\nmtriple = "aarch64-linux-gnu"\nmcpu = "{mcpu}"\n'
            'rpc = { tracker = "127.0.0.1:9190", key = "rpi4" }\n\n'
            '[validation]\nenabled = false\n\n[[builds]]\nmodel = "a"\ntargets = ["x86", "pi"]\n'
        )

    write("cortex-a72")
    assert ran(build(tmp_path)[1]) == {"import:a", "compile:a@x86", "compile:a@pi"}
    write("cortex-a76")
    _, statuses = build(tmp_path)
    assert ran(statuses) == {"compile:a@pi"} and statuses["compile:a@x86"] is Status.CACHED
