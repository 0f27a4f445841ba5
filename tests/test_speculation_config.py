"""The speculation config in the Snapshot: read from a real /server_info capture, merged with the
operator's declaration, carried through recordings, judged with by the advisor, exported, shown."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from specwatch.perf import HEAD_FORWARD_OVERHEAD_S, combine_bound
from hypothesis import given, strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from http_fixtures import LocalServer
from payloads import NGRAM_K4, read
from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.collectors.replay import ReplaySource
from specwatch.collectors.vllm import VllmSource, speculation_from_server_info
from specwatch.outputs.export import ExportAgent, build_registry
from specwatch.perf.hardware import lookup_model
from specwatch.advice.monitor import Monitor
from specwatch.recording import RecordingHeader, read_recording, write_recording
from specwatch.outputs.report import check_report, format_summary
from specwatch.telemetry.snapshot import (
    FROM_FLAGS,
    FROM_METRICS,
    FROM_SERVER_INFO,
    Snapshot,
    SpeculationConfig,
    TargetSample,
    resolve_speculation,
)
from specwatch.collectors.synthetic import SyntheticNode, generate
from specwatch.perf import HingeParameters
from specwatch.widgets.speculation import provenance_line
from specwatch.readings.window import Window

DATA = Path(__file__).parent / "data"
# A real /server_info?config_format=json of vLLM 0.32 (CPU) serving n-gram k=4 with dev mode on; the
# host's paths and its system_env were redacted before it was saved.
SERVER_INFO = DATA / "vllm-0.32-cpu-ngram-k4.server_info.json"

STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                       per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0)
SERVER_NGRAM = SpeculationConfig.known(FROM_SERVER_INFO, method="ngram", k=4, prompt_lookup_min=1,
                                       prompt_lookup_max=4)


def raw_speculative_config() -> dict:
    return json.loads(SERVER_INFO.read_text())["vllm_config"]["speculative_config"]


def with_speculation(snapshots, config):
    return [dataclasses.replace(s, targets=tuple(dataclasses.replace(t, speculation=config) for t in s.targets))
            for s in snapshots]


# -- the parser, on the real capture ------------------------------------------------------------

def test_the_real_server_info_reads_as_ngram_k4_without_a_draft_model():
    raw = raw_speculative_config()
    config = speculation_from_server_info(raw)
    assert raw["method"] == "ngram" and raw["model"] == "ngram"  # vLLM names the lookup "model" after it
    assert config.method == "ngram" and config.k == raw["num_speculative_tokens"] == 4
    assert (config.prompt_lookup_min, config.prompt_lookup_max) == (raw["prompt_lookup_min"], raw["prompt_lookup_max"])
    # draft_model_config holds the *target* for n-gram: it must not be shown as a draft model
    assert raw["draft_model_config"]["model"] == raw["target_model_config"]["model"]
    assert config.draft_model is None and config.draft_params is None
    assert all(source == FROM_SERVER_INFO for _, source in config.sources)


def test_a_draft_model_server_info_names_the_draft_and_canonicalises_the_method():
    raw = dict(raw_speculative_config(), method="draft_model", model="/srv/models/tiny-draft",
               num_speculative_tokens=3, speculative_token_tree="[(0,), (0, 0)]")
    config = speculation_from_server_info(raw)
    assert config.method == "draft" and config.k == 3
    assert config.draft_model == "/srv/models/tiny-draft" and config.source_of("draft_model") == FROM_SERVER_INFO
    assert config.token_tree == "[(0,), (0, 0)]"
    # a method the model does not price is kept as vLLM spells it
    assert speculation_from_server_info({"method": "dflash", "num_speculative_tokens": 2}).method == "dflash"


@pytest.mark.parametrize("bad", [None, "ngram", [], {}, {"method": 3, "num_speculative_tokens": "4"},
                                 {"num_speculative_tokens": True}])
def test_malformed_speculative_configs_give_nothing_rather_than_guesses(bad):
    assert speculation_from_server_info(bad) is None


# -- merging what the server says with what the operator declared ----------------------------------

def test_the_server_wins_and_the_disagreement_is_said():
    declared = SpeculationConfig.from_flags("eagle3", draft_model="my/eagle", draft_params=2e8)
    merged = resolve_speculation(SERVER_NGRAM, declared)
    assert merged.method == "ngram" and merged.source_of("method") == FROM_SERVER_INFO
    # what the server does not expose comes from the flags
    assert merged.draft_model == "my/eagle" and merged.source_of("draft_model") == FROM_FLAGS
    assert merged.draft_params == 2e8
    assert merged.disagreements == (
        "--method eagle3 was given, but the server's /server_info says ngram: judged with ngram",)
    agreeing = resolve_speculation(SERVER_NGRAM, SpeculationConfig.from_flags("prompt_lookup"))
    assert agreeing.disagreements == () and agreeing.method == "ngram"  # the same method, spelled otherwise


def test_flags_fill_in_without_server_info_and_newer_flags_win_over_recorded_ones():
    assert SpeculationConfig.from_flags() is None
    recorded = SpeculationConfig.known(FROM_FLAGS, method="ngram", k=4)
    told = SpeculationConfig.from_flags("draft_model", draft_params=1e9)
    merged = resolve_speculation(recorded, told)
    assert merged.method == "draft" and merged.k == 4 and merged.disagreements == ()
    assert resolve_speculation(None, told) is told and resolve_speculation(recorded, None) is recorded


# -- serialisation: Snapshot dicts and recordings ------------------------------------------------

def test_round_trip_through_the_snapshot_dict_and_json():
    config = resolve_speculation(SERVER_NGRAM, SpeculationConfig.from_flags("eagle", draft_params=5e8))
    snap = Snapshot(time=1.0, targets=(TargetSample("http://a:8000", "ok", speculation=config),
                                       TargetSample("http://b:8000", "ok")))
    back = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert back == snap
    assert "speculation" not in snap.to_dict()["targets"][1]  # absent stays absent: older readers see layout 1


def test_a_recording_holds_the_config_and_replays_it_unchanged(tmp_path):
    snaps = with_speculation(list(generate(NODE, [4.0] * 12)), SERVER_NGRAM)
    snaps[6:] = with_speculation(snaps[6:], SpeculationConfig.known(FROM_SERVER_INFO, method="eagle3", k=4))
    path = tmp_path / "spec.swrec"
    write_recording(path, RecordingHeader(data="synthetic"), snaps)
    rec = read_recording(path)
    assert [s.targets[0].speculation for s in rec.snapshots] == [s.targets[0].speculation for s in snaps]

    async def play():
        source = ReplaySource(path, speed=100.0)
        out = []
        while (s := await source.read()) is not None:
            out.append(s.targets[0].speculation)
        return out

    assert asyncio.run(play()) == [s.targets[0].speculation for s in snaps]


@pytest.mark.parametrize("name", ["recording-format-1.swrec", "recording-format-2.swrec"])
def test_recordings_made_before_the_config_existed_still_read(name):
    rec = read_recording(DATA / name)
    assert rec.warnings == [] and rec.snapshots
    assert all(t.speculation is None for s in rec.snapshots for t in s.targets)


# -- the collector, against a fake vLLM serving the real captures ----------------------------------

class FakeVllm:
    """/metrics, /version and (with dev mode) /server_info, from the real captures; editable live."""

    def __init__(self, server_info: dict | None) -> None:
        self.metrics = read(NGRAM_K4)
        self.server_info = server_info
        self.up = True

    def __call__(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?")[0]
        if not self.up:
            status, body = 503, b"restarting"
        elif path == "/metrics":
            status, body = 200, self.metrics.encode()
        elif path == "/version":
            status, body = 200, b'{"version": "0.32.0"}'
        elif path == "/server_info" and self.server_info is not None:
            status, body = 200, json.dumps(self.server_info).encode()
        else:
            status, body = 404, b'{"detail": "Not Found"}'
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


def scrape(source: VllmSource) -> TargetSample:
    async def go():
        async with source:  # one client per event loop: each scrape here runs in a fresh one
            return (await source.scrape())[0]

    return asyncio.run(go())


def test_the_collector_attaches_server_info_to_every_sample_and_rereads_it_after_a_restart():
    info = json.loads(SERVER_INFO.read_text())
    fake = FakeVllm(info)
    with LocalServer(fake) as srv:
        source = VllmSource([srv.url], declared=SpeculationConfig.from_flags("eagle3"))
        first, second = scrape(source), scrape(source)
        assert first.speculation == second.speculation
        assert first.speculation.method == "ngram" and first.speculation.k == 4
        assert first.speculation.source_of("method") == FROM_SERVER_INFO
        assert "judged with ngram" in first.speculation.disagreements[0]
        assert sum(p.startswith("/server_info") for p, _ in srv.requests) == 1  # read once

        # the server restarts (a new process start time) configured otherwise: the config is re-read
        info["vllm_config"]["speculative_config"].update(method="eagle3", model="/srv/eagle3", num_speculative_tokens=4)
        start = next(line for line in fake.metrics.splitlines() if line.startswith("process_start_time_seconds"))
        fake.metrics = fake.metrics.replace(start, "process_start_time_seconds 1.9e9")
        after = scrape(source)
        assert after.speculation.method == "eagle3" and after.speculation.draft_model == "/srv/eagle3"
        assert after.speculation.disagreements == ()

        # down, then back without dev mode: what the server runs is read again, and only the flags remain
        fake.up = False
        down = scrape(source)
        assert not down.ok and down.speculation.method == "eagle3" and down.speculation.source == FROM_FLAGS
        fake.up, fake.server_info = True, None
        back = scrape(source)
        assert back.speculation.source_of("method") == FROM_FLAGS
        assert back.speculation.k == 4 and back.speculation.source_of("k") == FROM_METRICS
        assert sum(p.startswith("/server_info") for p, _ in srv.requests) == 3


def test_without_dev_mode_or_flags_only_k_is_known():
    with LocalServer(FakeVllm(None)) as srv:
        sample = scrape(VllmSource([srv.url]))
    assert sample.ok and sample.speculation == SpeculationConfig.known(FROM_METRICS, k=4)


# -- the advisor judges with the sample's config -------------------------------------------------

def judge(config: AdvisorConfig, speculation, load=(2.0,) * 30):
    window, advisor = Window(10.0), Advisor(config)
    verdict = None
    for snap in with_speculation(generate(NODE, list(load)), speculation):
        window.add(snap)
        verdict = advisor.update(window.target(NODE.url), snap.gpus)
    return advisor, verdict


def test_the_advisor_takes_the_method_from_server_info():
    advisor, verdict = judge(AdvisorConfig(), SERVER_NGRAM)
    # an n-gram lookup runs no model forward: at low load the break-even is 1 + k·0 = 1
    assert advisor.last_inputs.method == "ngram" and advisor.last_inputs.draft_ratio == 0.0
    assert verdict.low_load_break_even == pytest.approx(1.0)
    assert "method_assumed" not in verdict.flags
    _, unknown = judge(AdvisorConfig(), None)
    # priced as a draft head: r = 0.05 of a target step per draft token, plus the head's own fixed
    # forward cost (50 µs a forward against steps of 10–20 ms here)
    assert "method_assumed" in unknown.flags
    assert 1 + 4 * 0.05 < unknown.low_load_break_even < 1 + 4 * (0.05 + HEAD_FORWARD_OVERHEAD_S / 0.010)


def test_the_server_overrules_the_advisor_flag_and_says_so():
    advisor, verdict = judge(AdvisorConfig(method="eagle3"), SERVER_NGRAM)
    assert advisor.last_inputs.method == "ngram" and advisor.speculation.method == "ngram"
    assert "--method eagle3 was given, but the server's /server_info says ngram: judged with ngram" in verdict.reasons


def test_the_draft_cost_comes_from_the_samples_draft_size():
    model = lookup_model("Llama-3.1-8B")
    sample = SpeculationConfig.known(FROM_FLAGS, method="draft_model", draft_model="tiny-draft", draft_params=1e9)
    advisor, verdict = judge(AdvisorConfig(model=model), sample)
    r = 1e9 / model.params + 0.05  # bytes of the draft over the target's, plus its fixed per-forward cost
    assert advisor.last_inputs.method == "draft"
    assert advisor.last_inputs.draft_ratio == pytest.approx(r)
    # verifying k+1 positions costs a little more than one plain step (attention over the extra
    # positions), so the break-even sits just above Leviathan's 1 + k·r
    assert 1 + 4 * r <= verdict.low_load_break_even <= (1 + 4 * r) * 1.02


def test_a_config_change_mid_run_changes_the_draft_cost():
    window, advisor = Window(10.0), Advisor(AdvisorConfig())
    snaps = list(generate(NODE, [2.0] * 40))
    snaps = with_speculation(snaps[:20], SERVER_NGRAM) + with_speculation(
        snaps[20:], SpeculationConfig.known(FROM_SERVER_INFO, method="eagle3", k=4))
    ratios = []
    for snap in snaps:
        window.add(snap)
        advisor.update(window.target(NODE.url), snap.gpus)
        ratios.append(advisor.last_inputs.draft_ratio if advisor.last_inputs else None)
    assert ratios[19] == 0.0 and ratios[-1] == pytest.approx(0.05)


# -- shown: check's block, the exporter, the panel -----------------------------------------------

def test_check_report_takes_method_and_draft_model_from_the_sample():
    window = Window(30.0)
    for snap in with_speculation(generate(NODE, [2.0] * 3), SERVER_NGRAM):
        window.add(snap)
    spec = check_report(window, NODE.url, {}, combine_bound([]))["speculation"]
    assert (spec["method"], spec["draft_model"], spec["source"], spec["k"]) == ("ngram", None, FROM_SERVER_INFO, 4)


def test_check_report_of_a_target_never_read_does_not_say_it_runs_without_speculation():
    """Health is never shown as a verdict: a target that cannot be read is not "not configured"."""
    from specwatch.telemetry.snapshot import Snapshot, TargetSample

    window = Window(30.0)
    url = "http://127.0.0.1:9"
    for t in (1.0, 2.0):
        window.add(Snapshot(t, (TargetSample(url, "connection_refused", f"vLLM at {url}: connection refused"),)))
    report = check_report(window, url, {"speculation": "unknown", "confidence": 0.0, "reasons": []},
                          combine_bound([]))
    assert report["state"] == "connection_refused" and report["speculation"]["configured"] is None
    assert "not configured" not in format_summary(report)


def test_the_exporter_publishes_the_config_the_verdict_used():
    monitor = Monitor(10.0, AdvisorConfig(method="eagle3"))
    agent = ExportAgent(None, monitor, node="n1", mode="replay")
    for snap in with_speculation(generate(NODE, [2.0] * 12), SERVER_NGRAM):
        agent.ingest(snap)
    text = generate_latest(build_registry(agent, process_metrics=False)).decode()
    infos = [s for fam in text_string_to_metric_families(text) for s in fam.samples
             if s.name == "specwatch_speculation_info"]
    assert [(s.labels, s.value) for s in infos] == [
        ({"node": "n1", "target": NODE.url, "method": "ngram", "draft_model": "none", "source": "server_info"}, 1.0)]


@pytest.mark.parametrize(("config", "words"), [
    (SERVER_NGRAM, "method from /server_info  k from /server_info  draft none"),
    (resolve_speculation(SpeculationConfig.known(FROM_METRICS, k=3),
                         SpeculationConfig.from_flags("draft_model", draft_model="tiny-draft")),
     "method from --method  k from metrics  draft tiny-draft (--draft-model)"),
    # the panel's first line says "method unknown": this line says how to make it known
    (None, "pass --method and --k N, or serve vLLM with VLLM_SERVER_DEV_MODE=1"),
])
def test_the_panel_says_where_each_setting_came_from(config, words):
    assert provenance_line(config).plain == words


def test_where_the_line_does_not_fit_it_gives_way_rather_than_being_cut():
    """The overview's Speculation panel at 80×24 has 36 columns: a real server's /server_info line
    read "method from /server_info  k from /s…"."""
    assert provenance_line(SERVER_NGRAM, 36).plain == "method and k from /server_info"
    assert provenance_line(SERVER_NGRAM, 80).plain == "method from /server_info  k from /server_info  draft none"
    drafted = resolve_speculation(SpeculationConfig.known(FROM_METRICS, k=3),
                                  SpeculationConfig.from_flags("draft_model", draft_model="tiny-draft"))
    # origins that differ are each said; a draft model is never the one to give way
    assert provenance_line(drafted, 50).plain.startswith("method from --method  k from metrics  draft tiny-draft")


# -- properties ---------------------------------------------------------------------------------

_methods = st.sampled_from(["ngram", "eagle3", "draft_model", "mtp", "dflash", "prompt_lookup"])
_configs = st.builds(
    lambda source, method, k, model, params: SpeculationConfig.known(
        source, method=method, k=k, draft_model=model, draft_params=params),
    st.sampled_from([FROM_SERVER_INFO, FROM_FLAGS, FROM_METRICS]),
    st.none() | _methods,
    st.none() | st.integers(0, 16),
    st.none() | st.text(min_size=1, max_size=20).filter(str.strip).map(str.strip),
    st.none() | st.floats(1e6, 1e12),
)


@given(_configs, _configs)
def test_merging_keeps_every_server_fact_and_round_trips(observed, declared):
    merged = resolve_speculation(observed, declared)

    def server_fact(name: str, source: str | None) -> bool:
        # the server's /server_info, and a k its metrics count, win over what was declared
        return source == FROM_SERVER_INFO or (source == FROM_METRICS and name == "k")

    for name, source in observed.sources:
        if server_fact(name, source):
            assert getattr(merged, name) == getattr(observed, name) and merged.source_of(name) == source
    for name, source in declared.sources:
        if not server_fact(name, observed.source_of(name)):
            assert getattr(merged, name) == getattr(declared, name)
    if merged is not None:
        assert SpeculationConfig.from_dict(json.loads(json.dumps(merged.to_dict()))) == merged
