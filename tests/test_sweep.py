"""`specwatch sweep` without an engine: crossings on crafted curves, --from-bench on crafted files,
the load generator against a fake OpenAI-compatible streaming server on loopback, and failures."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from specwatch.sweep import loadgen
from specwatch import sweep as sw
from specwatch.commands.options import ExitCode
from specwatch.commands.sweep import add_arguments as add_sweep_arguments, run as run_sweep
from specwatch.sweep import crossover_marker, load_sweep

# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def parse(argv: list[str]):
    import argparse

    p = argparse.ArgumentParser()
    add_sweep_arguments(p)
    return p.parse_args(argv)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    code = run_sweep(parse(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def log_interpolated_crossing(c0: float, s0: float, c1: float, s1: float) -> float:
    """Written out independently of sweep.crossing_point: S − 1 linear in log2(c), solved for 0."""
    a, b = math.log2(c0), math.log2(c1)
    slope = (s1 - s0) / (b - a)
    return 2 ** (a + (1.0 - s0) / slope)


# --------------------------------------------------------------------------------------------------
# Crossings on crafted curves
# --------------------------------------------------------------------------------------------------


def test_crossing_interpolates_in_log_concurrency_between_the_tiers_around_it():
    points = [(1, 1.8), (2, 1.5), (4, 1.2), (8, 0.9), (16, 0.6)]
    x, state = sw.crossing_point(points)
    assert state == sw.CROSSES
    assert x == pytest.approx(log_interpolated_crossing(4, 1.2, 8, 0.9))
    # 1.2 → 0.9 is two thirds of the way to 1 at 4 → 8 in log2: 2^(2 + 2/3)
    assert x == pytest.approx(2 ** (2 + 2 / 3))


def test_crossing_takes_the_first_fall_and_skips_missing_points():
    points = [(1, 1.4), (2, None), (4, 0.8), (8, 1.1), (16, 0.7)]
    x, state = sw.crossing_point(points)
    assert state == sw.CROSSES
    assert x == pytest.approx(log_interpolated_crossing(1, 1.4, 4, 0.8))


def test_crossing_states_when_the_curves_do_not_cross():
    assert sw.crossing_point([(1, 1.3), (4, 1.1), (16, 1.0)]) == (None, sw.PAYS_THROUGHOUT)
    assert sw.crossing_point([(1, 0.9), (4, 1.2), (16, 0.8)]) == (None, sw.NEVER_PAYS)
    assert sw.crossing_point([(1, None), (2, None)]) == (None, sw.NO_DATA)
    assert sw.crossing_point([]) == (None, sw.NO_DATA)
    # exactly break-even at a tier and below after: the crossing is that tier
    assert sw.crossing_point([(1, 1.2), (2, 1.0), (4, 0.5)])[0] == pytest.approx(2.0)


def side(tps: float, tpot_ms: float, length: float | None = None) -> dict:
    return {"output_tokens_per_s": tps, "tpot_p50_s": tpot_ms / 1000, "acceptance_length": length}


def test_crossings_from_tiers_use_tokens_per_s_and_inverted_tpot():
    tiers = [
        {"concurrency": 1, "baseline": side(100, 10), "speculative": side(180, 5.5, 2.5)},
        {"concurrency": 4, "baseline": side(380, 10.5), "speculative": side(400, 9.8, 2.4)},
        {"concurrency": 16, "baseline": side(1400, 11.4), "speculative": side(1000, 15.0, 2.4)},
    ]
    values, states = sw.crossings(tiers)
    assert values["throughput"] == pytest.approx(log_interpolated_crossing(4, 400 / 380, 16, 1000 / 1400))
    assert values["tpot"] == pytest.approx(log_interpolated_crossing(4, 10.5 / 9.8, 16, 11.4 / 15.0))
    assert states == {"throughput": sw.CROSSES, "tpot": sw.CROSSES}


# --------------------------------------------------------------------------------------------------
# --from-bench on crafted vllm bench serve --save-result files
# --------------------------------------------------------------------------------------------------

BASE_CURVE = {1: (95.0, 10.2), 2: (186.0, 10.4), 4: (360.0, 10.9), 8: (690.0, 11.4), 16: (1290.0, 12.1)}
SPEC_CURVE = {1: (210.0, 4.6), 2: (380.0, 5.0), 4: (560.0, 6.9), 8: (640.0, 12.1), 16: (900.0, 17.0)}


def bench_result(concurrency: int, tps: float, tpot_ms: float, spec: bool, *, date: str = "20250101-120000",
                 drop: tuple[str, ...] = ()) -> dict:
    """A result object with the fields vllm.md §4 lists for `vllm bench serve --save-result`."""
    data = {
        "date": date, "endpoint_type": "openai", "backend": "vllm", "label": None, "model_id": "meta-llama/Llama-3.1-8B",
        "tokenizer_id": "meta-llama/Llama-3.1-8B", "num_prompts": 200, "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": concurrency, "duration": 200 * 128 / tps, "completed": 200, "failed": 0,
        "total_input_tokens": 200 * 300, "total_output_tokens": 200 * 128, "request_throughput": tps / 128,
        "request_goodput": None, "output_throughput": tps, "total_token_throughput": tps * (428 / 128),
        "max_output_tokens_per_s": tps * 1.2, "max_concurrent_requests": concurrency,
        "mean_ttft_ms": 40.0, "median_ttft_ms": 38.0, "std_ttft_ms": 5.0, "p99_ttft_ms": 60.0,
        "mean_tpot_ms": tpot_ms * 1.02, "median_tpot_ms": tpot_ms, "std_tpot_ms": 0.5, "p99_tpot_ms": tpot_ms * 1.5,
        "mean_itl_ms": tpot_ms, "median_itl_ms": tpot_ms, "std_itl_ms": 0.4, "p99_itl_ms": tpot_ms * 2,
    }
    if spec:
        data |= {"spec_decode_acceptance_rate": 41.0, "spec_decode_acceptance_length": 2.64,
                 "spec_decode_num_drafts": 10000, "spec_decode_draft_tokens": 40000,
                 "spec_decode_accepted_tokens": 16400,
                 "spec_decode_per_position_acceptance_rates": [0.62, 0.45, 0.33, 0.24]}
    for key in drop:
        data.pop(key, None)
    return data


def write_bench_dirs(tmp_path: Path) -> tuple[Path, Path]:
    base_dir, spec_dir = tmp_path / "base", tmp_path / "spec"
    base_dir.mkdir()
    spec_dir.mkdir()
    for c, (tps, tpot) in BASE_CURVE.items():
        (base_dir / f"vllm-infqps-concurrency{c}-Llama-3.1-8B.json").write_text(json.dumps(bench_result(c, tps, tpot, False)))
    for c, (tps, tpot) in SPEC_CURVE.items():
        (spec_dir / f"vllm-infqps-concurrency{c}-Llama-3.1-8B.json").write_text(json.dumps(bench_result(c, tps, tpot, True)))
    return base_dir, spec_dir


def direct_crossings() -> tuple[float, float]:
    """The crossings computed straight from the crafted numbers."""
    tiers = sorted(BASE_CURVE)
    throughput = [(c, SPEC_CURVE[c][0] / BASE_CURVE[c][0]) for c in tiers]
    tpot = [(c, BASE_CURVE[c][1] / SPEC_CURVE[c][1]) for c in tiers]

    def first_fall(points):
        for (c0, s0), (c1, s1) in zip(points, points[1:]):
            if s0 >= 1 > s1:
                return log_interpolated_crossing(c0, s0, c1, s1)
        raise AssertionError("the crafted curves cross")

    return first_fall(throughput), first_fall(tpot)


def test_from_bench_gives_the_crossing_a_direct_computation_gives(tmp_path):
    base_dir, spec_dir = write_bench_dirs(tmp_path)
    out_dir = tmp_path / "out"
    code, stdout, stderr = run_cli(["--from-bench", str(base_dir), str(spec_dir), "-o", str(out_dir), "--json"])
    assert code == 0, stderr
    report = json.loads(stdout)
    throughput, tpot = direct_crossings()
    assert 4 < throughput < 8 and 4 < tpot < 8
    assert report["crossing"]["throughput"] == pytest.approx(throughput)
    assert report["crossing"]["tpot"] == pytest.approx(tpot)
    assert report["schema"] == "specwatch.sweep/2" and report["source"] == "bench" and report["complete"]
    assert [t["concurrency"] for t in report["tiers"]] == sorted(BASE_CURVE)
    tier4 = report["tiers"][2]
    assert tier4["baseline"]["tpot_p50_s"] == pytest.approx(BASE_CURVE[4][1] / 1000)
    assert tier4["baseline"]["ttft_p50_s"] == pytest.approx(0.038)
    assert tier4["baseline"]["tpot_p95_s"] is None  # the default bench percentiles have no p95
    assert tier4["speculative"]["acceptance_length"] == 2.64
    assert tier4["speculative"]["acceptance_rate"] == pytest.approx(0.41)
    assert tier4["speculative"]["k"] == 4
    assert tier4["speculative"]["requests_ok"] == 200 and tier4["speculative"]["requests_failed"] == 0
    # the written files hold the same report, and the CSV one row per round (one file a tier: one round)
    assert json.loads((out_dir / "sweep.json").read_text()) == report
    rows = (out_dir / "sweep.csv").read_text().splitlines()
    assert rows[0].startswith("concurrency,round,order,baseline_requests_ok")
    assert [r.split(",")[0] for r in rows[1:]] == [str(c) for c in sorted(BASE_CURVE)]
    # no --gpu/--model: the predicted curve is fitted from the measured points, and says so
    predicted = report["predicted"]
    assert predicted["basis"] == "fitted" and predicted["k"] == 4
    assert predicted["acceptance_length"] == pytest.approx(2.64)
    assert len(predicted["points"]) >= len(BASE_CURVE)
    assert (out_dir / "sweep.txt").read_text().count("predicted (fitted)") >= 1


def test_from_bench_with_gpu_and_model_draws_the_datasheet_curve(tmp_path):
    base_dir, spec_dir = write_bench_dirs(tmp_path)
    code, stdout, stderr = run_cli(["--from-bench", str(base_dir), str(spec_dir), "-o", str(tmp_path / "o"),
                                    "--gpu", "H100", "--model", "Llama-3.1-8B", "--method", "eagle"])
    assert code == 0, stderr
    report = load_sweep(tmp_path / "o")
    predicted = report["predicted"]
    assert predicted["basis"] == "datasheet" and "Llama-3.1-8B" in predicted["note"]
    # an EAGLE-1 head on Llama-3.1-8B, from its config.json: one decoder layer (attention
    # 4096·(4096 + 2·1024 + 4096), MLP 3·4096·14336), the 2·4096 → 4096 FC and the 128,256 × 4096 LM
    # head it reads, over the 8.03 B weights of a plain step (r was a flat 0.05 before)
    layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336
    assert predicted["draft_ratio"] == pytest.approx((layer + 2 * 4096**2 + 128256 * 4096) / 8.03e9, rel=0.01)
    assert predicted["draft_ratio_basis"].startswith("eagle: derived from Llama-3.1-8B's shapes")
    # the prediction at each point is what `predict` says for the same configuration
    from specwatch.advice.predict import predict

    point = next(p for p in predicted["points"] if p["concurrency"] == 4.0)
    said = predict("H100", model="Llama-3.1-8B", batch=4, k=4, acceptance_length=2.64, method="eagle",
                   context=predicted["context_per_sequence"])
    assert point["speedup"] == pytest.approx(said["verdict"]["expected_speedup"], rel=1e-9)
    # the text output holds the plot, no wider than 80 columns, with the predicted curve's legend
    assert "predicted (datasheet)" in stdout
    assert max(len(line) for line in stdout.splitlines()) <= 80


def test_bad_and_partial_bench_files_are_reported_and_the_rest_kept(tmp_path):
    base_dir, spec_dir = write_bench_dirs(tmp_path)
    (base_dir / "broken.json").write_text("{not json")
    (spec_dir / "vllm-infqps-concurrency16-Llama-3.1-8B.json").write_text(
        json.dumps(bench_result(16, 900.0, 17.0, True, drop=("max_concurrency",))))
    (spec_dir / "notes.json").write_text(json.dumps({"hello": "world", "max_concurrency": 2}))
    code, stdout, stderr = run_cli(["--from-bench", str(base_dir), str(spec_dir), "-o", str(tmp_path / "o"), "--json"])
    assert code == ExitCode.INCOMPLETE
    report = json.loads(stdout)
    assert not report["complete"]
    errors = "\n".join(report["errors"])
    assert "broken.json: not valid JSON" in errors
    assert "no max_concurrency (run vllm bench serve with --max-concurrency N)" in errors
    assert "notes.json: not a vllm bench serve result (missing completed, output_throughput, median_tpot_ms)" in errors
    assert "concurrency 16 has no speculative result" in errors
    assert "broken.json" in stderr
    # the good tiers are all there, and the crossing (between 4 and 8) still comes out
    assert [t["concurrency"] for t in report["tiers"]] == [1, 2, 4, 8, 16]
    assert report["tiers"][-1]["speculative"] is None
    assert report["crossing"]["throughput"] == pytest.approx(direct_crossings()[0])
    assert json.loads((tmp_path / "o" / "sweep.json").read_text())["errors"] == report["errors"]


def test_two_results_for_one_tier_keep_the_later_in_load_bench_dir(tmp_path):
    base_dir, spec_dir = write_bench_dirs(tmp_path)
    (spec_dir / "rerun.json").write_text(json.dumps(bench_result(4, 999.0, 3.0, True, date="20250102-090000")))
    tiers, errors = sw.load_bench_dir(spec_dir)
    assert tiers[4]["output_tokens_per_s"] == 999.0
    assert any("2 results for concurrency 4" in e and "kept the later, rerun.json" in e for e in errors)


def test_repeated_bench_files_of_one_tier_are_its_rounds(tmp_path):
    base_dir, spec_dir = write_bench_dirs(tmp_path)
    # two more rounds of tier 4 on each side, dated later; the speculative ones unevenly fast
    for i, (b, s) in enumerate([(100.0, 130.0), (104.0, 120.0)]):
        (base_dir / f"again{i}.json").write_text(json.dumps(bench_result(4, b, 10.0, False, date=f"2025010{i + 2}-090000")))
        (spec_dir / f"again{i}.json").write_text(json.dumps(bench_result(4, s, 8.0, True, date=f"2025010{i + 2}-090000")))
    first_base, first_spec = BASE_CURVE[4][0], SPEC_CURVE[4][0]
    report = sw.record_from_bench(base_dir, spec_dir).report(sw.PredictionInputs())
    assert not report["errors"] and report["complete"]
    tier = next(t for t in report["tiers"] if t["concurrency"] == 4)
    assert [r["round"] for r in tier["rounds"]] == [1, 2, 3]
    # oldest first, paired by position: the i-th baseline file with the i-th speculative one
    assert [r["baseline"]["output_tokens_per_s"] for r in tier["rounds"]] == [first_base, 100.0, 104.0]
    assert [r["speculative"]["output_tokens_per_s"] for r in tier["rounds"]] == [first_spec, 130.0, 120.0]
    ratios = [first_spec / first_base, 1.3, 120.0 / 104.0]
    assert tier["speedup"]["throughput"] == pytest.approx(math.prod(ratios) ** (1 / 3))
    assert tier["speedup_interval"]["throughput"]["n"] == 3
    # the other tiers have one file a side: one round, no interval
    assert all(t["verdict"]["throughput"] == sw.ONE_ROUND for t in report["tiers"] if t["concurrency"] != 4)


def test_a_missing_bench_folder_ends_with_one_line_and_writes_nothing(tmp_path):
    base_dir, _ = write_bench_dirs(tmp_path)
    code, _, stderr = run_cli(["--from-bench", str(base_dir), str(tmp_path / "nope"), "-o", str(tmp_path / "o")])
    assert code == ExitCode.UNREADABLE
    assert stderr.strip().splitlines() == [
        f"specwatch sweep: the speculative folder {tmp_path / 'nope'}: not a folder of vllm bench serve "
        "--save-result files"]
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------------
# load_sweep and the TUI's marker
# --------------------------------------------------------------------------------------------------


def test_load_sweep_rejects_what_is_not_a_sweep(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "specwatch.check/1"}))
    with pytest.raises(sw.SweepFileError, match="not a specwatch sweep"):
        load_sweep(bad)
    bad.write_text("[")
    with pytest.raises(sw.SweepFileError, match="not valid JSON"):
        load_sweep(bad)
    with pytest.raises(sw.SweepFileError, match="cannot read the sweep file"):
        load_sweep(tmp_path / "missing.json")
    bad.write_text(json.dumps({"schema": sw.SCHEMA, "tiers": [{"c": 1}], "crossing": {"throughput": None, "tpot": None}}))
    with pytest.raises(sw.SweepFileError, match="tiers"):
        load_sweep(bad)


def test_crossover_marker_places_the_current_concurrency():
    sweep = {"tiers": [{"concurrency": c} for c in (1, 2, 4, 8, 16)],
             "crossing": {"throughput": 5.6, "tpot": 6.0}, "crossing_state": {"throughput": "crosses"}}
    assert crossover_marker(sweep, 3) == "sweep crossover ≈ 5.6, now 3, below it: speculation paid here"
    assert crossover_marker(sweep, 12) == "sweep crossover ≈ 5.6, now 12, above it: speculation cost throughput here"
    assert crossover_marker(sweep, None) == "sweep crossover ≈ 5.6 (now unknown)"
    flat = {"tiers": sweep["tiers"], "crossing": {"throughput": None, "tpot": None},
            "crossing_state": {"throughput": "pays_throughout"}}
    assert crossover_marker(flat, 32) == "sweep: speculation paid at every tier (1–16), now 32, beyond the measured range"
    never = dict(flat, crossing_state={"throughput": "never_pays"})
    assert crossover_marker(never, 2) == "sweep: speculation cost at every tier (1–16), now 2"


# --------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------


def test_synthetic_sets_are_deterministic_and_distinct():
    for name in loadgen.PROMPT_SET_NAMES:
        a, b = loadgen.synthetic_prompts(name, 12, seed=3), loadgen.synthetic_prompts(name, 12, seed=3)
        assert a == b and all(p.text for p in a)
    assert loadgen.synthetic_prompts("echo", 4) != loadgen.synthetic_prompts("echo", 4, seed=1)
    assert "Incident log" in loadgen.synthetic_prompts("echo", 1)[0].text
    assert "```python" in loadgen.synthetic_prompts("code", 1)[0].text
    mixed = loadgen.synthetic_prompts("mixed", 3)
    assert "Incident log" in mixed[0].text and "```python" in mixed[1].text
    with pytest.raises(ValueError, match="unknown prompt set"):
        loadgen.synthetic_prompts("poetry", 3)


def test_prompt_files_jsonl_messages_and_sharegpt(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("\n".join([
        json.dumps({"prompt": "hello there", "max_tokens": 7}),
        json.dumps("a bare string"),
        "",
        json.dumps({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}),
    ]))
    prompts = loadgen.load_prompt_file(jsonl)
    assert [p.text for p in prompts] == ["hello there", "a bare string", None]
    assert prompts[0].max_tokens == 7
    assert prompts[2].as_messages() == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert prompts[2].as_text() == "system: be brief\nuser: hi\nassistant:"
    assert prompts[1].as_messages() == [{"role": "user", "content": "a bare string"}]

    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "4"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "Name a colour."}]},
    ]))
    prompts = loadgen.load_prompt_file(share)
    assert [p.as_messages()[0]["content"] for p in prompts] == ["What is 2+2?", "Name a colour."]
    assert len(loadgen.load_prompt_file(share, limit=1)) == 1


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "ok"}\n{"prompt": ', "line 2: not valid JSON"),
    ('{"prompt": "ok"}\n{"nothing": 1}', "line 2: no 'prompt', 'messages' or 'conversations' field"),
    ('{"prompt": "ok", "max_tokens": -3}', "line 1: max_tokens must be an integer"),
    ('{"messages": [{"role": "user"}]}', "line 1: each message needs a string 'role' and a string 'content'"),
    ("\n\n", "holds no usable prompt"),
])
def test_bad_prompt_files_name_the_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(loadgen.PromptFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loadgen.load_prompt_file(path)


def test_a_bad_prompt_file_ends_the_sweep_with_a_message(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{oops")
    code, _, stderr = run_cli(["--baseline", "127.0.0.1:9", "--speculative", "127.0.0.1:9",
                               "--prompt-file", str(path), "-o", str(tmp_path / "o")])
    assert code == ExitCode.UNREADABLE and "bad.jsonl line 1: not valid JSON" in stderr


# --------------------------------------------------------------------------------------------------
# One streamed request, on a scripted transport with a scripted clock: exact timings
# --------------------------------------------------------------------------------------------------


class ScriptedClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sse(payload: dict | str) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


def scripted_stream(clock: ScriptedClock, steps: list[tuple[float, bytes]]):
    """A response body that advances the clock by each step's delay before yielding its bytes."""

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):
            for delay, data in steps:
                clock.now += delay
                yield data

    return Body()


