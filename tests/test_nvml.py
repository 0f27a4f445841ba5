"""The NVML collector, driven through the nvidia-ml-py double (and once through the real bindings)."""

from __future__ import annotations

import math
from pathlib import Path

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvml_double import GIB, FakeClock, FakeGpu, FakeNvml, ampere_gpu, hopper_gpu
from specwatch.collectors.nvml import (
    REASON_FUNCTION_MISSING,
    REASON_GPU_LOST,
    REASON_NO_NVLINK,
    REASON_NOT_SUPPORTED,
    REASON_WARMING_UP,
    NvmlCollector,
    counter_rate,
    nvml_error_reason,
    process_display_name,
    read_process_name,
)
from specwatch.telemetry.gpu_events import CLOCK_EVENT_REASONS, decode_clock_event_reasons, is_performance_limited
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuSample, Snapshot

GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util")


def make(gpus: list[FakeGpu], **kwargs) -> tuple[FakeNvml, NvmlCollector, FakeClock]:
    clock = FakeClock()
    nvml = FakeNvml(gpus, clock=clock, **kwargs)
    collector = NvmlCollector(nvml, clock=clock, proc_root=str(Path("/nonexistent-proc")))
    return nvml, collector, clock


def assert_every_field_accounted(sample: GpuSample) -> None:
    for name in GPU_FIELDS:
        assert (name in sample.values) != (name in sample.errors), (name, sample.values, sample.errors)


# -- the real bindings on this GPU-less machine -------------------------------------------------


def test_real_pynvml_without_driver_reports_no_driver() -> None:
    collector = NvmlCollector()  # the real pynvml
    gpus, status = collector.poll()
    assert gpus == ()
    assert status.name == "nvml"
    assert status.state == "no_driver"
    assert status.message.startswith("no NVIDIA driver (")
    # init is tried once; later polls repeat the verdict without raising
    assert collector.poll() == ((), status)
    assert not collector.reads_devices  # nothing to block on: polled in place, not in a thread
    collector.close()
    assert collector.poll()[1].state == "closed"


def test_a_collector_reads_devices_until_nvml_is_known_unusable() -> None:
    _, collector, _ = make([ampere_gpu()])
    assert collector.reads_devices  # not initialised yet: the first poll may block in nvmlInit
    collector.poll()
    assert collector.reads_devices
    collector.close()
    assert not collector.reads_devices


@pytest.mark.anyio
async def test_a_poller_polls_a_collector_that_reads_no_device_in_place(monkeypatch) -> None:
    import asyncio

    from specwatch.collectors.gpus import GpuPoller

    threads = []
    real_to_thread = asyncio.to_thread

    async def counted(func, *args):
        threads.append(func)
        return await real_to_thread(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    _, reading, _ = make([ampere_gpu()])
    poller = GpuPoller(reading, dcgm=False)
    gpus, (status,) = await poller.poll(None)
    assert len(gpus) == 1 and status.state == "ok" and len(threads) == 1
    reading.close()
    gpus, (status,) = await poller.poll(None)
    assert gpus == () and status.state == "closed" and len(threads) == 1  # no thread for nothing


# -- init ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "state", "message_start"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no_driver", "no NVIDIA driver ("),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no_driver", "no NVIDIA driver ("),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver_mismatch", "NVIDIA driver and kernel module differ"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no_permission", "no permission"),
        (pynvml.NVML_ERROR_UNKNOWN, "error", "NVML failed to initialise"),
    ],
)
def test_init_failures_become_states(code: int, state: str, message_start: str) -> None:
    nvml, collector, _ = make([hopper_gpu()], init_error=code)
    gpus, status = collector.poll()
    assert gpus == ()
    assert (status.state, status.message.startswith(message_start)) == (state, True), status
    collector.poll()
    assert nvml.calls["nvmlInit"] == 1  # initialised once, lazily
    collector.close()
    assert nvml.calls["nvmlShutdown"] == 0  # nothing to shut down


