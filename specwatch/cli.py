"""The `specwatch` command line (DESIGN §5)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from typing import Any, Sequence

from specwatch import __version__
from specwatch.report import (
    EXIT_UNREADABLE,
    SpeculationConfig,
    check_report,
    exit_status,
    format_summary,
)
from specwatch.window import Window


def add_connection_arguments(p: Any, token_env: str, what: str = "") -> None:
    """--token-env/--token-file and --ca-file/--insecure: a token never comes from argv, and TLS is
    verified unless turned off explicitly. `p` is a parser or an argument group."""
    to = f" for {what}" if what else ""
    p.add_argument("--token-env", metavar="NAME", default=token_env,
                   help=f"environment variable holding a bearer token{to} (default %(default)s)")
    p.add_argument("--token-file", metavar="PATH", help=f"file whose first line is a bearer token{to}")
    p.add_argument("--ca-file", metavar="PATH", help=f"CA bundle for HTTPS{' ' + what if what else ' targets'}")
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates (not recommended)")


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every live command shares (check, watch, record, export)."""
    from specwatch.collectors.vllm import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, DEFAULT_TOKEN_ENV, DEFAULT_URL

    p.add_argument("--url", action="append", dest="urls", metavar="URL",
                   help=f"vLLM server (base URL or its /metrics URL); repeat for several (default {DEFAULT_URL})")
    add_connection_arguments(p, DEFAULT_TOKEN_ENV)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="per-request timeout (default %(default)s)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                   help="largest /metrics payload accepted (default %(default)s)")
    p.add_argument("--method", help="the speculation method, when the server does not expose it "
                                    "(ngram, suffix, eagle, eagle3, mtp, draft_model, ...)")
    p.add_argument("--draft-model", help="the draft model, when the server does not expose it")
    p.add_argument("--draft-ratio", type=float, metavar="R",
                   help="draft cost per draft token relative to a target step, when known (r)")
    p.add_argument("--draft-params", metavar="N", help="the draft model's parameter count (e.g. 1B)")
    p.add_argument("--dcgm", metavar="URL",
                   help="dcgm-exporter /metrics URL (default: try localhost:9400 quietly)")
    p.add_argument("--no-dcgm", action="store_true", help="do not read a dcgm-exporter")
    p.add_argument("--no-nvml", action="store_true", help="do not read local GPUs through NVML")
    p.add_argument("--gpu", metavar="NAME", help="the GPU model, overriding what NVML or DCGM report "
                                                 "(H100, H200, A100, L40S, ...)")
    p.add_argument("--model", dest="model_name", metavar="NAME",
                   help="the served model's architecture (Llama-3.1-70B, Qwen2.5-7B, ...): "
                        "enables the datasheet step-time prior")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel degree (default 1)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch",
        description="Is speculative decoding paying on this vLLM node right now, and why?",
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from specwatch.watchcli import add_watch_arguments

    watch = sub.add_parser("watch", help="the live dashboard (what bare `specwatch` runs)",
                           description="The live dashboard: the verdict, the numbers under it, and their history.")
    add_watch_arguments(watch)

    check = sub.add_parser("check", help="read the node twice, a window apart, and print the verdict",
                           description="Scrape the target twice, --window seconds apart, and report.")
    add_source_arguments(check)
    check.add_argument("--window", type=float, default=5.0, metavar="SECONDS",
                       help="seconds between the two scrapes (default %(default)s)")
    check.add_argument("--json", action="store_true", help="print the specwatch.check/1 JSON object")

    from specwatch.commands.predict import add_arguments as add_predict_arguments

    predict = sub.add_parser("predict", help="the verdict for a configuration, with no live node",
                             description="What speculation would do for this GPU, model, load and acceptance.")
    add_predict_arguments(predict)

    from specwatch.tune import add_tune_arguments

    tune = sub.add_parser("tune", help="the speculation schedule by batch size, ready to paste into vLLM",
                          description="Watch a server (or read a recording) and compute, for every batch size, "
                                      "the k that maximises the expected speedup.")
    add_tune_arguments(tune)

    from specwatch.replaycli import add_demo_arguments, add_record_arguments, add_replay_arguments

    record = sub.add_parser("record", help="record the live sources to a file, headless",
                            description="Record Snapshots from the live sources until --duration or Ctrl-C.")
    add_record_arguments(record)
    replay = sub.add_parser("replay", help="play a recording back through the same advisor",
                            description="Play a recording in the dashboard, or print its verdict timeline "
                                        "with --headless.")
    add_replay_arguments(replay)
    demo = sub.add_parser("demo", help="play a bundled scenario: no GPU and no server needed",
                          description="Play a bundled recording (real or synthetic, and labelled so).")
    add_demo_arguments(demo)
    # the demo tells a story of minutes: at 10× the first flip comes within a minute (shown as ×10)
    demo.set_defaults(speed=10.0)

    from specwatch.sweepcli import add_sweep_arguments

    sweep = sub.add_parser("sweep", help="baseline vs speculative across concurrency: where the curves cross",
                           description="Run the same prompts against a server without and one with speculation "
                                       "at rising concurrency, and find where speculation stops paying.")
    add_sweep_arguments(sweep)

    from specwatch.exportcli import add_export_arguments, add_fleet_arguments

    export = sub.add_parser("export", help="serve the verdict as Prometheus metrics (a headless agent)",
                            description="Run the sources and the advisor, and serve specwatch_* metrics.")
    add_export_arguments(export)
    fleet = sub.add_parser("fleet", help="every node's verdict, read through Prometheus",
                           description="A table of nodes from a Prometheus server that scrapes specwatch agents.")
    add_fleet_arguments(fleet)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not argv or (argv[0] not in commands and argv[0] not in ("-h", "--help", "--version")):
        argv = ["watch", *argv]  # bare `specwatch [flags]` is `specwatch watch [flags]`
    args = parser.parse_args(argv)
    if args.command == "watch":
        from specwatch.recorder import live_recorder
        from specwatch.watchcli import run_watch

        return run_watch(args, recorder=live_recorder(args))
    if args.command == "check":
        return run_check(args)
    if args.command == "record":
        from specwatch.replaycli import run_record

        return run_record(args)
    if args.command == "replay":
        from specwatch.replaycli import run_replay_headless

        return run_replay_headless(args) if args.headless else run_replay_tui(args)
    if args.command == "demo":
        from specwatch.replaycli import run_demo_headless

        return run_demo_headless(args) if args.headless or args.list else run_demo_tui(args)
    if args.command == "export":
        from specwatch.exportcli import run_export

        return run_export(args)
    if args.command == "fleet":
        from specwatch.exportcli import run_fleet

        return run_fleet(args)
    if args.command == "sweep":
        from specwatch.sweepcli import run_sweep

        return run_sweep(args)
    if args.command == "tune":
        from specwatch.tune import run_tune

        return run_tune(args)
    if args.command == "predict":
        from specwatch.commands.predict import run as run_predict

        return run_predict(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _source_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Token and TLS settings from the flags; raises TokenError or ValueError with a clear message."""
    from specwatch.collectors.vllm import read_token, verify_from_flags

    token = read_token(args.token_env, args.token_file)
    verify = verify_from_flags(args.insecure, args.ca_file)
    return {"token": token, "verify": verify, "timeout_s": args.timeout, "max_bytes": args.max_bytes}


def run_check(args: argparse.Namespace) -> int:
    from specwatch.collectors.vllm import DEFAULT_URL, TokenError, VllmSource

    if args.window <= 0:
        print("specwatch check: --window must be greater than 0", file=sys.stderr)
        return EXIT_UNREADABLE
    urls = args.urls or [DEFAULT_URL]
    if len(urls) > 1:
        print("specwatch check: check reads one target; run it once per --url (watch and export take several)",
              file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        settings = _source_settings(args)
        source = VllmSource(urls[:1], **settings)
        advisor_config(args)
    except (TokenError, ValueError) as exc:
        print(f"specwatch check: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    report = asyncio.run(_check(source, args))
    if args.json:
        print(json.dumps(finite_json(report), indent=2, allow_nan=False, default=_json_default))
    else:
        print(format_summary(report))
    return exit_status(report["state"] == "ok", report["verdict"])


def advisor_config(args: argparse.Namespace, spec_config: dict | None = None) -> Any:
    """The advisor's configuration from the flags (and /server_info when dev mode exposes it)."""
    from specwatch.advisor import AdvisorConfig
    from specwatch.hardware import lookup, lookup_model
    from specwatch.predict import parse_quantity

    spec_config = spec_config or {}
    gpu = None
    if args.gpu:
        gpu = lookup(args.gpu)
        if gpu is None:
            raise ValueError(f"unknown GPU {args.gpu!r} (try H100, H200, A100, L40S, L4, ...)")
    model = None
    if args.model_name:
        model = lookup_model(args.model_name)
        if model is None:
            raise ValueError(f"unknown model {args.model_name!r} (try Llama-3.1-8B, Llama-3.1-70B, Qwen2.5-7B, ...)")
    draft_params = parse_quantity(args.draft_params, "draft params") if args.draft_params else None
    return AdvisorConfig(
        method=args.method or spec_config.get("method"),
        draft_ratio=args.draft_ratio,
        draft_params=draft_params,
        gpu=gpu,
        model=model,
        tp=args.tp,
    )


def gpu_poller(args: argparse.Namespace) -> Any:
    """NVML plus dcgm-exporter, as the flags ask; None when both are off."""
    from specwatch.collectors.gpus import GpuPoller
    from specwatch.collectors.nvml import NvmlCollector

    if args.no_nvml and args.no_dcgm:
        return None
    collector = _NvmlOff() if args.no_nvml else NvmlCollector()
    return GpuPoller(collector, dcgm_url=args.dcgm, dcgm=not args.no_dcgm)


class _NvmlOff:
    """Stands in for the NVML collector under --no-nvml: no GPUs, and a state saying why."""

    def poll(self) -> tuple[tuple, Any]:
        from specwatch.snapshot import SourceStatus

        return (), SourceStatus("nvml", "off", "NVML reading turned off (--no-nvml)")

    def close(self) -> None:
        pass


async def _check(source: Any, args: argparse.Namespace) -> dict[str, Any]:
    from specwatch.advisor import Advisor
    from specwatch.sources import LiveSource

    url = source.targets[0].url
    window = Window(seconds=max(args.window * 2, 1.0))
    live = LiveSource(source, gpu_poller(args), interval_s=args.window, gpu_timeout_s=args.timeout)
    try:
        window.add(await live.read())
        if window.latest.targets[0].ok:
            await asyncio.sleep(args.window)
            window.add(await live.read())
    finally:
        await live.aclose()
    info = source.info(url)
    spec_config = (info.speculative_config if info else None) or {}
    config = SpeculationConfig(
        method=args.method or spec_config.get("method"),
        draft_model=args.draft_model or spec_config.get("model"),
    )
    advisor = Advisor(advisor_config(args, spec_config))
    verdict = advisor.update(window.target(url), window.latest.gpus)
    return check_report(window, url, verdict.to_dict(), verdict.bound, config)


def run_replay_tui(args: argparse.Namespace) -> int:
    """The dashboard over a recording: pause, seek, speed and step keys."""
    from specwatch.app import run_app
    from specwatch.collectors.replay import ReplaySource
    from specwatch.recording import RecordingError
    from specwatch.replaycli import replay_monitor

    try:
        source = ReplaySource(args.file, speed=args.speed)
        monitor = replay_monitor(source.header, args)
    except (RecordingError, OSError) as exc:
        print(f"specwatch replay: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except ValueError as exc:
        print(f"specwatch replay: {exc}", file=sys.stderr)
        return 2
    return run_app(source, monitor, title="specwatch replay")


def build_demo(scenarios: Sequence[Any], args: argparse.Namespace) -> tuple[Any, Any]:
    """The source and Monitor that play `scenarios` (bundled recordings) one after another.

    One scenario loops on its own; several play in turn, each target tagged with its scenario's name
    and judged under the advisor settings its recording was made with."""
    from specwatch.collectors.replay import PlaylistSource, ReplaySource
    from specwatch.replaycli import replay_advisor_config, replay_monitor

    sources = [ReplaySource(s.path, speed=args.speed, loop=len(scenarios) == 1) for s in scenarios]
    monitor = replay_monitor(sources[0].header, args)
    if len(sources) == 1:
        return sources[0], monitor
    names = [s.name for s in scenarios]
    monitor.target_configs = {
        PlaylistSource.target_url(url, name): replay_advisor_config(src.header, args)
        for src, name in zip(sources, names)
        for url in {t.url for snap in src.recording.snapshots[:1] for t in snap.targets}
    }
    return PlaylistSource(sources, names), monitor


def run_demo_tui(args: argparse.Namespace) -> int:
    """The dashboard over the bundled scenarios, one after another, looping, each labelled real or
    synthetic. --scenario plays just one."""
    from specwatch.app import run_app
    from specwatch.recording import RecordingError
    from specwatch.replaycli import list_scenarios

    scenarios = list_scenarios()
    if args.scenario:
        scenarios = [s for s in scenarios if s.name == args.scenario]
        if not scenarios:
            names = ", ".join(s.name for s in list_scenarios())
            print(f"specwatch demo: no scenario {args.scenario!r}; bundled: {names}", file=sys.stderr)
            return 2
    else:
        # the synthetic H100 story first: it shows speculation paying, costing, and paying again
        scenarios.sort(key=lambda s: (s.name != "h100-70b-ngram", s.data != "real", s.name))
    if not scenarios:
        print("specwatch demo: no bundled scenarios found (is the package installed completely?)", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        source, monitor = build_demo(scenarios, args)
    except (RecordingError, OSError, ValueError) as exc:
        print(f"specwatch demo: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    return run_app(source, monitor, title="specwatch demo")


def finite_json(value: Any) -> Any:
    """The value with every NaN or infinity replaced by null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


if __name__ == "__main__":
    raise SystemExit(main())