def completions_chunk(text: str, usage: dict | None = None) -> dict:
    chunk: dict = {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text}]}
    if usage is not None:
        chunk = {"id": "x", "object": "text_completion", "choices": [], "usage": usage}
    return chunk


async def one_request(steps_for, settings=None, status=200, raise_exc=None):
    clock = ScriptedClock()
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        if raise_exc is not None:
            raise raise_exc
        return httpx.Response(status, stream=scripted_stream(clock, steps_for(clock)),
                              headers={"content-type": "text/event-stream"})

    settings = settings or loadgen.RequestSettings(model="m", max_tokens=9)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        result = await loadgen.stream_request(client, "http://fake", loadgen.Prompt(text="hi"), 0, settings, clock)
    return result, seen


def test_ttft_and_tpot_come_from_chunk_times_and_the_usage_token_count():
    # first token after 0.25 s, then chunks of several tokens (as under speculation) 0.04 s apart;
    # usage says 9 tokens in 4 chunks
    steps = lambda clock: [(0.25, sse(completions_chunk("a"))), (0.04, sse(completions_chunk("bcd"))),
                           (0.04, sse(completions_chunk("ef"))), (0.04, sse(completions_chunk("ghi"))),
                           (0.01, sse(completions_chunk("", usage={"prompt_tokens": 5, "completion_tokens": 9}))),
                           (0.0, sse("[DONE]"))]
    result, seen = asyncio.run(one_request(steps))
    assert result.ok and result.failure is None
    assert result.ttft_s == pytest.approx(0.25)
    assert result.output_tokens == 9 and result.chunks == 4 and result.prompt_tokens == 5
    assert result.tpot_s == pytest.approx(0.12 / 8)
    body = seen[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 9 and body["prompt"] == "hi" and body["ignore_eos"] is True


def test_without_usage_the_chunks_are_counted():
    steps = lambda clock: [(0.1, sse(completions_chunk("a"))), (0.05, sse(completions_chunk("b"))),
                           (0.05, sse(completions_chunk("c"))), (0.0, sse("[DONE]"))]
    result, _ = asyncio.run(one_request(steps))
    assert result.output_tokens == 3 and result.tpot_s == pytest.approx(0.05)


def test_tokens_that_decode_to_no_text_yet_are_still_timed_and_counted():
    # a tiny random model's tokens often decode to nothing (partial UTF-8, special tokens): vLLM
    # still streams a chunk per step with "text": "", and usage counts the tokens
    steps = lambda clock: [(0.3, sse(completions_chunk(""))), (0.05, sse(completions_chunk(""))),
                           (0.05, sse(completions_chunk("z"))),
                           (0.01, sse({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})),
                           (0.0, sse(completions_chunk("", usage={"prompt_tokens": 2, "completion_tokens": 3}))),
                           (0.0, sse("[DONE]"))]
    result, _ = asyncio.run(one_request(steps))
    assert result.ok and result.failure is None
    assert result.output_tokens == 3 and result.chunks == 3
    assert result.ttft_s == pytest.approx(0.3) and result.tpot_s == pytest.approx(0.05)


def test_chat_requests_send_messages_and_read_deltas():
    steps = lambda clock: [(0.2, sse({"choices": [{"delta": {"role": "assistant", "content": ""}}]})),
                           (0.1, sse({"choices": [{"delta": {"content": "x"}}]})),
                           (0.1, sse({"choices": [{"delta": {"content": "y"}}]})), (0.0, sse("[DONE]"))]
    settings = loadgen.RequestSettings(model="m", api="chat", max_tokens=2, temperature=0.7)
    result, seen = asyncio.run(one_request(steps, settings))
    assert result.ok and result.ttft_s == pytest.approx(0.3) and result.output_tokens == 2
    assert seen[0]["messages"] == [{"role": "user", "content": "hi"}] and seen[0]["temperature"] == 0.7


@pytest.mark.parametrize("steps, status, exc, kind, words", [
    (lambda c: [(0.0, b'{"error": "overloaded"}')], 503, None, "http_503", "HTTP 503: {\"error\": \"overloaded\"}"),
    (lambda c: [(0.1, sse(completions_chunk("a"))), (0.1, sse({"error": {"message": "engine died"}}))], 200, None,
     loadgen.FAIL_STREAM, "mid-stream: engine died"),
    (lambda c: [(0.1, sse(completions_chunk("a")))], 200, None, loadgen.FAIL_INCOMPLETE, "before [DONE]"),
    (lambda c: [(0.1, b"data: {broken\n\n")], 200, None, loadgen.FAIL_STREAM, "unreadable stream chunk"),
    (lambda c: [(0.0, sse("[DONE]"))], 200, None, loadgen.FAIL_EMPTY, "no output token"),
    (lambda c: [], 200, httpx.ReadTimeout("slow"), loadgen.FAIL_TIMEOUT, "no answer within 120 s"),
    (lambda c: [], 200, httpx.ConnectError("[Errno 111] Connection refused"), loadgen.FAIL_CONNECTION,
     "connection refused"),
])
def test_failures_become_counted_results(steps, status, exc, kind, words):
    result, _ = asyncio.run(one_request(steps, status=status, raise_exc=exc))
    assert not result.ok and result.failure == kind
    assert words in result.message
    assert result.tpot_s is None


def test_a_runaway_response_is_cut_at_the_byte_cap():
    steps = lambda clock: [(0.0, sse(completions_chunk("x" * 500))) for _ in range(50)]
    settings = loadgen.RequestSettings(model="m", max_response_bytes=4000)
    result, _ = asyncio.run(one_request(steps, settings))
    assert result.failure == loadgen.FAIL_TOO_LARGE


# --------------------------------------------------------------------------------------------------
# A fake OpenAI-compatible streaming server on loopback
# --------------------------------------------------------------------------------------------------


@dataclass
class FakeBehaviour:
    first_token_delay_s: float = 0.02
    chunk_delay_s: float = 0.005
    tokens_per_chunk: int = 1  # > 1 acts like speculation committing several tokens per step
    k: int | None = None  # exposes spec-decode counters in /metrics when set
    fail_marker: str | None = None  # prompts containing it get HTTP 500
    die_after_requests: int | None = None  # stop listening (and drop connections) after that many
    arrivals: list | None = None  # a log shared by several servers: each appends `name` per request
    name: str = ""


@dataclass
class FakeState:
    bodies: list[dict] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    generated: int = 0
    drafts: int = 0
    accepted: int = 0


class FakeOpenAIServer:
    """Enough of vLLM's HTTP surface for the sweep: /v1/models, /health, /metrics, and streamed
    /v1/completions and /v1/chat/completions (HTTP/1.1 keep-alive, chunked transfer)."""

    def __init__(self, behaviour: FakeBehaviour) -> None:
        self.behaviour = behaviour
        self.state = FakeState()
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.base_events.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.dead = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._die(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _start(self) -> None:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _die(self) -> None:
        self.dead = True
        if self.server is not None:
            self.server.close()
        for w in list(self.writers):
            w.transport.abort()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while not self.dead:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                    await self._complete(writer, json.loads(body), chat=path.endswith("chat/completions"))
                elif path == "/v1/models":
                    await self._send(writer, 200, json.dumps({"data": [{"id": "fake-model"}]}), "application/json")
                elif path == "/health":
                    await self._send(writer, 200, "", "text/plain")
                elif path == "/metrics":
                    await self._send(writer, 200, self._metrics(), "text/plain; version=0.0.4")
                else:
                    await self._send(writer, 404, "not found", "text/plain")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    async def _send(self, writer, status: int, text: str, content_type: str) -> None:
        data = text.encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                     + data)
        await writer.drain()

    def _metrics(self) -> str:
        s = self.state
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="fake-model"}} {s.in_flight}',
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{engine="0",model_name="fake-model"}} {s.generated}',
        ]
        k = self.behaviour.k
        if k:
            per_pos = [s.accepted // k + (1 if i < s.accepted % k else 0) for i in range(k)]
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="fake-model"}} {s.drafts}',
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="fake-model"}} {s.drafts * k}',
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="fake-model"}} {s.accepted}',
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
            ] + [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="fake-model",'
                 f'position="{i}"}} {v}' for i, v in enumerate(per_pos)]
        return "\n".join(lines) + "\n"

    async def _complete(self, writer, body: dict, chat: bool) -> None:
        b, s = self.behaviour, self.state
        s.bodies.append(body)
        if b.arrivals is not None:
            b.arrivals.append(b.name)
        if b.die_after_requests is not None and len(s.bodies) > b.die_after_requests:
            # let the requests already streaming finish, so the count that succeeded is exact
            while s.in_flight:
                await asyncio.sleep(0.005)
            await self._die()
            return
        prompt = body.get("prompt") or json.dumps(body.get("messages"))
        if b.fail_marker and b.fail_marker in prompt:
            await self._send(writer, 500, '{"error": "internal"}', "application/json")
            return
        s.in_flight += 1
        s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

            def frame(payload: str) -> bytes:
                data = f"data: {payload}\n\n".encode()
                return f"{len(data):x}\r\n".encode() + data + b"\r\n"

            await asyncio.sleep(b.first_token_delay_s)
            left = int(body["max_tokens"])
            while left > 0:
                n = min(b.tokens_per_chunk, left)
                left -= n
                s.generated += n
                if b.k:
                    s.drafts += 1
                    s.accepted += n - 1
                text = {"delta": {"content": "x" * n}} if chat else {"text": "x" * n}
                writer.write(frame(json.dumps({"choices": [{"index": 0, **text}]})))
                await writer.drain()
                if left:
                    await asyncio.sleep(b.chunk_delay_s)
            usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": int(body["max_tokens"])}
            writer.write(frame(json.dumps({"choices": [], "usage": usage})) + frame("[DONE]") + b"0\r\n\r\n")
            await writer.drain()
        finally:
            s.in_flight -= 1


