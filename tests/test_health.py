"""Health figures against hand computations: the real capture's buckets (a truncation-heavy run:
every request stopped at max_tokens) and small known inputs for goodput and energy."""

import pytest

from payloads import NGRAM_K4, read
from specwatch.telemetry.exposition import parse_payload
from specwatch.readings.figures import lifetime_increases
from specwatch.readings.health import (energy_counter_increase, energy_per_token, goodput, health_figures, health_report,
                              share_at_or_below)
from specwatch.telemetry.snapshot import EngineSample, GpuSample, Histogram, Snapshot, TargetSample
from specwatch.readings.window import Window

URL = "http://node:8000/metrics"


@pytest.fixture(scope="module")
def capture_increases():
    (engine,) = parse_payload(read(NGRAM_K4)).engines
    return lifetime_increases(engine)


def test_latency_table_from_the_capture(capture_increases):
    rows = {r.name: r for r in health_figures(capture_increases).latency}
    assert set(rows) >= {"e2e", "queue", "ttft", "prefill", "decode", "tpot", "itl"}
    e2e = rows["e2e"]
    # e2e buckets: le=0.3 → 2, le=0.5 → 16, le=1.0 → 16, le=1.5 → 20, of 20; sum 10.594841241836548
    assert e2e.count == 20
    assert e2e.mean_s == pytest.approx(10.594841241836548 / 20)
    assert e2e.p50_s == pytest.approx(0.3 + 0.2 * (10 - 2) / 14)  # rank 10 inside (0.3, 0.5]
    assert e2e.p90_s == pytest.approx(1.0 + 0.5 * (18 - 16) / 4)  # rank 18 inside (1.0, 1.5]
    assert e2e.p99_s == pytest.approx(1.0 + 0.5 * (19.8 - 16) / 4)
    # every queue time in the first bucket (0, 0.3] with a mean of 0.037 ms: the bucket's middle
    # (150 ms) is more than any 20 observations with that mean can have as their median, so the
    # median is held to Markov's bound, twice the mean (and p99 to a hundred times it)
    queue_mean = 0.0007334120006703415 / 20
    assert rows["queue"].p50_s == pytest.approx(2 * queue_mean)
    assert rows["queue"].p90_s == pytest.approx(10 * queue_mean)
    assert rows["queue"].p99_s == pytest.approx(100 * queue_mean)
    assert rows["queue"].mean_s == pytest.approx(0.0007334120006703415 / 20)
    # issue 45: held to the bound, those figures are the most the quantiles can be, and say so; the
    # e2e figures are interpolated estimates and carry no mark
    assert dict(rows["queue"].bounds) == {"p50_s": "at_most", "p90_s": "at_most", "p99_s": "at_most"}
    assert rows["queue"].to_dict()["bounds"] == {"p50_s": "at_most", "p90_s": "at_most", "p99_s": "at_most"}
    assert rows["e2e"].bounds == () and "bounds" not in rows["e2e"].to_dict()
    from specwatch.widgets.health import latency_lines
    shown = "\n".join(line.plain for line in latency_lines({"latency": {r.name: r.to_dict() for r in rows.values()}}))
    queue_line = next(line for line in shown.splitlines() if line.strip().startswith("queue"))
    assert queue_line.count("≤") == 3 and "≤ at most" in shown
    assert "≤" not in next(line for line in shown.splitlines() if line.strip().startswith("e2e"))
    assert rows["decode"].mean_s == pytest.approx(5.5017083540001295 / 20)
    assert rows["prefill"].mean_s == pytest.approx(1.4540504859993462 / 20)


def test_request_shape_and_finish_reasons_from_the_capture(capture_increases):
    health = health_figures(capture_increases)
    shape = health.shape
    # request_prompt_tokens: sum 1194 over 20; request_generation_tokens: sum 1144 over 20
    assert shape.requests == 20
    assert shape.prompt_mean_tokens == pytest.approx(59.7)
    assert shape.output_mean_tokens == pytest.approx(57.2)
    assert shape.input_output_ratio == pytest.approx(1194 / 1144)
    assert not shape.prefill_heavy
    assert shape.prompt_p50 == pytest.approx(50.0)  # rank 10 at the top of (20, 50], 0 → 10
    assert shape.output_p50 == pytest.approx(50 + 50 * 7 / 17)  # (50, 100], 3 → 20
    # the run capped every request with max_tokens: finished_reason="length" 20, the others 0
    assert health.finish_reasons == {"length": 20.0}
    assert health.truncated_share == 1.0
    assert capture_increases.counters["vllm:request_success"] == 20.0


