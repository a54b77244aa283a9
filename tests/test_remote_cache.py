"""The remote cache against a real S3-compatible server (moto's server mode, started on 127.0.0.1) and a
shared folder, with the fake stages: what a second machine takes, what it refuses, what a reader never writes."""

from __future__ import annotations

import shutil

from modelbuild.engine.remote import redact
from tests.helpers.cli import run_cli
from tests.helpers.object_store import s3
from tests.helpers.processes import free_port


def clone(root, tmp_path_factory):
    """The same recipe and models in another folder with an empty cache, as on another machine."""
    other = tmp_path_factory.mktemp("clone")
    for name in ("deploy.toml", "a.json", "b.json"):
        shutil.copy(root / name, other / name)
    return other


def statuses(out: str) -> dict[str, str]:
    return {
        line.split()[1]: line.split()[0] for line in out.splitlines() if line.split()[:1] in (["built"], ["cached"])
    }


def test_a_second_machine_builds_nothing_the_first_has_uploaded(
    fake_project, bucket, monkeypatch, capsys, tmp_path_factory
):
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    code, out, err = run_cli(capsys, root, "build")
    assert code == 0 and f"remote cache {bucket}: 0 results taken, 4 given" in err
    other = clone(root, tmp_path_factory)
    code, out, err = run_cli(capsys, other, "build")
    assert code == 0 and set(statuses(out).values()) == {"cached"} and "4 results taken" in err
    assert (other / "build/a/cpu/model.so").read_bytes() == (root / "build/a/cpu/model.so").read_bytes()
    keys = s3().glob(f"{bucket.removeprefix('s3://')}/actions/*/*.json")
    assert len(keys) == 4


def test_a_result_the_build_doubts_runs_again_though_a_read_only_team_cache_holds_it(
    fake_project, bucket, monkeypatch, capsys, tmp_path_factory
):
    from modelbuild.engine.scheduler import Options
    from modelbuild.pipeline.project import open_project

    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    run_cli(capsys, root, "build")
    # a pull request's machine: it may read the team's cache, not change it, and doubts what it takes from it
    # as it doubts its own results (a failed timing gate does, reports/remeasure.py)
    project = open_project(clone(root, tmp_path_factory) / "deploy.toml", cache_mode="read")
    run = project.run([], Options(), doubt=lambda node, result: "max_p99_ms" if node.id == "compile:a@cpu" else None)
    assert {node: r.status.value for node, r in run.results.items() if r.status.value == "built"} == {
        "compile:a@cpu": "built"
    }
    assert [str(r) for r in run.results["compile:a@cpu"].reasons] == ["its cached result fails max_p99_ms: run again"]
    assert len(s3().glob(f"{bucket.removeprefix('s3://')}/actions/*/*.json")) == 4  # the team's cache as it was


def test_a_tampered_remote_object_is_refused_and_its_stage_rebuilt(
    fake_project, bucket, monkeypatch, capsys, tmp_path_factory
):
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    run_cli(capsys, root, "build")
    library = (root / "build/a/cpu/model.so").read_bytes()
    objects = bucket.removeprefix("s3://") + "/objects"
    planted = [path for path in s3().glob(f"{objects}/*/*") if s3().cat_file(path) == library]
    for path in planted:
        s3().pipe_file(path, library[::-1])  # as long as the library: only its digest tells
    other = clone(root, tmp_path_factory)
    code, out, err = run_cli(capsys, other, "build")
    assert code == 0 and statuses(out)["compile:a@cpu"] == "built" and statuses(out)["import:a"] == "cached"
    assert "does not match its digest; rebuilding instead" in err
    assert (other / "build/a/cpu/model.so").read_bytes() == library
    # and the machine that rebuilt it put the true bytes back, so the next one takes it
    assert planted and all(s3().cat_file(path) == library for path in planted)


def test_a_reader_in_read_mode_never_writes(fake_project, bucket, monkeypatch, capsys):
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    code, _, err = run_cli(capsys, root, "build", "--cache-mode", "read")
    assert code == 0 and "0 results taken, read only" in err
    assert s3().find(bucket.removeprefix("s3://")) == []


def test_entries_signed_with_another_key_are_rejected(fake_project, bucket, monkeypatch, capsys, tmp_path_factory):
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", bucket)
    monkeypatch.setenv("MODELBUILD_CACHE_SIGNING_KEY", "an intruder's key")
    run_cli(capsys, root, "build")
    monkeypatch.setenv("MODELBUILD_CACHE_SIGNING_KEY", "the team's key")
    code, out, err = run_cli(capsys, clone(root, tmp_path_factory), "build")
    assert code == 0 and set(statuses(out).values()) == {"built"}
    assert "not signed with this team's key; building instead" in err
    assert "the team's key" not in err and "intruder" not in err


def test_an_unreachable_remote_is_said_once_and_the_build_goes_on_locally(fake_project, monkeypatch, capsys):
    root, _ = fake_project
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "MODELBUILD_REMOTE_CACHE": "s3://nowhere/cache",
    }.items():
        monkeypatch.setenv(name, value)
    code, out, err = run_cli(capsys, root, "build")
    assert code == 0 and set(statuses(out).values()) == {"built"}
    assert err.count("unavailable") == 1 and "building locally" in err


def test_a_shared_folder_is_a_remote_by_the_same_code(fake_project, monkeypatch, capsys, tmp_path_factory):
    root, _ = fake_project
    shared = tmp_path_factory.mktemp("shared")
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", str(shared))
    run_cli(capsys, root, "build")
    code, out, err = run_cli(capsys, clone(root, tmp_path_factory), "build")
    assert code == 0 and set(statuses(out).values()) == {"cached"} and "4 results taken" in err


def test_an_object_a_writer_left_half_written_is_replaced_by_the_next_writer(
    fake_project, monkeypatch, capsys, tmp_path_factory
):
    root, _ = fake_project
    shared = tmp_path_factory.mktemp("shared")
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", str(shared))
    run_cli(capsys, root, "build")
    library = (root / "build/a/cpu/model.so").read_bytes()
    # a writer stopped after half the library's bytes, before its entry
    (object_path,) = [path for path in shared.glob("objects/*/*") if path.read_bytes() == library]
    object_path.write_bytes(library[: len(library) // 2])
    for entry in shared.glob("actions/*/*.json"):
        if '"compile:a@cpu"' in entry.read_text():
            entry.unlink()
    code, out, err = run_cli(capsys, clone(root, tmp_path_factory), "build")
    assert code == 0 and statuses(out)["compile:a@cpu"] == "built"
    assert object_path.read_bytes() == library
    # written under another name and renamed: nothing half written is left beside it
    assert [path.name for path in shared.rglob("*.tmp")] == []


def test_a_bad_cache_mode_or_protocol_is_one_line_with_the_fix(fake_project, monkeypatch, capsys):
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_CACHE_MODE", "sometimes")
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", "s3://b/p")
    code, _, err = run_cli(capsys, root, "build")
    assert code == 2 and err.strip() == (
        "error: MODELBUILD_CACHE_MODE='sometimes' is not a cache mode (fix: one of read, readwrite, off)"
    )
    monkeypatch.delenv("MODELBUILD_CACHE_MODE")
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", "nosuch://b/p")
    code, _, err = run_cli(capsys, root, "build")
    assert code == 2 and "fsspec knows no protocol 'nosuch'" in err


def test_credentials_in_a_url_never_reach_a_message():
    assert (
        redact("remote cache https://alice:s3cr3t@cache.example/p unavailable")
        == "remote cache https://***@cache.example/p unavailable"
    )
