"""`specwatch record`, `specwatch replay --headless` and `specwatch demo --headless|--list`.

Each command comes as an `add_*_arguments(parser)` and a `run_*(args) -> int`, for specwatch.cli to
wire; the TUI paths of replay and demo build a ReplaySource and a Monitor the same way
(`replay_monitor`, `scenario_path`).

Exit status: 0 done; 1 the recording stopped on a write error (the file stays valid up to its last
flush); 2 a usage error (an unknown scenario, a bad flag value); 3 the target or the file could not
be read (the message says why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, TextIO

from specwatch.advisor import AdvisorConfig
# DEFAULT_EVALUATE_EVERY_S: the Monitor's default cadence, what a live run uses (5 s of data time)
from specwatch.monitor import DEFAULT_EVALUATE_EVERY_S, Monitor, VerdictChange
from specwatch.recording import (
    FILE_SUFFIX,
    RecordingError,
    RecordingHeader,
    RecordingWriter,
    format_time,
    open_snapshots,
)
from specwatch.snapshot import Snapshot

EXIT_OK = 0
EXIT_WRITE_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3
DEFAULT_WINDOW_S = 30.0  # the Monitor's default window

# ==================================================================================================
# record
# ==================================================================================================


def add_record_arguments(p: argparse.ArgumentParser) -> None:
    from specwatch.cli import add_source_arguments

    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help=f"the recording to write (conventionally *{FILE_SUFFIX}); created with mode 0600")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="stop after this many seconds (default: until Ctrl-C)")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between polls (default %(default)s)")
    p.add_argument("--notes", default="", help="free text stored in the recording's header")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_source_arguments(p)


def advisor_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The advisor flags as stored in a recording's header, so a replay judges as the live run did."""
    settings = {
        "method": getattr(args, "method", None),
        "draft_ratio": getattr(args, "draft_ratio", None),
        "draft_params": getattr(args, "draft_params", None),
        "gpu": getattr(args, "gpu", None),
        "model": getattr(args, "model_name", None),
        "tp": getattr(args, "tp", None),
    }
    return {k: v for k, v in settings.items() if v is not None and not (k == "tp" and v == 1)}


