"""The `specwatch` command line: the parser and `main`. Each command lives in its own module under
`specwatch.commands`, imported when the parser is built or the command runs, never at import time,
so importing this module stays cheap."""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import Sequence

from specwatch import __version__


@dataclass(frozen=True)
class Command:
    name: str
    module: str  # the dotted name, spelled out so the import analysis (tests/test_imports.py) sees it
    help: str
    description: str
    add_function: str = "add_arguments"
    run_function: str = "run"

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
    Command("fleet", "specwatch.commands.fleet", "every node's verdict, read through Prometheus",
            "A table of nodes from a Prometheus server that scrapes specwatch agents."),
)
BY_NAME = {c.name: c for c in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    from specwatch.commands.options import ArgumentParser

    parser = ArgumentParser(prog="specwatch",
                            description="Is speculative decoding paying on this vLLM node right now, and why?")
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        command.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from specwatch.commands.options import CommandError, print_error

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in BY_NAME and argv[0] not in ("-h", "--help", "--version")):
        argv = ["watch", *argv]  # bare `specwatch [flags]` is `specwatch watch [flags]`
    args = build_parser().parse_args(argv)
    try:
        return BY_NAME[args.command].run(args)
    except CommandError as exc:
        print_error(args.command, exc.message)
        return int(exc.status)


if __name__ == "__main__":
    raise SystemExit(main())
