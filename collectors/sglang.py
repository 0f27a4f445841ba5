"""The SGLang adapter: SGLang's /metrics (server started with --enable-metrics) and /get_server_info,
mapped onto the EngineSample fields the window reads (vLLM's family names).

Names, types and labels follow SGLang's own collector (python/sglang/srt/metrics/collector.py) and
its production-metrics page. Two generations are read:

- older releases (the docs' example, ~0.4): families labelled by `model_name` only;
  `sglang:time_per_output_token_seconds`; no speculation families;
- current releases: the scheduler's gauges labelled `model_name, engine_type, tp_rank, pp_rank`
  (and `dp_rank` with data parallelism); `sglang:inter_token_latency_seconds` observed per output
  token; `sglang:spec_accept_length` and `sglang:spec_accept_rate` gauges.

What maps onto what (SGLang → the window's name):

  num_running_reqs → vllm:num_requests_running      num_queue_reqs → vllm:num_requests_waiting
  token_usage (0..1) → vllm:kv_cache_usage_perc     max_total_num_tokens → KV capacity in tokens
  prompt_tokens_total → vllm:prompt_tokens          generation_tokens_total → vllm:generation_tokens
  num_requests_total → vllm:request_success         time_to_first_token_seconds → the same name
  inter_token_latency_seconds / time_per_output_token_seconds (both per output token)
                     → vllm:request_time_per_output_token_seconds (the window's TPOT)

Speculation: SGLang exposes no draft or acceptance counters, only `sglang:spec_accept_length`, a
gauge set every decode log interval (40 decode steps by default) to (accepted + bonus tokens) / verify
steps of that interval. A gauge is not a counter: its increase means nothing. The adapter windows it
time-weighted: each interval between two readings is given the value read at its end (the gauge then
describes the steps just before the reading), and the adapter keeps two running integrals per engine,
∫dt and ∫(L − 1)dt, over the intervals where the engine was decoding. It writes them as the window's
drafts and accepted-token counters, so the window's `1 + accepted / drafts` over any span is the
time-weighted mean of L over that span; with k known, draft tokens are k·∫dt, so the rate is (L̄ − 1)/k.
Those "drafts" are seconds of weight, not a count: TargetSample.engine = "sglang" tells the reports
and the advisor so. An interval is skipped when the gauge did not change and no generated token was
counted (an idle engine keeps its last value: SGLang's gauges are "mostrecent"), and when the gauge
is 0 (no decode logged yet). There are no per-position counters: `accepted_per_position` stays empty.

k and the method come from /get_server_info (the server's arguments): speculative_algorithm (EAGLE,
EAGLE3, NEXTN = MTP, STANDALONE = a draft model, NGRAM), speculative_num_steps (the chain depth, k),
speculative_eagle_topk and speculative_num_draft_tokens; with topk > 1 the drafts form a tree of
num_draft_tokens verified tokens per step, not k + 1, which SpeculationConfig.token_tree records.
Where it cannot be read (the endpoint disabled, or a proxy that passes only /metrics), the operator's
--k and --method stand in: --k then sets the draft-token counter as the server's k would.

No token budget per step is read (TargetSample.token_budget stays None): vLLM's budget is shared by
the decodes' verified positions and the prefill chunks of one step, which is what the advisor prices,
while SGLang runs a prefill (extend) batch apart from its decode batches unless --enable-mixed-chunk,
which its server arguments turn off for speculative decoding (the EAGLE family and standalone drafts
among them). Its chunked_prefill_size and max_prefill_tokens bound those prefill batches, not a step
the verified positions share, so neither is that budget.

Tensor- and pipeline-parallel ranks repeat the same scheduler gauges: rank 0 of each is read. The
tokenizer's counters and histograms (tokens, requests, TTFT, per-token latency) are server-wide, not
per data-parallel rank: they ride on the first engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specwatch.collectors.engines import SGLANG, AdapterState, MetricsReading, claims
from specwatch.telemetry.snapshot import (FROM_SERVER_INFO, EngineSample, Histogram, ParallelLayout, SpeculationConfig,
                                          TargetSample, parallel_layout_from)
from specwatch.telemetry.urls import beside
from specwatch.readings.window import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    GENERATION_TOKENS,
    KV_CAPACITY_TOKENS,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    RUNNING,
    TTFT,
    WAITING,
)

KV_USAGE = "vllm:kv_cache_usage_perc"
TPOT = "vllm:request_time_per_output_token_seconds"

# SGLang counters (prometheus_client's base names, without _total) → the window's names
COUNTERS = {
    "sglang:prompt_tokens": PROMPT_TOKENS,
    "sglang:generation_tokens": GENERATION_TOKENS,
    "sglang:num_requests": REQUEST_SUCCESS,
}
GAUGES = {
    "sglang:num_running_reqs": RUNNING,
    "sglang:num_queue_reqs": WAITING,
    "sglang:token_usage": KV_USAGE,
    "sglang:max_total_num_tokens": KV_CAPACITY_TOKENS,
}
HISTOGRAMS = {
    "sglang:time_to_first_token_seconds": TTFT,
    # both are observed per output token (the newer one as the interval over the tokens it brought)
    "sglang:inter_token_latency_seconds": TPOT,
    "sglang:time_per_output_token_seconds": TPOT,
}
# Gauges kept under SGLang's own names too: what the engine said, for recordings and the reports.
ACCEPT_LENGTH = "sglang:spec_accept_length"
RAW_GAUGES = (ACCEPT_LENGTH, "sglang:spec_accept_rate", "sglang:gen_throughput", "sglang:cache_hit_rate")
# The families whose presence says the payload is SGLang's at all.
REQUIRED = ("sglang:",)

# speculative_algorithm → the method names the performance model prices
METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "MTP": "mtp", "STANDALONE": "draft",
           "NGRAM": "ngram", "LOOKAHEAD": "ngram"}
INFO_PATHS = ("/get_server_info", "/server_info")


def _rank_zero(labels: dict[str, str]) -> bool:
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


@dataclass
class _Builder:
    model_name: str | None = None

    def __post_init__(self) -> None:
        self.counters: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.buckets: dict[str, dict[float, float]] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def histograms(self) -> dict[str, Histogram]:
        out = {}
        for name, by_le in self.buckets.items():
            buckets = tuple(sorted(by_le.items()))
            count = self.counts.get(name, buckets[-1][1] if buckets else 0.0)
            out[name] = Histogram(buckets, self.sums.get(name, 0.0), count)
        return out


def parse_sglang(text: str) -> tuple[dict[str, _Builder], _Builder]:
    """The payload → per data-parallel rank the scheduler's gauges, and the server-wide counters
    and histograms. Raises ValueError when the text is not Prometheus exposition."""
    engines: dict[str, _Builder] = {}
    server = _Builder()
    for family in text_string_to_metric_families(text):
        name = family.name
        for sample in family.samples:
            labels = sample.labels
            value = float(sample.value)
            if name in GAUGES or name in RAW_GAUGES:
                if not _rank_zero(labels) or not math.isfinite(value):
                    continue
                b = engines.setdefault(labels.get("dp_rank", "0"), _Builder())
                b.model_name = b.model_name or labels.get("model_name")
                if name in GAUGES:
                    b.gauges[GAUGES[name]] = value
                if name in RAW_GAUGES:
                    b.gauges[name] = value
            elif name in COUNTERS and sample.name.endswith("_total"):
                server.model_name = server.model_name or labels.get("model_name")
                key = COUNTERS[name]
                server.counters[key] = server.counters.get(key, 0.0) + value
            elif name in HISTOGRAMS:
                key = HISTOGRAMS[name]
                server.model_name = server.model_name or labels.get("model_name")
                if sample.name.endswith("_bucket"):
                    le = float(labels["le"])
                    by_le = server.buckets.setdefault(key, {})
                    by_le[le] = by_le.get(le, 0.0) + value
                elif sample.name.endswith("_sum"):
                    server.sums[key] = server.sums.get(key, 0.0) + value
                elif sample.name.endswith("_count"):
                    server.counts[key] = server.counts.get(key, 0.0) + value
    return engines, server


class AcceptanceIntegrator:
    """The time-weighted window of an acceptance-length gauge, as two running integrals: ∫dt and
    ∫(L − 1)dt over the intervals where the engine decoded (see the module's docstring)."""

    def __init__(self) -> None:
        self.weight_s = 0.0
        self.accepted_s = 0.0
        self._last: tuple[float, float, float | None] | None = None  # (time, gauge, generation counter)

    def add(self, now: float, length: float, generated: float | None) -> None:
        last = self._last
        self._last = (now, length, generated)
        if last is None:
            return
        then, before, generated_before = last
        if generated is not None and generated_before is not None and generated < generated_before:
            # the server restarted: the integrals begin again, as its counters did
            self.weight_s = self.accepted_s = 0.0
            return
        dt = now - then
        if dt <= 0 or not length >= 1.0:  # L counts the bonus token: below 1 nothing was logged
            return
        if length == before and (generated is None or generated == generated_before):
            return  # no sign of decoding: the gauge holds its last interval's value
        self.weight_s += dt
        self.accepted_s += (length - 1.0) * dt


def speculation_from_sglang_info(info: object) -> SpeculationConfig | None:
    """/get_server_info (SGLang's server arguments as JSON) → a SpeculationConfig; None without
    speculation. Values of the wrong type are left out, not guessed."""
    if not isinstance(info, dict):
        return None

    def whole(key: str) -> int | None:
        value = info.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    algorithm = info.get("speculative_algorithm")
    if not isinstance(algorithm, str) or algorithm.strip().upper() in ("", "NONE"):
        return None
    method = METHODS.get(algorithm.strip().upper(), algorithm.strip().lower())
    steps = whole("speculative_num_steps")
    topk = whole("speculative_eagle_topk")
    draft_tokens = whole("speculative_num_draft_tokens")
    tree = None
    if topk is not None and topk > 1:
        tree = f"topk={topk}, {draft_tokens if draft_tokens is not None else '?'} draft tokens verified per step"
    draft = info.get("speculative_draft_model_path")
    draft = draft.strip() if isinstance(draft, str) and draft.strip() else None
    if method in ("ngram", "mtp") and draft == info.get("model_path"):
        draft = None
    return SpeculationConfig.known(FROM_SERVER_INFO, method=method, k=steps, token_tree=tree,
                                   draft_model=draft if method != "ngram" else None)


class SglangAdapter:
    name = SGLANG
    label = "SGLang"
    info_paths = INFO_PATHS

    def claims(self, text: str) -> bool:
        return claims(SGLANG, text)

    def read_metrics(self, text: str, state: AdapterState, now: float,
                     speculation: SpeculationConfig | None = None, info_read: bool = False) -> MetricsReading:
        """The payload → EngineSamples by the window's names. `speculation` is what /get_server_info
        said and `info_read` whether it was read: then k sets the draft-token counter, and a server
        without speculation gets no acceptance counters although SGLang logs the gauge as 0. Unread,
        a gauge of at least 1 (the bonus token) is what says the server speculates."""
        try:
            per_rank, server = parse_sglang(text)
        except (ValueError, TypeError, KeyError, IndexError) as exc:  # what the parser raises on bad text
            raise ValueError(f"not Prometheus exposition text: {exc!r}") from None
        if not self.claims(text):
            return MetricsReading((), None, REQUIRED)
        if not per_rank:
            per_rank = {"0": _Builder()}  # an idle server logs no scheduler gauge until its first batch
        integrators: dict[str, AcceptanceIntegrator] = state.values.setdefault("acceptance", {})
        generated = server.counters.get(GENERATION_TOKENS)
        engines = []
        for i, rank in enumerate(sorted(per_rank, key=lambda r: (len(r), r))):
            b = per_rank[rank]
            counters: dict[str, float] = {}
            histograms: dict[str, Histogram] = {}
            if i == 0:
                counters.update(server.counters)
                histograms = server.histograms()
            length = b.gauges.get(ACCEPT_LENGTH)
            speculating = speculation is not None if info_read else (length is not None and length >= 1.0)
            if speculating and length is not None:
                integ = integrators.setdefault(rank, AcceptanceIntegrator())
                integ.add(now, length, generated)
                counters[DRAFTS] = integ.weight_s
                counters[ACCEPTED] = integ.accepted_s
                k = speculation.k if speculation is not None else None
                if k:
                    counters[DRAFT_TOKENS] = k * integ.weight_s
            engines.append(EngineSample(rank, b.model_name or server.model_name, counters, dict(b.gauges),
                                        histograms))
        return MetricsReading(tuple(engines))


# -- the scrape ------------------------------------------------------------------------------------


async def scrape_sglang(client: Any, target: Any, text: str, payload_bytes: int, elapsed: float,
                        probe_info: bool, declared: SpeculationConfig | None) -> TargetSample:
    """An SGLang target's /metrics, already fetched, read with its server info (once per server
    start). The collector's transport handling (collectors.vllm) is shared by every engine."""
    import time

    from specwatch.telemetry.snapshot import TARGET_OK, resolve_speculation

    adapter = SglangAdapter()
    info = target.info
    if not adapter.claims(text):
        return TargetSample(target.url, "families_missing",
                            f"SGLang at {target.url}: /metrics has no sglang: family (is this an SGLang server "
                            "started with --enable-metrics?)", version=info.version,
                            payload_bytes=payload_bytes, engine=SGLANG)
    if probe_info and not info.probed:
        # before reading the gauges: whether the server speculates, and its k, decide what they mean
        await probe_sglang_info(client, target)
    resolved = resolve_speculation(info.speculation, declared)
    info_read = info.server_info is not None
    try:
        # unread, the server's arguments are the operator's flags: --k sets the draft-token counter
        reading = adapter.read_metrics(text, target.adapter_state, time.monotonic(),
                                       info.speculation if info_read else resolved, info_read)
    except ValueError as exc:
        return TargetSample(target.url, "not_prometheus", f"SGLang at {target.url}: {exc}", version=info.version,
                            payload_bytes=payload_bytes, engine=SGLANG)
    generated = reading.engines[0].counters.get(GENERATION_TOKENS) if reading.engines else None
    last_generated = target.adapter_state.values.get("generated")
    if generated is not None and last_generated is not None and generated < last_generated:
        info.probed = False  # a restarted server: its version and arguments may have changed
    target.adapter_state.values["generated"] = generated
    return TargetSample(
        url=target.url,
        state=TARGET_OK,
        version=info.version,
        engines=reading.engines,
        process_start_time=reading.process_start_time,
        scrape_seconds=elapsed,
        payload_bytes=payload_bytes,
        speculation=resolved,
        engine=SGLANG,
        parallel=parallel_from_server_info(info.server_info),
    )


def parallel_from_server_info(args: object) -> ParallelLayout | None:
    """How SGLang lays the model out, from its server arguments: tp_size GPUs; with
    enable_dp_attention, attention in dp_size groups of tp_size/dp_size GPUs, each its own requests;
    the MoE's experts spread over ep_size GPUs (above 1). None where tp_size is not given."""
    if not isinstance(args, dict):
        return None
    tp, dp, ep = args.get("tp_size"), args.get("dp_size", 1), args.get("ep_size")
    dp_attention = args.get("enable_dp_attention") is True
    if dp_attention and isinstance(tp, int) and isinstance(dp, int) and dp >= 1 and tp % dp == 0:
        return parallel_layout_from(tp // dp, ep, True, "/get_server_info")
    return parallel_layout_from(tp, ep, False, "/get_server_info")


async def probe_sglang_info(client: Any, target: Any) -> None:
    """/get_server_info (or /server_info in releases that renamed it): the server's arguments, with
    the speculation setup and the version. Bounded by the collector's whole-request deadline."""
    import asyncio

    import httpx

    from specwatch.collectors.transport import DEFAULT_MAX_BYTES, PayloadTooLarge, deadline_s, get_bounded

    info = target.info
    info.probed = True
    try:
        async with asyncio.timeout(deadline_s(client)):
            for path in INFO_PATHS:
                r = await get_bounded(client, beside(target.request_base or target.url, path, target.metrics_url),
                                      DEFAULT_MAX_BYTES)
                if r.status_code != 200:
                    continue
                body = r.json()
                if isinstance(body, dict):
                    info.server_info = body
                    version = body.get("version")
                    info.version = str(version) if version is not None else info.version
                    info.speculation = speculation_from_sglang_info(body)
                    return
    except TimeoutError:
        info.probed = False  # try again on a later poll
    except ValueError:
        pass  # a 200 that is not JSON: asking again will not change it
    except (httpx.HTTPError, OSError, PayloadTooLarge):
        info.probed = False
