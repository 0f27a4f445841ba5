"""The `check` report (DESIGN §5): a Window and its latest Snapshot → the specwatch.check/1 object.

Pure: it formats what the window computed (the exit status is the command's: specwatch.commands.check).
"""

from __future__ import annotations

from typing import Any, Sequence

from specwatch.readings.health import health_report, node_output_tokens
from specwatch.advice.token_budget import TokenBudget, resolve_token_budget
from specwatch.perf import BoundEstimate
from specwatch.telemetry.snapshot import (GpuSample, Snapshot, SourceStatus, SpeculationConfig, TargetSample,
                                         inferred_device, resolve_device, resolve_speculation)
from specwatch.readings.window import TTFT, EngineFigures, TargetWindow, Window
from specwatch.collectors.engines import LABELS as ENGINE_LABELS

CHECK_SCHEMA = "specwatch.check/1"


# Activity/utilisation fields that check reports for each GPU, in DESIGN §5's order.
CHECK_GPU_FIELDS = ("sm_active", "tensor_active", "dram_bw_util", "util_gpu", "util_memory",
                    "power_w", "memory_used_bytes")


def histogram_mean(h: Any) -> float | None:
    """sum / count of a histogram's increase; None without observations."""
    return h.sum / h.count if h is not None and h.count > 0 else None