def test_closed_loop_keeps_the_concurrency_and_counts_failures_without_raising():
    prompts = [loadgen.Prompt(text=f"prompt {i}" + (" BOOM" if i == 2 else "")) for i in range(5)]
    with FakeOpenAIServer(FakeBehaviour(fail_marker="BOOM", first_token_delay_s=0.05)) as server:
        async def go():
            async with httpx.AsyncClient() as client:
                plan = loadgen.TierPlan(concurrency=3, requests=10, warmup=2)
                return await loadgen.run_tier(client, server.url, prompts, plan,
                                              loadgen.RequestSettings(model="fake-model", max_tokens=6))

        run = asyncio.run(go())
    assert server.state.max_in_flight == 3
    # warm-up took prompts 0 and 1; the measured ten are 2,3,4,0,1,2,3,4,0,1 → prompt 2 twice
    # (three connections race, so the server may see them in another order)
    assert sorted(b["prompt"] for b in server.state.bodies) == sorted(prompts[i % 5].text for i in range(12))
    stats = loadgen.tier_stats(run)
    assert stats.requests_ok == 8 and stats.requests_failed == 2
    assert stats.failures == {"http_500": 2}
    assert "HTTP 500" in stats.first_failure
    assert stats.output_tokens == 8 * 6
    assert stats.tpot_p50_s is not None and stats.ttft_p50_s >= 0.05  # TTFT cannot beat the server's delay
    assert not run.server_dead


