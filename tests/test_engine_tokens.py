"""The tokens vLLM's steps compute and emit, measured on a real server (the CPU wheel, a tiny Llama).

vLLM V1 observes `vllm:iteration_tokens_total` once per engine step with the prompt tokens the step
computed plus the tokens it emitted, not the positions a verify step computed. These tests drive a
known set of requests through an n-gram server and a draft-model server and check, from the raw
/metrics (prometheus_client) and the completions' own usage:
- the histogram's Δsum is Δprompt − Δprompt_cached + Δgeneration, and its Δcount counts the steps;
- the first token of every request is counted once by the TTFT histogram;
- specwatch's computed-tokens figure (window.StepTokens) is prompt computed + verified positions
  (draft tokens + one per draft) + plain decode tokens, from the counters;
- vLLM counts a draft's accepted tokens before it cuts the step's output at the request's end, so
  the accepted counter holds tokens no request received: one request at a time, the engine's own
  step count shows how many, against specwatch's estimate (figures.tokens_cut).
Both readings are taken with the server idle, so no step is half-recorded between them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.telemetry.exposition import parse_payload
from specwatch.telemetry.snapshot import TARGET_OK, Snapshot, TargetSample
from specwatch.readings.window import Window
from vllm_server import ECHO_PROMPTS

pytestmark = pytest.mark.engine

REQUESTS = 12
CONCURRENCY = 3
MAX_TOKENS = 20

RAW = {
    "prompt": "vllm:prompt_tokens_total",
    "cached": "vllm:prompt_tokens_cached_total",
    "generation": "vllm:generation_tokens_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "steps_sum": "vllm:iteration_tokens_total_sum",
    "steps_count": "vllm:iteration_tokens_total_count",
    "first_tokens": "vllm:time_to_first_token_seconds_count",
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
}


def raw_figures(body: str, names: dict[str, str] = RAW) -> dict[str, float]:
    """The figures `names` maps to (RAW's by default), summed over their label sets, from
    prometheus_client alone."""
    by_name = {v: k for k, v in names.items()}
    out = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            key = by_name.get(s.name)
            if key is not None:
                out[key] += s.value
    return out


def idle_reading(server, timeout_s: float = 120.0) -> tuple[float, str]:
    """A /metrics body taken with nothing running or waiting, and its time."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = server.metrics_text()
        raw = raw_figures(body)
        if raw["running"] == 0 and raw["waiting"] == 0:
            # a second look: the step that finished the last request has been recorded
            time.sleep(0.5)
            again = server.metrics_text()
            if raw_figures(again) == raw:
                return time.time(), again
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not go idle; log:\n{server.log_tail()}")
        time.sleep(0.5)


def drive(server) -> list[dict]:
    """REQUESTS completions, CONCURRENCY at a time; their usage blocks."""
    def one(i: int) -> dict:
        for attempt in range(2):
            try:
                return server.complete(ECHO_PROMPTS[i % len(ECHO_PROMPTS)] + f" request {i}", MAX_TOKENS)["usage"]
            except httpx.HTTPError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(one, range(REQUESTS)))


def measure(server) -> tuple[dict[str, float], object, list[dict]]:
    t0, body0 = idle_reading(server)
    usage = drive(server)
    t1, body1 = idle_reading(server)
    first, last = raw_figures(body0), raw_figures(body1)
    delta = {k: last[k] - first[k] for k in RAW}
    figures = window_over(server.url, (t0, body0), (t1, body1)).total
    return delta, figures, usage


def window_over(url: str, *readings: tuple[float, str]):
    """specwatch's window (TargetWindow) over /metrics bodies read at the given times."""
    window = Window(3600.0)
    for t, body in readings:
        parsed = parse_payload(body)
        window.add(Snapshot(time=t, targets=(TargetSample(url, TARGET_OK, engines=parsed.engines,
                                                          process_start_time=parsed.process_start_time),)))
    return window.target(url)


