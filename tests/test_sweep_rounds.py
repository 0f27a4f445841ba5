"""The sweep's rounds: interval maths on hand-computed samples, the interleaving order as the
servers saw it, the adaptive stop, warm-up kept out of the figures, and a throttle on one side."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from nvml_double import FakeClock, FakeNvml, hopper_gpu
from specwatch import sweep as sw
from specwatch.collectors.gpus import GpuPoller
from specwatch.commands.options import ExitCode
from specwatch.collectors.nvml import NvmlCollector
from specwatch.sweep import loadgen
from test_sweep import FakeBehaviour, FakeOpenAIServer, run_cli

# --------------------------------------------------------------------------------------------------
# Interval maths, against values worked out by hand (t quantiles from a printed table)
# --------------------------------------------------------------------------------------------------


def test_mean_interval_of_three_known_values():
    # mean 12, sample sd 2, se 2/√3 = 1.154701, t(0.975, 2) = 4.3027: half-width 4.968335
    i = sw.mean_interval([10.0, 12.0, 14.0])
    assert i.estimate == pytest.approx(12.0)
    assert i.low == pytest.approx(7.031665, abs=1e-5) and i.high == pytest.approx(16.968335, abs=1e-5)
    assert i.n == 3
    # missing rounds are left out, a single value has no interval, none has no estimate
    assert sw.mean_interval([10.0, None, 14.0]).n == 2
    # two values 10, 14: sd 2.828427, se 2, t(0.975, 1) = 12.7062: 12 ± 25.4124
    two = sw.mean_interval([10.0, None, 14.0])
    assert (two.low, two.high) == (pytest.approx(-13.4124), pytest.approx(37.4124))
    assert sw.mean_interval([5.0]) == sw.Interval(5.0, None, None, 1)
    assert sw.mean_interval([]) == sw.Interval(None, None, None, 0)


def test_speedup_interval_is_a_t_interval_on_the_log_of_paired_ratios():
    base = [100.0, 200.0, 50.0]
    # per-round ratios e^0.1, e^0.2, e^0.3: log mean 0.2, log sd 0.1, se 0.0577350,
    # half-width 4.3027 × 0.0577350 = 0.2484174 → [e^-0.0484174, e^0.4484174] = [0.952736, 1.565827]
    spec = [b * math.exp(x) for b, x in zip(base, (0.1, 0.2, 0.3))]
    i = sw.ratio_interval(spec, base)
    assert i.estimate == pytest.approx(1.221403, abs=1e-6)  # e^0.2, the geometric mean
    assert i.low == pytest.approx(0.952736, abs=1e-5) and i.high == pytest.approx(1.565827, abs=1e-5)
    assert sw.verdict(i) == sw.WITHIN_NOISE  # the point estimate says 1.22, the interval holds 1
    # a pair with a missing or zero side does not count
    assert sw.ratio_interval(spec + [None], base + [10.0]).n == 3
    assert sw.ratio_interval([1.0], [0.0]).n == 0


def test_t_quantiles_match_the_printed_table_beyond_thirty():
    # t(0.975) for 40, 60, 120 degrees of freedom, from any statistics table
    assert sw.t_quantile_975(40) == pytest.approx(2.0211, abs=2e-4)
    assert sw.t_quantile_975(60) == pytest.approx(2.0003, abs=2e-4)
    assert sw.t_quantile_975(120) == pytest.approx(1.9799, abs=2e-4)
    assert sw.t_quantile_975(1) == 12.7062
    with pytest.raises(ValueError):
        sw.t_quantile_975(0)


def test_verdicts_come_from_the_interval_not_the_estimate():
    assert sw.verdict(sw.Interval(1.3, 1.05, 1.6, 3)) == sw.PAYS
    assert sw.verdict(sw.Interval(0.8, 0.7, 0.95, 3)) == sw.COSTS
    assert sw.verdict(sw.Interval(0.9, 0.7, 1.02, 3)) == sw.WITHIN_NOISE
    assert sw.verdict(sw.Interval(1.5, None, None, 1)) == sw.ONE_ROUND
    assert sw.verdict(sw.Interval(None, None, None, 0)) is None


def test_rounds_to_resolve_follow_the_one_over_root_n_shrink():
    # estimate e^0.1 with a log half-width of 0.2 at 4 rounds: 4 × (0.2 / 0.1)² = 16 rounds in all
    i = sw.Interval(math.exp(0.1), math.exp(-0.1), math.exp(0.3), 4)
    assert sw.rounds_to_resolve(i) == 16
    assert sw.rounds_to_resolve(sw.Interval(1.0, 0.9, 1.1, 4)) is None  # exactly 1: no n resolves it
    assert sw.rounds_to_resolve(sw.Interval(1.2, None, None, 1)) is None


# --------------------------------------------------------------------------------------------------
# The crossing's interval
# --------------------------------------------------------------------------------------------------


def test_the_crossing_interval_runs_from_the_lower_ends_fall_to_the_upper_ends_fall():
    tiers = [
        {"concurrency": 1, "speedup_interval": {"throughput": {"low": 1.2, "high": 1.6}, "tpot": {}}},
        {"concurrency": 4, "speedup_interval": {"throughput": {"low": 0.8, "high": 1.2}, "tpot": {}}},
        {"concurrency": 16, "speedup_interval": {"throughput": {"low": 0.5, "high": 0.9}, "tpot": {}}},
    ]
    out = sw.crossing_intervals(tiers)["throughput"]
    # lower ends 1.2 → 0.8 between 1 and 4: half-way in log2, concurrency 2
    assert out["low"] == pytest.approx(2.0) and out["low_state"] == sw.CROSSES
    # upper ends 1.2 → 0.9 between 4 and 16: two thirds of the way from log2 4 = 2 to 4: 2^(10/3)
    assert out["high"] == pytest.approx(2 ** (10 / 3)) and out["high_state"] == sw.CROSSES
    assert sw.crossing_intervals(tiers)["tpot"]["low_state"] == sw.NO_DATA


# --------------------------------------------------------------------------------------------------
# The adaptive stop, with scripted rounds and a scripted clock
# --------------------------------------------------------------------------------------------------


class ScriptedSweep(sw.LiveSweep):
    """A LiveSweep whose runs put scripted tokens/s and advance a scripted clock by 10 s each."""

    def __init__(self, plan: sw.SweepPlan, ratios: list[float]) -> None:
        self.now = 0.0
        super().__init__(sw.SweepRecord(source="live"), plan, [loadgen.Prompt(text="x")],
                         loadgen.RequestSettings(model="m"), progress=None, clock=lambda: self.now)
        self.ratios = ratios
        self.runs: list[tuple[str, int]] = []

    async def run_tier(self, endpoint: sw.Endpoint, concurrency: int) -> bool:
        self.now += 10.0
        done = sum(1 for r in self.record.rounds.get(concurrency, []) if r[endpoint.side] is not None)
        tps = 100.0 if endpoint.side == "baseline" else 100.0 * self.ratios[done % len(self.ratios)]
        self.runs.append((endpoint.side, concurrency))
        self.record.put(concurrency, endpoint.side, {"output_tokens_per_s": tps, "tpot_p50_s": 0.01})
        return True


def scripted(plan: sw.SweepPlan, ratios: list[float]) -> ScriptedSweep:
    sweep = ScriptedSweep(plan, ratios)
    sweep.record.servers = {s: {} for s in sw.SIDES}
    endpoints = {s: sw.Endpoint(s, f"http://{s}", "m") for s in sw.SIDES}
    assert asyncio.run(sw.run_tiers(sweep, endpoints))
    return sweep


def test_without_a_budget_a_tier_gets_exactly_repeat_rounds_in_a_b_b_a_order():
    sweep = scripted(sw.SweepPlan(tiers=(1,), requests=1, repeat=4), [1.3, 0.8])
    assert [side for side, _ in sweep.runs] == ["baseline", "speculative", "speculative", "baseline",
                                                "baseline", "speculative", "speculative", "baseline"]
    assert sweep.record.tier_notes[1]["stopped_because"] == "rounds done"


def test_the_adaptive_stop_ends_a_clear_tier_at_the_minimum_and_spends_the_budget_on_a_noisy_one():
    # tier 1 pays clearly (1.50, 1.52): resolved after the 2 minimum rounds, 40 s of its 100 s share.
    # tier 2 swings 1.3, 0.8: never resolves; its share is what is left, 160 s, at 20 s a round.
    plan = sw.SweepPlan(tiers=(1, 2), requests=1, repeat=2, budget_s=200.0)
    sweep = ScriptedSweep(plan, [])
    ratios = {1: [1.50, 1.52], 2: [1.3, 0.8]}

    async def run_tier(endpoint, concurrency):
        sweep.now += 10.0
        done = sum(1 for r in sweep.record.rounds.get(concurrency, []) if r[endpoint.side] is not None)
        tps = 100.0 if endpoint.side == "baseline" else 100.0 * ratios[concurrency][done % 2]
        sweep.record.put(concurrency, endpoint.side, {"output_tokens_per_s": tps, "tpot_p50_s": 0.01})
        return True

    sweep.run_tier = run_tier
    assert asyncio.run(sw.run_tiers(sweep, {s: sw.Endpoint(s, f"http://{s}", "m") for s in sw.SIDES}))
    notes = sweep.record.tier_notes
    assert notes[1] == {"rounds": 2, "stopped_because": "resolved", "round_s": 20.0}
    assert notes[2]["stopped_because"] == "budget spent" and notes[2]["rounds"] == 8  # 160 s / 20 s
    report = sweep.record.report(sw.PredictionInputs())
    assert report["unresolved_tiers"] == [2]
    tier2 = report["tiers"][1]
    assert tier2["verdict"]["throughput"] == sw.WITHIN_NOISE
    assert tier2["stop"]["rounds_to_resolve"] > 8 and tier2["stop"]["budget_to_resolve_s"] == \
        pytest.approx((tier2["stop"]["rounds_to_resolve"] - 8) * 20.0)
    assert report["tiers"][0]["verdict"]["throughput"] == sw.PAYS
    plot = sw.render_plot(report)
    assert "c=2: tokens/s speedup" in plot and "within noise" in plot and "unresolved" in plot


def test_next_round_rules():
    wide = sw.Interval(1.0, 0.8, 1.25, 3)
    clear = sw.Interval(1.3, 1.1, 1.5, 3)
    go = dict(min_rounds=3, max_rounds=5, round_s=10.0)
    assert sw.next_round(2, wide, budget_left_s=None, **go).go_on  # below the minimum
    assert not sw.next_round(3, wide, budget_left_s=None, **go).go_on  # no budget: exactly the minimum
    assert sw.next_round(3, wide, budget_left_s=50.0, **go).go_on
    assert sw.next_round(3, clear, budget_left_s=50.0, **go).reason == "resolved"
    assert sw.next_round(3, wide, budget_left_s=5.0, **go).reason == "budget spent"
    assert sw.next_round(5, wide, budget_left_s=500.0, **go).reason == "round cap"


# --------------------------------------------------------------------------------------------------
# Live rounds against fake servers: the order the servers saw, and warm-up kept out of /metrics
# --------------------------------------------------------------------------------------------------


def test_the_servers_see_interleaved_rounds_and_the_warmup_only_once(tmp_path):
    arrivals: list[str] = []
    baseline = FakeOpenAIServer(FakeBehaviour(arrivals=arrivals, name="b"))
    speculative = FakeOpenAIServer(FakeBehaviour(tokens_per_chunk=3, k=3, arrivals=arrivals, name="s"))
    with baseline, speculative:
        code, stdout, stderr = run_cli([
            "--baseline", baseline.url, "--speculative", speculative.url, "--tiers", "1",
            "--requests", "2", "--warmup", "3", "--max-tokens", "12", "--scrape-interval", "0.05",
            "--repeat", "3", "-o", str(tmp_path / "o"), "--json"])
    assert code == 0, stderr
    runs: list[list] = []
    for name in arrivals:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    # warm-up 3 + round 1 (2) on each; round 2 speculative then baseline; round 3 baseline then speculative
    assert runs == [["b", 5], ["s", 5 + 2], ["b", 2 + 2], ["s", 2]]
    tier = json.loads(stdout)["tiers"][0]
    # the probe reads /metrics after the warm-up: 12 tokens in chunks of 3 is 4 drafts a request,
    # and each round's 2 measured requests give 8 (the 3 warm-up requests' 12 drafts are not there)
    assert [r["speculative"]["drafts"] for r in tier["rounds"]] == [8, 8, 8]
    assert all(r["speculative"]["requests_ok"] == 2 for r in tier["rounds"])


# --------------------------------------------------------------------------------------------------
# Noise it can see
# --------------------------------------------------------------------------------------------------


def nvml_poller(gpu) -> GpuPoller:
    clock = FakeClock()
    return GpuPoller(NvmlCollector(FakeNvml([gpu], clock=clock), clock=clock, read_processes=False), dcgm=False)


def test_a_throttle_on_one_side_only_flags_the_round():
    gpu = hopper_gpu()
    poller = nvml_poller(gpu)
    steal = iter([(1000.0, 500.0, 0.0), (2000.0, 1000.0, 0.0), (3000.0, 1500.0, 0.0), (4000.0, 2000.0, 200.0)])

    async def side(reasons: int) -> dict:
        gpu.clocks_event_reasons = reasons
        conditions = sw.RoundConditions(poller.poll_nvml, 0.01, stat_reader=lambda: next(steal),
                                        load_reader=lambda: 1.0)
        conditions.start()
        await asyncio.sleep(0.03)
        return await conditions.finish()

    base = asyncio.run(side(0))
    spec = asyncio.run(side(0x4 | 0x1))  # power cap (and idle, which is not a throttle)
    poller.close()
    assert base["gpu"]["throttle_reasons"] == [] and spec["gpu"]["throttle_reasons"] == ["power cap"]
    assert base["gpu"]["sm_clock_mhz_min"] == 1980.0
    # steal: 0 of 1000 jiffies on the baseline side, 200 of 1000 on the speculative side
    assert base["cpu_steal_pct"] == 0.0 and spec["cpu_steal_pct"] == pytest.approx(20.0)
    flags = sw.condition_flags(base, spec)
    assert "GPU throttled on the speculative side only (power cap)" in flags
    assert "CPU steal differs: 0.0 % baseline, 20.0 % speculative" in flags
    assert sw.condition_flags(base, base) == []

    record = sw.SweepRecord(source="live")
    record.put(1, "baseline", {"output_tokens_per_s": 100.0}, base)
    record.put(1, "speculative", {"output_tokens_per_s": 90.0}, spec)
    record.put(1, "speculative", {"output_tokens_per_s": 95.0}, base)
    record.put(1, "baseline", {"output_tokens_per_s": 100.0}, base)
    tier = record.report(sw.PredictionInputs())["tiers"][0]
    assert tier["flagged_rounds"] == [1]
    assert "round 1: GPU throttled on the speculative side only (power cap)" in sw.render_plot(
        record.report(sw.PredictionInputs()), width=120)


def test_a_host_without_proc_stat_or_gpus_records_none_not_an_error(tmp_path):
    assert sw.read_proc_stat(str(tmp_path / "missing")) is None
    (tmp_path / "stat").write_text("intr 1 2 3\n")
    assert sw.read_proc_stat(str(tmp_path / "stat")) is None
    assert sw.cpu_shares(None, (1.0, 1.0, 0.0)) == (None, None)

    async def side() -> dict:
        conditions = sw.RoundConditions(None, stat_reader=lambda: None)
        conditions.start()
        return await conditions.finish(failed_requests=2)

    out = asyncio.run(side())
    assert out["gpu"] is None and out["gpu_state"] == "not polled" and out["cpu_steal_pct"] is None
    assert out["requests_failed"] == 2


def test_failures_on_one_side_only_flag_the_round():
    assert sw.condition_flags({"requests_failed": 3}, {"requests_failed": 0}) == [
        "requests failed on one side only (3 baseline, 0 speculative)"]


def test_tokens_the_server_generated_beyond_the_sweeps_requests_flag_the_round():
    """Another client on the speculative server during its side: its generation counter rose by 1200
    tokens where the sweep's requests received 768. 10 tokens over (a request that failed after
    generating some) is within the share and says nothing."""
    async def side(received: int, server: float | None) -> dict:
        conditions = sw.RoundConditions(None, stat_reader=lambda: None, load_reader=lambda: None)
        conditions.start()
        return await conditions.finish(0, received, server)

    quiet, shared = asyncio.run(side(768, 778.0)), asyncio.run(side(768, 1200.0))
    assert quiet["unrequested_tokens"] == 10.0 and shared["unrequested_tokens"] == 432.0
    assert sw.condition_flags(quiet, quiet) == []
    assert sw.condition_flags(quiet, shared) == [
        "the speculative server generated 432 tokens its requests did not receive (other clients on it, "
        "or failed requests): its figures are not the sweep's alone"]
    # a server whose counter was not read flags nothing
    unread = asyncio.run(side(768, None))
    assert unread["unrequested_tokens"] is None and sw.condition_flags(unread, unread) == []


def test_a_live_round_records_a_throttle_seen_only_while_the_speculative_server_works(tmp_path):
    gpu = hopper_gpu()
    poller = nvml_poller(gpu)
    baseline = FakeOpenAIServer(FakeBehaviour())
    speculative = FakeOpenAIServer(FakeBehaviour(tokens_per_chunk=3, k=3, chunk_delay_s=0.03))

    def poll():
        # the GPU is power-capped while the speculative server has requests in flight
        gpu.clocks_event_reasons = 0x4 if speculative.state.in_flight else 0
        return poller.poll_nvml()

    record = sw.SweepRecord(source="live")
    plan = sw.SweepPlan(tiers=(1,), requests=4, warmup=0, scrape_interval_s=0.05, repeat=1)
    with baseline, speculative:
        live = sw.LiveSweep(record, plan, loadgen.synthetic_prompts("echo", 8), loadgen.RequestSettings(
            model="-", max_tokens=12, timeout_s=10), progress=None, gpu_poll=poll)
        asyncio.run(sw.sweep_two_servers(live, sw.Endpoint("baseline", baseline.url),
                                         sw.Endpoint("speculative", speculative.url)))
    poller.close()
    report = record.report(sw.PredictionInputs())
    assert report["complete"], report["stopped"]
    r = report["tiers"][0]["rounds"][0]
    assert r["conditions"]["baseline"]["gpu"]["throttle_reasons"] == []
    assert r["conditions"]["speculative"]["gpu"]["throttle_reasons"] == ["power cap"]
    assert "GPU throttled on the speculative side only (power cap)" in r["flags"]
    assert report["tiers"][0]["flagged_rounds"] == [1]


# --------------------------------------------------------------------------------------------------
# Files: the new schema, the old one still read, the marker with the interval, the CSV per round
# --------------------------------------------------------------------------------------------------


def test_old_sweep_files_are_still_read_and_the_marker_shows_the_interval(tmp_path):
    old = {"schema": "specwatch.sweep/1", "tiers": [{"concurrency": 1}, {"concurrency": 16}],
           "crossing": {"throughput": 5.6, "tpot": None}, "crossing_state": {"throughput": "crosses"}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded = sw.load_sweep(tmp_path / "old.json")
    assert sw.crossover_marker(loaded, 3) == "sweep crossover ≈ 5.6, now 3, below it: speculation paid here"
    new = dict(old, schema=sw.SCHEMA, crossing_interval={"throughput": {
        "low": 4.0, "low_state": "crosses", "high": 7.5, "high_state": "crosses"}})
    (tmp_path / "new.json").write_text(json.dumps(new))
    loaded = sw.load_sweep(tmp_path / "new.json")
    assert sw.crossover_marker(loaded, 3) == \
        "sweep crossover ≈ 5.6 (95 % 4.0–7.5), now 3, below it: speculation paid here"
    assert sw.crossover_marker(loaded, 6) == \
        "sweep crossover ≈ 5.6 (95 % 4.0–7.5), now 6, inside the crossing's interval: too close to call"
    assert sw.crossover_marker(loaded, 9).endswith("now 9, above it: speculation cost throughput here")
    open_ended = dict(new, crossing_interval={"throughput": {
        "low": None, "low_state": "never_pays", "high": 7.5, "high_state": "crosses"}})
    assert "(95 % below 1–7.5)" in sw.crossover_marker(open_ended, None)
    (tmp_path / "bad.json").write_text(json.dumps(dict(new, crossing_interval={"throughput": {"low": "x"}})))
    with pytest.raises(sw.SweepFileError, match="crossing_interval"):
        sw.load_sweep(tmp_path / "bad.json")


def test_budget_is_refused_where_rounds_cannot_alternate(tmp_path):
    code, _, stderr = run_cli(["--from-bench", str(tmp_path), str(tmp_path), "--budget", "60",
                               "-o", str(tmp_path / "o")])
    assert code == ExitCode.USAGE and "--budget needs two running servers" in stderr


def test_the_dashboard_marker_carries_the_crossing_interval():
    from specwatch.widgets.view import SweepMarker

    new = {"crossing": {"throughput": 5.6, "tpot": None},
           "crossing_interval": {"throughput": {"low": 4.2, "high": None, "high_state": "pays_throughout"}}}
    marker = SweepMarker.from_results(new)
    assert (marker.throughput_crossing, marker.throughput_low, marker.throughput_high) == (5.6, 4.2, None)
    assert marker.crossing_text() == "sweep crossover 6 (95 % 4–?)"
    old = SweepMarker.from_results({"crossing": {"throughput": 5.6, "tpot": None}})
    assert old.crossing_text() == "sweep crossover 6"
    assert SweepMarker.from_results({"crossing": {"throughput": None}}).crossing_text() is None


def test_too_many_rounds_is_a_usage_error(tmp_path):
    code, _, stderr = run_cli(["--baseline", "http://127.0.0.1:1", "--speculative", "http://127.0.0.1:2",
                               "--repeat", str(sw.MAX_ROUNDS + 1), "-o", str(tmp_path / "o")])
    assert code == ExitCode.USAGE and f"--repeat must be in 1..{sw.MAX_ROUNDS}" in stderr


def test_the_plot_draws_each_tiers_interval_as_an_error_bar():
    record = sw.SweepRecord(source="bench")
    # tier 1: ratios 1.1, 1.5, 1.9 (wide); tier 8: 0.9, 0.9, 0.9 (no spread: a bar of one cell)
    for c, ratios in ((1, (1.1, 1.5, 1.9)), (8, (0.9, 0.9, 0.9))):
        for ratio in ratios:
            record.put(c, "baseline", {"output_tokens_per_s": 100.0, "tpot_p50_s": 0.01})
            record.put(c, "speculative", {"output_tokens_per_s": 100.0 * ratio, "tpot_p50_s": 0.01})
    report = record.report(sw.PredictionInputs())
    low = report["tiers"][0]["speedup_interval"]["throughput"]["low"]
    assert low < 1  # the wide interval reaches below break-even
    plot = sw.render_plot(report, width=78)
    panel = plot.split("speedup, speculative / baseline")[1].split("concurrency (log scale)")[0]
    rows = [line[8:] for line in panel.splitlines() if len(line) > 8 and line[6:8] == " |"]
    # the bar at concurrency 1 is the first column, top row first: "|" above and below the point "M"
    first_column = "".join(row[:1] for row in rows)
    assert first_column.count("|") >= 3
    assert first_column.index("|") < first_column.index("M") < first_column.rindex("|")
    assert "| = the 95 % interval of M over the rounds" in plot
    assert all(not line.lstrip().startswith("-0") for line in plot.splitlines())
    assert max(len(line) for line in plot.splitlines()) <= 78
