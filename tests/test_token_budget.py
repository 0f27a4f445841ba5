"""The engine's token budget per step, live: read from a real /server_info capture, carried in every
reading and through recordings, given by --max-num-batched-tokens where the server does not say it
(the server wins, and a flag it contradicts is said), priced by the live advisor (a budget tight
enough cuts the prefill, and the reason says where the budget came from) and shown by check --json."""

from __future__ import annotations

import dataclasses
import json

import pytest

from http_fixtures import LocalServer
from test_speculation_config import DATA, NODE as SPECULATION_NODE, SERVER_INFO, FakeVllm, scrape
from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.advice.token_budget import (BUDGET_FLAG, FROM_VLLM_DEFAULT, NO_BUDGET, TokenBudget,
                                          resolve_token_budget, vllm_default_token_budget)
from specwatch.cli import build_parser
from specwatch.collectors.synthetic import generate
from specwatch.collectors.vllm import VllmSource, token_budget_from_server_info
from specwatch.commands.options import UsageError, advisor_config, advisor_settings
from specwatch.outputs.report import check_report
from specwatch.perf import combine_bound
from specwatch.recording import RecordingHeader, RecordingWriter, read_recording, reader, write_recording
from specwatch.telemetry.snapshot import (
    FROM_FLAGS,
    FROM_SERVER_INFO,
    Snapshot,
    SnapshotFormatError,
    TargetSample,
)
from specwatch.readings.window import Window

# test_speculation_config's real /server_info of vLLM 0.32 (CPU), n-gram k=4, dev mode on: its
# scheduler_config holds max_num_batched_tokens and max_num_scheduled_tokens, both 2048. And its
# A100-like node (test_advisor's), here with 8000 uncached prompt tokens per 100 output tokens: the
# steps prefill 80 prompt tokens per token they emit. At 16 running with k=4 and L ≈ 2, a plain step
# wants 80·16 = 1280 prompt tokens and a speculative one 80·16·2 ≈ 2560 beside its 16·5 = 80
# verified positions: a budget of 2048 (the capture's) holds the first and cuts the second.
NODE = dataclasses.replace(SPECULATION_NODE, prompt_tokens_per_request=8000, output_tokens_per_request=100,
                           prompt_cached_fraction=0.0)
CUT_WORDS = "the step's token budget (2048, from the server's /server_info) leaves the prefill"


def server_info() -> dict:
    return json.loads(SERVER_INFO.read_text())


def with_budget(snapshots, budget: int | None):
    return [dataclasses.replace(s, targets=tuple(dataclasses.replace(t, token_budget=budget) for t in s.targets))
            for s in snapshots]


# -- the parser, on the real capture ------------------------------------------------------------

def test_the_real_server_info_gives_its_schedulers_budget():
    info = server_info()
    scheduler = info["vllm_config"]["scheduler_config"]
    assert scheduler["max_num_batched_tokens"] == scheduler["max_num_scheduled_tokens"] == 2048
    assert token_budget_from_server_info(info) == 2048
    # some releases write vllm_config as a JSON string
    assert token_budget_from_server_info(dict(info, vllm_config=json.dumps(info["vllm_config"]))) == 2048


def _with_scheduler(**values) -> dict:
    info = server_info()
    scheduler = info["vllm_config"]["scheduler_config"]
    for key, value in values.items():
        if value is _ABSENT:
            scheduler.pop(key)
        else:
            scheduler[key] = value
    return info


_ABSENT = object()


@pytest.mark.parametrize("bad", [True, False, -2048, 0, 2048.0, "2048", None, [2048], {"tokens": 2048}])
def test_values_of_the_wrong_type_are_left_out_not_guessed(bad):
    assert token_budget_from_server_info(_with_scheduler(max_num_batched_tokens=bad,
                                                         max_num_scheduled_tokens=bad)) is None
    # one usable value is still read
    assert token_budget_from_server_info(_with_scheduler(max_num_batched_tokens=4096,
                                                         max_num_scheduled_tokens=bad)) == 4096