def test_init_is_lazy_and_shutdown_once() -> None:
    nvml, collector, _ = make([hopper_gpu()])
    assert nvml.total_calls == 0
    collector.poll()
    collector.poll()
    assert nvml.calls["nvmlInit"] == 1
    collector.close()
    collector.close()
    assert nvml.calls["nvmlShutdown"] == 1
    assert nvml.refcount == 0


def test_count_failure_and_zero_gpus() -> None:
    _, collector, _ = make([hopper_gpu()], count_error=pynvml.NVML_ERROR_UNKNOWN)
    gpus, status = collector.poll()
    assert gpus == () and status.state == "error" and "count" in status.message
    _, collector, _ = make([])
    gpus, status = collector.poll()
    assert gpus == () and status.state == "no_gpus"


# -- Hopper with GPM ----------------------------------------------------------------------------


def test_hopper_first_poll_warms_up_then_reads_gpm_fractions() -> None:
    gpu = hopper_gpu(memory_used=70 * GIB, util_gpu_pct=100, util_memory_pct=55, power_mw=512_345,
                     temperature_c=61, sm_clock_mhz=1755, mem_clock_mhz=2619, power_limit_mw=700_000)
    nvml, collector, clock = make([gpu])
    nvml.set_gpm(0, {2: 90.0, 3: 40.0, 5: 12.0, 10: 70.0})
    gpus, status = collector.poll()
    assert status.state == "ok"
    first = gpus[0]
    for name in GPM_FIELDS:
        assert first.errors[name] == REASON_WARMING_UP
    assert_every_field_accounted(first)
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.compute_capability == (9, 0)
    assert first.mig_mode is False
    assert first.values["util_gpu"] == 1.0 and first.values["util_memory"] == 0.55
    assert first.values["power_w"] == pytest.approx(512.345)
    assert first.values["power_limit_w"] == 700.0
    assert first.values["memory_used_bytes"] == 70 * GIB
    assert first.values["memory_total_bytes"] == 80 * GIB
    assert first.values["sm_clock_mhz"] == 1755 and first.values["sm_clock_max_mhz"] == 1980
    assert first.values["temperature_c"] == 61

    clock.advance(1.0)
    second = collector.poll()[0][0]
    assert second.values["sm_active"] == pytest.approx(0.90)
    assert second.values["sm_occupancy"] == pytest.approx(0.40)
    assert second.values["tensor_active"] == pytest.approx(0.12)
    assert second.values["dram_bw_util"] == pytest.approx(0.70)
    assert not any(name in second.errors for name in GPM_FIELDS)
    assert_every_field_accounted(second)


def test_gpm_value_is_the_average_between_consecutive_polls() -> None:
    nvml, collector, clock = make([hopper_gpu()])
    nvml.set_gpm(0, {2: 0.0, 3: 0.0, 5: 0.0, 10: 0.0})
    collector.poll()
    clock.advance(0.5)
    nvml.set_gpm(0, {2: 100.0, 3: 20.0, 5: 80.0, 10: 10.0})
    clock.advance(1.5)
    sample = collector.poll()[0][0]
    # 0.5 s at 0 and 1.5 s at the new activity, over 2 s
    assert sample.values["sm_active"] == pytest.approx(0.75)
    assert sample.values["tensor_active"] == pytest.approx(0.60)
    # the next interval starts at the previous poll's sample, not at the first one
    clock.advance(1.0)
    assert collector.poll()[0][0].values["sm_active"] == pytest.approx(1.0)


def test_gpm_costs_one_sample_per_device_per_poll_and_close_frees_buffers() -> None:
    nvml, collector, clock = make([hopper_gpu(i) for i in range(3)])
    for _ in range(5):
        collector.poll()
        clock.advance(1.0)
    assert nvml.calls["nvmlGpmSampleGet"] == 15
    assert nvml.calls["nvmlGpmMetricsGet"] == 12  # every poll after the first, per device
    assert nvml.calls["nvmlGpmSampleAlloc"] == 6  # two buffers per device, then reused
    assert nvml.live_gpm_samples == 6
    collector.close()
    assert nvml.live_gpm_samples == 0