def test_goodput_from_the_capture(capture_increases):
    # TTFT buckets: le=0.04 → 1, le=0.06 → 15, le=1.0 → 16, le=2.5 → 20
    g = goodput(capture_increases, slo_ttft_s=0.05, slo_tpot_s=None)
    assert g.ttft_share == pytest.approx((1 + 14 * 0.5) / 20)
    assert g.share_low == g.share_high == g.ttft_share
    assert goodput(capture_increases, 1.0, None).ttft_share == pytest.approx(16 / 20)
    # TPOT: all 20 requests in (0, 0.01]; 5 ms is half-way through that bucket
    g = goodput(capture_increases, slo_ttft_s=0.05, slo_tpot_s=0.005, tpot_ratio_if_toggled=2.0)
    assert g.tpot_share == pytest.approx(0.5)
    assert (g.share_low, g.share_high) == (pytest.approx(0.0), pytest.approx(0.4))
    # twice slower per token: inside 5 ms iff 2.5 ms now, a quarter of the bucket; TTFT unchanged
    assert g.tpot_share_if_toggled == pytest.approx(0.25)
    assert g.share_high_if_toggled == pytest.approx(0.25)
    assert g.share_low_if_toggled == pytest.approx(0.0)
    assert goodput(capture_increases, None, None) is None


def test_share_at_or_below_is_the_inverse_of_the_quantile():
    h = Histogram(((1.0, 2.0), (3.0, 6.0), (float("inf"), 10.0)), 20.0, 10.0)
    assert share_at_or_below(h, 0.5) == pytest.approx(0.1)
    assert share_at_or_below(h, 1.0) == pytest.approx(0.2)
    assert share_at_or_below(h, 2.0) == pytest.approx(0.4)
    assert share_at_or_below(h, 100.0) == pytest.approx(0.6)  # nothing known inside +Inf
    assert share_at_or_below(Histogram((), 0.0, 0.0), 1.0) is None


def test_energy_per_token_known_inputs():
    e = energy_per_token({0: 600.0, 1: 300.0}, output_tokens=300.0, seconds=10.0,
                         computed_per_emitted=1.5, speedup_if_toggled=0.8)
    assert e.joules == 900.0
    assert e.joules_per_token == pytest.approx(3.0)
    assert [(g.index, g.joules_per_token) for g in e.gpus] == [(0, 2.0), (1, 1.0)]
    # the switch is predicted 0.8× as fast: at the same power each token costs 1/0.8 as much
    assert e.joules_per_token_if_toggled == pytest.approx(3.75)
    assert energy_per_token({}, 300.0, 10.0) is None
    assert energy_per_token({0: 5.0}, 0.0, 10.0).joules_per_token is None
    assert energy_counter_increase(10.0, 4.0) is None
    assert energy_counter_increase(None, 4.0) is None


def _gpu(index, energy=None, lost=False):
    values = {} if energy is None else {"energy_j": energy}
    return GpuSample(index=index, name="H200", values=values, lost=lost)


def _snap(t, gen, gpus):
    engine = EngineSample(engine="0", model_name="m",
                          counters={"vllm:generation_tokens": gen, "vllm:prompt_tokens": 0.0},
                          gauges={"vllm:num_requests_running": 1.0})
    target = TargetSample(URL, "ok", engines=(engine,), process_start_time=1.0)
    return Snapshot(time=t, targets=(target,), gpus=tuple(gpus))


def test_window_energy_over_pairs_skips_a_reset():
    w = Window(60.0)
    w.add(_snap(100.0, 0.0, [_gpu(0, 1000.0), _gpu(1, 2000.0)]))
    w.add(_snap(105.0, 100.0, [_gpu(0, 1300.0), _gpu(1, 2100.0)]))
    # GPU 1's counter went back (driver reload): that pair adds nothing for it
    w.add(_snap(110.0, 300.0, [_gpu(0, 1600.0), _gpu(1, 50.0)]))
    joules, seconds = w.gpu_energy()
    assert joules == {0: 600.0, 1: 100.0}
    assert seconds == 10.0
    window = w.target(URL)
    assert window.increases.counter("vllm:generation_tokens") == 300.0
    e = energy_per_token(joules, window.increases.counter("vllm:generation_tokens"), seconds)
    assert e.joules_per_token == pytest.approx(700.0 / 300.0)


