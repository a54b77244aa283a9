"""Choosing the executor, and what a build says when the cluster it chose cannot be used: pure logic and the
fake stages, no Ray (a cluster that does not answer is refused before Ray is imported)."""

from __future__ import annotations

import pytest

from modelbuild.engine.executors import LOCAL, ExecutorChoice, choose_executor
from modelbuild.errors import ModelbuildError
from tests.helpers.cli import run_cli
from tests.helpers.processes import free_port

CLUSTER = "ray://head.example:10001"


@pytest.mark.parametrize(
    ("chosen", "env", "kind", "address", "expected"),
    [
        (None, None, "local", None, LOCAL),
        (None, None, "ray", CLUSTER, ExecutorChoice("ray", CLUSTER)),
        (None, None, "auto", CLUSTER, ExecutorChoice("ray", CLUSTER, fallback=True)),
        (None, None, "auto", None, LOCAL),  # auto, and no cluster named: here
        ("local", None, "ray", CLUSTER, LOCAL),  # the command line over the recipe
        (None, "local", "ray", CLUSTER, LOCAL),  # the environment over the recipe
        ("ray://other:1", "local", "local", None, ExecutorChoice("ray", "ray://other:1")),  # command line first
        ("auto", None, "local", CLUSTER, ExecutorChoice("ray", CLUSTER, fallback=True)),
    ],
)
def test_the_command_line_then_the_environment_then_the_recipe_choose(chosen, env, kind, address, expected):
    assert choose_executor(chosen, env, kind, address) == expected


@pytest.mark.parametrize("text", ["ray", "ray://head", "ray://head:port", "http://head:10001", "remote"])
def test_an_executor_that_is_not_one_is_refused_with_the_ones_there_are(text):
    with pytest.raises(ModelbuildError, match=r"is not an executor \(fix: local, auto, or ray://HOST:PORT"):
        choose_executor(text, None)


def test_a_recipe_that_asks_for_ray_without_an_address_is_refused_at_its_line(fake_project, capsys):
    root, _ = fake_project
    recipe = root / "deploy.toml"
    recipe.write_text(recipe.read_text() + '\n[executor]\nkind = "ray"\n')
    code, _, err = run_cli(capsys, root, "build")
    assert code == 2 and "executor" in err and 'address = "ray://HOST:PORT"' in err
    assert len(err.strip().splitlines()) == 1


def test_a_cluster_that_does_not_answer_fails_the_build_in_one_line_with_exit_4(
    fake_project, tmp_path, capsys, monkeypatch
):
    root, _ = fake_project
    address = f"ray://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", str(tmp_path / "remote"))
    code, out, err = run_cli(capsys, root, "build", "--executor", address)
    assert code == 4
    assert err.strip() == f"error: the Ray cluster at {address} does not answer"
    assert not list((root / ".cache").glob("actions/*/*.json")), "nothing recorded"


def test_auto_builds_here_with_a_note_where_the_cluster_does_not_answer(fake_project, tmp_path, capsys, monkeypatch):
    root, _ = fake_project
    monkeypatch.setenv("MODELBUILD_REMOTE_CACHE", str(tmp_path / "remote"))
    address = f"ray://127.0.0.1:{free_port()}"
    recipe = root / "deploy.toml"
    recipe.write_text(recipe.read_text() + f'\n[executor]\nkind = "auto"\naddress = "{address}"\n')
    code, out, err = run_cli(capsys, root, "build")
    assert code == 0 and out.count("built ") == 4
    assert f"note: the Ray cluster at {address} does not answer; building on this machine" in err


def test_a_cluster_needs_a_remote_cache_its_workers_share(fake_project, capsys):
    root, _ = fake_project
    code, _, err = run_cli(capsys, root, "build", "--executor", f"ray://127.0.0.1:{free_port()}")
    assert code == 2
    assert "needs a remote cache its workers can reach" in err and "MODELBUILD_REMOTE_CACHE" in err
