"""`specwatch sweep` against real vLLM servers (the CPU wheel, a tiny random Llama): a baseline
without speculation and the n-gram (k = 4) server, tiers 1, 2, 4, 8, kept short."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from vllm_server import ECHO_PROMPTS

pytestmark = pytest.mark.engine

TIERS = (1, 2, 4, 8)
# Enough work per tier that it lasts a few scrape intervals even at concurrency 8 on the CPU.
REQUESTS = 16
MAX_TOKENS = 48


def test_sweep_baseline_vs_ngram_gives_both_curves_the_crossing_and_the_files(baseline_server, ngram_server, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ECHO_PROMPTS) + "\n")
    out_dir = tmp_path / "sweep"
    r = subprocess.run(
        [sys.executable, "-m", "specwatch", "sweep", "--baseline", baseline_server.url,
         "--speculative", ngram_server.url, "--tiers", ",".join(map(str, TIERS)), "--requests", str(REQUESTS),
         "--warmup", "1", "--max-tokens", str(MAX_TOKENS), "--prompt-file", str(prompts), "--scrape-interval", "0.25",
         "--method", "ngram", "--request-timeout", "120", "--repeat", "1", "-o", str(out_dir), "--json"],
        capture_output=True, text=True, timeout=1200)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    print((out_dir / "sweep.txt").read_text())  # shown with -s: what an operator sees

    # the files are complete and agree with what was printed
    assert json.loads((out_dir / "sweep.json").read_text()) == report
    csv_rows = (out_dir / "sweep.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in csv_rows[1:]] == [str(c) for c in TIERS]
    assert report["schema"] == "specwatch.sweep/2" and report["complete"] and not report["errors"]
    assert [t["concurrency"] for t in report["tiers"]] == list(TIERS)
    assert report["servers"]["baseline"]["model"] == "tiny-llama"
    assert report["servers"]["speculative"]["version"] == "0.32.0"

    tps = {side: {t["concurrency"]: t[side]["output_tokens_per_s"] for t in report["tiers"]}
           for side in ("baseline", "speculative")}
    for t in report["tiers"]:
        for side in ("baseline", "speculative"):
            figures = t[side]
            assert figures["requests_ok"] == REQUESTS and figures["requests_failed"] == 0, (t["concurrency"], side, figures)
            assert figures["output_tokens"] == REQUESTS * MAX_TOKENS  # ignore_eos: every request runs to max tokens
            assert 0 < figures["ttft_p50_s"] <= figures["ttft_p95_s"]
            # chunks that reach the client together (a busy 2-core host) can make a TPOT near 0
            assert 0 <= figures["tpot_p50_s"] <= figures["tpot_p95_s"]
        spec = t["speculative"]
        assert spec["k"] == 4
        assert 1.0 <= spec["acceptance_length"] <= 5.0
        assert t["baseline"]["acceptance_length"] is None
    # the tokens each server generated over a tier (its own counter, read before the first request
    # and after the last) are the tokens the tier's requests received: nothing else ran on it, and
    # the round carries no flag. (Tokens/s need not grow with concurrency here: on two busy CPU
    # cores the API server, not the engine, can bound a tiny model's throughput at every tier.)
    for t in report["tiers"]:
        for side in ("baseline", "speculative"):
            assert t[side]["server_generation_tokens"] == REQUESTS * MAX_TOKENS, (t["concurrency"], side, t[side])
        assert all(r["conditions"][side]["unrequested_tokens"] == 0 for r in t["rounds"] for side in ("baseline", "speculative"))
        assert not any("tokens its requests did not receive" in f for r in t["rounds"] for f in r["flags"]), t["rounds"]
    assert all(v > 0 for side in tps.values() for v in side.values())
    # the running batch over each tier: the time average of the engine's own per-request times
    # (Σ request_inference_time over the tier's span), which counts every request of the tier. Each
    # request's time in the engine lies inside the client's time waiting on it, and the client keeps
    # at most c in flight, so the average lies in (0, c]. The gauge read at in-flight scrapes is kept
    # beside it and is not asserted above 0: on this machine it reads 0 at every scrape of some runs
    # while the tier runs (a tiny model's requests finish between scrapes).
    for t in report["tiers"]:
        c = t["concurrency"]
        for side in ("baseline", "speculative"):
            figures = t[side]
            assert figures["running_from"] == "request_times", (c, side, figures)
            assert 0 < figures["running_mean"] <= c + 1e-6, (c, side, figures)
            gauge = figures["running_gauge_mean"]
            assert gauge is None or 0 <= gauge <= c, (c, side, figures)

    # the crossing is the log-interpolated fall of tokens/s speedup through 1, if it falls in range
    ratios = [(c, tps["speculative"][c] / tps["baseline"][c]) for c in TIERS]
    expected = None
    if ratios[0][1] >= 1:
        for (c0, s0), (c1, s1) in zip(ratios, ratios[1:]):
            if s0 >= 1 > s1:
                a, b = math.log2(c0), math.log2(c1)
                expected = 2 ** (a + (s0 - 1) / (s0 - s1) * (b - a))
                break
    assert report["crossing"]["throughput"] == (pytest.approx(expected) if expected is not None else None)

    # the predicted curve is drawn beside the measured one: fitted (no GPU here), over the tiers
    predicted = report["predicted"]
    assert predicted["basis"] == "fitted" and predicted["k"] == 4
    assert predicted["draft_ratio"] == 0.0 and predicted["draft_ratio_basis"].startswith("ngram")
    assert min(p["concurrency"] for p in predicted["points"]) == 1
    assert max(p["concurrency"] for p in predicted["points"]) == 8
    plot = (out_dir / "sweep.txt").read_text()
    assert "predicted (fitted)" in plot and "output tokens/s by concurrency" in plot
    assert max(len(line) for line in plot.splitlines()) <= 80


def test_the_same_small_sweep_twice_gives_overlapping_intervals(baseline_server, ngram_server, tmp_path):
    """The issue's complaint: two runs of one sweep told opposite stories with the same assurance.
    With rounds and intervals, two runs must agree within their intervals at every tier, and a tier
    whose interval holds 1 must say so rather than pick a side."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ECHO_PROMPTS) + "\n")
    reports = []
    for run in (1, 2):
        out_dir = tmp_path / f"sweep{run}"
        r = subprocess.run(
            [sys.executable, "-m", "specwatch", "sweep", "--baseline", baseline_server.url,
             "--speculative", ngram_server.url, "--tiers", "1,2", "--requests", "4", "--warmup", "1",
             "--max-tokens", "16", "--repeat", "3", "--prompt-file", str(prompts), "--scrape-interval", "0.25",
             "--method", "ngram", "--request-timeout", "120", "-o", str(out_dir), "--json"],
            capture_output=True, text=True, timeout=900)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0, r.stderr
        reports.append(json.loads(r.stdout))
        print((out_dir / "sweep.txt").read_text())
    for report in reports:
        assert report["schema"] == "specwatch.sweep/2" and report["complete"]
        for t in report["tiers"]:
            assert [r["order"] for r in t["rounds"]] == [["baseline", "speculative"], ["speculative", "baseline"],
                                                         ["baseline", "speculative"]]
            interval = t["speedup_interval"]["throughput"]
            assert interval["n"] == 3 and interval["low"] < interval["estimate"] < interval["high"]
            expected = "pays" if interval["low"] > 1 else "costs" if interval["high"] < 1 else "within_noise"
            assert t["verdict"]["throughput"] == expected
            if expected == "within_noise":
                assert t["concurrency"] in report["unresolved_tiers"]
            # the per-round speedups are what the interval was built from: each round's own ratio
            ratios = [r["speculative"]["output_tokens_per_s"] / r["baseline"]["output_tokens_per_s"] for r in t["rounds"]]
            assert min(ratios) <= interval["estimate"] <= max(ratios)
    for first, second in zip(reports[0]["tiers"], reports[1]["tiers"]):
        a, b = first["speedup_interval"]["throughput"], second["speedup_interval"]["throughput"]
        assert a["low"] <= b["high"] and b["low"] <= a["high"], (first["concurrency"], a, b)
