"""The `specwatch` command line (DESIGN §5)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Sequence

from specwatch import __version__
from specwatch.report import (
    EXIT_UNREADABLE,
    SpeculationConfig,
    check_report,
    exit_status,
    format_summary,
)
from specwatch.snapshot import Snapshot
from specwatch.window import Window


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every live command shares (check, watch, record, export)."""
    from specwatch.collectors.vllm import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, DEFAULT_TOKEN_ENV, DEFAULT_URL

    p.add_argument("--url", action="append", dest="urls", metavar="URL",
                   help=f"vLLM server (base URL or its /metrics URL); repeat for several (default {DEFAULT_URL})")
    p.add_argument("--token-env", metavar="NAME", default=DEFAULT_TOKEN_ENV,
                   help="environment variable holding a bearer token (default %(default)s)")
    p.add_argument("--token-file", metavar="PATH", help="file whose first line is a bearer token")
    p.add_argument("--ca-file", metavar="PATH", help="CA bundle for HTTPS targets")
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates (not recommended)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="per-request timeout (default %(default)s)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                   help="largest /metrics payload accepted (default %(default)s)")
    p.add_argument("--method", help="the speculation method, when the server does not expose it "
                                    "(ngram, suffix, eagle, eagle3, mtp, draft_model, ...)")
    p.add_argument("--draft-model", help="the draft model, when the server does not expose it")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specwatch",
        description="Is speculative decoding paying on this vLLM node right now, and why?",
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="read the node twice, a window apart, and print the verdict",
                           description="Scrape the target twice, --window seconds apart, and report.")
    add_source_arguments(check)
    check.add_argument("--window", type=float, default=5.0, metavar="SECONDS",
                       help="seconds between the two scrapes (default %(default)s)")
    check.add_argument("--json", action="store_true", help="print the specwatch.check/1 JSON object")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "check":
        return run_check(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _source_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Token and TLS settings from the flags; raises TokenError with a clear message."""
    from specwatch.collectors.vllm import read_token

    token = read_token(args.token_env, args.token_file)
    verify: bool | str = True
    if args.insecure:
        verify = False
    elif args.ca_file:
        verify = args.ca_file
    return {"token": token, "verify": verify, "timeout_s": args.timeout, "max_bytes": args.max_bytes}


def run_check(args: argparse.Namespace) -> int:
    from specwatch.collectors.vllm import DEFAULT_URL, TokenError, VllmSource

    if args.window <= 0:
        print("specwatch check: --window must be greater than 0", file=sys.stderr)
        return EXIT_UNREADABLE
    urls = args.urls or [DEFAULT_URL]
    try:
        settings = _source_settings(args)
        source = VllmSource(urls[:1], **settings)
    except (TokenError, ValueError) as exc:
        print(f"specwatch check: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    report = asyncio.run(_check(source, args))
    if args.json:
        print(json.dumps(report, indent=2, allow_nan=False, default=_json_default))
    else:
        print(format_summary(report))
    return exit_status(report["state"] == "ok", report["verdict"])


async def _check(source: Any, args: argparse.Namespace) -> dict[str, Any]:
    url = source.targets[0].url
    window = Window(seconds=max(args.window * 2, 1.0))
    async with source:
        window.add(Snapshot(time=time.time(), targets=await source.scrape()))
        if window.latest.targets[0].ok:
            await asyncio.sleep(args.window)
            window.add(Snapshot(time=time.time(), targets=await source.scrape()))
    info = source.info(url)
    spec_config = (info.speculative_config if info else None) or {}
    config = SpeculationConfig(
        method=args.method or spec_config.get("method"),
        draft_model=args.draft_model or spec_config.get("model"),
    )
    verdict, bound = pending_verdict()
    return check_report(window, url, verdict, bound, config)


def pending_verdict() -> tuple[dict[str, Any], dict[str, Any]]:
    """The verdict block before the advisor decides: unknown, saying why."""
    verdict = {
        "speculation": "unknown",
        "confidence": 0.0,
        "expected_speedup": None,
        "break_even_length": None,
        "crossover_concurrency": None,
        "change_recommended": False,
        "reasons": ["the advisor is not part of this build yet: engine and speculation figures only"],
    }
    return verdict, {"state": "unknown", "signals": []}


def _json_default(value: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


if __name__ == "__main__":
    raise SystemExit(main())
