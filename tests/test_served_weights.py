"""The served weights' format as the server says it: vLLM's /server_info names its quantisation
(vllm_config.model_config.quantization; tests/data's real capture is an unquantised model, None).
Mapped to the formats the step law prices, carried in every reading and through recordings, and
read by the advisor's datasheet prior, where it wins over --dtype and the model's released format.
A recording keeps it as it keeps the device (test_cpu_engine)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from http_fixtures import LocalServer
from test_speculation_config import FakeVllm, scrape
from specwatch.advice.advisor import Advisor, AdvisorConfig
from specwatch.collectors.synthetic import SyntheticNode, generate
from specwatch.collectors.vllm import VllmSource, weights_from_server_info
from specwatch.perf import prior_for_model
from specwatch.perf.hardware import MODELS, lookup
from specwatch.readings.window import Window

SERVER_INFO = Path(__file__).parent / "data" / "vllm-0.32-cpu-ngram-k4.server_info.json"


def server_info(quantization: object = None, quantization_config: object = None) -> dict:
    info = json.loads(SERVER_INFO.read_text())
    info["vllm_config"]["model_config"]["quantization"] = quantization
    info["vllm_config"]["model_config"]["quantization_config"] = quantization_config
    return info


def test_the_real_capture_is_an_unquantised_model():
    real = json.loads(SERVER_INFO.read_text())
    assert real["vllm_config"]["model_config"]["quantization"] is None
    assert weights_from_server_info(real) is None


@pytest.mark.parametrize("method, config, read", [
    ("fp8", None, "fp8"), ("FP8", None, "fp8"), ("fbgemm_fp8", None, "fp8"), ("modelopt", None, "fp8"),
    ("awq_marlin", None, "awq"), ("gptq_marlin", {"bits": 4}, "gptq"), ("gptq_marlin", {"bits": 8}, "w8a16"),
    ("mxfp4", None, "w4a16"), ("experts_int8", None, "w8a16"),
    # a container whose scheme the name does not tell, a format not priced, or nothing usable
    ("compressed-tensors", None, None), ("modelopt_fp4", None, None), ("bitsandbytes", None, None),
    (None, None, None), (8, None, None), (["fp8"], None, None),
])
def test_a_quantisation_method_is_read_as_the_format_it_names(method, config, read):
    assert weights_from_server_info(server_info(method, config)) == read
    # the vllm_config written as a JSON string, as some releases write it
    info = server_info(method, config)
    info["vllm_config"] = json.dumps(info["vllm_config"])
    assert weights_from_server_info(info) == read
    assert weights_from_server_info("not an object") is None


def test_the_collector_carries_the_weights_and_without_dev_mode_none():
    with LocalServer(FakeVllm(server_info("fp8"))) as srv:
        assert scrape(VllmSource([srv.url])).weights == "fp8"
    with LocalServer(FakeVllm(None)) as srv:
        assert scrape(VllmSource([srv.url])).weights is None


H100 = lookup("H100")
LLAMA_70B = MODELS["Llama-3.1-70B"]
NODE = SyntheticNode(step=prior_for_model(H100, LLAMA_70B, tp=4).hinge(), gpus=4, per_position=(0.6, 0.4, 0.25, 0.15))


def prior_of(served: str | None, flag: str | None) -> tuple[str, str]:
    """The weights' format the advisor's datasheet prior reads, and the verdict's words on that prior,
    after 20 s of the node with the server saying `served` (its extrapolation names the prior)."""
    window = Window(30.0)
    advisor = Advisor(AdvisorConfig(method="ngram", model=LLAMA_70B, tp=4, dtype=flag))
    for snap in generate(NODE, [8.0] * 20, seed=1):
        snap = dataclasses.replace(snap, targets=tuple(dataclasses.replace(t, weights=served) for t in snap.targets))
        window.add(snap)
        verdict = advisor.update(window.target(NODE.url), snap.gpus)
    (words,) = [r for r in verdict.reasons if "datasheet prior" in r]
    return advisor.step_samples.dtype, words


def test_the_servers_word_on_its_weights_wins_over_the_flag_and_the_release():
    dtype, words = prior_of(None, None)
    assert dtype == "bf16" and "(datasheet prior for Llama-3.1-70B on H100 SXM)" in words
    assert prior_of(None, "awq")[0] == "awq"
    dtype, words = prior_of("fp8", None)
    assert dtype == "fp8" and "(datasheet prior for Llama-3.1-70B in fp8 on H100 SXM)" in words
    assert prior_of("fp8", "awq")[0] == "fp8"
    # a word no law prices (a recording written by another specwatch, or by hand) is not taken
    assert prior_of("fp5", None)[0] == "bf16"


def test_check_json_shows_the_weights_the_verdict_read_and_where_they_came_from():
    from specwatch.outputs.report import check_report
    from specwatch.perf import combine_bound

    def engine_weights(served: str | None, flag: str | None) -> dict:
        window = Window(30.0)
        advisor = Advisor(AdvisorConfig(method="ngram", model=MODELS["DeepSeek-V3"], tp=8, dtype=flag))
        for snap in generate(NODE, [8.0] * 10, seed=1):
            window.add(dataclasses.replace(snap, targets=tuple(dataclasses.replace(t, weights=served)
                                                               for t in snap.targets)))
            advisor.update(window.target(NODE.url), snap.gpus)
        return check_report(window, NODE.url, {}, combine_bound([]), weights=advisor.weights)["engine"]["weights"]

    assert engine_weights(None, None) == {"format": "fp8", "source": "release"}
    assert engine_weights(None, "bf16") == {"format": "bf16", "source": "flags"}
    assert engine_weights("w4a16", "bf16") == {"format": "w4a16", "source": "server_info"}