def test_the_smaller_of_the_two_budgets_is_the_steps_and_either_alone_serves():
    # vLLM's scheduler hands out max_num_scheduled_tokens per step, which may be set below the runner's
    # max_num_batched_tokens (speculation's extra slots)
    assert token_budget_from_server_info(_with_scheduler(max_num_scheduled_tokens=1900)) == 1900
    assert token_budget_from_server_info(_with_scheduler(max_num_scheduled_tokens=_ABSENT)) == 2048
    assert token_budget_from_server_info(_with_scheduler(max_num_batched_tokens=_ABSENT,
                                                         max_num_scheduled_tokens=1024)) == 1024


@pytest.mark.parametrize("info", [None, "x", [], {}, {"vllm_config": "{not json"}, {"vllm_config": {}},
                                  {"vllm_config": {"scheduler_config": "2048"}}, {"vllm_config": []}])
def test_a_server_info_without_a_scheduler_config_gives_none(info):
    assert token_budget_from_server_info(info) is None


# -- the collector, against a fake vLLM serving the real captures ----------------------------------

def test_the_collector_carries_the_budget_in_every_sample_and_rereads_it_after_a_restart():
    info = server_info()
    fake = FakeVllm(info)
    with LocalServer(fake) as srv:
        source = VllmSource([srv.url])
        first, second = scrape(source), scrape(source)
        assert first.ok and first.token_budget == second.token_budget == 2048
        # a restart (a new process start time) with another budget: read again
        info["vllm_config"]["scheduler_config"].update(max_num_batched_tokens=8192, max_num_scheduled_tokens=8192)
        start = next(line for line in fake.metrics.splitlines() if line.startswith("process_start_time_seconds"))
        fake.metrics = fake.metrics.replace(start, "process_start_time_seconds 1.9e9")
        assert scrape(source).token_budget == 8192
        # and without dev mode after the next restart: no budget, not the old one
        fake.server_info = None
        fake.metrics = fake.metrics.replace("process_start_time_seconds 1.9e9", "process_start_time_seconds 2.0e9")
        assert scrape(source).token_budget is None


def test_without_dev_mode_the_sample_has_no_budget():
    with LocalServer(FakeVllm(None)) as srv:
        sample = scrape(VllmSource([srv.url]))
    assert sample.ok and sample.token_budget is None


# -- the Snapshot dict and recordings ------------------------------------------------------------

def test_round_trip_through_the_snapshot_dict_and_json():
    snap = Snapshot(time=1.0, targets=(TargetSample("http://a:8000", "ok", token_budget=2048),
                                       TargetSample("http://b:8000", "ok")))
    written = snap.to_dict()
    assert written["targets"][0]["token_budget"] == 2048
    assert "token_budget" not in written["targets"][1]  # absent stays absent: older readers see what they knew
    assert Snapshot.from_dict(json.loads(json.dumps(written))) == snap


@pytest.mark.parametrize("bad", ["2048", 2048.0, True, 0, -1, [2048]])
def test_a_budget_written_wrong_is_a_malformed_snapshot_not_a_guess(bad):
    d = Snapshot(time=1.0, targets=(TargetSample("http://a:8000", "ok"),)).to_dict()
    d["targets"][0]["token_budget"] = bad
    with pytest.raises(SnapshotFormatError):
        Snapshot.from_dict(d)


@pytest.fixture(scope="module")
def budget_recording(tmp_path_factory):
    """A recording whose server's budget changes mid-run (a restart), in several members."""
    snaps = list(generate(NODE, [8.0] * 30, seed=1))
    snaps = with_budget(snaps[:10], None) + with_budget(snaps[10:20], 2048) + with_budget(snaps[20:], 4096)
    path = tmp_path_factory.mktemp("budget") / "budget.swrec"
    with RecordingWriter(path, RecordingHeader(data="synthetic", interval_s=1.0), member_seconds=7.0) as writer:
        for snap in snaps:
            writer.write(snap)
    return snaps, path


@pytest.mark.parametrize("parser", ["orjson", "stdlib"])
def test_a_recording_keeps_the_budget_of_every_reading(budget_recording, monkeypatch, parser):
    snaps, path = budget_recording
    if parser == "stdlib":
        monkeypatch.setattr(reader, "_fast_loads", None)
    rec = read_recording(path)
    assert rec.warnings == []
    assert [s.targets[0].token_budget for s in rec.snapshots] == [None] * 10 + [2048] * 10 + [4096] * 10
    assert rec.snapshots == snaps