def test_a_server_that_dies_mid_tier_ends_it_early():
    prompts = loadgen.synthetic_prompts("open", 4)
    with FakeOpenAIServer(FakeBehaviour(die_after_requests=5)) as server:
        async def go():
            async with httpx.AsyncClient() as client:
                return await loadgen.run_tier(client, server.url, prompts,
                                              loadgen.TierPlan(concurrency=2, requests=200, warmup=0),
                                              loadgen.RequestSettings(model="fake-model", max_tokens=4, timeout_s=10))

        run = asyncio.run(go())
    assert run.server_dead and "stopped answering" in run.dead_message
    stats = loadgen.tier_stats(run)
    assert stats.requests_ok == 5
    assert stats.requests_failed < 20  # the dead server was noticed, not hammered 195 times
    assert set(stats.failures) <= {loadgen.FAIL_CONNECTION, loadgen.FAIL_INCOMPLETE}


def test_sweep_against_two_fake_servers_writes_complete_files(tmp_path):
    baseline = FakeOpenAIServer(FakeBehaviour(chunk_delay_s=0.004))
    speculative = FakeOpenAIServer(FakeBehaviour(chunk_delay_s=0.006, tokens_per_chunk=3, k=3))
    out_dir = tmp_path / "o"
    with baseline, speculative:
        code, stdout, stderr = run_cli([
            "--baseline", baseline.url, "--speculative", speculative.url, "--tiers", "1,2,4",
            "--requests", "6", "--warmup", "1", "--max-tokens", "12", "--prompts", "echo",
            "--scrape-interval", "0.05", "--repeat", "2", "-o", str(out_dir), "--json"])
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["complete"] and report["stopped"] is None and report["source"] == "live"
    assert [t["concurrency"] for t in report["tiers"]] == [1, 2, 4]
    # both servers got the same prompts in the same order with the same max tokens
    assert sorted(b["prompt"] for b in baseline.state.bodies) == sorted(b["prompt"] for b in speculative.state.bodies)
    # at concurrency 1 (the first 1 + 6 requests) nothing races: the order is the same too
    assert [b["prompt"] for b in baseline.state.bodies[:7]] == [b["prompt"] for b in speculative.state.bodies[:7]]
    assert {b["max_tokens"] for b in baseline.state.bodies + speculative.state.bodies} == {12}
    # one warm-up request per tier and side, before its first round only
    assert len(baseline.state.bodies) == 3 * (1 + 2 * 6)
    for tier in report["tiers"]:
        assert [r["order"] for r in tier["rounds"]] == [["baseline", "speculative"], ["speculative", "baseline"]]
        for name in sw.SIDES:
            figures = tier[name]
            assert figures["requests_ok"] == 2 * 6 and figures["requests_failed"] == 0
            assert figures["output_tokens"] == 2 * 6 * 12
            for r in tier["rounds"]:
                assert r[name]["requests_ok"] == 6
                assert r["conditions"][name]["requests_failed"] == 0
            for key in ("tpot_p50_s", "tpot_p95_s", "ttft_p50_s", "ttft_p95_s", "output_tokens_per_s"):
                assert figures[key] is not None and figures[key] > 0, (name, key)
        # the fake speculative server commits 3 tokens per step with k = 3: L = 1 + 2/1 per draft,
        # except the last, shorter chunk of each request (12 = 4 × 3: none here)
        assert tier["speculative"]["acceptance_length"] == pytest.approx(3.0)
        assert tier["speculative"]["k"] == 3
        assert tier["baseline"]["acceptance_length"] is None
    assert report["servers"]["baseline"]["model"] == "fake-model"
    assert report["predicted"]["basis"] == "fitted"
    assert "method unknown: priced as a draft head" in report["predicted"]["draft_ratio_basis"]
    files = {p.name for p in out_dir.iterdir()}
    assert {"sweep.json", "sweep.csv", "sweep.txt"} <= files
    assert len((out_dir / "sweep.csv").read_text().splitlines()) == 1 + 3 * 2  # one row per round
    assert "tiers 1,2,4" in stderr and "[speculative] concurrency 4: 6 ok, 0 failed" in stderr


