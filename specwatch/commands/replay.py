"""`specwatch replay` and `specwatch demo`: a recording (or a bundled scenario) played through the
same advisor, in the dashboard or, with --headless, as a verdict timeline.

The advisor settings stored in the recording's header apply unless a flag overrides them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence, TextIO

from specwatch.commands.options import (
    CommandError,
    ExitCode,
    UsageError,
    add_advisor_arguments,
    advisor_config,
    positive_number,
    print_error,
    require_terminal,
    window_seconds,
)
from specwatch.recording import FILE_SUFFIX

if TYPE_CHECKING:
    from specwatch.advice.monitor import Monitor, VerdictChange
    from specwatch.recording import RecordingHeader
    from specwatch.telemetry.snapshot import Snapshot

DEFAULT_WINDOW_S = 30.0  # the Monitor's default window


def _add_timeline_arguments(p: argparse.ArgumentParser) -> None:
    # the Monitor's default cadence, what a live run uses (5 s of data time)
    from specwatch.advice.monitor import DEFAULT_EVALUATE_EVERY_S

    p.add_argument("--headless", action="store_true", help="print the verdict timeline instead of the TUI")
    p.add_argument("--json", action="store_true", help="with --headless: one JSON object per verdict change")
    p.add_argument("--window", type=window_seconds, default=DEFAULT_WINDOW_S, metavar="SECONDS",
                   help="the rate window (default %(default)s)")
    p.add_argument("--evaluate-every", type=positive_number, default=DEFAULT_EVALUATE_EVERY_S, metavar="SECONDS",
                   help="seconds of data time between verdicts; keep the live run's value to reproduce "
                        "its verdicts (default %(default)s)")
    p.add_argument("--speed", type=positive_number, default=1.0, metavar="X", help="TUI playback speed, 0.5 to 100")
    add_advisor_arguments(p, overriding="the recording's")


# ==================================================================================================
# replay
# ==================================================================================================


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a recording made by `specwatch record` (or the demo generator)")
    _add_timeline_arguments(p)


def run(args: argparse.Namespace) -> int:
    if args.headless:
        return play_headless(args.file, args, "replay")
    from specwatch.dashboard.app import run_app
    from specwatch.collectors.replay import ReplaySource
    from specwatch.recording import RecordingError

    try:
        source = ReplaySource(args.file, speed=args.speed)
    except (RecordingError, OSError) as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    except ValueError as exc:  # a --speed out of range
        raise UsageError(str(exc)) from None
    monitor = replay_monitor(source.header, args)
    require_terminal("replay")
    return run_app(source, monitor, title="specwatch replay")


def replay_monitor(header: RecordingHeader, args: argparse.Namespace | None = None, *,
                   changes_only: bool = False) -> Monitor:
    """The Monitor a replay (headless or TUI) feeds: the header's advisor settings under the flags,
    and the flags' window. `changes_only` for a headless timeline, which reads the changes alone (see
    Monitor): the dashboard shows every verdict."""
    from specwatch.advice.monitor import DEFAULT_EVALUATE_EVERY_S, Monitor

    window = getattr(args, "window", None) or DEFAULT_WINDOW_S
    every = getattr(args, "evaluate_every", None) or DEFAULT_EVALUATE_EVERY_S
    if not (0 < window < math.inf and 0 < every < math.inf):  # flags parse as such; this is for callers
        raise UsageError("--window and --evaluate-every must be greater than 0")
    return Monitor(window_s=window, advisor_config=advisor_config(args, header.advisor, recorded=True),
                   evaluate_every_s=every, changes_only=changes_only)


def verdict_timeline(snapshots: Iterable[Snapshot], monitor: Monitor) -> Iterable[VerdictChange]:
    """Every verdict change the Monitor reports while it reads the Snapshots in order."""
    for snapshot in snapshots:
        yield from monitor.ingest(snapshot)


def _print_change(change: VerdictChange, as_json: bool, out: TextIO) -> None:
    from specwatch.recording import format_time

    if as_json:
        out.write(json.dumps(change.to_dict(), allow_nan=False) + "\n")
        return
    v = change.verdict
    speedup = f"{v.expected_speedup:.2f}×" if v.expected_speedup is not None else "-"
    reason = v.reasons[0] if v.reasons else ""
    out.write(f"{format_time(change.time)}  {change.url}  {v.speculation:<7} confidence {v.confidence:.2f}  "
              f"speedup {speedup:>6}  {reason}\n")


def play_headless(path: Path | str, args: argparse.Namespace, command: str, out: TextIO | None = None) -> int:
    """Print the verdict timeline of the recording at `path`; `command` names the command in messages."""
    from specwatch.recording import RecordingError, open_snapshots

    out = out if out is not None else sys.stdout  # looked up per call: tests and the TUI swap it
    warnings: list[str] = []
    try:
        header, snapshots = open_snapshots(path, warnings)
    except RecordingError as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    monitor = replay_monitor(header, args, changes_only=True)
    if not args.json:
        kind = "SYNTHETIC data" if header.synthetic else "real data"
        out.write(f"# {Path(path).name}: {kind} from {header.host or 'an unnamed host'}"
                  + (f" — {header.notes}" if header.notes else "") + "\n")
    _print_timeline(path, snapshots, monitor, args.json, out, command, warnings)
    return ExitCode.OK


def _print_timeline(path: Path | str, snapshots: Iterable[Snapshot], monitor: Monitor, as_json: bool, out: TextIO,
                    command: str, warnings: list[str], scenario: str | None = None) -> None:
    """The verdict changes of one recording, at its own recorded times; `scenario` tags JSON lines."""
    count = 0
    try:
        for change in verdict_timeline(snapshots, monitor):
            if as_json and scenario is not None:
                out.write(json.dumps({**change.to_dict(), "scenario": scenario}, allow_nan=False) + "\n")
            else:
                _print_change(change, as_json, out)
        count = len(monitor.window)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # the reader of stdout left: not the file's fault
            raise
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}", ExitCode.UNREADABLE) from None
    out.flush()
    if count == 0 and monitor.latest is None:
        # a header and nothing after it: the recorder stopped (or the copy was cut) before its first
        # reading. Nothing was replayed, which a script must not read as success.
        raise CommandError(f"{path} holds its header and no Snapshots: nothing to replay (the recording was "
                           "cut off, or its recorder stopped, before the first reading)", ExitCode.UNREADABLE)
    for w in warnings:
        print_error(command, f"warning: {w}")


# ==================================================================================================
# demo
# ==================================================================================================


@dataclass(frozen=True)
class Scenario:
    name: str
    data: str  # "real" or "synthetic"
    notes: str
    path: Path

    @property
    def clock(self) -> str:
        """Whose clock the recording's times are: a real run's wall clock, or the generator's."""
        return "recorded" if self.data == "real" else "synthetic"


