"""The health figures on a real server (the CPU wheel, a tiny Llama), against the completions' own
answers: a truncation-heavy run (max_tokens small, EOS ignored) whose finish reasons say so, the
request shape from the usage blocks, and one latency observation per request.

Both readings are taken with the server idle, so every request of the run is in the window."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from specwatch.readings.health import goodput
from test_engine_tokens import idle_reading, window_over
from vllm_server import ECHO_PROMPTS

pytestmark = pytest.mark.engine

REQUESTS = 8
MAX_TOKENS = 3


def _complete(server, i: int) -> dict:
    for attempt in range(2):
        try:
            return server.complete(ECHO_PROMPTS[i % len(ECHO_PROMPTS)] + f" health {i}", MAX_TOKENS)
        except httpx.HTTPError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def test_truncated_run_health_matches_the_completions(ngram_server):
    t0, body0 = idle_reading(ngram_server)
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda i: _complete(ngram_server, i), range(REQUESTS)))
    t1, body1 = idle_reading(ngram_server)
    tw = window_over(ngram_server.url, (t0, body0), (t1, body1))
    health = tw.health
    # the completions' own finish reasons: every one cut at max_tokens
    reasons = [a["choices"][0]["finish_reason"] for a in answers]
    assert reasons == ["length"] * REQUESTS
    assert health.finish_reasons == {"length": float(REQUESTS)}
    assert health.truncated_share == 1.0
    # the request shape: the usage blocks' prompt and completion tokens
    prompts = [a["usage"]["prompt_tokens"] for a in answers]
    assert health.shape.requests == REQUESTS
    assert health.shape.prompt_mean_tokens == pytest.approx(sum(prompts) / REQUESTS)
    assert health.shape.output_mean_tokens == pytest.approx(MAX_TOKENS)
    assert health.shape.input_output_ratio == pytest.approx(sum(prompts) / (MAX_TOKENS * REQUESTS))
    # one observation per request in each per-request latency histogram
    rows = {r.name: r for r in health.latency}
    for name in ("e2e", "queue", "ttft", "prefill", "decode", "tpot"):
        assert rows[name].count == REQUESTS, name
    # a request's life: e2e is at least its prefill plus its decode, on average too
    assert rows["e2e"].mean_s >= rows["prefill"].mean_s + rows["decode"].mean_s - 1e-6
    # an SLO no request can miss, and one every request misses
    assert goodput(tw.increases, 3600.0, None).share_high == 1.0
    assert goodput(tw.increases, 1e-9, None).share_high == 0.0


# Requests shaped like a mixed service: long prompts with short answers (retrieval, classification),
# short prompts with long answers (chat), a few in between. (words of the prompt, max_tokens)
MIXED_SHAPES = [(90, 2), (110, 3), (80, 5), (120, 8), (100, 12), (70, 20),
                (4, 16), (6, 24), (3, 40), (8, 60), (5, 30), (7, 50),
                (30, 3), (25, 6), (35, 10), (20, 30)]


def test_the_prefill_heavy_share_of_real_requests_lies_within_the_bounds(ngram_server):
    """The load generator knows each request's prompt and output tokens (the server's usage blocks):
    the share with a prompt over 10× its output, counted request by request, must lie within the
    bounds computed from the server's two length histograms alone."""
    import asyncio

    from specwatch.readings.health import OUTPUT_LENGTH, PROMPT_LENGTH, share_over_ratio_bounds
    from specwatch.sweep.loadgen import Prompt, RequestSettings, TierPlan, run_tier

    words = " ".join(ECHO_PROMPTS).split()
    prompts = [Prompt(text=" ".join(words[i % len(words)] for i in range(n)) + f" shape {j}", max_tokens=m)
               for j, (n, m) in enumerate(MIXED_SHAPES)]

    async def drive():
        async with httpx.AsyncClient(trust_env=False) as client:
            return await run_tier(client, ngram_server.url, prompts, TierPlan(concurrency=2, requests=len(prompts)),
                                  RequestSettings(model=ngram_server.served_name, timeout_s=300.0))

    t0, body0 = idle_reading(ngram_server)
    run = asyncio.run(drive())
    t1, body1 = idle_reading(ngram_server)
    results = run.measured
    # the random-weight model may answer only tokens that decode to no text: the load generator then
    # counts the request as empty, yet the server generated max_tokens (EOS ignored), as it does
    # for every answered one
    assert all(r.ok or r.failure == "no_tokens" for r in results), [r.message for r in results if not r.ok]
    assert all(r.output_tokens == prompts[r.index].max_tokens for r in results if r.ok)
    assert all(r.prompt_tokens is not None for r in results)
    outputs = [r.output_tokens if r.ok else prompts[r.index].max_tokens for r in results]
    truth = sum(r.prompt_tokens > 10 * o for r, o in zip(results, outputs)) / len(results)
    inc = window_over(ngram_server.url, (t0, body0), (t1, body1)).increases
    prompt_h, output_h = inc.histogram(PROMPT_LENGTH), inc.histogram(OUTPUT_LENGTH)
    assert prompt_h.count == output_h.count == len(results)  # every request of the run, in the window
    low, high = share_over_ratio_bounds(prompt_h, output_h)
    print(f"prefill-heavy share: {truth:.3f} of {len(results)} requests; bounds {low:.3f}..{high:.3f}; "
          f"(prompt, output) {sorted(zip((r.prompt_tokens for r in results), outputs))}")
    assert low <= truth <= high
    assert (low, high) != (0.0, 1.0)  # the histograms do say something about this traffic
