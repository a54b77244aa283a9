"""How a run looks in the terminal: a live view of the stages, then a summary. Only the CLI uses this.

rich is imported only for a live terminal: importing it costs about a third of a no-op build, and CI logs,
pipes and NO_COLOR get plain lines that need none of it.
"""

from __future__ import annotations

import os
import sys
import time

from modelbuild.engine.events import NodeFinished, NodeProgress, NodeResult, NodeStarted, NodeWaiting, Status
from modelbuild.progress import describe

STYLES = {
    Status.CACHED: "dim green",
    Status.BUILT: "bold green",
    Status.FAILED: "bold red",
    Status.SKIPPED: "yellow",
    Status.STALE: "yellow",
    Status.RUNNING: "cyan",
    Status.PENDING: "dim",
}


PLAIN_PROGRESS_SECONDS = 10.0  # without a live view, a progress line at most this often per stage


class PlainConsole:
    """The part of rich's Console the CLI uses, for output that is not a live terminal: plain lines."""

    is_terminal = False
    no_color = True

    def __init__(self, stream) -> None:
        self.file = stream

    def print(self, text="", *, markup: bool = False) -> None:
        print(text, file=self.file, flush=True)


def make_console(stream=None):
    """rich's Console on a terminal (colour, the live view), else a PlainConsole."""
    stream = stream or sys.stdout
    if not stream.isatty() or "NO_COLOR" in os.environ:
        return PlainConsole(stream)
    from rich.console import Console

    return Console(file=stream, highlight=False, soft_wrap=True, emoji=False)


def is_live(console) -> bool:
    return console.is_terminal and not console.no_color


class LiveReporter:
    """Shows each stage's state and time as it changes; plain lines when the output is not a terminal."""

    def __init__(self, console, node_ids: list[str], *, clock=time.perf_counter) -> None:
        self.console = console
        self.clock = clock
        self.states: dict[str, tuple[Status, float | None]] = {n: (Status.PENDING, None) for n in node_ids}
        self.started: dict[str, float] = {}
        self.notes: dict[str, str] = {}
        self.fields: dict[str, dict] = {}
        self.printed_at: dict[str, float] = {}
        # get_renderable: the table is rebuilt at every refresh, so a running stage's clock ticks between events
        self.live = None
        if is_live(console):
            from rich.live import Live

            self.live = Live(console=console, refresh_per_second=4, transient=True, get_renderable=self._table)

    def __enter__(self) -> LiveReporter:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, event) -> None:
        if isinstance(event, NodeStarted):
            self.started[event.node] = self.clock()
            self.states[event.node] = (Status.RUNNING, None)
            if not self.live:
                why = f"  ({'; '.join(map(str, event.reasons))})" if event.reasons else ""
                self.console.print(f"running  {event.node}{why}")
        elif isinstance(event, NodeProgress):
            now = self.clock()
            self.fields[event.node] = event.fields
            self.notes[event.node] = describe(event.fields, now - self.started.get(event.node, now))
            if not self.live and now - self.printed_at.get(event.node, 0) >= PLAIN_PROGRESS_SECONDS:
                self.printed_at[event.node] = now
                self.console.print(f"progress {event.node}  {self.notes[event.node]}", markup=False)
        elif isinstance(event, NodeWaiting):
            self.console.print(f"waiting  {event.node}  {waiting_for(event)}", markup=False)
        elif isinstance(event, NodeFinished):
            result = event.result
            self.states[result.node] = (result.status, result.seconds)
            if not self.live and result.status is not Status.STALE:  # the command lists what is stale
                self.console.print(result_line(result))
        if self.live:
            self.live.refresh()

    def _table(self):
        from rich.table import Table
        from rich.text import Text

        table = Table(show_header=False, box=None, padding=(0, 1))
        now = self.clock()
        for node, (status, seconds) in self.states.items():
            note = Text("")
            if status is Status.RUNNING:
                seconds = now - self.started.get(node, now)
                note = self._progress(node, seconds)
            table.add_row(
                Text(status.value, style=STYLES[status]), node, "" if seconds is None else f"{seconds:.1f}s", note
            )
        return table

    def _progress(self, node: str, elapsed: float):
        """A running stage's note; a bar of trials measured when it reports a planned count (tuning)."""
        from rich.columns import Columns
        from rich.progress_bar import ProgressBar
        from rich.text import Text

        fields = self.fields.get(node, {})
        text = Text(describe(fields, elapsed) if fields else "", style="dim")
        if "planned" not in fields or not fields["planned"]:
            return text
        bar = ProgressBar(total=fields["planned"], completed=fields.get("trials", 0), width=24)
        return Columns([bar, text], padding=(0, 1))


def waiting_for(event: NodeWaiting) -> str:
    who = event.holder or "another build"
    if event.why == "timing":
        return "other builds are running stages on this machine; it times alone"
    if event.why == "timed":
        return f"{who} is timing on this machine; nothing runs beside it"
    if event.why == "queued":
        return f"{who} waits to time on this machine; it goes first"
    return f"{who} is building the same key; its result will be reused"


def result_line(result: NodeResult) -> str:
    line = f"{result.status.value:<8} {result.node}  {result.seconds:.2f}s"
    if result.status is Status.FAILED:
        line += f"  {result.error}" + (f" (log: {result.log})" if result.log else "")
    elif result.status in (Status.STALE, Status.SKIPPED) and result.reasons:
        line += "  " + "; ".join(map(str, result.reasons))
    return line


def summary_table(results: list[NodeResult]):
    from rich.table import Table
    from rich.text import Text

    table = Table(title="modelbuild", show_lines=False)
    for column in ("stage", "status", "seconds", "key"):
        table.add_column(column)
    for r in results:
        table.add_row(r.node, Text(r.status.value, style=STYLES[r.status]), f"{r.seconds:.2f}", (r.key or "")[:12])
    return table
