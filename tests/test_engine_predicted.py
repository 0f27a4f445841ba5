"""The sweep's predicted curve and the live advisor against what a real sweep measured (the CPU
wheel, a tiny Llama, n-gram k = 4, tiers 1, 2, 4, five rounds a tier).

On this node the engine does not decode all the time (prefills, the API server, the tokenizer and
the load generator share two cores with it), n-gram finds no match for about half of the decode
steps, and a speculative step costs nearly twice a plain one: the prediction is built from the
engine's own step periods, busy share and per-step emission (specwatch.readings.figures) through
the same decision as the advisor's. Before, it said 2.34×, 1.38×, 0.77× at concurrency 1, 2, 4
where a sweep measured 1.19×, 1.78×, 1.93×.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from test_engine_check import run_check
from vllm_server import ECHO_PROMPTS, Traffic

pytestmark = pytest.mark.engine

TIERS = (1, 2, 4)
ROUNDS = 5
# Requests a tier: six (a 0.15 s tier at c = 1) left one stall of the server a round's whole figure,
# and rounds measured 184 to 1121 tokens/s on one server in one run (c = 1 speedups of 0.42x, 0.51x
# and 2.33x in three runs); 24 hold them within a few percent but for the odd round.
REQUESTS = 24
MAX_TOKENS = 32
WIDEN = 1.25


def widened(interval: dict) -> tuple[float, float]:
    return interval["low"] / WIDEN, interval["high"] * WIDEN


@pytest.fixture(scope="module")
def measured(baseline_server, ngram_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("predicted")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ECHO_PROMPTS) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "specwatch", "sweep", "--baseline", baseline_server.url,
         "--speculative", ngram_server.url, "--tiers", ",".join(map(str, TIERS)), "--requests", str(REQUESTS),
         "--warmup", "1", "--max-tokens", str(MAX_TOKENS), "--prompt-file", str(prompts), "--scrape-interval", "0.25",
         "--method", "ngram", "--request-timeout", "120", "--repeat", str(ROUNDS), "-o", str(tmp / "sweep"), "--json"],
        capture_output=True, text=True, timeout=1500)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    print((tmp / "sweep" / "sweep.txt").read_text())
    return json.loads(r.stdout)


def test_the_predicted_curve_rests_on_the_engines_own_timing(measured):
    """Each tier carries the engine's own timing on both sides, read from the servers' counters, and
    the predicted curve is built from it: step periods at the positions the steps computed, the
    baseline's busy share, and what a decode step emitted and verified per sequence (n-gram misses
    included). The comparison with the measured interval is printed; on this two-core machine the
    c = 1 interval itself moves between runs (0.92-1.15, 1.01-1.28 and 0.75-1.16 in three), so no
    one prediction can be held to every run's interval yet."""
    predicted = measured["predicted"]
    assert predicted is not None, measured.get("predicted_note")
    assert predicted["basis"] == "fitted" and "the baseline engine decoded" in predicted["note"]
    at = {p["concurrency"]: p["speedup"] for p in predicted["points"]}
    k = predicted["k"]
    for tier in measured["tiers"]:
        c, base, spec = tier["concurrency"], tier["baseline"], tier["speculative"]
        assert base["step_period_s"] > 0 and spec["step_period_s"] > 0
        assert 0 < base["busy_share"] <= 1 and 0 < spec["busy_share"] <= 1
        # Per sequence a speculative decode step verifies at least the one position a plain step
        # decodes. The positions a whole step computed are not compared across the two servers: they
        # count the sequences each batched, and the faster server drains a tier's requests sooner (at
        # c = 4 one run measured 3.36 positions a verify step against 4.17 a plain one).
        assert spec["computed_tokens_per_step"] > 0 and base["computed_tokens_per_step"] > 0
        # n-gram misses: a decode step emits fewer tokens than a draft gives, and verifies at most k+1
        assert 1 <= spec["emitted_per_sequence_step"] <= spec["acceptance_length"] + 1e-9
        assert spec["emitted_per_sequence_step"] <= spec["verified_per_sequence_step"] <= k + 1 + 1e-9
        low, high = widened(tier["speedup_interval"]["throughput"])
        print(f"c={c}: predicted {at[c]:.2f}, measured {tier['speedup_interval']['throughput']}, "
              f"baseline busy {base['busy_share']:.2f}, inside the widened interval: {low <= at[c] <= high}")
        assert 0 < at[c] < k + 1


