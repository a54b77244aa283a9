"""The command line: the only place that prints or exits. `entry.main` parses the arguments and calls one
command's function (`parser` says which); each module holds the commands of one concern."""

from modelbuild.cli.entry import main

__all__ = ["main"]
