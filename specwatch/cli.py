"""The `specwatch` command line: the parser and `main`. Each command lives in its own module under
`specwatch.commands`, imported when the parser is built or the command runs, never at import time,
so importing this module stays cheap."""

from __future__ import annotations

import argparse
import codecs
import difflib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from specwatch import __version__


@dataclass(frozen=True)
class Command:
    name: str
    module: str  # the dotted name, spelled out so the import analysis (tests/test_imports.py) sees it
    help: str
    description: str
    add_function: str = "add_arguments"
    run_function: str = "run"
    # the command describes the command line itself (completion): it is given the whole parser, every
    # command's options built, as args.parser
    whole_parser: bool = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        getattr(importlib.import_module(self.module), self.add_function)(parser)

    def run(self, args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(self.module), self.run_function)(args))


COMMANDS = (
    Command("watch", "specwatch.commands.watch", "the live dashboard (what bare `specwatch` runs)",
            "The live dashboard: the verdict, the numbers under it, and their history."),
    Command("check", "specwatch.commands.check", "read the node twice, a window apart, and print the verdict",
            "Scrape the target twice, --window seconds apart, and report."),
    Command("predict", "specwatch.commands.predict", "the verdict for a configuration, with no live node",
            "What speculation would do for this GPU, model, load and acceptance."),
    Command("tune", "specwatch.commands.tune", "the speculation schedule by batch size, ready to paste into vLLM",
            "Watch a server (or read a recording) and compute, for every batch size, "
            "the k that maximises the expected speedup."),
    Command("record", "specwatch.commands.record", "record the live sources to a file, headless",
            "Record Snapshots from the live sources until --duration or Ctrl-C."),
    Command("replay", "specwatch.commands.replay", "play a recording back through the same advisor",
            "Play a recording in the dashboard, or print its verdict timeline with --headless."),
    Command("demo", "specwatch.commands.replay", "play a bundled scenario: no GPU and no server needed",
            "Play a bundled recording (real or synthetic, and labelled so).",
            add_function="add_demo_arguments", run_function="run_demo"),
    Command("sweep", "specwatch.commands.sweep", "baseline vs speculative across concurrency: where the curves cross",
            "Run the same prompts against a server without and one with speculation "
            "at rising concurrency, and find where speculation stops paying."),
    Command("export", "specwatch.commands.export", "serve the verdict as Prometheus metrics (a headless agent)",
            "Run the sources and the advisor, and serve specwatch_* metrics."),
    Command("fleet", "specwatch.commands.fleet", "every node's verdict, read through Prometheus or directly",
            "A table of nodes from a Prometheus server that scrapes specwatch agents, or, for a few nodes, "
            "from each node's agent or vLLM or SGLang server read directly (--url)."),
    Command("completion", "specwatch.commands.completion", "print the shell completion script (bash, zsh, fish)",
            "Print the completion script of every command and flag for bash, zsh or fish, "
            "to save where the shell loads completions from.", whole_parser=True),
)
BY_NAME = {c.name: c for c in COMMANDS}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, that command's options alone (every command is still
    listed, with its help): a run parses one command's options, and building the others' imports
    their modules and what they import (httpx, asyncio, the collectors), a fifth of a short
    headless replay's start-up."""
    from specwatch.commands.options import ArgumentParser

    parser = ArgumentParser(prog="specwatch",
                            description="Is speculative decoding paying on this vLLM or SGLang node right now, "
                                        "and why?")
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.command_parsers = {}
    for command in COMMANDS:
        p = parser.command_parsers[command.name] = sub.add_parser(command.name, help=command.help,
                                                                   description=command.description)
        if only is None or command.name == only:
            command.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from specwatch.commands.options import CommandError, ExitCode, print_error, read_url_files

    tolerate_narrow_encodings()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in BY_NAME:
        # a word where a command goes is a mistyped command (`specwatch chek`), not the dashboard's flags
        close = difflib.get_close_matches(argv[0], list(BY_NAME), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"the commands are {', '.join(BY_NAME)}"
        print_error("", f"unknown command {argv[0]!r}; {hint} (see specwatch --help)")
        return ExitCode.USAGE
    if not argv or (argv[0] not in BY_NAME and argv[0] not in ("-h", "--help", "--version")):
        argv = ["watch", *argv]  # bare `specwatch [flags]` is `specwatch watch [flags]`
    command = argv[0] if argv[0] in BY_NAME else ""
    stdout = sys.stdout
    quiet_pipe = QuietPipe.install()
    try:
        if command:
            load_numpy_single_threaded()
        whole = command in BY_NAME and BY_NAME[command].whole_parser
        parser = build_parser(None if whole else command or None)
        args = parser.parse_args(argv)
        command = args.command
        if BY_NAME[args.command].whole_parser:
            args.parser = parser
        read_url_files(args)  # --url-file: its URLs join --url's before the command sees them
        return int(BY_NAME[args.command].run(args))
    except CommandError as exc:
        print_error(command, exc.message)
        return int(exc.status)
    except KeyboardInterrupt:
        # Ctrl-C anywhere a command did not catch it itself: its `finally` blocks have run
        print_error(command, "interrupted")
        return ExitCode.INTERRUPTED
    finally:
        quiet_pipe.flush()
        sys.stdout = stdout


def load_numpy_single_threaded() -> None:
    """Import numpy with its BLAS on one thread, unless the user chose a number. OpenBLAS starts a
    thread per core as it loads, which costs more CPU than a short headless replay's reading (and
    more the more cores); specwatch's arrays are a few hundred numbers, too small for threads to
    pay. The variable is read once, as the library loads: it is put back as it was, so that a
    process specwatch starts (a vLLM server in a sweep) gets the user's environment."""
    if "numpy" in sys.modules:
        return
    name = "OPENBLAS_NUM_THREADS"
    chosen = name in os.environ
    if not chosen:
        os.environ[name] = "1"
    try:
        import numpy  # noqa: F401 - loaded now, under the setting above
    except ImportError:
        pass  # the command that needs it says so
    finally:
        if not chosen:
            os.environ.pop(name, None)


# What the output's non-ASCII characters read as on a stream that cannot encode them
# (PYTHONIOENCODING=ascii, a C locale); anything else becomes "?".
ASCII_FORMS = {"×": "x", "≤": "<=", "≥": ">=", "≈": "~", "−": "-", "–": "-", "—": "-", "…": "...", "·": "-",
               "→": "->", "←": "<-", "±": "+/-", "°": " deg", "µ": "u", "▶": ">", "•": "*"}


def _ascii_forms(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(ASCII_FORMS.get(ch, "?") for ch in text), exc.end


codecs.register_error("specwatch.ascii", _ascii_forms)


def tolerate_narrow_encodings() -> None:
    """stdout and stderr that cannot encode the output's "×", "≤" or "—" (PYTHONIOENCODING=ascii,
    LANG=C on an old Python) write an ASCII form of them instead of ending in a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or getattr(stream, "errors", "strict") != "strict" or not hasattr(stream, "reconfigure"):
            continue
        try:
            "×≤—".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            try:
                stream.reconfigure(errors="specwatch.ascii")
            except (ValueError, OSError):
                pass


class QuietPipe:
    """stdout that goes quiet when its reader leaves (`specwatch check | head -1`): the rest of the
    output is dropped, the command finishes and exits with its own status, and no BrokenPipeError
    surfaces, neither from a write nor from the flush at exit."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.closed_by_reader = False

    @classmethod
    def install(cls) -> QuietPipe:
        if isinstance(sys.stdout, QuietPipe):
            return sys.stdout
        quiet = cls(sys.stdout)
        sys.stdout = quiet
        return quiet

    def _reader_left(self) -> None:
        self.closed_by_reader = True
        try:  # what is still buffered, and what the interpreter flushes at exit, go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if self.closed_by_reader:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        if self.closed_by_reader:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


if __name__ == "__main__":
    raise SystemExit(main())
