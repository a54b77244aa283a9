"""`modelbuild`'s entry point: the arguments parsed, the command called, and every failure rendered
once, as one line and its exit code."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback

from modelbuild.cli.common import EXIT_ENVIRONMENT, EXIT_OK, EXIT_USAGE, say_error
from modelbuild.cli.parser import COMMANDS, argument_parser
from modelbuild.errors import ModelbuildError, environment_failure


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        args = argument_parser().parse_args(_with_command(argv))
    except SystemExit as exit:  # argparse has printed its usage line
        return EXIT_USAGE if exit.code not in (0, None) else EXIT_OK
    try:
        return _run(args, debug)
    except BrokenPipeError:  # `modelbuild schema | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _with_command(argv: list[str]) -> list[str]:
    """argv with `build` put first when no command is named; a word one typo away from a command is refused,
    not taken for a build selector (`modelbuild biuld`)."""
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version")):
        return argv
    if argv and not argv[0].startswith("-"):
        import difflib  # here, as every import on the way to a no-op build is paid on every build

        close = difflib.get_close_matches(argv[0], COMMANDS, n=1, cutoff=0.75)
        if close and "@" not in argv[0]:
            say_error(
                f"unknown command {argv[0]!r} (fix: did you mean `modelbuild {close[0]}`? To build a model "
                f"of that name, write `modelbuild build {argv[0]}`)"
            )
            raise SystemExit(EXIT_USAGE)
    return ["build", *argv]


def _run(args, debug: bool) -> int:
    """Call the command; every failure is one line on stderr and its exit code (`--debug` adds the traceback)."""
    from modelbuild.cli.console import make_console

    previous = signal.signal(signal.SIGINT, _interrupt_once) if _main_thread() else None
    try:
        return args.handler(args, make_console())
    except ModelbuildError as err:
        return _failed(err, err.exit_code, debug)
    except OSError as err:
        failure = environment_failure(err)
        if failure is None:
            raise
        return _failed(failure, EXIT_ENVIRONMENT, debug)
    except KeyboardInterrupt:  # outside a build's stages (those raise Interrupted)
        say_error("interrupted: nothing half-built was recorded", prefix="")
        return 130
    finally:
        # after a Ctrl-C the command is ending: more presses stay ignored until the process has exited
        if previous is not None and signal.getsignal(signal.SIGINT) is _interrupt_once:
            signal.signal(signal.SIGINT, previous)


def _interrupt_once(signum, frame) -> None:
    """The first Ctrl-C stops the command; later ones are ignored, so they cannot cut short the clean-up the
    first one started (killing running stages takes well under a second)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _failed(err: BaseException, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    say_error(str(err))
    return code
