"""Quantiles that cannot be true are not shown: an interpolated histogram quantile is held to what
the histogram's sum and count say (Markov: a non-negative quantity's q-quantile is at most
mean/(1 − q), so p50 ≤ 2×, p90 ≤ 10×, p99 ≤ 100× the mean). On the real vLLM capture every queue
time lies in le="0.3" with a mean of 0.037 ms; interpolation alone gave p50 150 ms, p99 297 ms."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from http_fixtures import LocalServer, metrics_and_version
from payloads import NGRAM_K4, read
from specwatch.readings.figures import histogram_quantile, markov_bound
from specwatch.telemetry.snapshot import Histogram
from test_export import ExportProcess, samples, wait_for

QUIET = ["--no-nvml", "--no-dcgm"]
BOUND = {0.5: 2.0, 0.9: 10.0, 0.95: 20.0, 0.99: 100.0}
SLACK = 1 + 1e-9


def test_the_clamp_decides_when_everything_is_in_the_first_bucket():
    # 20 observations, all in (0, 0.3], summing to 0.7 ms: interpolation says p50 = 150 ms
    h = Histogram(((0.3, 20.0), (0.5, 20.0), (math.inf, 20.0)), 0.0007, 20.0)
    mean = 0.0007 / 20
    assert histogram_quantile(0.5, h) == pytest.approx(2 * mean)
    assert histogram_quantile(0.9, h) == pytest.approx(10 * mean)
    assert histogram_quantile(0.99, h) == pytest.approx(100 * mean)
    assert markov_bound(0.5, h) == pytest.approx(2 * mean)


def test_the_clamp_leaves_a_consistent_histogram_alone():
    h = Histogram(((0.1, 10.0), (0.5, 60.0), (1.0, 100.0), (math.inf, 100.0)), 40.0, 100.0)
    assert histogram_quantile(0.5, h) == pytest.approx(0.1 + 0.4 * (50 - 10) / 50)
    assert histogram_quantile(0.99, h) == pytest.approx(0.5 + 0.5 * 39 / 40)


@pytest.mark.parametrize("total", [0.0, math.nan, math.inf, -1.0])
def test_no_clamp_without_a_usable_sum(total):
    # an exposition without its _sum line reads as a sum of 0: the mean is not known, nothing clamps
    h = Histogram(((0.3, 20.0), (math.inf, 20.0)), total, 20.0)
    assert markov_bound(0.5, h) is None
    assert histogram_quantile(0.5, h) == pytest.approx(0.15)
    assert markov_bound(1.0, Histogram(((0.3, 2.0), (math.inf, 2.0)), 0.1, 2.0)) is None


def zeroed(text: str) -> str:
    """The capture as the same server read before any request: every counter and histogram at 0,
    gauges as they are. Serving this first and the capture after makes a window over the whole run."""
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out = []
    for line in text.splitlines():
        name = re.match(r"[^{\s#]+", line)
        if name and not line.startswith("#"):
            base = re.sub(r"_(bucket|sum|count|total)$", "", name.group(0))
            if kinds.get(base) in ("counter", "histogram") or kinds.get(name.group(0)) == "counter":
                line = line.rsplit(" ", 1)[0] + " 0.0"
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture
def capture_server():
    after = read(NGRAM_K4).encode()
    before = zeroed(read(NGRAM_K4)).encode()
    served = []

    def metrics() -> bytes:
        served.append(1)
        return before if len(served) == 1 else after

    with LocalServer(metrics_and_version(metrics)) as server:
        yield server


def assert_latency_rows_bounded(latency: dict) -> None:
    assert {"e2e", "queue", "ttft", "tpot"} <= set(latency)
    for phase, row in latency.items():
        for q, key in ((0.5, "p50_s"), (0.9, "p90_s"), (0.99, "p99_s")):
            assert row[key] is not None and 0 <= row[key] <= BOUND[q] * row["mean_s"] * SLACK, (phase, key, row)


def test_check_on_the_real_capture_respects_the_bounds(capture_server):
    r = subprocess.run([sys.executable, "-m", "specwatch", "check", "--url", capture_server.url, "--window", "0.3",
                        *QUIET, "--json"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr
    report = json.loads(r.stdout)
    latency = report["health"]["latency"]
    assert_latency_rows_bounded(latency)
    queue = latency["queue"]
    assert queue["mean_s"] == pytest.approx(0.0007334120006703415 / 20)
    assert queue["p50_s"] < 0.001 and queue["p99_s"] < 0.01  # not 150 ms and 297 ms
    engine = report["engine"]
    ttft_mean = latency["ttft"]["mean_s"]
    assert engine["ttft_p50_s"] <= 2 * ttft_mean * SLACK and engine["ttft_p95_s"] <= 20 * ttft_mean * SLACK


def test_the_exporter_on_the_real_capture_respects_the_bounds(capture_server, tmp_path):
    with ExportProcess(["--url", capture_server.url, *QUIET, "--listen", "127.0.0.1:0", "--interval", "0.3",
                        "--node", "n1"], tmp_path / "agent.log") as agent:
        text = wait_for(agent.metrics_text, lambda t: 'phase="queue"' in t, "the latency series")
    means, totals, capture = {}, {}, read(NGRAM_K4)  # the capture's own sums and counts: the means
    for name, phase in (("e2e_request_latency_seconds", "e2e"), ("request_queue_time_seconds", "queue"),
                        ("time_to_first_token_seconds", "ttft"), ("request_time_per_output_token_seconds", "tpot")):
        for part in ("sum", "count"):
            m = re.search(rf"^vllm:{name}_{part}\{{[^}}]*\}} (\S+)$", capture, re.M)
            totals[phase, part] = float(m.group(1))
        means[phase] = totals[phase, "sum"] / totals[phase, "count"]
    seen = set()
    for labels, value in samples(text)["specwatch_request_latency_seconds"]:
        phase, q = labels["phase"], float(labels["quantile"])
        if phase in means:
            seen.add(phase)
            assert 0 <= value <= BOUND[q] * means[phase] * SLACK, (labels, value, means[phase])
    assert seen == set(means)