def run_record(args: argparse.Namespace) -> int:
    from specwatch.cli import _source_settings, advisor_config
    from specwatch.collectors.vllm import DEFAULT_URL, TokenError, VllmSource

    if args.interval <= 0 or (args.duration is not None and args.duration <= 0):
        print("specwatch record: --interval and --duration must be greater than 0", file=sys.stderr)
        return EXIT_USAGE
    urls = args.urls or [DEFAULT_URL]
    try:
        settings = _source_settings(args)
        advisor_config(args)  # validates --gpu, --model and --draft-params before anything is created
        vllm = VllmSource(urls, **settings)
    except (TokenError, ValueError) as exc:
        print(f"specwatch record: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    header = RecordingHeader(data="real", targets=tuple(urls), notes=args.notes, interval_s=args.interval,
                             advisor=advisor_settings(args))
    try:
        writer = RecordingWriter(args.output, header, overwrite=args.force)
    except RecordingError as exc:
        print(f"specwatch record: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    outcome = _RecordOutcome()
    try:
        asyncio.run(_record(vllm, args, writer, outcome))
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        try:
            writer.close()
        except RecordingError as exc:
            outcome.error = str(exc)
    span = "nothing" if outcome.first is None else \
        f"{writer.snapshots_written} Snapshots, {format_time(outcome.first)} – {format_time(outcome.last)}"
    if outcome.error:
        print(f"specwatch record: {outcome.error}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    why = "interrupted" if outcome.interrupted else "done"
    print(f"specwatch record: {why}: {span} in {args.output} ({writer.bytes_written} bytes)", file=sys.stderr)
    return EXIT_OK


@dataclass
class _RecordOutcome:
    first: float | None = None
    last: float | None = None
    interrupted: bool = False
    error: str | None = None


async def _record(vllm: Any, args: argparse.Namespace, writer: RecordingWriter, outcome: _RecordOutcome) -> None:
    from specwatch.cli import gpu_poller
    from specwatch.sources import LiveSource, stop_on_signals

    stop = stop_on_signals()  # a stop request ends the loop between polls: the last Snapshot is whole
    live = LiveSource(vllm, gpu_poller(args), interval_s=args.interval, gpu_timeout_s=args.timeout)
    started = time.monotonic()
    reported: set[str] = set()
    try:
        while not stop.is_set():
            tick = time.monotonic()
            snapshot = await live.read()
            try:
                writer.write(snapshot)
            except RecordingError as exc:
                outcome.error = str(exc)
                return
            outcome.first = snapshot.time if outcome.first is None else outcome.first
            outcome.last = snapshot.time
            for target in snapshot.targets:
                if not target.ok and target.url not in reported:
                    reported.add(target.url)  # say it once; the recording keeps every failed read
                    print(f"specwatch record: {target.url}: {target.message or target.state} "
                          "(recording continues)", file=sys.stderr)
            if args.duration is not None and time.monotonic() - started >= args.duration:
                break
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, args.interval - (time.monotonic() - tick)))
            except asyncio.TimeoutError:
                pass
        if stop.is_set():
            outcome.interrupted = True
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                asyncio.get_running_loop().remove_signal_handler(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        await live.aclose()


# ==================================================================================================
# replay (headless) and the pieces the TUI shares
# ==================================================================================================


def _add_timeline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="print the verdict timeline instead of the TUI")
    p.add_argument("--json", action="store_true", help="with --headless: one JSON object per verdict change")
    p.add_argument("--window", type=float, default=DEFAULT_WINDOW_S, metavar="SECONDS",
                   help="the rate window (default %(default)s)")
    p.add_argument("--evaluate-every", type=float, default=DEFAULT_EVALUATE_EVERY_S, metavar="SECONDS",
                   help="seconds of data time between verdicts; keep the live run's value to reproduce "
                        "its verdicts (default %(default)s)")
    p.add_argument("--speed", type=float, default=1.0, metavar="X", help="TUI playback speed, 0.5 to 100")
    p.add_argument("--method", help="override the speculation method stored in the recording")
    p.add_argument("--draft-ratio", type=float, metavar="R", help="override the draft cost ratio r")
    p.add_argument("--gpu", metavar="NAME", help="override the GPU model")
    p.add_argument("--model", dest="model_name", metavar="NAME", help="override the served model's architecture")
    p.add_argument("--tp", type=int, metavar="N", help="override the tensor-parallel degree")


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a recording made by `specwatch record` (or the demo generator)")
    _add_timeline_arguments(p)


def replay_advisor_config(header: RecordingHeader, args: argparse.Namespace | None = None) -> AdvisorConfig:
    """The advisor settings stored in the header, overridden by any flags given."""
    from specwatch.hardware import lookup, lookup_model
    from specwatch.predict import parse_quantity

    stored = dict(header.advisor)
    for key, attr in (("method", "method"), ("draft_ratio", "draft_ratio"), ("gpu", "gpu"),
                      ("model", "model_name"), ("tp", "tp")):
        value = getattr(args, attr, None) if args is not None else None
        if value is not None:
            stored[key] = value
    gpu = lookup(stored["gpu"]) if stored.get("gpu") else None
    if stored.get("gpu") and gpu is None:
        raise ValueError(f"unknown GPU {stored['gpu']!r} (try H100, H200, A100, L40S, ...)")
    model = lookup_model(stored["model"]) if stored.get("model") else None
    if stored.get("model") and model is None:
        raise ValueError(f"unknown model {stored['model']!r} (try Llama-3.1-8B, Llama-3.1-70B, ...)")
    draft_params = stored.get("draft_params")
    if isinstance(draft_params, str):
        draft_params = parse_quantity(draft_params, "draft params")
    return AdvisorConfig(
        method=stored.get("method"),
        draft_ratio=None if stored.get("draft_ratio") is None else float(stored["draft_ratio"]),
        draft_params=draft_params,
        gpu=gpu,
        model=model,
        tp=int(stored.get("tp") or 1),
    )


def replay_monitor(header: RecordingHeader, args: argparse.Namespace | None = None) -> Monitor:
    """The Monitor a replay (headless or TUI) feeds: the header's advisor settings, the flags' window."""
    window = getattr(args, "window", None) or DEFAULT_WINDOW_S
    every = getattr(args, "evaluate_every", None) or DEFAULT_EVALUATE_EVERY_S
    if window <= 0 or every <= 0:
        raise ValueError("--window and --evaluate-every must be greater than 0")
    return Monitor(window_s=window, advisor_config=replay_advisor_config(header, args), evaluate_every_s=every)