def test_a_server_dying_mid_sweep_stops_it_and_keeps_the_partial_results(tmp_path):
    baseline = FakeOpenAIServer(FakeBehaviour())
    # the speculative server serves tier 1 (4 + 1 warm-up) and part of tier 2, then dies
    speculative = FakeOpenAIServer(FakeBehaviour(tokens_per_chunk=2, k=2, die_after_requests=7))
    out_dir = tmp_path / "o"
    with baseline, speculative:
        code, stdout, stderr = run_cli([
            "--baseline", baseline.url, "--speculative", speculative.url, "--tiers", "1,2,4",
            "--requests", "4", "--warmup", "1", "--max-tokens", "6", "--scrape-interval", "0.05",
            "--request-timeout", "10", "--repeat", "1", "-o", str(out_dir)])
    assert code == ExitCode.INCOMPLETE
    assert "stopped early: speculative: the server at" in stderr and "stopped answering" in stderr
    report = load_sweep(out_dir)
    assert not report["complete"]
    assert [t["concurrency"] for t in report["tiers"]] == [1, 2]
    assert report["tiers"][0]["speculative"]["requests_ok"] == 4
    partial = report["tiers"][1]["speculative"]
    assert partial["requests_failed"] > 0 and partial["requests_ok"] < 4
    assert "stopped early" in (out_dir / "sweep.txt").read_text()
    assert "stopped early" in stdout  # the plot and table are printed with what was measured


