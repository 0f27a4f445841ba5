"""`specwatch check`: read the node twice, a window apart, print the verdict and exit with it
(0 no change, 1 change recommended, 2 not enough data, 3 the target could not be read). With several
--url, every target is read and reported, and the status is the most urgent of theirs."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from typing import Any, Iterable

from specwatch.commands.options import CommandError, ExitCode, add_source_arguments, live_session, window_seconds


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(p)
    p.add_argument("--window", type=window_seconds, default=5.0, metavar="SECONDS",
                   help="seconds between the two scrapes (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the specwatch.check/1 JSON object")
    p.add_argument("--sweep", metavar="FILE",
                   help="a `specwatch sweep` results JSON: its measured crossover is used when it measured "
                        "this target's model, method and k (said under `sweep` in --json)")


def run(args: argparse.Namespace) -> int:
    from specwatch.outputs.report import format_summary

    sweep = _sweep_identity(args.sweep) if getattr(args, "sweep", None) else None
    session = live_session(args, interval_s=args.window, window_s=max(args.window * 2, 1.0))
    reports = asyncio.run(_check(session, args, sweep))
    if args.json:
        # specwatch.check/1 as before for the first target, with every target's report in `targets`
        document = {**reports[0], "targets": reports}
        print(json.dumps(finite_json(document), indent=2, allow_nan=False, default=_json_default))
    else:
        print("\n".join(format_summary(report) for report in reports))
    return worst_status(exit_status(r["state"] == "ok", r["verdict"], (r.get("deployment") or {}).get("role"))
                        for r in reports)


def exit_status(target_ok: bool, verdict: dict[str, Any], role: str | None = None) -> ExitCode:
    """The check contract: no usable reading (the target cannot be read, or its engine is stalled:
    requests running, counters frozen), not enough data, change recommended, or no change. A Dynamo
    frontend or a prefill worker, read, is never judged (its decode workers are): nothing to change
    there, and nothing missing."""
    if not target_ok or "engine_stalled" in verdict.get("flags", ()):
        return ExitCode.UNREADABLE
    from specwatch.collectors.dynamo import NOT_JUDGED_ROLES

    if role in NOT_JUDGED_ROLES and "not_judged" in verdict.get("flags", ()):
        return ExitCode.OK
    if verdict.get("speculation") == "unknown":
        return ExitCode.NOT_ENOUGH_DATA
    return ExitCode.CHANGE if verdict.get("change_recommended") else ExitCode.OK


# with several targets the status is the one that needs a person first: one unreadable target
# outweighs the rest, then one that cannot be judged, then one that wants a change
_SEVERITY = (ExitCode.UNREADABLE, ExitCode.NOT_ENOUGH_DATA, ExitCode.CHANGE, ExitCode.OK)


def worst_status(statuses: Iterable[ExitCode]) -> ExitCode:
    return min(statuses, key=_SEVERITY.index, default=ExitCode.OK)


def _sweep_identity(path: str) -> Any:
    from specwatch.sweep import SweepFileError, load_sweep
    from specwatch.advice.sweep_evidence import SweepIdentity

    try:
        return SweepIdentity.from_sweep(load_sweep(path))
    except SweepFileError as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None


def sweep_block(sweep: Any, advisor: Any, verdict: Any, tw: Any, time: float | None) -> dict[str, Any]:
    """What check --json says of the sweep: the verdict's reconciliation, or, with no verdict to
    reconcile (no traffic, no reading), whether the sweep measured this target at all."""
    from specwatch.telemetry.snapshot import canonical_method_name
    from specwatch.advice.sweep_evidence import reconcile_crossover

    if "sweep" in verdict.details:
        return verdict.details["sweep"]
    target = tw.latest if tw is not None else None
    model = next((e.model_name for e in target.engines if e.model_name), None) if target is not None else None
    spec = advisor.speculation or (target.speculation if target is not None else None)
    method = spec.method if spec is not None else None
    k = (spec.k if spec is not None else None) or (tw.k if tw is not None else None)
    return reconcile_crossover(sweep, model, canonical_method_name(method) if method else None, k,
                               target.version if target is not None else None, time, None).to_dict()


async def _check(session: Any, args: argparse.Namespace, sweep: Any = None) -> list[dict[str, Any]]:
    from specwatch.advice.advisor import Advisor
    from specwatch.outputs.report import check_report

    urls = [t.url for t in session.vllm.targets]
    window = session.monitor.window
    live = session.source
    try:
        window.add(await live.read())
        if any(t.ok for t in window.latest.targets):
            await asyncio.sleep(args.window)
            window.add(await live.read())
    finally:
        await live.aclose()
    reports = []
    for url in urls:
        # the method and draft come from the samples (/server_info, else the flags), as in every front end
        advisor = Advisor(session.monitor.advisor_config)
        advisor.sweep = sweep
        verdict = advisor.update(window.target(url), window.latest.gpus, window.latest.sources)
        config = session.monitor.advisor_config
        report = check_report(window, url, verdict.to_dict(), verdict.bound, advisor.speculation,
                              slo=(config.slo_ttft_s, config.slo_tpot_s), token_budget=config.token_budget,
                              device=config.device, weights=advisor.weights,
                              judged_budget=advisor.last_inputs.token_budget if advisor.last_inputs else None)
        if sweep is not None:
            report["sweep"] = sweep_block(sweep, advisor, verdict, window.target(url), window.latest.time)
        reports.append(report)
    return reports


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
