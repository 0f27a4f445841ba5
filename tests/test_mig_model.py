"""A MIG slice through the performance model: the parent GPU identified for the datasheet, its
peaks scaled to the slice, or the verdict saying the shape is assumed when NVML gave no share."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pynvml
import pytest

from nvml_double import GIB, FakeClock, FakeNvml, h100_mig_3g, hopper_gpu
from specwatch.advice.advisor import AdvisorConfig
from specwatch.collectors.nvml import NvmlCollector
from specwatch.perf.hardware import GPUS, scale_to_mig
from specwatch.advice.monitor import Monitor
from specwatch.perf import HingeParameters
from specwatch.collectors.synthetic import SyntheticNode, generate

STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA H100 80GB HBM3", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0, gpus=1)
# NVIDIA's H100 SXM datasheet: 989.4 TFLOP/s dense BF16, 3.35 TB/s; the MIG user guide: a 3g.40gb
# instance has 3/7 of the SMs and 4/8 of the memory
H100_BF16, H100_BANDWIDTH = 989.4e12, 3.35e12


def mig_gpus(**mig_errors):
    clock = FakeClock()
    gpu = hopper_gpu(mig_mode=(1, 1), memory_total=80 * GIB,
                     mig_devices=[h100_mig_3g(processes=[(4242, 30 * GIB)], errors=mig_errors)])
    collector = NvmlCollector(FakeNvml([gpu], clock=clock), clock=clock, proc_root=str(Path("/nonexistent-proc")))
    gpus, _ = collector.poll()
    return gpus


def verdict_on(gpus):
    monitor = Monitor(advisor_config=AdvisorConfig(method="ngram"))
    for snapshot in generate(NODE, [8.0] * 40):
        monitor.ingest(dataclasses.replace(snapshot, gpus=gpus))
    (state,) = monitor.states.values()
    return state.verdict


def test_scaling_a_spec_to_a_slice():
    h100 = GPUS["H100-SXM"]
    slice_ = scale_to_mig(h100, 3 / 7, 4 / 8, "3g.40gb")
    assert slice_.bf16_flops == pytest.approx(H100_BF16 * 3 / 7)
    assert slice_.memory_bandwidth == pytest.approx(H100_BANDWIDTH / 2)
    # half of the 81,559 MiB NVML gives the whole H100 (MIG's 3g.40gb is about 40 GiB, not 40e9 bytes)
    assert slice_.memory_bytes == pytest.approx(81559 * 2**20 / 2) and slice_.interconnect_bandwidth is None
    assert slice_.name == "H100 SXM · MIG 3g.40gb"
    with pytest.raises(ValueError):
        scale_to_mig(h100, 8 / 7, 0.5)


def test_the_verdict_reasons_about_the_slice_not_the_whole_gpu():
    verdict = verdict_on(mig_gpus())
    spec = verdict.gpu_spec
    assert spec is not None and "MIG 3g.40gb" in spec.name
    assert spec.bf16_flops == pytest.approx(H100_BF16 * 3 / 7)
    assert spec.memory_bandwidth == pytest.approx(H100_BANDWIDTH / 2)
    assert "mig_shape_assumed" not in verdict.flags and "gpu_unidentified" not in verdict.flags


def test_without_the_slices_share_the_verdict_says_the_shape_is_assumed():
    verdict = verdict_on(mig_gpus(nvmlDeviceGetAttributes=pynvml.NVML_ERROR_NOT_SUPPORTED))
    assert verdict.gpu_spec is None  # not the whole H100's roofs for a third of it
    assert "mig_shape_assumed" in verdict.flags
    assert any("MIG 3g.40gb (GPU 0)" in r and "shape is assumed" in r for r in verdict.reasons)
    assert verdict.confidence <= 0.5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_dashboard_shows_the_slice_with_its_parent():
    from specwatch.dashboard.app import SpecwatchApp
    from specwatch.widgets.gpu import GpuPanel
    from specwatch.widgets.header import HeaderBar
    from test_app import ScriptedSource, text_of, until

    gpus = mig_gpus()
    data = [dataclasses.replace(s, gpus=gpus) for s in generate(NODE, [8.0] * 10)]
    app = SpecwatchApp(ScriptedSource(data), Monitor(advisor_config=AdvisorConfig(method="ngram")))
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: app.ended, "the source ended")
        await pilot.pause()
        header = text_of(app.query_one(HeaderBar))
        await pilot.press("2")  # the GPUs tab
        await until(pilot, lambda: app.query_one("#gpu-panel", GpuPanel).view.time == app.latest.time,
                    "the GPUs tab shows the reading")
        panel = text_of(app.query_one("#gpu-panel", GpuPanel))
    assert "1× H100 80GB HBM3 · MIG 3g.40gb" in header  # one GPU, one slice of it: not "2 GPUs, mixed"
    assert "GPU0 MIG 3g.40gb" in panel