def test_an_unreachable_server_ends_the_sweep_before_it_starts(tmp_path):
    with FakeOpenAIServer(FakeBehaviour()) as baseline:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed_port = s.getsockname()[1]
        code, _, stderr = run_cli(["--baseline", baseline.url, "--speculative", f"127.0.0.1:{closed_port}",
                                   "--tiers", "1", "--requests", "2", "-o", str(tmp_path / "o")])
    assert code == ExitCode.UNREADABLE  # nothing measured: the target could not be used, not a partial sweep
    assert f"127.0.0.1:{closed_port}: connection refused (is the server running?)" in stderr
    assert "nothing was measured and nothing written" in stderr
    assert not (tmp_path / "o").exists()


def test_argument_problems_are_reported_not_raised(tmp_path):
    code, _, stderr = run_cli(["--baseline", "http://a:1"])
    assert code == ExitCode.USAGE and "--baseline and --speculative go together" in stderr
    code, _, stderr = run_cli(["--serve", "some/model"])
    assert code == ExitCode.USAGE and "--serve needs --speculative-config" in stderr
    code, _, stderr = run_cli(["--serve", "m", "--speculative-config", "{nope"])
    assert code == ExitCode.USAGE and "not valid JSON" in stderr
    code, _, stderr = run_cli(["--serve", "m", "--speculative-config", '{"num_speculative_tokens": 3}'])
    assert code == ExitCode.USAGE and 'needs a "method"' in stderr
    code, _, stderr = run_cli(["--serve", "m", "--speculative-config", '{"method": "ngram"}', "--serve-arg=--port=1"])
    assert code == ExitCode.USAGE and "--port is set by specwatch sweep --serve" in stderr
    code, _, stderr = run_cli(["--from-bench", "a", "b", "--gpu", "H100"])
    assert code == ExitCode.USAGE and "needs both --gpu and --model" in stderr


