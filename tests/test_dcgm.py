"""The dcgm-exporter reader, the NVML+DCGM merge, and GpuPoller."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from nvml_double import GIB, FakeClock, FakeNvml, ampere_gpu, hopper_gpu
from specwatch.collectors.dcgm import (
    DEFAULT_DCGM_URL,
    MAX_PAYLOAD_BYTES,
    REASON_BLANK,
    REASON_MIG_ONLY,
    REASON_NAN,
    REASON_NOT_EXPORTED,
    DcgmParseError,
    fetch_dcgm,
    merge_gpu_samples,
    parse_dcgm_metrics,
)
from specwatch.collectors.gpus import GpuPoller
from specwatch.collectors.nvml import REASON_NOT_SUPPORTED, NvmlCollector
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuSample

DATA = Path(__file__).parent / "data"
L4_IDLE = (DATA / "dcgm-exporter-L4-idle.prom").read_text()
L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
MIB = 1024 * 1024


def series(name: str, value: str, **labels: str) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}} {value}\n"


def gpu_labels(index: int, uuid: str, **extra: str) -> dict[str, str]:
    return {"gpu": str(index), "UUID": uuid, "device": f"nvidia{index}", "modelName": "NVIDIA A100-SXM4-80GB",
            "Hostname": "node-a", **extra}


# -- parsing ------------------------------------------------------------------------------------


def test_real_l4_sample() -> None:
    reading = parse_dcgm_metrics(L4_IDLE)
    assert reading.hostname == "i-030791dc5a37cd257"
    assert len(reading.samples) == 1
    gpu = reading.samples[0]
    assert (gpu.index, gpu.uuid, gpu.name, gpu.source) == (0, L4_UUID, "NVIDIA L4", "dcgm")
    assert gpu.values["sm_clock_mhz"] == 210
    assert gpu.values["mem_clock_mhz"] == 405
    assert gpu.values["temperature_c"] == 31
    assert gpu.values["power_w"] == pytest.approx(16.365)
    assert gpu.values["util_gpu"] == 0 and gpu.values["util_memory"] == 0
    assert gpu.values["tensor_active"] == 0 and gpu.values["dram_bw_util"] == 0
    assert gpu.values["pcie_tx_bytes_per_s"] == 112603 and gpu.values["pcie_rx_bytes_per_s"] == 17544
    assert gpu.values["memory_used_bytes"] == 0
    assert gpu.values["memory_total_bytes"] == (22563 + 470) * MIB  # used + free + reserved
    # SM_ACTIVE and SM_OCCUPANCY are commented out in the exporter's default counters
    assert gpu.errors["sm_active"] == REASON_NOT_EXPORTED
    assert gpu.errors["sm_occupancy"] == REASON_NOT_EXPORTED
    for name in GPU_FIELDS:
        assert (name in gpu.values) != (name in gpu.errors), name


def test_lowercase_hostname_label() -> None:
    lower = L4_IDLE.replace('Hostname="', 'hostname="')
    assert 'Hostname="' not in lower
    reading = parse_dcgm_metrics(lower)
    assert reading.hostname == "i-030791dc5a37cd257"
    assert reading.samples == parse_dcgm_metrics(L4_IDLE).samples


def test_percentages_become_fractions_and_two_gpus_sort_by_index() -> None:
    text = (
        series("DCGM_FI_DEV_GPU_UTIL", "97", **gpu_labels(1, "GPU-b"))
        + series("DCGM_FI_DEV_MEM_COPY_UTIL", "41", **gpu_labels(1, "GPU-b"))
        + series("DCGM_FI_PROF_SM_ACTIVE", "0.83", **gpu_labels(1, "GPU-b"))
        + series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.929", **gpu_labels(0, "GPU-a"))
        + series("DCGM_FI_PROF_DRAM_ACTIVE", "0.691", **gpu_labels(0, "GPU-a"))
        + series("DCGM_FI_DEV_FB_USED", "1024", **gpu_labels(0, "GPU-a"))
        + series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "4", **gpu_labels(0, "GPU-a"))
    )
    reading = parse_dcgm_metrics(text)
    assert [g.uuid for g in reading.samples] == ["GPU-a", "GPU-b"]
    a, b = reading.samples
    assert b.values["util_gpu"] == pytest.approx(0.97) and b.values["util_memory"] == pytest.approx(0.41)
    assert b.values["sm_active"] == pytest.approx(0.83)
    assert a.values["tensor_active"] == pytest.approx(0.929) and a.values["dram_bw_util"] == pytest.approx(0.691)
    assert a.values["memory_used_bytes"] == 1024 * MIB
    assert a.throttle_reasons == ("power cap",)
    assert reading.series == 7


def test_nan_blank_and_mig_instance_values_are_reasons() -> None:
    text = (
        series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "NaN", **gpu_labels(0, "GPU-a"))
        + series("DCGM_FI_DEV_GPU_TEMP", "2147483632", **gpu_labels(0, "GPU-a"))
        + series("DCGM_FI_DEV_SM_CLOCK", "9223372036854775794", **gpu_labels(0, "GPU-a"))
        + series("DCGM_FI_PROF_DRAM_ACTIVE", "0.8", **gpu_labels(0, "GPU-a", GPU_I_PROFILE="1g.10gb", GPU_I_ID="13"))
        + series("DCGM_FI_DEV_POWER_USAGE", "+Inf", **gpu_labels(0, "GPU-a"))
        # a PCIe rate near 2^31 bytes/s is a real value, not the int32 blank
        + series("DCGM_FI_PROF_PCIE_TX_BYTES", "2147483640", **gpu_labels(0, "GPU-a"))
    )
    gpu = parse_dcgm_metrics(text).samples[0]
    assert gpu.errors["tensor_active"] == REASON_NAN
    assert gpu.errors["temperature_c"] == REASON_BLANK
    assert gpu.errors["sm_clock_mhz"] == REASON_BLANK
    assert gpu.errors["power_w"] == REASON_BLANK
    assert gpu.errors["dram_bw_util"] == REASON_MIG_ONLY
    assert gpu.values == {"pcie_tx_bytes_per_s": 2147483640.0}


def test_missing_labels() -> None:
    # no gpu label at all: not a per-GPU series (NVSwitch, foreign metrics)
    with pytest.raises(DcgmParseError):
        parse_dcgm_metrics('DCGM_FI_DEV_GPU_TEMP{UUID="GPU-a"} 40\nnode_load1 0.5\n')
    # a gpu index but no UUID or model: keyed by index, unknown name
    gpu = parse_dcgm_metrics('DCGM_FI_DEV_GPU_TEMP{gpu="2"} 40\n').samples[0]
    assert (gpu.index, gpu.uuid, gpu.name, gpu.values["temperature_c"]) == (2, None, "unknown GPU", 40)
    assert parse_dcgm_metrics('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n').hostname is None
    # a non-numeric gpu label is skipped
    with pytest.raises(DcgmParseError):
        parse_dcgm_metrics('DCGM_FI_DEV_GPU_TEMP{gpu="all"} 40\n')


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage here and there",
        "\x00\x01\x02\xff binary",
        "<html><body>Not Found</body></html>",
        '{"gpus": []}',
        "# HELP only comments\n# TYPE x gauge\n",
        "node_load1 0.5\n",
        'DCGM_FI_DEV_GPU_TEMP{gpu="0" 40\n',
    ],
)
def test_bad_payloads_raise_parse_error(text: str) -> None:
    with pytest.raises(DcgmParseError):
        parse_dcgm_metrics(text)


# -- fetching -----------------------------------------------------------------------------------


def run_fetch(handler, url: str | None) -> tuple[tuple[GpuSample, ...], object]:
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await fetch_dcgm(client, url, timeout=0.5)

    return asyncio.run(go())


def _eight_gpus(text: str, step: int = 0) -> str:
    """The L4 capture as an 8-GPU node's exporter writes it, with every value moved by `step` and
    some made NaN or a DCGM blank, as a busy node's later scrape gives them."""
    out = []
    for n, line in enumerate(text.splitlines()):
        if line.startswith("DCGM_FI") and 'gpu="0"' in line:
            for i in range(8):
                copy = line.replace('gpu="0"', f'gpu="{i}"').replace(L4_UUID, f"GPU-{i:08d}")
                head, _, value = copy.rpartition(" ")
                moved = ("NaN" if (n + i + step) % 31 == 0 else "1.7976931348623157e+308" if (n + i + step) % 37 == 0
                         else repr(float(value) * (1 + step / 7) + i))
                out.append(f"{head} {moved}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _through_prometheus_client(text: str):
    """What parse_dcgm_metrics gives with every payload read by prometheus_client's parser."""
    import specwatch.collectors.dcgm as dcgm

    original = dcgm._exporter_samples
    dcgm._exporter_samples = lambda text: None
    try:
        return parse_dcgm_metrics(text)
    finally:
        dcgm._exporter_samples = original


@pytest.mark.parametrize("step", [0, 1, 2, 3])
def test_an_exporters_payload_reads_as_prometheus_client_reads_it(step: int) -> None:
    """The exporter's own shape is read without prometheus_client's parser (a fifth of the time at
    eight GPUs): the GPUs, their values, reasons, host and series count must be what that parser
    gives."""
    from specwatch.collectors.dcgm import _exporter_samples

    for text in (L4_IDLE, _eight_gpus(L4_IDLE, step)):
        assert _exporter_samples(text) is not None  # the shape the exporter writes is read here
        fast = parse_dcgm_metrics(text)
        assert fast == _through_prometheus_client(text)
    assert len(parse_dcgm_metrics(_eight_gpus(L4_IDLE, step)).samples) == 8


@pytest.mark.parametrize("step", [1, 2])
def test_a_later_scrape_of_a_shape_seen_reads_only_its_values(step: int, monkeypatch) -> None:
    """Once an exporter's payload has been read line by line, a later one with the same text between
    its values is read by that shape: what prometheus_client reads in it, without a line read."""
    import specwatch.collectors.dcgm as dcgm

    parse_dcgm_metrics(_eight_gpus(L4_IDLE, 0))
    later = _eight_gpus(L4_IDLE, step)
    with monkeypatch.context() as m:
        m.setattr(dcgm, "_exporter_lines", None)
        fast = parse_dcgm_metrics(later)
    assert fast == _through_prometheus_client(later)


@pytest.mark.parametrize("comment, learnt", [
    ("# HELP DCGM_FI_DEV_SM_CLOCK in MHz 5", True),  # a number in help text: nothing the reader reads
    ("# HELP 5", False),  # where a family's name is read: another number would be another family
])
def test_a_comment_ending_in_a_number(comment: str, learnt: bool, monkeypatch) -> None:
    import specwatch.collectors.dcgm as dcgm

    text = L4_IDLE.replace("# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).", comment, 1)
    assert text != L4_IDLE
    first = parse_dcgm_metrics(text)
    read = []
    monkeypatch.setattr(dcgm, "_exporter_lines", lambda t, real=dcgm._exporter_lines: read.append(t) or real(t))
    assert parse_dcgm_metrics(text) == first
    assert read == ([] if learnt else [text])
    if learnt:
        assert first == _through_prometheus_client(text)


@pytest.mark.parametrize("change, exporters_shape", [
    (lambda t: t.replace('Hostname="', 'Hostname="a\\"b', 1), False),  # an escaped quote in a label value
    (lambda t: t.replace("\nDCGM_FI_DEV_SM_CLOCK{", "\nDCGM_FI_DEV_MEM_CLOCK{", 1), False),  # under another family
    (lambda t: "\n".join(line + " 1700000000000" if line.startswith("DCGM_FI_DEV_GPU_TEMP") else line
                         for line in t.split("\n")), False),  # a timestamp
    # a family typed a counter: prometheus_client names its samples NAME_total, and so does the reader
    (lambda t: t.replace("# TYPE DCGM_FI_DEV_GPU_TEMP gauge", "# TYPE DCGM_FI_DEV_GPU_TEMP counter", 1), True),
])
def test_any_other_shape_is_read_by_prometheus_client(change, exporters_shape: bool) -> None:
    from specwatch.collectors.dcgm import _exporter_samples

    parse_dcgm_metrics(L4_IDLE)  # the exporter's shape is learnt: a changed payload must not pass for it
    text = change(L4_IDLE)
    assert text != L4_IDLE
    assert (_exporter_samples(text) is not None) == exporters_shape
    assert parse_dcgm_metrics(text) == _through_prometheus_client(text)


def test_fetch_ok() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=L4_IDLE, headers={"content-type": "text/plain; version=0.0.4"})

    gpus, status = run_fetch(handler, None)
    assert seen == [DEFAULT_DCGM_URL]
    assert status.state == "ok" and status.message == "1 GPU on i-030791dc5a37cd257"
    assert status.name == f"dcgm {DEFAULT_DCGM_URL}"
    assert gpus[0].uuid == L4_UUID