def _r(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def engine_block(tw: TargetWindow | None, reachable: bool, version: str | None) -> dict[str, Any]:
    total = tw.total if tw else None
    latest_engines = tw.latest.engines if tw and tw.latest.ok else ()
    gauges_only = tw.lifetime if tw else None  # gauges are the same in both; lifetime exists sooner
    figures = total or gauges_only
    judged = total.judged_running() if total else (None, None)
    block: dict[str, Any] = {
        "name": tw.latest.engine_name if tw else None,  # the serving engine: vllm, sglang
        "reachable": reachable,
        "version": version,
        "engines": len(latest_engines),
        "model": latest_engines[0].model_name if latest_engines else None,
        "running": figures.running if figures else None,
        "waiting": figures.waiting if figures else None,
        # the window's time averages (Little's law on the engine's per-request times), and the load
        # the verdict was judged at: the time average where it is measured, else the gauge
        "running_time_mean": _r(total.running_time_mean, 3) if total else None,
        "waiting_time_mean": _r(total.waiting_time_mean, 3) if total else None,
        "judged_running": _r(judged[0], 3),
        "judged_running_from": judged[1],
        "kv_cache_usage": _r(figures.kv_cache_usage) if figures else None,
        "ttft_p50_s": _r(total.ttft_p50_s) if total else None,
        "ttft_p95_s": _r(total.ttft_p95_s) if total else None,
        # the window's mean: what a Dynamo frontend's planner compares with its SLA
        "ttft_mean_s": _r(histogram_mean(tw.increases.histogram_totals(TTFT))) if tw and tw.increases else None,
        "tpot_mean_s": _r(total.tpot_mean_s) if total else None,
        "itl_mean_s": _r(total.itl_mean_s) if total else None,
        "generation_tokens_per_s": _r(total.generation_tokens_per_s, 3) if total else None,
        "prompt_tokens_per_s": _r(total.prompt_tokens_per_s, 3) if total else None,
        "prompt_to_output_ratio": _r(total.prompt_to_output_ratio, 4) if total else None,
        "computed_tokens_per_step_mean": _r(total.computed_tokens_per_step_mean, 3) if total else None,
        "prompt_and_emitted_tokens_per_step_mean":
            _r(total.prompt_and_emitted_tokens_per_step_mean, 3) if total else None,
        "mfu_intensity": _r(total.mfu_intensity, 3) if total else None,
        "restarts_in_window": total.restarts if total else 0,
        "window_s": _r(tw.seconds, 3) if tw else None,
        "per_engine": [
            {"engine": key, "running": f.running, "waiting": f.waiting, "kv_cache_usage": _r(f.kv_cache_usage),
             "generation_tokens_per_s": _r(f.generation_tokens_per_s, 3),
             "acceptance_length": _r(f.acceptance.acceptance_length) if f.acceptance else None}
            for key, f in (tw.engines.items() if tw else ())
        ],
    }
    return block


def _time_average_words(eng: dict[str, Any]) -> str:
    """" (1.7 on the window's average, judged at that)" where the verdict's load is the time average."""
    if eng.get("judged_running_from") != "time_average" or eng.get("judged_running") is None:
        return ""
    return f" ({eng['judged_running']:.1f} on the window's average, judged at that)"


def _acceptance_block(figures: EngineFigures | None) -> dict[str, Any] | None:
    if figures is None or figures.acceptance is None:
        return None
    return figures.acceptance.to_dict()


def speculation_block(tw: TargetWindow | None, config: SpeculationConfig | None = None) -> dict[str, Any]:
    """The speculation block: k from the metrics, the method and draft model from the target's
    SpeculationConfig (its /server_info, or what the operator declared), with `config` (what the
    verdict was judged with, or the operator's flags) filling in what the target's does not say."""
    configured = bool(tw and tw.speculation_configured)
    known = resolve_speculation(tw.latest.speculation if tw else None, config) if configured else None
    return {
        # null, not false, while the target cannot be read (as the exporter leaves the series out):
        # a server that does not answer is not "not configured"
        "configured": configured if tw is not None and tw.latest.ok else None,
        "k": (tw.k or (known.k if known else None)) if tw and configured else None,
        "method": known.method if known else None,
        "draft_model": known.draft_model if known else None,
        "source": known.source if known else None,  # where the method came from
        "sources": dict(known.sources) if known else None,  # and each of the other fields
        "token_tree": known.token_tree if known else None,  # tree drafting: verified positions ≠ k + 1
        # SGLang exposes acceptance only as a gauge: its "drafts" are seconds of weight, not drafts
        "acceptance_from": (_ACCEPTANCE_FROM.get(tw.latest.engine_name, "counters") if tw and configured else None),
        "window": _acceptance_block(tw.total) if tw and configured else None,
        "lifetime": _acceptance_block(tw.lifetime) if tw and configured else None,
    }


_ACCEPTANCE_FROM = {"sglang": "sglang:spec_accept_length gauge, time-weighted (drafts are seconds of weight)",
                    "trtllm": "trtllm_spec_decode_* counters (drafts = drafted at position 0, counted as requests "
                              "finish; else draft tokens / k)"}


def gpu_block(gpu: GpuSample) -> dict[str, Any]:
    block: dict[str, Any] = {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "source": gpu.source,
                             "lost": gpu.lost}
    for name in CHECK_GPU_FIELDS:
        block[name] = gpu.values.get(name)
    block["throttle_reasons"] = list(gpu.throttle_reasons)
    block["errors"] = {k: v for k, v in gpu.errors.items()}
    block["mig_mode"] = gpu.mig_mode
    block["mig"] = gpu.mig.to_dict() if gpu.mig is not None else None  # a MIG device: its parent and share
    return block


def sources_block(sources: Sequence[SourceStatus]) -> list[dict[str, Any]]:
    return [s.to_dict() for s in sources]


def check_report(
    window: Window,
    url: str,
    verdict: dict[str, Any],
    bound: BoundEstimate,
    config: SpeculationConfig | None = None,
    slo: tuple[float | None, float | None] = (None, None),
    token_budget: int | None = None,
    device: str | None = None,
    judged_budget: TokenBudget | None = None,
    weights: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The specwatch.check/1 object for one target. `config`: the speculation config the verdict was
    judged with (Advisor.speculation), when the target's own does not say everything. `slo`: the
    (TTFT, TPOT) targets in seconds that goodput counts against. `token_budget`: the operator's
    --max-num-batched-tokens, which the server's own budget wins over (under `engine.token_budget`,
    with where the one judged with came from). `device`: the operator's --device, which the server's
    own (its /server_info) wins over likewise (under `engine.device`). `judged_budget`: the budget the
    verdict was judged with (Advisor.last_inputs), which may be vLLM's default for the hardware.
    `weights`: the weights' format the verdict was priced with and where it came from
    (Advisor.weights: server_info, flags, release or default), under `engine.weights`."""
    latest: Snapshot | None = window.latest
    tw = window.target(url)
    gpu_joules, _ = window.gpu_energy()
    target = latest.target(url) if latest else None
    reachable = bool(target and target.ok)
    return {
        "schema": CHECK_SCHEMA,
        "time": latest.time if latest else None,
        "target": url,
        "state": target.state if target else "unknown",
        "message": target.message if target else "not scraped",
        "engine": {**engine_block(tw, reachable, target.version if target else None),
                   # the step's token budget the verdict was judged with: {tokens, source}, tokens null
                   # where neither the server nor the operator gave it (then no budget cuts the prefill)
                   "token_budget": (judged_budget or resolve_token_budget(target, token_budget)).to_dict(),
                   # what the engine runs on ("cpu" sets the step-time shape where no GPU is identified):
                   # {name, source}, name null where neither the server nor the operator said it
                   "device": dict(zip(("name", "source"), resolve_device(
                       target.device if target else None, device,
                       inferred_device(url, latest.sources, latest.gpus) if latest else None))),
                   # the weights' format the advisor prices (a datasheet prior reads it where the model and
                   # the GPU are known): {format, source}, null without an advisor
                   "weights": dict(zip(("format", "source"), weights)) if weights else None},
        "deployment": deployment_block(latest, target),
        "speculation": speculation_block(tw, config),
        "gpus": [gpu_block(g) for g in (latest.gpus if latest else ())],
        "sources": sources_block(latest.sources if latest else ()),
        "bound": bound.to_dict(),
        "verdict": verdict,
        "health": health_report(tw.increases if tw else None, tw.seconds if tw else 0.0, gpu_joules,
                                slo[0], slo[1], bool(tw and tw.speculation_configured),
                                verdict.get("expected_speedup"),
                                node_output_tokens(t.increases for t in map(window.target, window.target_urls())
                                                   if t is not None),
                                kv_capacity_tokens=tw.total.kv_capacity_tokens if tw and tw.total else None),
    }


def deployment_block(latest: Snapshot | None, target: TargetSample | None) -> dict[str, Any] | None:
    """Where the target sits in a deployment (a Dynamo frontend or worker, or a prefill worker the
    operator named); None for a bare server. For a frontend: the workers its metrics list and how
    many of them this run reads (the other targets of the same deployment that answered), so the
    ones not read can be named."""
    if target is None or (target.deployment is None and target.role is None):
        return None
    block: dict[str, Any] = {"namespace": target.deployment, "role": target.role, "judged": target.unjudged is None}
    # the deployment's planner, where one is read: its latencies and pools beside the verdict
    planner = next((t for t in (latest.targets if latest else ()) if t.ok and t.role == "planner"
                    and t.deployment == target.deployment and t.engines), None)
    if planner is not None:
        block["planner"] = {name.removeprefix("dynamo_planner_"): value
                            for name, value in planner.engines[0].gauges.items()}
    if target.role == "frontend":
        # the deployment's workers read here; a target down before it was ever read has no placement
        # yet, and is counted down beside them (a worker given with the frontend, most likely)
        peers = [t for t in (latest.targets if latest else ()) if t.url != target.url
                 and t.role not in ("frontend", "planner")
                 and (t.deployment == target.deployment or (t.deployment is None and not t.ok))]
        read = [t.url for t in peers if t.ok]
        # a worker's own id (Dynamo writes it on its port) matched against the ids the frontend lists
        read_ids = {w for t in peers if t.ok for w in t.workers}
        block["workers_listed"] = list(target.workers)
        block["workers_read"] = read
        block["workers_down"] = [t.url for t in peers if not t.ok]
        matched = all(t.workers for t in peers if t.ok)  # every worker read says its id
        unread = [w for w in target.workers if w.split(" ")[0].split(":")[0] not in read_ids]
        # named where the ids match (Dynamo 1.6 writes them on both sides), else only counted
        block["workers_not_read"] = unread if matched else None
        block["workers_not_read_count"] = len(unread) if matched else max(0, len(target.workers) - len(read))
    return block


def deployment_words(report: dict[str, Any]) -> str | None:
    """One line on the deployment for the summary, or None for a bare server."""
    block = report.get("deployment")
    if not block:
        return None
    words = f"  deployment {block['namespace'] or '?'}: {block['role'] or 'worker'}"
    if block["role"] == "frontend":
        listed = block["workers_listed"]
        words += f", routes to {len(listed)} worker(s), {len(block['workers_read'])} read here"
        if block["workers_down"]:
            words += f", down: {', '.join(block['workers_down'])}"
        if block["workers_not_read_count"]:
            named = ", ".join(block["workers_not_read"] or listed)
            words += (f"; {block['workers_not_read_count']} not read ({named}): add their system ports "
                      "(DYN_SYSTEM_PORT) with --url")
    planner = block.get("planner")
    if planner:
        words += ("; planner: TTFT " + _fmt(planner.get("observed_ttft_ms"), ".0f") + " ms observed, "
                  + _fmt(planner.get("estimated_ttft_ms"), ".0f") + " ms estimated; ITL "
                  + _fmt(planner.get("observed_itl_ms"), ".1f") + " ms observed, "
                  + _fmt(planner.get("estimated_itl_ms"), ".1f") + " ms estimated; decode replicas "
                  + _fmt(planner.get("num_decode_replicas"), ".0f"))
    return words


def format_summary(report: dict[str, Any]) -> str:
    """The short human summary printed without --json."""
    lines = [f"specwatch check  {report['target']}"]
    if report["state"] != "ok":
        lines.append(f"  target: {report['state']}: {report['message']}")
    placed = deployment_words(report)
    if placed:
        lines.append(placed)
    eng = report["engine"]
    if eng["reachable"]:
        version = eng["version"] or "version unknown"
        lines.append(
            f"  {ENGINE_LABELS.get(eng.get('name'), 'vLLM')} {version}, {eng['engines']} engine(s), "
            f"model {eng['model'] or '?'}: "
            f"running {_fmt(eng['running'], '.0f')}{_time_average_words(eng)}, "
            f"waiting {_fmt(eng['waiting'], '.0f')}, KV {_fmt(eng['kv_cache_usage'], '.0%')}"
        )
        lines.append(
            f"  output {_fmt(eng['generation_tokens_per_s'], '.1f')} tok/s, "
            f"TPOT {_fmt_ms(eng['tpot_mean_s'])}, TTFT p95 {_fmt_ms(eng['ttft_p95_s'])}, "
            f"prompt:output {_fmt(eng['prompt_to_output_ratio'], '.2f')}  (window {_fmt(eng['window_s'], '.1f')} s)"
        )
        if len(eng["per_engine"]) > 1:  # the total can hide one engine that differs
            for e in eng["per_engine"]:
                accept = e["acceptance_length"]
                lines.append(f"    engine {e['engine']}: running {_fmt(e['running'], '.0f')}, "
                             f"waiting {_fmt(e['waiting'], '.0f')}, KV {_fmt(e['kv_cache_usage'], '.0%')}, "
                             f"output {_fmt(e['generation_tokens_per_s'], '.1f')} tok/s"
                             + (f", acceptance length {accept:.2f}" if accept is not None else ""))
    spec = report["speculation"]
    if spec["configured"]:
        w = spec["window"]
        life = spec["lifetime"]
        method = f"{spec['method']} (from {spec['source']})" if spec["method"] else "method unknown"
        # an old (V0) server without the draft-token counter does not say k: say so, never "k=None"
        k_text = f"k={spec['k']}" if spec["k"] is not None else "k unknown (its counters do not give it)"
        gauge = spec.get("acceptance_from") == _ACCEPTANCE_FROM["sglang"]  # drafts are seconds of weight
        tree = f" (tree: {spec['token_tree']})" if spec.get("token_tree") else ""
        if w and w["acceptance_length"] is not None:
            per_pos = ", ".join(f"{p:.2f}" for p in w["per_position"])
            per_pos = "no per-position data" if gauge else f"per position [{per_pos}]"
            lines.append(
                f"  speculation: {method}, {k_text}{tree}: acceptance length {w['acceptance_length']:.2f}, "
                f"rate {_fmt(w['acceptance_rate'], '.1%')}, {per_pos} over the window"
            )
        else:
            lines.append(f"  speculation: {method}, {k_text}{tree}: no drafts in the window")
        if life and life["acceptance_length"] is not None:
            over = f"{life['drafts']:.1f} s of decoding (a gauge, time-weighted)" if gauge \
                else f"{life['drafts']:.0f} drafts"
            lines.append(f"    since start: acceptance length {life['acceptance_length']:.2f} over {over}")
    elif eng["reachable"]:
        lines.append("  speculation: not configured")
    for g in report["gpus"]:
        lines.append(f"  GPU {g['index']} {g['name']}: SM {_fmt(g['sm_active'], '.0%')}, "
                     f"tensor {_fmt(g['tensor_active'], '.0%')}, DRAM {_fmt(g['dram_bw_util'], '.0%')}, "
                     f"util {_fmt(g['util_gpu'], '.0%')}, {_fmt(g['power_w'], '.0f')} W")
    for s in report["sources"]:
        if s["state"] not in ("ok", "absent"):
            lines.append(f"  {s['name']}: {s['message'] or s['state']}")
    health = report.get("health") or {}
    reasons = health.get("finish_reasons") or {}
    if reasons:
        total = sum(reasons.values())
        lines.append("  finished: " + ", ".join(f"{reason} {count / total:.0%}" for reason, count in reasons.items())
                     + (" (most requests cut at max_tokens)" if (health.get("truncated_share") or 0) >= 0.5 else ""))
    goodput = health.get("goodput")
    if goodput is not None:
        low, high = goodput["share_low"], goodput["share_high"]
        share = f"{high:.0%}" if abs(high - low) < 0.005 else f"{low:.0%}–{high:.0%}"
        lines.append(f"  goodput: {share} of requests within the SLO (estimated from histogram buckets)")
    energy = health.get("energy")
    if energy is not None and energy["joules_per_token"] is not None:
        lines.append(f"  energy: {energy['joules_per_token']:.3g} J per output token over the window")
    v = report["verdict"]
    lines.append(f"  bound: {report['bound']['state']}")
    interval = v.get("speedup_interval")
    expected = (f", expected {v['expected_speedup']:.2f}× [{interval[0]:.2f}, {interval[1]:.2f}]"
                if interval and v.get("expected_speedup") is not None else "")
    lines.append(f"  verdict: speculation {v['speculation'].upper()} (confidence {v['confidence']:.2f}{expected})")
    for reason in v["reasons"]:
        lines.append(f"    - {reason}")
    sweep = report.get("sweep")
    if sweep and sweep["line"] not in v["reasons"]:  # no verdict carried it: said on its own
        lines.append(f"  sweep: {sweep['line']}")
    return "\n".join(lines)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"
