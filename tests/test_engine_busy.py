"""The engine's own timing, measured on a real server (the CPU wheel, a tiny Llama): what the live
step time and the engine's busy share rest on (specwatch.readings.figures, EngineFigures.busy_share).

vLLM observes `vllm:inter_token_latency_seconds` once per engine output of a decoding request: the
time since that request's previous output. While a request decodes the engine steps back to back,
so each observation is one step period, and their sum over a request is its decode time
(`vllm:request_decode_time_seconds`, first token to last). Steps per second × that period is the
share of the time the engine was stepping. These tests drive requests one at a time with pauses
between them, so the engine idles a known part of the window, and check from the raw /metrics:
- the latency's Δsum is the requests' Δdecode time, and its Δcount is the decode steps (every step
  less the one prefill step that gave each request its first token);
- specwatch's step period is that mean, and its busy share is the decode time (every step at that
  period), which leaves out the pauses and the prefills: the part speculation can speed. (On this
  CPU a request's prefill, scheduled to first token, takes some 0.3 s: four times its decode.)
"""

from __future__ import annotations

import time

import pytest

from test_engine_tokens import idle_reading, raw_figures, window_over
from vllm_server import ECHO_PROMPTS

pytestmark = pytest.mark.engine

REQUESTS = 8
MAX_TOKENS = 32
PAUSE_S = 1.5  # the client's pause after each request: the engine has nothing to do

RAW = {
    "itl_sum": "vllm:inter_token_latency_seconds_sum",
    "itl_count": "vllm:inter_token_latency_seconds_count",
    "decode_sum": "vllm:request_decode_time_seconds_sum",
    "prefill_sum": "vllm:request_prefill_time_seconds_sum",
    "steps": "vllm:iteration_tokens_total_count",
    "requests": "vllm:request_success_total",
}


def test_inter_token_latency_is_the_step_period_and_the_busy_share_leaves_the_idle_time_out(ngram_server):
    t0, body0 = idle_reading(ngram_server)
    for i in range(REQUESTS):
        ngram_server.complete(ECHO_PROMPTS[i % len(ECHO_PROMPTS)] + f" busy {i}", MAX_TOKENS)
        time.sleep(PAUSE_S)
    t1, body1 = idle_reading(ngram_server)
    first, last = raw_figures(body0, RAW), raw_figures(body1, RAW)
    delta = {k: last[k] - first[k] for k in RAW}
    print("deltas:", delta, "seconds:", t1 - t0)
    assert delta["requests"] == REQUESTS
    # one observation per decode output: every step but each request's prefill step (one request at
    # a time, its prompt in one step)
    assert delta["itl_count"] == delta["steps"] - REQUESTS
    # their sum is the requests' decode time: the periods between consecutive steps
    assert delta["itl_sum"] == pytest.approx(delta["decode_sum"], rel=0.02)

    figures = window_over(ngram_server.url, (t0, body0), (t1, body1)).total
    seconds = t1 - t0
    assert figures.itl_mean_s == pytest.approx(delta["itl_sum"] / delta["itl_count"])
    assert figures.steps_per_s == pytest.approx(delta["steps"] / seconds)
    # the busy share counts every step at the decode period: the requests' decode time (what
    # speculation can speed), and one period for each prefill step. The prefill itself, however
    # long it took, is not counted, nor are the pauses: neither is sped up by speculation.
    decode_steps = delta["steps"] - REQUESTS
    assert figures.busy_share == pytest.approx(delta["decode_sum"] * delta["steps"] / decode_steps / seconds,
                                               rel=0.01)
    assert figures.busy_share < (delta["decode_sum"] + delta["prefill_sum"]) / seconds
    assert figures.busy_share < 1.0 - REQUESTS * PAUSE_S / seconds