def test_polling_faster_than_gpm_refresh_repeats_the_last_interval() -> None:
    nvml, collector, clock = make([hopper_gpu()])
    nvml.set_gpm(0, {2: 50.0, 3: 50.0, 5: 50.0, 10: 50.0})
    collector.poll()
    clock.advance(0.05)
    too_soon = collector.poll()[0][0]
    assert too_soon.errors["sm_active"] == REASON_WARMING_UP
    assert nvml.calls["nvmlGpmSampleGet"] == 1
    clock.advance(1.0)
    collector.poll()
    clock.advance(0.01)
    repeated = collector.poll()[0][0]
    assert repeated.values["sm_active"] == pytest.approx(0.5)
    assert nvml.calls["nvmlGpmSampleGet"] == 2


def test_one_gpm_metric_failing_leaves_the_others() -> None:
    gpu = hopper_gpu(gpm_metric_errors={5: pynvml.NVML_ERROR_NOT_SUPPORTED, 3: pynvml.NVML_ERROR_NO_PERMISSION})
    nvml, collector, clock = make([gpu])
    nvml.set_gpm(0, {2: 30.0, 3: 30.0, 5: 30.0, 10: 30.0})
    collector.poll()
    clock.advance(1.0)
    sample = collector.poll()[0][0]
    assert sample.errors["tensor_active"] == REASON_NOT_SUPPORTED
    assert sample.errors["sm_occupancy"].startswith("no permission")
    assert sample.values["sm_active"] == pytest.approx(0.3)
    assert sample.values["dram_bw_util"] == pytest.approx(0.3)


def test_gpm_sampling_refused_despite_support_stops_trying() -> None:
    gpu = hopper_gpu(errors={"nvmlGpmSampleGet": pynvml.NVML_ERROR_NOT_SUPPORTED})
    nvml, collector, clock = make([gpu])
    for _ in range(3):
        sample = collector.poll()[0][0]
        clock.advance(1.0)
    assert sample.errors["tensor_active"] == REASON_NOT_SUPPORTED
    assert nvml.calls["nvmlGpmSampleGet"] == 1
    assert nvml.live_gpm_samples == 0


def test_gpm_functions_missing_from_driver() -> None:
    nvml, collector, _ = make([hopper_gpu()], function_not_found={"nvmlGpmQueryDeviceSupport"})
    sample = collector.poll()[0][0]
    assert sample.errors["sm_active"] == REASON_FUNCTION_MISSING
    assert nvml.calls["nvmlGpmSampleGet"] == 0


# -- Ampere without GPM -------------------------------------------------------------------------


def test_ampere_has_no_gpm_but_everything_else() -> None:
    nvml, collector, clock = make([ampere_gpu(util_gpu_pct=97, util_memory_pct=80)])
    for _ in range(2):
        gpus, status = collector.poll()
        clock.advance(1.0)
    sample = gpus[0]
    assert status.state == "ok"
    for name in GPM_FIELDS:
        assert sample.errors[name] == REASON_NOT_SUPPORTED
    assert nvml.calls["nvmlGpmSampleGet"] == 0 and nvml.calls["nvmlGpmSampleAlloc"] == 0
    assert sample.values["util_gpu"] == pytest.approx(0.97)
    assert sample.values["util_memory"] == pytest.approx(0.80)
    assert sample.compute_capability == (8, 0)
    assert_every_field_accounted(sample)


def test_mig_enabled_utilisation_is_not_supported() -> None:
    _, collector, _ = make([ampere_gpu(mig_mode=(1, 1))])
    sample = collector.poll()[0][0]
    assert sample.mig_mode is True
    assert sample.errors["util_gpu"] == "not supported with MIG enabled"
    assert "power_w" in sample.values


def test_gpu_without_mig_reports_unknown_mig_mode() -> None:
    _, collector, _ = make([FakeGpu(name="NVIDIA L4", uuid="GPU-l4", compute_capability=(8, 9),
                                    memory_total=24 * GIB, mig_mode=None)])
    assert collector.poll()[0][0].mig_mode is None