def test_a_damaged_budget_in_a_recording_is_a_warning_not_a_traceback(budget_recording, tmp_path):
    import gzip

    snaps, _ = budget_recording
    path = tmp_path / "one-member.swrec"
    write_recording(path, RecordingHeader(data="synthetic", interval_s=1.0), snaps)
    text = gzip.decompress(path.read_bytes()).decode()
    assert text.count('"token_budget":2048') == 10
    bad = tmp_path / "bad.swrec"
    bad.write_bytes(gzip.compress(text.replace('"token_budget":2048', '"token_budget":"2048"').encode()))
    rec = read_recording(bad)
    assert rec.warnings, "a budget written as text read without a word"
    assert all(s.targets[0].token_budget in (None, 4096) for s in rec.snapshots)


@pytest.mark.parametrize("name", ["recording-format-1.swrec", "recording-format-2.swrec"])
def test_recordings_made_before_the_budget_was_read_still_read(name):
    rec = read_recording(DATA / name)
    assert rec.warnings == [] and rec.snapshots
    assert all(t.token_budget is None for s in rec.snapshots for t in s.targets)


# -- the live advisor ----------------------------------------------------------------------------

def judge(config: AdvisorConfig, budget: int | None, load=(16.0,) * 30, node=NODE):
    window, advisor = Window(10.0), Advisor(config)
    verdict = None
    for snap in with_budget(generate(node, list(load), seed=0), budget):
        window.add(snap)
        verdict = advisor.update(window.target(node.url), snap.gpus)
    return advisor, verdict


def _cut_reason(verdict) -> str | None:
    return next((r for r in verdict.reasons if "the step's token budget" in r), None)


def test_the_advisors_decision_gets_the_servers_budget_and_a_tight_one_cuts_the_prefill():
    advisor, verdict = judge(AdvisorConfig(method="ngram"), 2048)
    inputs = advisor.last_inputs
    assert inputs.token_budget == TokenBudget(2048, FROM_SERVER_INFO)
    decision_inputs = inputs.decision_inputs(length=2.0)
    assert decision_inputs.token_budget == 2048
    assert decision_inputs.token_budget_from == "from the server's /server_info"
    assert CUT_WORDS in _cut_reason(verdict), verdict.reasons
    # the engine's output is requests: where the budget holds their prefill back and they complete
    # no faster, the verdict follows them (hold at 0.98×), not the decode steps (1.27×, on). 0.98, not
    # the 0.97 the 16 running would give with their prefill starved: the engine settles where its
    # prefill keeps up (about 12 stepped, the rest waiting), which completes a little more
    assert "the verdict follows the requests (0.98×), not the decode steps (1.27×)" in _cut_reason(verdict)
    assert verdict.speculation == "hold" and verdict.expected_speedup == pytest.approx(0.98, abs=0.005)
    # check --json reports each speedup behind it: the decode steps', the requests' per second (which
    # the engine's, and the verdict, follow here) and a request's end to end
    speedups = verdict.to_dict()["speedups"]
    assert speedups["decode"] == pytest.approx(1.27, abs=0.005)
    assert speedups["engine"] == speedups["requests_per_s"] == pytest.approx(0.98, abs=0.005)
    assert speedups["request_end_to_end"] is not None
    # the same node where neither the server nor the operator says it: an engine always has a
    # budget, and vLLM's own default for its API server on an A100 is 2048 (EngineArgs.get_batch_
    # defaults). But this node's steps computed about 2,666 tokens each, which no engine at 2048
    # steps: the default is a guess its own steps refute, so none is applied, and the reason says so
    defaulted, assumed = judge(AdvisorConfig(method="ngram"), None)
    assert defaulted.last_inputs.token_budget.tokens is None
    assert any(r.startswith("the engine's steps computed 26") and "more than vLLM's default budget of 2048"
               in r for r in assumed.reasons), assumed.reasons
    assert _cut_reason(assumed) is None
    # with the hardware unknown there is no default to assume: the prefill shares the step uncut
    unknown = dataclasses.replace(NODE, gpus=0)
    unbounded, free = judge(AdvisorConfig(method="ngram"), None, node=unknown)
    assert unbounded.last_inputs.token_budget == NO_BUDGET
    assert _cut_reason(free) is None
    assert any(r.startswith("prefill shares the step") for r in free.reasons)
    # a budget that holds the whole prefill cuts nothing
    _, roomy = judge(AdvisorConfig(method="ngram"), 65536)
    assert _cut_reason(roomy) is None


