"""The terminal view, rendered by rich's recording console with a clock the test moves."""

from __future__ import annotations

import io

from rich.console import Console

from modelbuild.cli.console import LiveReporter
from modelbuild.engine.events import NodeProgress, NodeStarted
from modelbuild.progress import clock, describe, eta

TUNING = {"tasks": 24, "tasks_done": 3, "trials": 40, "planned": 160, "estimate_ms": 0.8341}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=120, record=True, color_system=None)


def frame(reporter: LiveReporter) -> str:
    """What the live view shows at its next refresh."""
    console = terminal()
    console.print(reporter.live.get_renderable())
    return console.export_text()


def test_a_running_stages_clock_ticks_between_events():
    time = Clock()
    reporter = LiveReporter(terminal(), ["compile:cls@x86"], clock=time)
    reporter(NodeStarted("compile:cls@x86", ["never built"]))
    time.now += 1.25
    assert "running  compile:cls@x86  1.2s" in frame(reporter)
    time.now += 8.5  # no event came in between: the refresh alone moves the clock
    assert "running  compile:cls@x86  9.8s" in frame(reporter)


def test_tuning_shows_a_bar_with_tasks_trials_best_estimate_and_eta():
    time = Clock()
    reporter = LiveReporter(terminal(), ["tune:cls@x86"], clock=time)
    reporter(NodeStarted("tune:cls@x86", []))
    time.now += 60
    reporter(NodeProgress("tune:cls@x86", TUNING))
    shown = frame(reporter)
    assert "tasks 3/24  trials 40/160  best est. 0.834 ms  ETA 3m00s" in shown  # 40 trials a minute, 120 to go
    assert "━" in shown  # the bar


def test_without_a_terminal_progress_is_a_line_at_most_every_10_seconds():
    time, out = Clock(), io.StringIO()
    reporter = LiveReporter(Console(file=out, no_color=True, width=200), ["tune:cls@x86"], clock=time)
    reporter(NodeStarted("tune:cls@x86", []))
    for step in range(30):  # a report every second for 30 s
        time.now += 1
        reporter(NodeProgress("tune:cls@x86", {**TUNING, "trials": step + 1}))
    lines = [line for line in out.getvalue().splitlines() if line.startswith("progress")]
    assert len(lines) == 3 and lines[0].startswith("progress tune:cls@x86  tasks 3/24  trials 1/160")


def test_eta_and_clock():
    assert eta(40, 160, 60.0) == 180.0 and eta(0, 160, 5.0) is None and eta(160, 160, 99.0) == 0.0
    assert (clock(12.4), clock(185), clock(3720)) == ("12s", "3m05s", "1h02m")
    assert describe({"message": "timing the default schedule of task 2/9"}) == "timing the default schedule of task 2/9"


def test_a_waiting_stage_says_what_it_waits_for():
    from modelbuild.cli.console import waiting_for
    from modelbuild.engine.events import NodeWaiting

    who = "pid 4242 on ci-7 since 10:42:05"
    assert waiting_for(NodeWaiting("import:a", who)) == f"{who} is building the same key; its result will be reused"
    assert waiting_for(NodeWaiting("validate:a@cpu", "", "timing")) == (
        "other builds are running stages on this machine; it times alone"
    )
    assert waiting_for(NodeWaiting("import:a", who, "timed")) == (
        f"{who} is timing on this machine; nothing runs beside it"
    )
    assert waiting_for(NodeWaiting("import:a", "", "timed")).startswith("another build is timing")
    assert waiting_for(NodeWaiting("import:a", who, "queued")) == f"{who} waits to time on this machine; it goes first"