# -- every NVML error class maps to a reason ----------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason_start"),
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, "not supported on this GPU"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "not in this driver"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver and kernel module versions differ"),
        (pynvml.NVML_ERROR_UNKNOWN, "unknown NVML error"),
        (pynvml.NVML_ERROR_UNINITIALIZED, "NVML is not initialised"),
        (pynvml.NVML_ERROR_TIMEOUT, "NVML call timed out"),
        (pynvml.NVML_ERROR_NO_DATA, "no data yet"),
        (pynvml.NVML_ERROR_INSUFFICIENT_POWER, "GPU power cables"),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "GPU needs a reset"),
        (pynvml.NVML_ERROR_CORRUPTED_INFOROM, "corrupted infoROM"),
    ],
)
def test_each_error_class_becomes_a_field_reason(code: int, reason_start: str) -> None:
    nvml, collector, _ = make([hopper_gpu(errors={"nvmlDeviceGetPowerUsage": code})])
    gpus, status = collector.poll()
    sample = gpus[0]
    assert sample.errors["power_w"].startswith(reason_start), sample.errors["power_w"]
    assert not sample.lost and status.state == "ok"
    assert "sm_clock_mhz" in sample.values  # the other fields still read


def test_error_reasons_for_every_class_in_the_bindings() -> None:
    for name in dir(pynvml):
        if name.startswith("NVMLError_"):
            reason = nvml_error_reason(getattr(pynvml, name)())
            assert reason and not reason.startswith("NVML error: "), name
    assert nvml_error_reason(pynvml.NVMLError(4242)).startswith("NVML error: ")
    assert nvml_error_reason(pynvml.NVMLLibraryMismatchError("x")) == REASON_FUNCTION_MISSING


def test_real_error_subclasses_are_raised_by_the_double() -> None:
    nvml = FakeNvml([hopper_gpu(errors={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED})])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(1)
    s1, s2 = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    nvml.nvmlGpmSampleGet(handle, s1)
    nvml.clock.advance(1.0)
    nvml.nvmlGpmSampleGet(handle, s2)
    swapped = pynvml.c_nvmlGpmMetricsGet_t()
    swapped.version, swapped.numMetrics, swapped.sample1, swapped.sample2 = 1, 1, s2, s1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlGpmMetricsGet(swapped)
    with pytest.raises(AttributeError):
        nvml.nvmlDeviceGetBAR1MemoryInfo  # noqa: B018 - unmodelled functions fail loudly


# -- lost GPUs ----------------------------------------------------------------------------------


def test_one_of_eight_gpus_lost_mid_run_others_keep_polling() -> None:
    nvml, collector, clock = make([hopper_gpu(i) for i in range(8)])
    collector.poll()
    clock.advance(1.0)
    nvml.lose_gpu(3)
    gpus, status = collector.poll()
    assert [g.lost for g in gpus] == [i == 3 for i in range(8)]
    lost = gpus[3]
    assert lost.values == {}
    assert all(lost.errors[name] == REASON_GPU_LOST for name in GPU_FIELDS)
    assert lost.uuid == "GPU-00000000-0000-4000-8000-000000000003"
    assert status.state == "gpu_lost" and "GPU 3" in status.message and "7 of 8" in status.message
    for g in gpus[:3] + gpus[4:]:
        assert "sm_active" in g.values and "power_w" in g.values

    # later polls do not touch the lost GPU at all
    before = nvml.calls_by_device[3]
    clock.advance(1.0)
    gpus, status = collector.poll()
    assert nvml.calls_by_device[3] == before
    assert gpus[3].lost and sum(g.lost for g in gpus) == 1 and status.state == "gpu_lost"
    collector.close()
    assert nvml.live_gpm_samples == 0


