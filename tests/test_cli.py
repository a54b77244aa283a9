"""The command line: exit codes, one-line errors, and what each command prints."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest

from modelbuild.cli import main
from tests.helpers.cli import run_cli


def test_build_then_status_is_up_to_date(fake_project, capsys):
    root, _ = fake_project
    code, out, _ = run_cli(capsys, root, "build")
    assert code == 0
    assert "4 built, 0 cached, 0 failed" in out
    assert f"artifact: {root / 'build/a/cpu/model.so'}" in out
    assert run_cli(capsys, root, "status")[0] == 0


def test_status_lists_stale_stages_with_reasons_and_exits_1(fake_project, capsys):
    root, write = fake_project
    run_cli(capsys, root, "build")
    write(cores=8)
    code, out, _ = run_cli(capsys, root, "status")
    assert code == 1
    assert "stale  compile:a@cpu: target num-cores changed 2 -> 8" in out
    assert "import:a" not in out


def test_status_json_gives_each_reason_as_data(fake_project, capsys):
    root, write = fake_project
    run_cli(capsys, root, "build")
    write(cores=8)
    code, out, _ = run_cli(capsys, root, "status", "--json")
    stale = {entry["node"]: entry["reasons"] for entry in json.loads(out)["stale"]}
    assert code == 1 and stale["compile:a@cpu"] == [
        {"kind": "target", "field": "num-cores", "old": 2, "new": 8, "text": "target num-cores changed 2 -> 8"}
    ]


def test_selected_build_runs_only_its_stages(fake_project, capsys):
    root, _ = fake_project
    code, out, _ = run_cli(capsys, root, "build", "b@cpu", "--json")
    assert code == 0
    nodes = {n["node"] for n in json.loads(out)["nodes"]}
    assert nodes == {"import:b", "compile:b@cpu"}


def test_unknown_selector_is_a_usage_error(fake_project, capsys):
    root, _ = fake_project
    code, _, err = run_cli(capsys, root, "build", "nope@cpu")
    assert code == 2 and "no build matches 'nope@cpu'" in err and "a@cpu" in err


def test_search_needs_one_build_that_names_a_search(fake_project, capsys):
    root, _ = fake_project
    code, out, err = run_cli(capsys, root, "search", "a@cpu")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "'a@cpu' selects no build with a search" in err and 'search = "NAME"' in err
    code, _, err = run_cli(capsys, root, "search", "nope")
    assert code == 2 and "no build matches 'nope'" in err


def test_dry_run_says_what_would_run(fake_project, capsys):
    root, _ = fake_project
    code, out, _ = run_cli(capsys, root, "build", "--dry-run")
    assert code == 0 and "would run import:a: never built" in out
    assert not (root / ".cache/actions").exists()


def test_failed_stage_exits_3_and_points_at_its_log(fake_project, capsys):
    root, _ = fake_project
    (root / "a.json").write_text(json.dumps({"graph": [], "fail": "no kernel for Foo"}))
    code, out, _ = run_cli(capsys, root, "build", "--keep-going")
    assert code == 3
    assert "FAILED import:a: fake import refuses: no kernel for Foo" in out
    log = root / "build/logs/import-a.log"
    assert "Traceback" in log.read_text()
    artifacts = {b["name"]: b["artifact"] for b in json.loads((root / "build/report.json").read_text())["builds"]}
    assert artifacts["a@cpu"] is None and artifacts["b@cpu"].endswith("model.so")  # nothing published for a


def test_explain_shows_key_inputs_and_what_changed(fake_project, capsys):
    root, write = fake_project
    run_cli(capsys, root, "build")
    write(shape_a="[1, 3, 2, 2]")
    code, out, _ = run_cli(capsys, root, "explain", "a@cpu")
    assert code == 0
    assert "params.inputs.x.shape = [1,3,2,2]" in out
    assert "since last build: input x shape changed [1,3,8,8] -> [1,3,2,2]" in out


@pytest.mark.parametrize(
    "fmt, expected",
    [("tree", "  compile:a@cpu  <- import:a"), ("dot", '"import:a" -> "compile:a@cpu"'), ("mermaid", "flowchart LR")],
)
def test_graph_formats(fake_project, capsys, fmt, expected):
    root, _ = fake_project
    code, out, _ = run_cli(capsys, root, "graph", "--format", fmt)
    assert code == 0 and expected in out


def test_cache_stats_and_clean(fake_project, capsys):
    root, _ = fake_project
    run_cli(capsys, root, "build")
    run_cli(capsys, root, "build")
    code, out, _ = run_cli(capsys, root, "cache", "stats", "--json")
    stats = json.loads(out)
    assert (stats["hits"], stats["misses"], stats["entries"]) == (4, 4, 4)
    assert stats["hit_rate"] == 0.5
    assert run_cli(capsys, root, "clean")[0] == 0
    assert not (root / "build").exists() and (root / ".cache").exists()
    tuned = root / ".cache" / "tuning" / "llvm-x" / "database_tuning_record.json"
    tuned.parent.mkdir(parents=True)
    tuned.write_text("hours of measurements")
    code, out, _ = run_cli(capsys, root, "clean", "--all")
    assert code == 0 and "kept tuning databases" in out
    # the store lock stays: a build starting meanwhile must find the file clean holds, not a new one
    assert sorted(p.name for p in (root / ".cache").iterdir()) == ["store.lock", "tuning"] and tuned.exists()
    assert run_cli(capsys, root, "clean", "--all", "--tuning")[0] == 0
    assert [p.name for p in (root / ".cache").iterdir()] == ["store.lock"]


def test_clean_tuning_alone_is_a_usage_error(fake_project, capsys):
    root, _ = fake_project
    code, _, err = run_cli(capsys, root, "clean", "--tuning")
    assert code == 2 and err.strip() == "error: --tuning only goes with --all (fix: modelbuild clean --all --tuning)"


def test_a_stage_that_finds_bad_input_exits_2_with_one_line(fake_project, capsys):
    from tests.helpers.fake_stages import write_fake_model

    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], bad_input="input 'x' is int64 in the model")
    code, out, _ = run_cli(capsys, root, "build", "a")
    assert code == 2
    assert "FAILED import:a: fake import: input 'x' is int64 in the model" in out


def test_a_full_disk_in_a_stage_exits_4_with_one_line(fake_project, capsys):
    from tests.helpers.fake_stages import write_fake_model

    root, _ = fake_project
    write_fake_model(root / "a.json", ["conv"], disk_full=True)
    code, out, _ = run_cli(capsys, root, "build", "a")
    assert code == 4
    line = next(x for x in out.splitlines() if x.startswith("FAILED import:a"))
    assert "No space left on device" in line and "ENOSPC" in line and "fix: free disk space" in line
    assert not list((root / ".cache").glob("actions/*/*"))  # nothing recorded for the failed stage


def test_a_mistyped_command_is_refused_not_taken_for_a_build(fake_project, capsys):
    root, _ = fake_project
    code, out, err = run_cli(capsys, root, "biuld")
    assert code == 2 and out == ""
    assert err.strip().startswith("error: unknown command 'biuld' (fix: did you mean `modelbuild build`?")
    assert not (root / ".cache").exists()


def test_a_model_named_like_no_command_is_still_a_build_selector(fake_project, capsys):
    root, _ = fake_project
    code, out, _ = run_cli(capsys, root, "a")
    assert code == 0 and "compile:a@cpu" in out and "compile:b@cpu" not in out


def test_schema_piped_into_a_reader_that_leaves_early_is_not_a_traceback():
    proc = subprocess.run(
        f"{sys.executable} -m modelbuild schema | head -1", shell=True, capture_output=True, text=True
    )
    assert proc.stdout.strip() == "{" and proc.stderr == ""


def test_schema_prints_json_schema(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "modelbuild deploy.toml"


def test_bad_recipe_is_one_line_exit_2_no_traceback_and_cache_untouched(fake_project, capsys):
    root, _ = fake_project
    assert run_cli(capsys, root, "build")[0] == 0
    before = sorted(p.name for p in (root / ".cache").rglob("*"))
    text = (root / "deploy.toml").read_text().replace("num-cores", "num-core")
    (root / "deploy.toml").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "modelbuild", "-f", str(root / "deploy.toml")], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert (
        "deploy.toml:13: targets.cpu.num-core: unknown llvm target option 'num-core' (fix: did you mean 'num-cores'?"
        in proc.stderr
    )
    assert sorted(p.name for p in (root / ".cache").rglob("*")) == before


@contextlib.contextmanager
def mounted_tmpfs(folder, options):
    """A small tmpfs at `folder`: read-only or nearly full, as root alone cannot fake with permissions (root
    ignores them). Skipped, visibly, where this machine does not allow mounting."""
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'not root'})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_read_only_build_folder_is_one_line_exit_4(fake_project, capsys):
    root, _ = fake_project
    with mounted_tmpfs(root / "ro", "ro,size=1m") as folder:
        code, out, err = run_cli(capsys, root, "build", "--build-dir", str(folder / "build"))
    assert code == 4
    assert err.strip() == (
        f"error: Read-only file system: {folder / 'build'} (EROFS; fix: the filesystem is "
        "read-only: pass --build-dir / --cache-dir on a writable one)"
    )
    assert "Traceback" not in out + err


def test_a_full_disk_under_the_cache_is_exit_4_and_records_nothing(fake_project, capsys):
    root, _ = fake_project
    with mounted_tmpfs(root / "small", "size=256k") as folder:
        cache = folder / "cache"
        (folder / "filler").write_bytes(b"\0" * (256 * 1024 - 8192))  # leave room for folders, not for files
        code, out, err = run_cli(capsys, root, "build", "--cache-dir", str(cache))
        entries = list(cache.glob("actions/*/*"))
    assert code == 4, out + err
    assert "No space left on device" in out + err and "Traceback" not in out + err
    assert entries == []


def test_a_build_folder_that_is_a_file_is_one_line_exit_4(fake_project, capsys):
    root, _ = fake_project
    (root / "build").write_text("not a folder")
    code, _, err = run_cli(capsys, root, "build")
    assert code == 4
    assert err.startswith("error: ") and "a path that should be a folder is a file" in err and err.count("\n") == 1


def test_a_model_whose_external_data_file_is_missing_is_bad_input_in_one_line(fake_project, capsys):
    import onnx

    from tests.helpers.onnx_models import conv_relu

    root, _ = fake_project
    model = onnx.load(str(conv_relu(root / "conv.onnx")))
    onnx.save(model, str(root / "a.json"), save_as_external_data=True, location="a.weights", size_threshold=0)
    (root / "a.weights").unlink()
    code, out, err = run_cli(capsys, root, "build")
    assert code == 2, (out, err)
    assert "its tensors are kept in 'a.weights' beside it, and there is no such file" in out + err
    assert "Traceback" not in out + err
    assert "skipped  import:b" in out  # without --keep-going nothing new starts after a failure
    assert not (root / ".cache/actions").exists() or not any((root / ".cache/actions").iterdir())