@pytest.mark.parametrize(
    ("exc", "explicit_state", "default_state"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "connection_refused", "absent"),
        (httpx.ConnectTimeout("timed out"), "timeout", "absent"),
        (httpx.ReadTimeout("timed out"), "timeout", "absent"),
        (httpx.ConnectError("[Errno -2] Name or service not known"), "dns_failure", "absent"),
        (httpx.RemoteProtocolError("peer closed connection"), "network_error", "network_error"),
    ],
)
def test_fetch_network_failures(exc: Exception, explicit_state: str, default_state: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    gpus, status = run_fetch(handler, "http://gpu-node:9400/metrics")
    assert gpus == () and status.state == explicit_state and "gpu-node" in status.message
    gpus, status = run_fetch(handler, None)
    assert gpus == () and status.state == default_state
    if default_state == "absent":
        assert status.message.startswith("no dcgm-exporter on this node")


def test_fetch_real_refused_connection() -> None:
    # a port that was just free on localhost: nothing listens there
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go():
        async with httpx.AsyncClient() as client:
            return await fetch_dcgm(client, f"http://127.0.0.1:{port}/metrics", timeout=2.0)

    gpus, status = asyncio.run(go())
    assert gpus == () and status.state == "connection_refused"
    assert f"127.0.0.1:{port}" in status.message


@pytest.mark.parametrize(
    ("code", "state"), [(401, "http_401"), (403, "http_403"), (404, "http_404"), (503, "http_5xx"), (429, "http_error")]
)
def test_fetch_http_errors(code: int, state: str) -> None:
    gpus, status = run_fetch(lambda request: httpx.Response(code, text="nope"), "http://x:9400/metrics")
    assert gpus == () and status.state == state and str(code) in status.message


@pytest.mark.parametrize(
    "body", [b"<html>hello</html>", b"\x89PNG\r\n\x1a\n\x00\x00", b"\xff\xfe\xfa binary", b""]
)
def test_fetch_not_prometheus(body: bytes) -> None:
    gpus, status = run_fetch(lambda request: httpx.Response(200, content=body), "http://x:9400/metrics")
    assert gpus == () and status.state == "not_prometheus"


def test_fetch_payload_too_large() -> None:
    big = b"# " + b"x" * (MAX_PAYLOAD_BYTES + 10) + b"\n"
    gpus, status = run_fetch(lambda request: httpx.Response(200, content=big), "http://x:9400/metrics")
    assert gpus == () and status.state == "payload_too_large"


# -- merging ------------------------------------------------------------------------------------


def poll_double(gpus, polls: int = 2) -> tuple[GpuSample, ...]:
    clock = FakeClock()
    collector = NvmlCollector(FakeNvml(gpus, clock=clock), clock=clock, proc_root="/nonexistent")
    for _ in range(polls):
        samples, _ = collector.poll()
        clock.advance(1.0)
    return samples


def dcgm_for(uuid: str, index: int = 0, **values: str) -> GpuSample:
    text = "".join(series(name, v, **gpu_labels(index, uuid)) for name, v in values.items())
    return parse_dcgm_metrics(text).samples[0]


def test_merge_fills_profiling_fields_on_ampere() -> None:
    (nvml_gpu,) = poll_double([ampere_gpu(0, power_mw=300_000)])
    assert nvml_gpu.errors["tensor_active"] == REASON_NOT_SUPPORTED
    dcgm_gpu = dcgm_for(nvml_gpu.uuid, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE="0.12", DCGM_FI_PROF_DRAM_ACTIVE="0.66",
                        DCGM_FI_PROF_SM_ACTIVE="0.95", DCGM_FI_DEV_POWER_USAGE="250")
    (merged,) = merge_gpu_samples([nvml_gpu], [dcgm_gpu])
    assert merged.source == "nvml+dcgm"
    assert merged.values["tensor_active"] == pytest.approx(0.12)
    assert merged.values["dram_bw_util"] == pytest.approx(0.66)
    assert merged.values["sm_active"] == pytest.approx(0.95)
    assert "tensor_active" not in merged.errors and "dram_bw_util" not in merged.errors
    assert merged.errors["sm_occupancy"] == REASON_NOT_SUPPORTED  # neither source has it
    assert merged.values["power_w"] == 300.0  # NVML's own reading wins
    assert (merged.index, merged.name, merged.uuid) == (nvml_gpu.index, nvml_gpu.name, nvml_gpu.uuid)


def test_merge_matches_by_uuid_not_position() -> None:
    nvml_gpus = poll_double([ampere_gpu(0), ampere_gpu(1)])
    # the exporter numbers GPUs differently: match by UUID
    other = dcgm_for(nvml_gpus[0].uuid, index=1, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE="0.5")
    stranger = dcgm_for("GPU-not-on-this-node", index=0, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE="0.9")
    merged = merge_gpu_samples(nvml_gpus, [stranger, other])
    assert merged[0].values["tensor_active"] == 0.5 and merged[0].source == "nvml+dcgm"
    assert "tensor_active" not in merged[1].values and merged[1].source == "nvml"
    assert len(merged) == 2  # the stranger is not added


def test_merge_leaves_hopper_gpm_and_lost_gpus_alone() -> None:
    clock = FakeClock()
    nvml = FakeNvml([hopper_gpu(0), hopper_gpu(1)], clock=clock)
    nvml.set_gpm(0, {2: 10.0, 3: 10.0, 5: 10.0, 10: 10.0})
    collector = NvmlCollector(nvml, clock=clock, proc_root="/nonexistent")
    collector.poll()
    clock.advance(1.0)
    nvml.lose_gpu(1)
    gpus, _ = collector.poll()
    dcgm = [dcgm_for(g.uuid, g.index, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE="0.9") for g in gpus]
    merged = merge_gpu_samples(gpus, dcgm)
    assert merged[0].values["tensor_active"] == pytest.approx(0.1) and merged[0].source == "nvml"
    assert merged[1].lost and merged[1].values == {} and merged[1].source == "nvml"


def test_dcgm_only_gpu_list_when_nvml_has_none() -> None:
    dcgm = parse_dcgm_metrics(L4_IDLE).samples
    assert merge_gpu_samples([], dcgm) == dcgm
    assert merge_gpu_samples([], []) == ()


# -- the poller ---------------------------------------------------------------------------------


def test_poller_merges_nvml_and_dcgm() -> None:
    clock = FakeClock()
    nvml = FakeNvml([ampere_gpu(0), ampere_gpu(1)], clock=clock)
    uuid0 = nvml.gpus[0].uuid
    payload = series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.4", **gpu_labels(0, uuid0))
    poller = GpuPoller(NvmlCollector(nvml, clock=clock, proc_root="/nonexistent"), "http://localhost:9400/metrics")

    async def go():
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text=payload))
        async with httpx.AsyncClient(transport=transport) as client:
            return await poller.poll(client)

    gpus, sources = asyncio.run(go())
    assert [s.state for s in sources] == ["ok", "ok"]
    assert sources[0].name == "nvml" and sources[1].name.startswith("dcgm ")
    assert gpus[0].source == "nvml+dcgm" and gpus[0].values["tensor_active"] == 0.4
    assert gpus[1].source == "nvml"
    sync_gpus, sync_sources = poller.poll_nvml()
    assert len(sync_gpus) == 2 and [s.name for s in sync_sources] == ["nvml"]
    poller.close()
    assert nvml.calls["nvmlShutdown"] == 1


