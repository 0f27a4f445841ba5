"""The server's own word on how it lays its model out (issue 43, item 2): vLLM's parallel_config
(/server_info), SGLang's server arguments and TensorRT-LLM's trtllm_parallel_config_info, kept in the
Snapshot and laid under the advisor's datasheet prior, over the operator's --tp/--ep/--dp-attention."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specwatch.collectors.families import read_series
from specwatch.collectors.sglang import parallel_from_server_info as sglang_parallel
from specwatch.collectors.trtllm import parallel_from_config_info
from specwatch.collectors.vllm import parallel_from_server_info as vllm_parallel
from specwatch.telemetry.snapshot import ParallelLayout, TargetSample

DATA = Path(__file__).parent / "data"
VLLM_INFO = json.loads((DATA / "vllm-0.32-cpu-ngram-k4.server_info.json").read_text())  # the real CPU server's
SGLANG_ARGS = json.loads((DATA / "sglang-eagle3-chain.get_server_info.json").read_text())


def test_the_real_vllm_server_says_one_gpu_and_no_expert_parallelism():
    assert vllm_parallel(VLLM_INFO) == ParallelLayout(1, None, False, "/server_info")


def test_vllm_with_expert_parallelism_over_data_parallel_ranks():
    """vLLM's EP size is TP × DP, and DP above 1 runs attention data-parallel (each rank its own
    requests): --data-parallel-size 8 --enable-expert-parallel on 8 GPUs."""
    info = copy.deepcopy(VLLM_INFO)
    info["vllm_config"]["parallel_config"].update(data_parallel_size=8, enable_expert_parallel=True)
    assert vllm_parallel(info) == ParallelLayout(1, 8, True, "/server_info")
    info["vllm_config"]["parallel_config"].update(tensor_parallel_size=8, data_parallel_size=1)
    assert vllm_parallel(info) == ParallelLayout(8, 8, False, "/server_info")
    info["vllm_config"]["parallel_config"]["tensor_parallel_size"] = "eight"
    assert vllm_parallel(info) is None  # not guessed


def test_sglang_server_arguments():
    assert sglang_parallel(SGLANG_ARGS) == ParallelLayout(2, None, False, "/get_server_info")  # a real server's
    large = dict(SGLANG_ARGS, tp_size=96, dp_size=96, ep_size=96, enable_dp_attention=True)
    assert sglang_parallel(large) == ParallelLayout(1, 96, True, "/get_server_info")
    assert sglang_parallel(None) is None


def test_tensorrt_llm_parallel_config_info():
    text = ('trtllm_parallel_config_info{engine_type="pytorch",expert_parallel_size="8",gpu_count="8",'
            'model_name="deepseek-r1",pipeline_parallel_size="1",tensor_parallel_size="8"} 1.0\n')
    assert parallel_from_config_info(read_series(text)) == ParallelLayout(8, 8, False, "trtllm_parallel_config_info")
    assert parallel_from_config_info(read_series("trtllm_num_requests_running 1\n")) is None


def test_the_layout_goes_into_the_snapshot_and_back():
    sample = TargetSample("http://x", "ok", parallel=ParallelLayout(1, 96, True, "/get_server_info"))
    again = TargetSample.from_dict(json.loads(json.dumps(sample.to_dict())))
    assert again.parallel == sample.parallel
    assert TargetSample.from_dict({"url": "http://x", "state": "ok"}).parallel is None  # older recordings
    with pytest.raises(ValueError, match="whole numbers"):
        ParallelLayout.from_dict({"tp": 0})


def test_the_advisor_lays_its_prior_out_as_the_server_says():
    """Through the advisor: a DeepSeek-V3 server that says it runs EP 96 with DP attention is priced
    so, over the operator's --tp 8; one that says nothing keeps the operator's word."""
    import dataclasses

    from specwatch.advice.advisor import Advisor, AdvisorConfig
    from specwatch.collectors.synthetic import SyntheticNode, generate, ramp
    from specwatch.perf import HingeParameters
    from specwatch.readings.window import Window

    step = HingeParameters(base_s=0.03, knee=400.0, slope_s_per_token=0.03 / 400, kv_s_per_token=0.0, per_token_s=0.0)
    node = SyntheticNode(step=step, gpu_name="NVIDIA H100 80GB HBM3", k=2, per_position=(0.8, 0.5))

    def advisor_after(layout):
        advisor = Advisor(AdvisorConfig(method="mtp", model=MODELS_DS, tp=8))
        window = Window(10.0)
        for snap in generate(node, ramp(1, 8, 30), seed=0):
            if layout is not None:
                snap = dataclasses.replace(snap, targets=(dataclasses.replace(snap.targets[0], parallel=layout),))
            window.add(snap)
            advisor.update(window.target(node.url), snap.gpus)
        return advisor

    said = advisor_after(ParallelLayout(1, 96, True, "/get_server_info"))
    assert (said.step_samples.tp, said.step_samples.ep, said.step_samples.dp_attention) == (1, 96, True)
    assert said.step_samples._datasheet_law().alltoall_count == 58
    silent = advisor_after(None)
    assert (silent.step_samples.tp, silent.step_samples.ep) == (8, None)


from specwatch.perf.hardware import MODELS  # noqa: E402

MODELS_DS = MODELS["DeepSeek-V3"]


def test_a_recording_keeps_the_layout_and_replays_it(tmp_path):
    """Written by the recorder, read back by the reader's own fast path (which lays TargetSample's
    fields out in order): the layout survives, and a target without one reads as None."""
    import dataclasses

    from specwatch.recording import RecordingHeader, open_snapshots, write_recording
    from specwatch.collectors.synthetic import SyntheticNode, generate
    from specwatch.perf import HingeParameters

    step = HingeParameters(base_s=0.03, knee=400.0, slope_s_per_token=0.03 / 400, kv_s_per_token=0.0, per_token_s=0.0)
    node = SyntheticNode(step=step, gpu_name="NVIDIA H100 80GB HBM3", k=2, per_position=(0.8, 0.5))
    layout = ParallelLayout(1, 96, True, "/get_server_info")
    snaps = list(generate(node, [4.0] * 3, seed=0))
    snaps[1] = dataclasses.replace(snaps[1], targets=(dataclasses.replace(snaps[1].targets[0], parallel=layout),))
    path = tmp_path / "layout.swrec"
    write_recording(path, RecordingHeader(data="synthetic", host="node-1", interval_s=1.0), snaps)
    _, read = open_snapshots(path)
    assert [s.targets[0].parallel for s in read] == [None, layout, None]