def test_window_without_energy_readings():
    w = Window(60.0)
    w.add(_snap(100.0, 0.0, [_gpu(0)]))
    w.add(_snap(105.0, 10.0, [_gpu(0)]))
    assert w.gpu_energy() == ({}, 0.0)


def test_health_report_from_the_capture_by_hand(capture_increases):
    # 572 J on one GPU over the 1144 output tokens of the capture; speculation on, 1.25× at this load
    block = health_report(capture_increases, 30.0, {0: 572.0}, 0.05, None, speculation_on=True,
                          expected_speedup=1.25)
    assert block["speculation_toggled_to"] == "off"
    e = block["energy"]
    assert e["joules_per_token"] == pytest.approx(0.5)
    assert e["joules_per_token_if_toggled"] == pytest.approx(0.5 * 1.25)  # off: each token 1.25× longer
    # decode positions: verified 1037 draft tokens + 301 drafts, plain 1144 − (301 + 272 − cut) − 20
    # first tokens = 551 + cut, the cut being the accepted tokens vLLM counted past the 20 requests'
    # ends (0 to 4 a request: estimated, figures.tokens_cut); over 1144 output tokens
    from specwatch.readings.figures import step_tokens

    cut = step_tokens(capture_increases).cut
    assert 0 < cut <= 20 * 4
    assert e["computed_per_emitted"] == pytest.approx((1037 + 301 + 551 + cut) / 1144)
    assert block["goodput"]["ttft_share"] == pytest.approx(0.4)
    assert block["goodput"]["estimate"] == "from histogram bucket boundaries"
    assert block["finish_reasons"] == {"length": 20.0} and block["truncated_share"] == 1.0
    assert block["latency"]["e2e"]["p90_s"] == pytest.approx(1.25)
    assert block["request_shape"]["input_output_ratio"] == pytest.approx(1194 / 1144)
    # speculation off now: switching on at 1.25× makes each token 0.8× as long
    off = health_report(capture_increases, 30.0, {0: 572.0}, None, 0.005, speculation_on=False,
                        expected_speedup=1.25)
    assert off["energy"]["joules_per_token_if_toggled"] == pytest.approx(0.5 / 1.25)
    assert off["goodput"]["tpot_share_if_toggled"] == pytest.approx(
        share_at_or_below(capture_increases.histogram("vllm:request_time_per_output_token_seconds"), 0.005 * 1.25))
    empty = health_report(None, 0.0, {}, 0.05, None, True, None)
    assert empty["energy"] is None and empty["goodput"] is None and empty["latency"] == {}


def test_the_load_carried_from_the_capture_by_hand(capture_increases):
    """Issue 17's request rate, preemptions, prefix-cache hit rate and KV capacity, against the
    capture's own lines: request_success_total 20 (all length), num_preemptions_total 0,
    prefix_cache_queries_total 1194 and hits 0; cache_config_info's 4096 blocks of 128 tokens."""
    block = health_report(capture_increases, 30.0, {}, None, None, speculation_on=True, expected_speedup=None,
                          kv_capacity_tokens=4096 * 128)
    assert block["traffic"] == {"requests_per_s": pytest.approx(20 / 30), "preemptions_per_s": 0.0,
                                "prefix_cache_queries": 1194.0, "prefix_cache_hits": 0.0,
                                "prefix_cache_hit_rate": 0.0, "kv_capacity_tokens": 524288.0}
    # the KV size is read from the capture's gauges as the window reads them
    from specwatch.readings.figures import engine_figures
    (engine,) = parse_payload(read(NGRAM_K4)).engines
    assert engine_figures(capture_increases, [engine.gauges]).kv_capacity_tokens == 524288.0
    # nothing read: no rates, and no division by a zero-length window
    assert health_report(None, 0.0, {}, None, None, True, None)["traffic"]["requests_per_s"] is None
    assert health_report(capture_increases, 0.0, {}, None, None, True, None)["traffic"]["requests_per_s"] is None