def verdict_timeline(snapshots: Iterable[Snapshot], monitor: Monitor) -> Iterable[VerdictChange]:
    """Every verdict change the Monitor reports while it reads the Snapshots in order."""
    for snapshot in snapshots:
        yield from monitor.ingest(snapshot)


def _print_change(change: VerdictChange, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(change.to_dict(), allow_nan=False) + "\n")
        return
    v = change.verdict
    speedup = f"{v.expected_speedup:.2f}×" if v.expected_speedup is not None else "-"
    reason = v.reasons[0] if v.reasons else ""
    out.write(f"{format_time(change.time)}  {change.url}  {v.speculation:<7} confidence {v.confidence:.2f}  "
              f"speedup {speedup:>6}  {reason}\n")


def _play_headless(path: Path | str, args: argparse.Namespace, label: str, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout  # looked up per call: tests and the TUI swap it
    warnings: list[str] = []
    try:
        header, snapshots = open_snapshots(path, warnings)
        monitor = replay_monitor(header, args)
    except RecordingError as exc:
        print(f"specwatch {label}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except ValueError as exc:
        print(f"specwatch {label}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not args.json:
        kind = "SYNTHETIC data" if header.synthetic else "real data"
        out.write(f"# {Path(path).name}: {kind} from {header.host or 'an unnamed host'}"
                  + (f" — {header.notes}" if header.notes else "") + "\n")
    count = 0
    try:
        for change in verdict_timeline(snapshots, monitor):
            _print_change(change, args.json, out)
        count = len(monitor.window)
    except OSError as exc:
        print(f"specwatch {label}: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    out.flush()
    for w in warnings:
        print(f"specwatch {label}: warning: {w}", file=sys.stderr)
    if count == 0 and monitor.latest is None:
        print(f"specwatch {label}: {path} holds no Snapshots", file=sys.stderr)
    return EXIT_OK


def run_replay_headless(args: argparse.Namespace) -> int:
    return _play_headless(args.file, args, "replay")


# ==================================================================================================
# demo
# ==================================================================================================


@dataclass(frozen=True)
class Scenario:
    name: str
    data: str  # "real" or "synthetic"
    notes: str
    path: Path


def _bundled_files() -> list[Path]:
    root = resources.files("specwatch") / "data"
    try:
        entries = list(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    # resources of an installed package are files on disk (setuptools ships them as such)
    return sorted(Path(str(e)) for e in entries if e.name.endswith(FILE_SUFFIX))


def list_scenarios() -> list[Scenario]:
    """The bundled recordings, real ones first, each with its header's label and notes."""
    scenarios = []
    for path in _bundled_files():
        try:
            header, _ = open_snapshots(path)
        except RecordingError:
            continue  # a damaged bundled file is a packaging bug; test_replay catches it
        scenarios.append(Scenario(path.name[: -len(FILE_SUFFIX)], header.data, header.notes, path))
    return sorted(scenarios, key=lambda s: (s.data != "real", s.name))


def scenario_path(name: str) -> Path | None:
    for s in list_scenarios():
        if s.name == name:
            return s.path
    return None


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--list", action="store_true", help="print the bundled scenarios, one per line, name first")
    p.add_argument("--scenario", metavar="NAME", help="the scenario to play (see --list)")
    _add_timeline_arguments(p)


def run_demo_headless(args: argparse.Namespace) -> int:
    scenarios = list_scenarios()
    if args.list:
        for s in scenarios:
            print(f"{s.name}\t{s.data}\t{s.notes}")
        return EXIT_OK
    if not scenarios:
        print("specwatch demo: no bundled scenarios found (is the package installed completely?)", file=sys.stderr)
        return EXIT_UNREADABLE
    name = args.scenario or scenarios[0].name
    path = scenario_path(name)
    if path is None:
        print(f"specwatch demo: no scenario {name!r}; bundled: {', '.join(s.name for s in scenarios)}",
              file=sys.stderr)
        return EXIT_USAGE
    return _play_headless(path, args, "demo")