def test_gpu_lost_during_gpm_sampling() -> None:
    gpu = hopper_gpu()
    nvml, collector, clock = make([gpu, hopper_gpu(1)])
    collector.poll()
    gpu.errors["nvmlGpmSampleGet"] = pynvml.NVML_ERROR_GPU_IS_LOST
    clock.advance(1.0)
    gpus, _ = collector.poll()
    assert gpus[0].lost and not gpus[1].lost


def test_gpu_lost_before_first_poll() -> None:
    nvml, collector, _ = make([hopper_gpu(0), hopper_gpu(1)])
    nvml.lose_gpu(0)
    gpus, status = collector.poll()
    assert gpus[0].lost and gpus[0].name == "unknown GPU"
    assert not gpus[1].lost
    assert status.state == "gpu_lost"


# -- clocks, throughput, processes --------------------------------------------------------------


def test_throttle_reasons_decoded() -> None:
    _, collector, _ = make([hopper_gpu(clocks_event_reasons=0x4 | 0x20)])
    sample = collector.poll()[0][0]
    assert sample.throttle_reasons == ("power cap", "software thermal")


@pytest.mark.parametrize("how", ["function_not_found", "absent_functions"])
def test_throttle_reasons_fall_back_to_the_older_call(how: str) -> None:
    nvml, collector, _ = make([hopper_gpu(clocks_event_reasons=0x10)],
                              **{how: {"nvmlDeviceGetCurrentClocksEventReasons"}})
    assert collector.poll()[0][0].throttle_reasons == ("sync boost",)
    collector.poll()
    assert nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2
    assert nvml.calls["nvmlDeviceGetCurrentClocksEventReasons"] <= 1


def test_throttle_reasons_unavailable_is_a_reason() -> None:
    _, collector, _ = make([hopper_gpu(errors={"nvmlDeviceGetCurrentClocksEventReasons":
                                               pynvml.NVML_ERROR_NOT_SUPPORTED})])
    sample = collector.poll()[0][0]
    assert sample.throttle_reasons == () and sample.errors["throttle_reasons"] == REASON_NOT_SUPPORTED


def test_pcie_and_nvlink_rates_from_cumulative_counters() -> None:
    gpu = hopper_gpu(pcie_tx_bytes_per_s=2e9, pcie_rx_bytes_per_s=5e8,
                     nvlink_tx_bytes_per_s=1024 * 3e6, nvlink_rx_bytes_per_s=1024 * 1e6)
    nvml, collector, clock = make([gpu])
    first = collector.poll()[0][0]
    for name in ("pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s"):
        assert first.errors[name] == REASON_WARMING_UP
    clock.advance(2.0)
    second = collector.poll()[0][0]
    assert second.values["pcie_tx_bytes_per_s"] == pytest.approx(2e9)
    assert second.values["pcie_rx_bytes_per_s"] == pytest.approx(5e8)
    assert second.values["nvlink_tx_bytes_per_s"] == pytest.approx(1024 * 3e6)
    assert second.values["nvlink_rx_bytes_per_s"] == pytest.approx(1024 * 1e6)
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0
    # one batched field-value call per poll (plus the link count at start-up)
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 3


def test_pcie_falls_back_to_throughput_call_without_counters_and_no_nvlink() -> None:
    gpu = FakeGpu(name="NVIDIA L4", uuid="GPU-l4", compute_capability=(8, 9), memory_total=24 * GIB,
                  pcie_counters_supported=False, pcie_tx_bytes_per_s=123_000, pcie_rx_bytes_per_s=7_000)
    nvml, collector, _ = make([gpu])
    sample = collector.poll()[0][0]
    assert sample.values["pcie_tx_bytes_per_s"] == 123_000
    assert sample.values["pcie_rx_bytes_per_s"] == 7_000
    assert sample.errors["nvlink_tx_bytes_per_s"] == REASON_NO_NVLINK
    collector.poll()
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 4