# --------------------------------------------------------------------------------------------------
# --serve: the launch lifecycle, with a stand-in vllm module
# --------------------------------------------------------------------------------------------------

FAKE_API_SERVER = '''
import argparse, json, os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--model"); ap.add_argument("--host"); ap.add_argument("--port", type=int)
ap.add_argument("--speculative-config"); ap.add_argument("--max-num-seqs")
args = ap.parse_args()
with open(os.environ["FAKE_VLLM_RECORD"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
spec = json.loads(args.speculative_config) if args.speculative_config else None
state = {"drafts": 0, "accepted": 0, "generated": 0}
lock = threading.Lock()

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, body, ctype):
        data = body.encode()
        self.send_response(200); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models":
            return self.reply(json.dumps({"data": [{"id": args.model}]}), "application/json")
        if self.path == "/metrics":
            lines = ['vllm:num_requests_running{engine="0"} 0', 'vllm:generation_tokens_total{engine="0"} %d' % state["generated"]]
            if spec:
                k = spec["num_speculative_tokens"]
                lines += ['vllm:spec_decode_num_drafts_total{engine="0"} %d' % state["drafts"],
                          'vllm:spec_decode_num_draft_tokens_total{engine="0"} %d' % (state["drafts"] * k),
                          'vllm:spec_decode_num_accepted_tokens_total{engine="0"} %d' % state["accepted"]]
            return self.reply("\\n".join(lines) + "\\n", "text/plain")
        return self.reply("", "text/plain")
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body["max_tokens"]
        per = 2 if spec else 1
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close"); self.end_headers()
        sent = 0
        while sent < n:
            m = min(per, n - sent); sent += m
            with lock:
                state["generated"] += m
                if spec: state["drafts"] += 1; state["accepted"] += m - 1
            self.wfile.write(("data: " + json.dumps({"choices": [{"text": "y" * m}]}) + "\\n\\n").encode())
        self.wfile.write(b"data: [DONE]\\n\\n")
        self.close_connection = True

ThreadingHTTPServer((args.host, args.port), H).serve_forever()
'''


def test_serve_launches_baseline_then_speculative_and_stops_both(tmp_path):
    package = tmp_path / "fakevllm" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(FAKE_API_SERVER)
    record = tmp_path / "launches.jsonl"
    env = {"PYTHONPATH": str(tmp_path / "fakevllm"), "FAKE_VLLM_RECORD": str(record)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        code, stdout, stderr = run_cli([
            "--serve", "tiny/model", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}',
            "--serve-arg=--max-num-seqs=8", "--vllm-python", sys.executable, "--tiers", "1,2", "--requests", "3",
            "--max-tokens", "8", "--scrape-interval", "0.05", "--start-timeout", "60", "-o", str(tmp_path / "o"),
            "--json"])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert code == 0, stderr
    launches = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(launches) == 2
    assert "--speculative-config" not in launches[0]
    spec_argv = launches[1]
    assert json.loads(spec_argv[spec_argv.index("--speculative-config") + 1]) == {"method": "ngram",
                                                                                "num_speculative_tokens": 2}
    assert launches[0][:2] == ["--model", "tiny/model"] and "--max-num-seqs=8" in launches[0]
    report = json.loads(stdout)
    assert report["source"] == "serve" and report["complete"]
    assert report["servers"]["speculative"]["speculative_config"]["method"] == "ngram"
    assert report["tiers"][0]["speculative"]["acceptance_length"] == pytest.approx(2.0)
    assert report["predicted"]["draft_ratio_basis"].startswith("ngram")
    assert "stopping the baseline server" in stderr and "stopping the speculative server" in stderr
    # both servers are gone: their ports no longer accept connections
    for side in sw.SIDES:
        url = report["servers"][side]["url"]
        with pytest.raises(httpx.HTTPError):
            httpx.get(url + "/health", timeout=2.0)
    assert (tmp_path / "o" / "vllm-baseline.log").exists()


