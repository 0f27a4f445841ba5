"""The health figures on a real server (the CPU wheel, a tiny Llama), against the completions' own
answers: a truncation-heavy run (max_tokens small, EOS ignored) whose finish reasons say so, the
request shape from the usage blocks, and one latency observation per request.

Both readings are taken with the server idle, so every request of the run is in the window."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from specwatch.exposition import parse_payload
from specwatch.health import goodput
from specwatch.snapshot import TARGET_OK, Snapshot, TargetSample
from specwatch.window import Window
from test_engine_tokens import idle_reading
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
    window = Window(3600.0)
    for t, body in ((t0, body0), (t1, body1)):
        parsed = parse_payload(body)
        window.add(Snapshot(time=t, targets=(TargetSample(ngram_server.url, TARGET_OK, engines=parsed.engines,
                                                          process_start_time=parsed.process_start_time),)))
    tw = window.target(ngram_server.url)
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