def test_health_panel_fits_80_columns_and_says_what_the_capture_says(capture_increases):
    from rich.console import Console

    from specwatch.widgets.health import HealthPanel
    from specwatch.widgets.view import DashboardView, SourceInfo

    block = health_report(capture_increases, 30.0, {0: 572.0}, 0.05, 0.005, speculation_on=True,
                          expected_speedup=1.25, kv_capacity_tokens=4096 * 128)
    view = DashboardView(source=SourceInfo("live", "test"), health_report=lambda breakdown: block)
    console = Console(width=78, record=True, color_system=None)  # 80 less the panel's border
    console.print(HealthPanel().render_view(view, 78))
    lines = console.export_text().rstrip("\n").split("\n")
    assert len(lines) <= 15 and all(len(line) <= 78 for line in lines)
    text = "\n".join(lines)
    assert "load     0.7 req/s · preempted 0.0/s · prefix cache 0% hits · KV 524.3k tok" in text
    assert "length 100%" in text and "cut at max_tokens" in text
    # 40 % within TTFT, 50 % within TPOT: both, between 0 and 40 %; off, TPOT×1.25: 40 % within
    assert "0%–40% within TTFT≤50 ms TPOT≤5.0 ms · spec off: 0%–40%" in text
    assert "0.5 J per output token · spec off: 0.625 J" in text
    e2e = next(line for line in lines if line.strip().startswith("e2e"))
    assert "1.25 s" in e2e  # p90 from (1.0, 1.5]
    empty = DashboardView(source=SourceInfo("live", "test"))
    console = Console(width=78, record=True, color_system=None)
    console.print(HealthPanel().render_view(empty, 78))
    assert "two readings" in console.export_text()


def test_the_overview_health_block_is_the_whole_blocks_goodput_and_energy_without_its_breakdown(capture_increases):
    """The overview reads only the goodput and energy lines: the view works out the block without
    its latency breakdown unless a panel reads the whole of it, and both agree on what they share."""
    from specwatch.widgets.view import DashboardView, SourceInfo

    asked: list[bool] = []

    def report(breakdown: bool) -> dict:
        asked.append(breakdown)
        return health_report(capture_increases, 30.0, {0: 572.0}, 0.05, 0.005, speculation_on=True,
                             expected_speedup=1.25, breakdown=breakdown)

    view = DashboardView(source=SourceInfo("live", "test"), health_report=report)
    summary = view.health_summary
    assert asked == [False]
    assert summary["latency"] == {} and summary["request_shape"] is None
    whole = view.health
    assert asked == [False, True] and whole["latency"]
    assert (summary["goodput"], summary["energy"]) == (whole["goodput"], whole["energy"])
    assert view.health is whole and view.health_summary is summary  # each worked out once per view
    # a view whose whole block was read first takes the summary from it
    asked.clear()
    again = DashboardView(source=SourceInfo("live", "test"), health_report=report)
    whole = again.health
    assert again.health_summary is whole and asked == [True]


def test_the_prefix_cache_counters_by_their_names_before_0_9_2():
    """vLLM 0.8.5 to 0.11 exported the prefix cache's counters as gpu_prefix_cache_*: read as the
    later names are (the capture's lines renamed, with 300 of 1194 looked-up tokens hits)."""
    from specwatch.readings.figures import Increases

    text = read(NGRAM_K4).replace("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries") \
        .replace("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"tiny-llama\"} 0.0",
                 "vllm:gpu_prefix_cache_hits_total{engine=\"0\",model_name=\"tiny-llama\"} 300.0") \
        .replace("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
    (engine,) = parse_payload(text).engines
    assert "vllm:prefix_cache_queries" not in engine.counters
    assert engine.counters["vllm:gpu_prefix_cache_queries"] == 1194.0
    assert engine.counters["vllm:gpu_prefix_cache_hits"] == 300.0
    block = health_report(Increases(30.0, dict(engine.counters)), 30.0, {}, None, None, True, None)
    assert block["traffic"]["prefix_cache_hit_rate"] == pytest.approx(300 / 1194)


def test_the_time_averaged_load_from_the_capture_by_hand(capture_increases):
    """Little's law over the capture's lines: request_inference_time_seconds_sum 6.955758839999476 and
    request_queue_time_seconds_sum 0.0007334120006703415 (20 requests each) over a 30 s span are the
    mean number running and waiting; the instant gauges beside them say nothing of the span."""
    from dataclasses import replace

    from specwatch.readings.figures import engine_figures
    (engine,) = parse_payload(read(NGRAM_K4)).engines
    figures = engine_figures(replace(capture_increases, seconds=30.0), [engine.gauges])
    assert figures.running_time_mean == pytest.approx(6.955758839999476 / 30)
    assert figures.waiting_time_mean == pytest.approx(0.0007334120006703415 / 30)
    # no request finished in the span: no time average, rather than a 0 no one measured
    no_requests = replace(capture_increases, seconds=30.0, histograms={})
    assert engine_figures(no_requests, [engine.gauges]).running_time_mean is None