def test_plot_fits_80_columns_and_draws_both_curves_and_the_prediction():
    tiers = []
    for c, (b_tps, b_tpot) in BASE_CURVE.items():
        s_tps, s_tpot = SPEC_CURVE[c]
        entry = {"concurrency": c, "baseline": side(b_tps, b_tpot), "speculative": side(s_tps, s_tpot, 2.6)}
        entry["speedup"] = sw.tier_speedups(entry)
        tiers.append(entry)
    values, states = sw.crossings(tiers)
    predicted, _ = sw.predicted_curve(tiers, sw.PredictionInputs(k=4, method="ngram"))
    report = {"tiers": tiers, "crossing": values, "crossing_state": states, "predicted": predicted,
              "predicted_note": "", "errors": [], "stopped": None}
    text = sw.render_plot(report, width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    plot_rows = [line for line in lines if "|" in line]
    assert any("b" in row.split("|", 1)[1] for row in plot_rows) and any("s" in row.split("|", 1)[1] for row in plot_rows)
    assert any("M" in row.split("|", 1)[1] for row in plot_rows)
    assert any("." in row.split("|", 1)[1] for row in plot_rows)
    assert f"measured crossing ≈ {values['throughput']:.1f}" in text
    assert f"tokens/s: speculation stops paying at concurrency ≈ {values['throughput']:.1f}" in text


def test_the_fitted_prediction_recovers_a_known_step_time_curve():
    """Tiers made from a known hinge T(N): the curve fitted from them gives back its speedups."""
    from specwatch import perf

    truth = perf.HingeParameters(base_s=0.010, knee=16.0, slope_s_per_token=0.0006, kv_s_per_token=0.0, per_token_s=0.0)
    k, length = 3, 2.5
    tiers = []
    for c in (1, 2, 4, 8, 16, 32):
        plain, verify = truth.step_time(c), truth.step_time(c * (k + 1))
        tiers.append({"concurrency": c,
                      "baseline": {"tpot_p50_s": plain, "output_tokens_per_s": c / plain, "running_mean": float(c)},
                      "speculative": {"tpot_p50_s": verify / length, "output_tokens_per_s": c * length / verify,
                                      "acceptance_length": length, "k": k, "running_mean": float(c)}})
    predicted, note = sw.predicted_curve(tiers, sw.PredictionInputs(method="ngram"))
    assert predicted["basis"] == "fitted" and "fitted to 12 measured step times" in note
    for point in predicted["points"]:
        expected = perf.speedup(truth, point["concurrency"], k, length, 0.0)
        assert point["speedup"] == pytest.approx(expected, rel=0.1), point
    true_cross = perf.crossover_concurrency(truth, k, length, 0.0)
    assert true_cross.state == "crosses"
    assert predicted["crossover"] == pytest.approx(true_cross.concurrency, rel=0.15)
    # and the measured crossing of these tiers agrees with the model's, up to the interpolation
    values, _ = sw.crossings([dict(t, speedup=sw.tier_speedups(t)) for t in tiers])
    assert values["throughput"] == pytest.approx(true_cross.concurrency, rel=0.15)


def test_a_near_zero_tpot_does_not_squash_the_speedup_panel():
    tiers = [{"concurrency": 1, "baseline": side(100, 10), "speculative": side(150, 0.01, 3.0)},
             {"concurrency": 2, "baseline": side(190, 10.5), "speculative": side(170, 12.0, 3.0)}]
    for t in tiers:
        t["speedup"] = sw.tier_speedups(t)
    values, states = sw.crossings(tiers)
    text = sw.render_plot({"tiers": tiers, "crossing": values, "crossing_state": states, "predicted": None,
                           "predicted_note": "k is unknown", "errors": [], "stopped": None})
    assert "above 4 drawn at 4" in text
    speedup_panel = text.split("speedup, speculative / baseline", 1)[1]
    labels = [float(line.split("|")[0]) for line in speedup_panel.splitlines()
              if "|" in line and line.split("|")[0].strip().replace(".", "").isdigit()]
    assert max(labels) < 5  # the speedup panel's top label, not 1000
    assert "predicted: none (k is unknown)" in text


def test_the_table_says_the_batch_each_engine_ran_and_where_the_client_outran_it():
    """The tiers of a real CPU sweep (n-gram, the tiny Llama): at client concurrency 4 to 16 the
    baseline engine ran 2.1 to 6.9 requests at once (the client, the API server and the tokenizer
    share two cores with it). The table gives each side's, and one line names the tiers held back;
    a tier whose engine ran the client's concurrency is not named."""
    ran = {1: (0.88, 0.85), 2: (0.94, 1.23), 4: (2.12, 1.84), 8: (2.12, 3.3), 16: (6.93, 1.3), 32: (30.0, 29.0)}
    tiers = []
    for c, (b_ran, s_ran) in ran.items():
        entry = {"concurrency": c, "baseline": dict(side(800 + 30 * c, 1.0), running_mean=b_ran),
                 "speculative": dict(side(900 + 30 * c, 0.8, 3.3), running_mean=s_ran)}
        entry["speedup"] = sw.tier_speedups(entry)
        tiers.append(entry)
    values, states = sw.crossings(tiers)
    text = sw.render_plot({"tiers": tiers, "crossing": values, "crossing_state": states, "predicted": None,
                           "predicted_note": "", "errors": [], "stopped": None}, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    table = text.split(" conc ", 1)[1].splitlines()
    assert table[0].rstrip().endswith("ran b/s")
    assert table[3].rstrip().endswith("2.1/1.8") and table[6].rstrip().endswith("30.0/29.0")
    held = " ".join(text.split("the baseline engine ran well under", 1)[1].split()[:12])
    assert held.startswith("the client's concurrency at 2 (0.9), 4 (2.1), 8 (2.1), 16 (6.9):")
    assert "32 (" not in held