def test_where_the_server_does_not_say_the_flag_stands_in():
    advisor, verdict = judge(AdvisorConfig(method="ngram", token_budget=2048), None)
    assert advisor.last_inputs.token_budget == TokenBudget(2048, FROM_FLAGS)
    assert f"the step's token budget (2048, from {BUDGET_FLAG}) leaves the prefill" in _cut_reason(verdict)


def test_the_server_overrules_the_flag_and_says_so():
    advisor, verdict = judge(AdvisorConfig(method="ngram", token_budget=65536), 2048)
    assert advisor.last_inputs.token_budget.tokens == 2048
    assert f"{BUDGET_FLAG} 65536 was given, but the server's /server_info says 2048: judged with 2048" \
        in verdict.reasons
    assert CUT_WORDS in _cut_reason(verdict)
    _, agreeing = judge(AdvisorConfig(method="ngram", token_budget=2048), 2048)
    assert not any(r.startswith(BUDGET_FLAG) for r in agreeing.reasons)


@pytest.mark.parametrize("node, load", [(dataclasses.replace(NODE, speculation=False), (16.0,) * 30),
                                        (NODE, (0.0,) * 30)], ids=["not speculating", "no traffic"])
def test_the_disagreement_is_said_on_verdicts_that_end_before_a_decision_too(node, load):
    _, verdict = judge(AdvisorConfig(method="ngram", token_budget=4096), 2048, load=load, node=node)
    assert f"{BUDGET_FLAG} 4096 was given, but the server's /server_info says 2048: judged with 2048" \
        in verdict.reasons, verdict.reasons


def test_a_budget_below_the_running_batch_is_an_unknown_verdict_that_says_why():
    _, verdict = judge(AdvisorConfig(method="ngram", token_budget=8), None)
    assert verdict.speculation == "unknown"
    assert any("the step's token budget (8, from --max-num-batched-tokens) holds no prompt token" in r
               for r in verdict.reasons), verdict.reasons


def test_an_sglang_target_gets_no_budget_and_a_flag_for_it_is_said_unused():
    sglang = TargetSample("http://s:30000", "ok", engine="sglang", token_budget=None)
    assert resolve_token_budget(sglang, None) == NO_BUDGET
    unused = resolve_token_budget(sglang, 2048)
    assert unused.tokens is None and unused.note.startswith(f"{BUDGET_FLAG} 2048 was given, but SGLang")
    assert resolve_token_budget(None, 2048) == TokenBudget(2048, FROM_FLAGS)


# -- the flag, the recording's header, and check --json -------------------------------------------

@pytest.mark.parametrize("command", [["check"], ["watch"], ["record", "-o", "x.swrec"], ["export"], ["tune"],
                                     ["fleet", "--url", "http://n:8000"], ["replay", "x.swrec"]])
def test_every_judging_command_takes_the_flag(command):
    args = build_parser().parse_args([*command, "--max-num-batched-tokens", "4096"])
    assert advisor_config(args).token_budget == 4096
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--max-num-batched-tokens", "0"])


def test_the_flag_rides_in_a_recordings_header_and_a_replays_flag_wins():
    args = build_parser().parse_args(["record", "-o", "x.swrec", "--max-num-batched-tokens", "4096"])
    stored = advisor_settings(args)
    assert stored["max_num_batched_tokens"] == 4096
    assert advisor_config(None, stored).token_budget == 4096
    replay = build_parser().parse_args(["replay", "x.swrec", "--max-num-batched-tokens", "1024"])
    assert advisor_config(replay, stored).token_budget == 1024
    assert advisor_config(None, {}).token_budget is None
    with pytest.raises(UsageError):
        advisor_config(None, {"max_num_batched_tokens": "lots"})