def test_counter_going_backwards_is_a_reason_not_a_negative_rate() -> None:
    gpu = hopper_gpu(pcie_tx_bytes_per_s=1e9)
    nvml, collector, clock = make([gpu])
    collector.poll()
    clock.advance(1.0)
    assert collector.poll()[0][0].values["pcie_tx_bytes_per_s"] == pytest.approx(1e9)
    gpu._integrals["pcie_tx"] = 0.0  # driver reload resets the counter
    clock.advance(0.001)
    sample = collector.poll()[0][0]
    assert "pcie_tx_bytes_per_s" not in sample.values
    assert sample.errors["pcie_tx_bytes_per_s"].startswith("counter went backwards")


def test_processes_named_from_proc(tmp_path: Path) -> None:
    for pid, comm, cmdline in [
        (4242, "VLLM::EngineCor", b"VLLM::EngineCore\0"),
        (77, "python3", b"/usr/bin/python3\0-m\0vllm.entrypoints.openai.api_server\0--port\0008000\0"),
    ]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
    gpu = hopper_gpu(processes=[(77, 2 * GIB), (4242, 70 * GIB), (999, None)])
    clock = FakeClock()
    collector = NvmlCollector(FakeNvml([gpu], clock=clock), clock=clock, proc_root=str(tmp_path))
    processes = collector.poll()[0][0].processes
    assert [(p.pid, p.name, p.used_memory_bytes) for p in processes] == [
        (4242, "VLLM::EngineCore", 70 * GIB),
        (77, "python3: vllm.entrypoints.openai.api_server", 2 * GIB),
        (999, "pid not visible", None),
    ]


def test_process_listing_failure_is_a_reason() -> None:
    _, collector, _ = make([hopper_gpu(errors={"nvmlDeviceGetComputeRunningProcesses":
                                               pynvml.NVML_ERROR_NO_PERMISSION})])
    sample = collector.poll()[0][0]
    assert sample.processes == () and sample.errors["processes"].startswith("no permission")


def test_bytes_names_from_old_bindings_are_decoded_and_snapshot_round_trips() -> None:
    gpu = hopper_gpu(name=b"NVIDIA H200", uuid=b"GPU-h200")
    nvml, collector, clock = make([gpu])
    collector.poll()
    clock.advance(1.0)
    gpus, status = collector.poll()
    assert gpus[0].name == "NVIDIA H200" and gpus[0].uuid == "GPU-h200"
    snap = Snapshot(time=1.0, gpus=gpus, sources=(status,))
    assert Snapshot.from_dict(snap.to_dict()) == snap


# -- pure helpers -------------------------------------------------------------------------------


def test_decode_clock_event_reasons() -> None:
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1) == ("idle",)
    assert decode_clock_event_reasons(0x4 | 0x10 | 0x40) == ("power cap", "sync boost", "hardware thermal")
    assert decode_clock_event_reasons(0x1000 | 0x4) == ("power cap", "unknown (0x1000)")
    with pytest.raises(ValueError):
        decode_clock_event_reasons(-1)
    assert is_performance_limited(("idle", "power cap"))
    assert not is_performance_limited(("idle", "applications clocks"))
    # the table agrees with the bindings' own constants
    assert dict(CLOCK_EVENT_REASONS)[pynvml.nvmlClocksEventReasonSwPowerCap] == "power cap"
    assert dict(CLOCK_EVENT_REASONS)[pynvml.nvmlClocksThrottleReasonBoardLimit] == "board limit"


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_decoded_reasons_cover_exactly_the_set_bits(mask: int) -> None:
    names = decode_clock_event_reasons(mask)
    bit_by_name = {name: bit for bit, name in CLOCK_EVENT_REASONS}
    rebuilt = 0
    for name in names:
        if name.startswith("unknown (0x"):
            rebuilt |= int(name[len("unknown (0x"):-1], 16)
        else:
            rebuilt |= bit_by_name[name]
    assert rebuilt == mask
    assert len(set(names)) == len(names)


def test_counter_rate() -> None:
    assert counter_rate(None, (10.0, 1.0)) == (None, REASON_WARMING_UP)
    assert counter_rate((10.0, 1.0), (30.0, 3.0)) == (10.0, "")
    assert counter_rate((10.0, 1.0), (30.0, 1.0)) == (None, REASON_WARMING_UP)
    rate, reason = counter_rate((30.0, 1.0), (10.0, 2.0))
    assert rate is None and "backwards" in reason