def check_semantics(server, k: int) -> tuple[dict[str, float], object]:
    delta, figures, usage = measure(server)
    print("deltas:", delta)
    # the completions' own usage: the token counters count exactly these
    assert delta["prompt"] == sum(u["prompt_tokens"] for u in usage)
    assert delta["generation"] == sum(u["completion_tokens"] for u in usage) == REQUESTS * MAX_TOKENS
    # one first token per request, from its prefill
    assert delta["first_tokens"] == REQUESTS
    # the histogram: prompt tokens computed + tokens emitted, one observation per step
    assert delta["steps_sum"] == delta["prompt"] - delta["cached"] + delta["generation"]
    assert delta["drafts"] > 0
    assert delta["draft_tokens"] <= k * delta["drafts"]
    # every decode token after the first came from a verify step (1 + accepted per draft, less what
    # was cut at a request's end: at most k a request) or a plain decode of a request with no draft
    verify_emitted = delta["drafts"] + delta["accepted"]
    plain = delta["generation"] - REQUESTS - verify_emitted
    # what specwatch reports the steps computed, and what the histogram sums
    tokens = figures.step_tokens
    assert tokens is not None
    assert 0 <= tokens.cut <= k * REQUESTS
    assert plain + tokens.cut >= 0
    assert tokens.steps == delta["steps_count"] > 0
    assert tokens.prompt_computed == delta["prompt"] - delta["cached"]
    assert tokens.verified == delta["draft_tokens"] + delta["drafts"]
    assert tokens.verify_emitted == pytest.approx(verify_emitted - tokens.cut)
    assert tokens.plain_decode == pytest.approx(max(0.0, plain + tokens.cut))
    assert tokens.computed == pytest.approx(delta["prompt"] - delta["cached"] + delta["draft_tokens"] + delta["drafts"]
                                            + tokens.plain_decode)
    assert tokens.prompt_and_emitted == delta["steps_sum"]
    assert figures.prompt_and_emitted_tokens_per_step_mean == pytest.approx(delta["steps_sum"] / delta["steps_count"])
    assert figures.computed_tokens_per_step_mean == pytest.approx(tokens.computed / delta["steps_count"])
    # the steps computed more than they emitted: each draft verified draft tokens it mostly rejected
    assert tokens.computed > tokens.prompt_and_emitted
    return delta, tokens


def test_draft_model_steps_compute_k_plus_1_positions_per_draft(draft_server):
    delta, tokens = check_semantics(draft_server, 3)
    # a draft model always proposes k tokens: verified = drafts·(k+1)
    assert delta["draft_tokens"] == 3 * delta["drafts"]
    assert tokens.verified == 4 * delta["drafts"]
    # nearly nothing accepted (the draft is misaligned): the histogram's per-step mean is about
    # a quarter of what the decode steps computed
    assert delta["accepted"] < 0.1 * delta["draft_tokens"]


def test_ngram_steps_compute_draft_tokens_plus_one_per_draft(ngram_server):
    delta, tokens = check_semantics(ngram_server, 4)
    # an n-gram proposal can be shorter than k, or absent (then the request decodes plainly):
    # draft_tokens, not drafts·k, counts the positions verified
    print(f"n-gram: {delta['draft_tokens']:.0f} draft tokens over {delta['drafts']:.0f} drafts "
          f"(k·drafts = {4 * delta['drafts']:.0f}), {tokens.plain_decode:.0f} plain decode tokens")


def test_accepted_tokens_past_a_requests_end_are_counted_and_estimated(ngram_server):
    """One request at a time, every step is one request's: its prefill, then its decode steps, so
    the engine's decode steps are its steps less one a request. The counters' decode steps (drafts,
    and the plain decodes generation_tokens leaves) come short of them by the accepted tokens vLLM
    counted past each request's end (its scheduler counts them before cutting the output at
    max_tokens). Requests and prompts are the same every run (temperature 0, n-gram lookup), so the
    count is too: 14 for 8 requests of 32 tokens when it was first measured."""
    requests, max_tokens = 16, 32
    t0, body0 = idle_reading(ngram_server)
    for i in range(requests):
        ngram_server.complete(ECHO_PROMPTS[i % len(ECHO_PROMPTS)], max_tokens)
    t1, body1 = idle_reading(ngram_server)
    first, last = raw_figures(body0), raw_figures(body1)
    delta = {key: last[key] - first[key] for key in RAW}
    assert delta["first_tokens"] == requests and delta["generation"] == requests * max_tokens
    plain_by_counters = delta["generation"] - requests - (delta["drafts"] + delta["accepted"])
    engine_decode_steps = delta["steps_count"] - requests
    cut = engine_decode_steps - (delta["drafts"] + plain_by_counters)
    tokens = window_over(ngram_server.url, (t0, body0), (t1, body1)).total.step_tokens
    print(f"{requests} requests of {max_tokens}: {engine_decode_steps:.0f} decode steps, counters "
          f"{delta['drafts'] + plain_by_counters:.0f}: {cut:.0f} accepted tokens counted past the ends; "
          f"estimated {tokens.cut:.1f}")
    assert 0 < cut <= 4 * requests
    # the estimate (a renewal overshoot from the per-position rates) against the engine's count: the
    # requests' own tails decide each cut, so only the order of magnitude is held
    assert cut / 3 <= tokens.cut <= 3 * cut
    assert tokens.plain_decode + delta["drafts"] == pytest.approx(
        engine_decode_steps + tokens.cut - cut)