def test_check_json_shows_the_budget_and_where_it_came_from():
    window = Window(30.0)
    for snap in with_budget(generate(NODE, [8.0] * 3), 2048):
        window.add(snap)
    engine = check_report(window, NODE.url, {}, combine_bound([]), token_budget=4096)["engine"]
    assert engine["token_budget"] == {"tokens": 2048, "source": FROM_SERVER_INFO}
    unsaid = Window(30.0)
    for snap in with_budget(generate(NODE, [8.0] * 3), None):
        unsaid.add(snap)
    assert check_report(unsaid, NODE.url, {}, combine_bound([]), token_budget=4096)["engine"]["token_budget"] == \
        {"tokens": 4096, "source": FROM_FLAGS}
    assert check_report(unsaid, NODE.url, {}, combine_bound([]))["engine"]["token_budget"] == \
        {"tokens": None, "source": None}
    assert json.loads(json.dumps(engine))["token_budget"]["tokens"] == 2048
    # the budget the verdict was judged with, vLLM's default included, is the one shown
    judged = TokenBudget(2048, FROM_VLLM_DEFAULT)
    assert check_report(unsaid, NODE.url, {}, combine_bound([]), judged_budget=judged)["engine"]["token_budget"] == \
        {"tokens": 2048, "source": FROM_VLLM_DEFAULT}


def test_vllms_default_budget_follows_its_engine_args_by_device():
    """EngineArgs.get_batch_defaults, API server: 8192 on a device of at least 70 GiB that is not an
    A100, else 2048 (a CPU's capture in tests/data says 2048)."""
    from specwatch.perf.hardware import lookup

    assert vllm_default_token_budget(lookup("H100")) == 8192
    assert vllm_default_token_budget(lookup("H200")) == 8192
    assert vllm_default_token_budget(lookup("MI300X")) == 8192
    assert vllm_default_token_budget(lookup("A100-80GB-SXM")) == 2048  # vLLM PR #17885
    assert vllm_default_token_budget(lookup("L40S")) == 2048
    assert vllm_default_token_budget(None) == 2048
    # by the server's release: the rule by device came with 0.9, 0.8's V1 engine gave 2048 everywhere,
    # and the V0 engine before it prefilled apart unless told otherwise (no default assumed)
    assert vllm_default_token_budget(lookup("H100"), "0.32.0") == 8192
    assert vllm_default_token_budget(lookup("H100"), "0.8.5.post1") == 2048
    assert vllm_default_token_budget(lookup("H100"), "0.6.3") is None
    assert vllm_default_token_budget(lookup("H100"), "dev") == 8192  # unreadable: taken as current
    info = server_info()["vllm_config"]["scheduler_config"]
    assert info["max_num_batched_tokens"] == vllm_default_token_budget(None)


def test_predict_assumes_vllms_default_budget_where_none_is_given():
    from specwatch.advice.predict import predict
    from specwatch.perf.hardware import lookup

    heavy = dict(model="Llama-3.1-8B", batch=64, k=3, acceptance_length=2.5, method="eagle3", context=1000,
                 prompt_tokens=4000, output_tokens=200)
    a100 = predict(gpu=lookup("A100-80GB-SXM"), **heavy)
    assert a100["inputs"]["max_num_batched_tokens"] == 2048
    assert a100["inputs"]["max_num_batched_tokens_source"] == FROM_VLLM_DEFAULT
    # 64 × 4 verified positions leave 1792 of the 3200 prompt tokens the completions bring: requests
    # wait to start, and the engine settles where its prefill keeps up, 2048 / (4 + 20 × 2.5) ≈ 38
    # running; they complete no faster than without speculation, and the verdict follows them
    assert a100["verdict"]["speculation"] == "hold" and a100["verdict"]["throughput_speedup"] < 1
    assert any("the engine settles at about 38 of the 64 running" in r for r in a100["verdict"]["reasons"])
    assert any("vLLM's default for its API server" in r for r in a100["verdict"]["reasons"])
    # an H100's default (8192) holds the whole prefill: nothing is cut, the decode steps decide
    h100 = predict(gpu=lookup("H100"), **heavy)
    assert h100["inputs"]["max_num_batched_tokens"] == 8192
    assert not any("leaves the prefill" in r for r in h100["verdict"]["reasons"])
    # the operator's flag stands over the default; without the traffic's shape no budget is assumed
    flagged = predict(gpu=lookup("A100-80GB-SXM"), max_num_batched_tokens=65536, **heavy)
    assert flagged["inputs"]["max_num_batched_tokens_source"] == FROM_FLAGS
    shapeless = predict(gpu=lookup("A100-80GB-SXM"), **{k: v for k, v in heavy.items() if "tokens" not in k})
    assert shapeless["inputs"]["max_num_batched_tokens"] is None