@pytest.mark.parametrize(
    ("comm", "cmdline", "expected"),
    [
        ("VLLM::EngineCor", ["VLLM::EngineCore"], "VLLM::EngineCore"),
        ("python3", ["python3", "-m", "vllm.entrypoints.openai.api_server"], "python3: vllm.entrypoints.openai.api_server"),
        ("python3.11", ["/usr/bin/python3.11", "-u", "/usr/local/bin/vllm", "serve", "m"], "python3.11: vllm"),
        ("python", ["python", "-X", "dev", "-msglang.launch_server"], "python: sglang.launch_server"),
        ("vllm", ["/usr/local/bin/vllm", "serve"], "vllm"),
        ("python3", ["python3", "-c", "import vllm"], "python3"),
        ("", ["/opt/bin/trtllm-serve"], "trtllm-serve"),
        ("", [], ""),
    ],
)
def test_process_display_name(comm: str, cmdline: list[str], expected: str) -> None:
    assert process_display_name(comm, cmdline) == expected


def test_read_process_name_of_this_process() -> None:
    import os

    name = read_process_name(os.getpid())
    assert name.startswith("python") or name.startswith("pytest")
    assert read_process_name(2**22 + 12345, proc_root="/nonexistent") == "pid not visible"


def test_fields_are_never_nan() -> None:
    nvml, collector, clock = make([hopper_gpu(i) for i in range(2)] + [ampere_gpu(2)])
    for _ in range(3):
        for g in collector.poll()[0]:
            assert all(math.isfinite(v) for v in g.values.values())
        clock.advance(1.0)