def test_a_cpu_engines_prior_beside_the_plain_step_the_baseline_measured(measured):
    """Out of sample: the CPU prior the live advisor judges with, anchored on the speculative
    engine's step periods alone (as live, where no plain step is ever seen), prices the plain step
    that the baseline server measured at the same concurrency. At c = 1, in six runs, it priced
    106 %, 87 %, 77 %, 68 %, 70 % and 85 % of the measured plain step; the law without vLLM's fixed
    step cost (every position its share of the step, from the first: the verify step's time over
    its positions) priced 83 %, 68 %, 54 %, 49 %, 51 % and 62 %. On this two-core machine a step is
    mostly fixed cost (a plain step measured 2.3-2.9 ms, a verify step of 3.25 positions 3.0-4.3 ms):
    the 1 ms the law assumes is a floor. At c = 2 and 4 the step periods scatter (a plain step
    measured faster at c = 2 than at c = 1; at c = 4 a verify step of 9.4 positions took 4-5 plain
    ones) and neither law was the closer in most runs (6 of 12 tier-runs each). A seventh run, on a
    busier machine, measured the verify step at 6.35 ms and the plain one at 1.90 ms, where the fixed
    cost priced 180 % and the old law 152 %: these are timings on two shared cores, so the comparison
    is printed, not held."""
    from specwatch.advice.step_samples import cpu_prior
    from specwatch.perf import step_overhead_s

    for tier in measured["tiers"]:
        base, spec = tier["baseline"], tier["speculative"]
        verify = (spec["computed_tokens_per_step"], spec["step_period_s"])
        with_fixed = cpu_prior([verify], step_overhead_s()).step_time(base["computed_tokens_per_step"])
        proportional = verify[1] / verify[0] * base["computed_tokens_per_step"]
        plain = base["step_period_s"]
        print(f"c={tier['concurrency']}: plain step measured {plain * 1e3:.2f} ms; priced {with_fixed * 1e3:.2f} ms "
              f"with vLLM's fixed step cost, {proportional * 1e3:.2f} ms without; the verify step "
              f"{spec['step_period_s'] * 1e3:.2f} ms at {spec['computed_tokens_per_step']:.2f} positions")
        # what the prior needs of the measurement: step periods and positions (how close each law
        # comes is timing: printed, not held). Where the baseline batched more sequences than the
        # speculative server (its requests drain slower), its plain step computes more positions
        # than the verify step anchoring the prior, and the law extrapolates: said, not refused.
        assert plain > 0 and verify[1] > 0
        assert base["computed_tokens_per_step"] > 0 and verify[0] > 0
        if base["computed_tokens_per_step"] >= verify[0]:
            print("  the plain step computed more positions than the verify step: the law extrapolates")
        print(f"  priced / measured: {with_fixed / plain:.2f} with the fixed cost, {proportional / plain:.2f} without")