# The story the demo opens with: speculation paying, costing past the crossover, and paying again.
OPENING_SCENARIO = "h100-70b-ngram"


def _bundled_files() -> list[Path]:
    root = resources.files("specwatch") / "data"
    try:
        entries = list(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    # resources of an installed package are files on disk (setuptools ships them as such)
    return sorted(Path(str(e)) for e in entries if e.name.endswith(FILE_SUFFIX))


def demo_playlist(scenarios: Iterable[Scenario]) -> list[Scenario]:
    """The order the demo plays its scenarios in, headless and in the dashboard alike: the opening
    story first, then the real recordings (what a node really looks like), then the other synthetic ones."""
    return sorted(scenarios, key=lambda s: (s.name != OPENING_SCENARIO, s.data != "real", s.name))


def list_scenarios() -> list[Scenario]:
    """The bundled recordings in playlist order, each with its header's label and notes."""
    from specwatch.recording import RecordingError, open_snapshots

    scenarios = []
    for path in _bundled_files():
        try:
            header, _ = open_snapshots(path)
        except RecordingError:
            continue  # a damaged bundled file is a packaging bug; test_replay catches it
        scenarios.append(Scenario(path.name[: -len(FILE_SUFFIX)], header.data, header.notes, path))
    return demo_playlist(scenarios)


def scenario_path(name: str) -> Path | None:
    for s in list_scenarios():
        if s.name == name:
            return s.path
    return None


def unknown_scenario(name: str) -> UsageError:
    names = ", ".join(s.name for s in list_scenarios()) or "none found"
    return UsageError(f"no scenario {name!r}; bundled: {names}")


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--list", action="store_true", help="print the bundled scenarios, one per line, name first")
    p.add_argument("--scenario", metavar="NAME", help="the scenario to play (see --list)")
    _add_timeline_arguments(p)
    # the demo tells a story of minutes: at 10× the first flip comes within a minute (shown as ×10)
    p.set_defaults(speed=10.0)


def run_demo(args: argparse.Namespace) -> int:
    scenarios = list_scenarios()
    if args.list:
        for s in scenarios:
            print(f"{s.name}\t{s.data}\t{s.notes}")
        return ExitCode.OK
    if args.scenario:
        scenarios = [s for s in scenarios if s.name == args.scenario]
        if not scenarios:
            raise unknown_scenario(args.scenario)
    if not scenarios:
        raise CommandError("no bundled scenarios found (is the package installed completely?)", ExitCode.UNREADABLE)
    if args.headless:
        return play_demo_headless(scenarios, args)
    return _run_demo_tui(scenarios, args)


def scenario_line(scenario: Scenario, header: RecordingHeader, position: int, count: int,
                  start: float | None, end: float | None) -> dict[str, Any]:
    """What the headless demo says before a scenario's timeline: which one, real or synthetic, and
    the span of its own clock (the times its verdicts are printed at)."""
    return {"scenario": scenario.name, "position": position, "of": count, "data": scenario.data,
            "clock": scenario.clock, "start": start, "end": end, "host": header.host, "notes": header.notes}


def play_demo_headless(scenarios: Sequence[Scenario], args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Every scenario's verdict timeline, in playlist order, once each: a line saying which scenario
    and whether it is real or synthetic, then its verdicts at its own recorded times, judged by a
    Monitor of its own under the settings it was recorded with (as in the dashboard)."""
    from specwatch.recording import RecordingError, format_time, index_recording, open_snapshots

    out = out if out is not None else sys.stdout
    for position, scenario in enumerate(scenarios, 1):
        warnings: list[str] = []
        try:
            index = index_recording(scenario.path, [])
            header, snapshots = open_snapshots(scenario.path, warnings)
        except (RecordingError, OSError) as exc:
            raise CommandError(str(exc), ExitCode.UNREADABLE) from None
        line = scenario_line(scenario, header, position, len(scenarios), index.start, index.end)
        if args.json:
            out.write(json.dumps(line, allow_nan=False) + "\n")
        else:
            label = "REAL data" if scenario.data == "real" else "SYNTHETIC data"
            out.write(f"# scenario {position}/{len(scenarios)} {scenario.name}: {label} from "
                      f"{header.host or 'an unnamed host'}, {scenario.clock} clock "
                      f"{format_time(index.start)} – {format_time(index.end)}"
                      + (f" — {header.notes}" if header.notes else "") + "\n")
        _print_timeline(scenario.path, snapshots, replay_monitor(header, args, changes_only=True), args.json, out,
                        "demo", warnings, scenario=scenario.name)
    return ExitCode.OK


def _run_demo_tui(scenarios: list[Scenario], args: argparse.Namespace) -> int:
    """The dashboard over the playlist, one scenario after another, looping, each on its own clock
    and labelled real or synthetic. --scenario plays just one."""
    from specwatch.dashboard.app import run_app
    from specwatch.recording import RecordingError

    try:
        source, monitor = build_demo(scenarios, args)
    except (RecordingError, OSError) as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    require_terminal("demo")
    return run_app(source, monitor, title="specwatch demo")


def build_demo(scenarios: Sequence[Any], args: argparse.Namespace) -> tuple[Any, Any]:
    """The source and Monitor that play `scenarios` (bundled recordings) one after another.

    One scenario loops on its own; several play in turn, each target tagged with its scenario's name
    and judged under the advisor settings its recording was made with (under the flags)."""
    from specwatch.collectors.replay import PlaylistSource, ReplaySource

    sources = [ReplaySource(s.path, speed=args.speed, loop=len(scenarios) == 1) for s in scenarios]
    monitor = replay_monitor(sources[0].header, args)
    if len(sources) == 1:
        return sources[0], monitor
    names = [s.name for s in scenarios]
    monitor.target_configs = {
        PlaylistSource.target_url(url, name): advisor_config(args, src.header.advisor, recorded=True)
        for src, name in zip(sources, names)
        for snap in [src.first_snapshot()] if snap is not None for url in {t.url for t in snap.targets}
    }
    return PlaylistSource(sources, names), monitor