def test_total_energy_counter_in_joules_or_a_reason() -> None:
    gpu = hopper_gpu(energy_mj=12_345_678)
    nvml, collector, clock = make([gpu])
    (sample,), _ = collector.poll()
    assert sample.values["energy_j"] == pytest.approx(12345.678)
    gpu.energy_mj += 700_000  # 700 J later
    clock.advance(1.0)
    (sample,), _ = collector.poll()
    assert sample.values["energy_j"] == pytest.approx(13045.678)

    old = ampere_gpu(0, errors={"nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_NOT_SUPPORTED})
    _, collector, _ = make([old])
    (sample,), _ = collector.poll()
    assert "energy_j" not in sample.values
    assert sample.errors["energy_j"] == REASON_NOT_SUPPORTED


# -- MIG ---------------------------------------------------------------------------------------


def mig_h100(**overrides) -> FakeGpu:
    """An H100 80GB in MIG mode, carved into a 3g.40gb (running vLLM) and a 1g.10gb, one slot empty."""
    from nvml_double import h100_mig_3g

    one = h100_mig_3g(gpu_instance_id=9, name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", sm_count=16,
                      gpu_instance_slices=1, compute_instance_slices=1, memory_mb=10 * 1024, memory_used=0)
    values = dict(mig_mode=(1, 1), mig_devices=[h100_mig_3g(gpu_instance_id=2, processes=[(4242, 30 * GIB)]),
                                                None, one])
    values.update(overrides)
    return hopper_gpu(**values)


def test_mig_devices_are_shown_as_slices_of_their_parent_with_their_share() -> None:
    nvml, collector, clock = make([mig_h100(), ampere_gpu(1)])
    collector.poll()
    clock.advance(1.0)
    gpus, status = collector.poll()
    assert [g.index for g in gpus] == [0, 1, 2, 3]  # the whole GPUs first, then the MIG devices
    parent, _, three, one = gpus
    assert parent.mig_mode is True and parent.mig is None and "power_w" in parent.values
    assert three.name == "NVIDIA H100 80GB HBM3 · MIG 3g.40gb (GPU 0)"
    assert three.uuid.startswith("MIG-")
    mig = three.mig
    assert (mig.parent_index, mig.parent_name, mig.profile) == (0, "NVIDIA H100 80GB HBM3", "3g.40gb")
    assert (mig.gpu_instance_id, mig.compute_instance_id, mig.sm_count) == (2, 0, 60)
    # the MIG user guide's fractions for 3g.40gb on H100: 3/7 of the SMs, 4/8 of the memory
    assert mig.sm_fraction == pytest.approx(3 / 7) and mig.memory_fraction == pytest.approx(4 / 8)
    assert one.mig.sm_fraction == pytest.approx(1 / 7) and one.mig.memory_fraction == pytest.approx(1 / 8)
    assert three.values["memory_total_bytes"] == 40 * GIB and three.values["memory_used_bytes"] == 30 * GIB
    assert [p.pid for p in three.processes] == [4242]
    # what belongs to the whole GPU is said to be there, not left blank
    assert three.errors["power_w"] == "per GPU, not per MIG device: see GPU 0"
    assert_every_field_accounted(three)
    assert status.state == "ok" and status.message == "2 GPUs, 2 MIG devices"
    # the slices round-trip through a recording's Snapshot
    snap = Snapshot(time=1.0, gpus=gpus)
    assert Snapshot.from_dict(snap.to_dict()) == snap
    assert "mig" not in gpus[1].to_dict()  # a whole GPU is written as before


@pytest.mark.parametrize("function", ["nvmlDeviceGetAttributes", "nvmlDeviceGetGpuInstanceId",
                                      "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetName",
                                      "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses"])
def test_every_mig_call_not_supported_becomes_na_with_a_reason(function: str) -> None:
    from nvml_double import h100_mig_3g

    gpu = hopper_gpu(mig_mode=(1, 1), mig_devices=[h100_mig_3g(errors={function: pynvml.NVML_ERROR_NOT_SUPPORTED})])
    _, collector, _ = make([gpu])
    gpus, status = collector.poll()
    assert status.state == "ok" and len(gpus) == 2
    sample = gpus[1]
    assert not sample.lost and sample.mig is not None
    assert_every_field_accounted(sample)
    reasons = [why for why in sample.errors.values() if why.startswith(REASON_NOT_SUPPORTED)]
    assert reasons, sample.errors
    if function == "nvmlDeviceGetAttributes":
        assert sample.mig.sm_fraction is None and sample.mig.memory_fraction is None
        assert sample.errors["mig_shares"] == REASON_NOT_SUPPORTED
        assert sample.mig.profile == "3g.40gb"  # still from the name
    if function == "nvmlDeviceGetGpuInstanceId":
        assert sample.mig.gpu_instance_id is None and sample.errors["mig_gpu_instance_id"] == REASON_NOT_SUPPORTED


def test_mig_enumeration_failures_are_reasons_on_the_parent() -> None:
    gpu = mig_h100(errors={"nvmlDeviceGetMaxMigDeviceCount": pynvml.NVML_ERROR_NOT_SUPPORTED})
    _, collector, _ = make([gpu])
    gpus, status = collector.poll()
    assert len(gpus) == 1 and gpus[0].errors["mig_devices"] == REASON_NOT_SUPPORTED and status.state == "ok"
    # bindings older than the MIG calls: the function is missing, said once, nothing raised
    _, collector, _ = make([mig_h100()], absent_functions=["nvmlDeviceGetMigDeviceHandleByIndex"])
    gpus, _ = collector.poll()
    assert len(gpus) == 1 and gpus[0].errors["mig_devices"] == REASON_FUNCTION_MISSING
    # MIG off: no MIG device is looked for
    nvml, collector, _ = make([hopper_gpu(mig_mode=(0, 0))])
    assert len(collector.poll()[0]) == 1 and nvml.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 0


def test_a_lost_parent_loses_its_mig_devices() -> None:
    nvml, collector, clock = make([mig_h100()])
    collector.poll()
    nvml.lose_gpu(0)
    clock.advance(1.0)
    gpus, status = collector.poll()
    assert all(g.lost for g in gpus) and len(gpus) == 3
    assert status.state == "gpu_lost" and "GPU 0 fell off the bus" in status.message