def test_poller_without_driver_takes_gpus_from_dcgm() -> None:
    poller = GpuPoller(NvmlCollector())  # real pynvml: no driver here

    async def go():
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text=L4_IDLE))
        async with httpx.AsyncClient(transport=transport) as client:
            return await poller.poll(client)

    gpus, sources = asyncio.run(go())
    assert sources[0].state == "no_driver" and sources[1].state == "ok"
    assert [(g.uuid, g.source) for g in gpus] == [(L4_UUID, "dcgm")]


def test_poller_with_dcgm_disabled_and_absent_default() -> None:
    clock = FakeClock()
    collector = NvmlCollector(FakeNvml([hopper_gpu()], clock=clock), clock=clock, proc_root="/nonexistent")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    async def go(poller: GpuPoller):
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
            return await poller.poll(client)

    gpus, sources = asyncio.run(go(GpuPoller(collector, dcgm=False)))
    assert len(gpus) == 1 and [s.name for s in sources] == ["nvml"]
    gpus, sources = asyncio.run(go(GpuPoller(collector)))
    assert len(gpus) == 1 and sources[1].state == "absent"
    assert gpus[0].values["memory_total_bytes"] == 80 * GIB


def test_total_energy_from_the_real_capture_in_joules() -> None:
    # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION 4742776 (mJ since boot) on the idle L4
    (gpu,) = parse_dcgm_metrics(L4_IDLE).samples
    assert gpu.values["energy_j"] == pytest.approx(4742.776)