def test_a_default_budget_the_engines_own_steps_exceed_is_not_applied():
    """vLLM's default is a guess at the server's flag: steps that computed more tokens on average
    than it holds (5 % over: the computed positions are estimated) say the server runs a larger
    budget. What the server or the operator said is never second-guessed."""
    from specwatch.advice.token_budget import checked_against_steps

    default = TokenBudget(2048, FROM_VLLM_DEFAULT)
    assert checked_against_steps(default, 2000.0) is default
    assert checked_against_steps(default, 2100.0) is default  # within the estimate's 5 %
    assert checked_against_steps(default, None) is default
    refuted = checked_against_steps(default, 3100.0)
    assert refuted.tokens is None and "3100 tokens on average" in refuted.note and BUDGET_FLAG in refuted.note
    for said in (TokenBudget(2048, FROM_SERVER_INFO), TokenBudget(2048, FROM_FLAGS)):
        assert checked_against_steps(said, 3100.0) is said


def test_a_plain_engine_whose_decodes_fill_the_budget_settles_and_one_past_it_is_refused():
    from specwatch.advice.predict import predict
    from specwatch.perf.hardware import lookup

    full = dict(gpu=lookup("H100"), model="Llama-3.1-8B", k=3, acceptance_length=2.5, method="eagle3",
                max_num_batched_tokens=2048, prompt_tokens=1000, output_tokens=500)
    # 2048 running fill a 2048-token budget with their decodes (vLLM's largest max_num_seqs under it):
    # no prompt token fits beside them, requests complete and none starts until the batch falls to
    # where its prefill keeps pace, 2048 / (1 + 2 prompt tokens a token) ≈ 683 running
    settled = predict(batch=2048, **full)
    reasons = settled["verdict"]["reasons"]
    assert any("the plain engine's decodes fill the budget too: it settles at about 683 of the 2048 running" in r
               for r in reasons), reasons
    assert settled["verdict"]["speculation"] in ("on", "off", "hold")
    # more running than the budget holds is a load vLLM never runs under that budget: refused, saying so
    with pytest.raises(ValueError, match=r"max_num_seqs ≤ max_num_batched_tokens"):
        predict(batch=3000, **full)


def test_where_the_budget_decides_a_request_goes_at_the_engines_pace():
    """600 running at k = 4 on a 2,048-token budget: the verified positions overfill it and the
    prefill is held back, so the engine completes requests 0.71× as fast. Each of the 600 requests
    in the system waits its turn for a step, so its own time stretches as much; the end-to-end
    figure was worked out from the decode steps alone and said 1.40×, a gain beside the loss."""
    from specwatch.advice.predict import predict
    from specwatch.perf.hardware import lookup

    result = predict(gpu=lookup("H100"), model="Llama-3.1-8B", batch=600, k=4, acceptance_length=2.5,
                     method="eagle3", max_num_batched_tokens=2048, prompt_tokens=1000, output_tokens=500)
    verdict = result["verdict"]
    assert verdict["throughput_speedup"] < 1 and verdict["speculation"] == "off"
    assert verdict["request_speedup"] == pytest.approx(verdict["throughput_speedup"])
    assert any("each request waits its turn for a step the token budget holds" in r for r in verdict["reasons"])
    # where the budget holds nothing back, the prefill dilutes the decode's gain as before
    free = predict(gpu=lookup("H100"), model="Llama-3.1-8B", batch=16, k=4, acceptance_length=2.5, method="eagle3",
                   prompt_tokens=1000, output_tokens=500)["verdict"]
    assert 1 < free["request_speedup"] < free["expected_speedup"]