def test_the_live_advisor_at_concurrency_1_says_what_the_sweep_measured(measured, ngram_server):
    """Under the same concurrency-1 traffic the live advisor, told the engine runs on the CPU (this
    server is not in dev mode, so its /server_info cannot say it: --device cpu), judges with a CPU's
    shape (vLLM's fixed step cost, then every verified position its compute), and its busy share: its expected speedup is
    compared with the sweep's measured interval, widened as above. (Before, with no device known, it said
    the optimistic end of the range the unknown shape leaves: 2.14x and 2.37x in two runs, where the
    sweep measured 0.90x and 0.77x.)"""
    tier = next(t for t in measured["tiers"] if t["concurrency"] == 1)
    interval = tier["speedup_interval"]["throughput"]
    with Traffic(ngram_server, concurrency=1, max_tokens=MAX_TOKENS, stream=True):
        time.sleep(3.0)
        code, report, stderr = run_check(ngram_server.url, 10.0, "--method", "ngram", "--device", "cpu")
    verdict = report["verdict"]
    low, high = widened(interval)
    print(f"live advisor {verdict['expected_speedup']:.2f}, measured {interval}, inside the widened interval: "
          f"{low <= verdict['expected_speedup'] <= high}", verdict["reasons"])
    assert any(r.startswith("the engine runs on the CPU (--device cpu)") for r in verdict["reasons"])
    assert any("busy" in r and "speculation can speed only that share" in r for r in verdict["reasons"])
    assert "gpu_unidentified" not in verdict["flags"]
    # With vLLM's fixed step cost in the CPU's shape: 1.12x to 1.16x in six runs, inside each run's
    # widened interval (0.89x, 1.07x, 1.42x, 1.37x, 1.51x and 1.35x measured). Without it, every
    # position at its full cost, it said 0.85x, outside a quiet run's 1.10-1.27 widened. The interval at c = 1 moves
    # between runs on this two-core machine, so inside it is printed, not held. Held: within a factor
    # of 2 of what the sweep measured (the unknown shape's optimistic end was 3x off).
    assert 0.5 <= verdict["expected_speedup"] / interval["estimate"] <= 2.0, (verdict["expected_speedup"], interval)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_without_any_flag_the_loopback_cpu_server_is_judged_as_the_cpu_at_its_time_averaged_load(
        measured, ngram_server, concurrency):
    """Issue 45, items 1 and 4, on the real CPU vLLM: with no --device and no dev mode, the server is on
    loopback and this machine has no NVIDIA driver, so the engine is judged as the CPU it runs on
    (named, with where that came from), never on a GPU's roofline; and the load it is judged at is the
    window's time average from vLLM's request times, where the running gauge reads 0 at most scrapes.
    The verdict is held within a factor of 2 of what the sweep measured at the same concurrency (as
    the --device cpu check above is; the interval itself moves between runs on two cores)."""
    tier = next(t for t in measured["tiers"] if t["concurrency"] == concurrency)
    interval = tier["speedup_interval"]["throughput"]
    with Traffic(ngram_server, concurrency=concurrency, max_tokens=MAX_TOKENS, stream=True):
        time.sleep(3.0)
        code, report, stderr = run_check(ngram_server.url, 10.0, "--method", "ngram")
    nvml = next(s for s in report["sources"] if s["name"] == "nvml")
    if nvml["state"] != "no_driver":
        pytest.skip(f"this machine's NVML is {nvml['state']}: the host says nothing of a loopback server's device")
    verdict, engine = report["verdict"], report["engine"]
    print(f"c={concurrency}: judged at {engine['judged_running']} running ({engine['judged_running_from']}), gauge "
          f"{engine['running']}; live {verdict['expected_speedup']}, measured {interval}", verdict["reasons"])
    assert engine["device"] == {"name": "cpu", "source": "host"}
    assert any(r.startswith("the engine runs on the CPU (it is on this machine, which has no NVIDIA driver)")
               for r in verdict["reasons"]), verdict["reasons"]
    assert "gpu_unidentified" not in verdict["flags"]
    # the load: the time average of the requests' time in the engine, inside what the client keeps in
    # flight (a request that began before the window counts whole: a little slack for the edges)
    assert engine["judged_running_from"] == "time_average"
    assert 0 < engine["judged_running"] <= concurrency * 1.2, engine
    assert engine["running_time_mean"] == pytest.approx(engine["judged_running"], rel=1e-3)
    assert 0.5 <= verdict["expected_speedup"] / interval["estimate"] <= 2.0, (verdict["expected_speedup"], interval)
