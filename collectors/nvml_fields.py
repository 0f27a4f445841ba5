"""NVML field values, read in one batch per device: the NVLink link count (once per device), and
the cumulative PCIe and NVLink byte counters (every poll), turned into throughput rates between two
polls. Where a driver lacks the PCIe counters, PCIe throughput comes from the older
nvmlDeviceGetPcieThroughput call instead, which the driver averages over 20 ms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specwatch.collectors.nvml_calls import (
    NVML_SUCCESS,
    REASON_COUNTER_RESET,
    REASON_NO_NVLINK,
    REASON_WARMING_UP,
    NvmlCallFailed,
    NvmlCalls,
)
from specwatch.collectors.nvml_device import DeviceState, read_fields

# Field-value ids (nvml.h). Hard-coded because older bindings lack the names, and the ids are part
# of the C ABI, so they never change.
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # cumulative KiB
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_PCIE_COUNT_TX_BYTES = 197  # cumulative bytes
FI_PCIE_COUNT_RX_BYTES = 198
# scopeId UINT_MAX asks for the sum over all NVLink links.
SCOPE_ALL_LINKS = 0xFFFFFFFF


def counter_rate(previous: tuple[float, float] | None, current: tuple[float, float]) -> tuple[float | None, str]:
    """Rate per second between two (counter value, seconds) readings, or None and the reason."""
    if previous is None:
        return None, REASON_WARMING_UP
    (v0, t0), (v1, t1) = previous, current
    if t1 <= t0:
        return None, REASON_WARMING_UP
    if v1 < v0:
        return None, REASON_COUNTER_RESET
    return (v1 - v0) / (t1 - t0), ""


_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value_number(fv: Any) -> float:
    """The number in a c_nvmlFieldValue_t, read through the union member its valueType names."""
    kind = int(fv.valueType)
    member = _FIELD_VALUE_MEMBERS[kind] if 0 <= kind < len(_FIELD_VALUE_MEMBERS) else "ullVal"
    return float(getattr(fv.value, member))


class ThroughputCounters:
    """PCIe and NVLink throughput of a GPU, from NVML's field values. Keeps each counter's previous
    reading on the device (`DeviceState.counters`), so a rate needs two polls."""

    def __init__(self, calls: NvmlCalls, clock: Callable[[], float]) -> None:
        self._calls = calls
        self._clock = clock

    def field_values(self, handle: Any, ids: Sequence[int | tuple[int, int]]
                     ) -> dict[int, tuple[float, float] | str]:
        """Batch-read field values: {fieldId: (number, driver timestamp in s, 0 if none) or a reason}.

        Raises NvmlCallFailed only when the GPU is lost; the call succeeds when any value was filled
        in, so each entry carries its own nvmlReturn.
        """
        try:
            values = self._calls.call("nvmlDeviceGetFieldValues", handle, list(ids))
        except NvmlCallFailed as failed:
            if failed.lost:
                raise
            return {(i[0] if isinstance(i, tuple) else i): failed.reason for i in ids}
        out: dict[int, tuple[float, float] | str] = {}
        for fv in values:
            if int(fv.nvmlReturn) != NVML_SUCCESS:
                out[int(fv.fieldId)] = self._calls.reason_for_code(int(fv.nvmlReturn))
            else:
                stamp_us = int(fv.timestamp)
                out[int(fv.fieldId)] = (_field_value_number(fv), stamp_us / 1e6 if stamp_us > 0 else 0.0)
        return out

    def read_nvlink_links(self, dev: DeviceState) -> None:
        """How many NVLink links the GPU has, read once: none means no NVLink fields to ask for."""
        links = self.field_values(dev.handle, [FI_NVLINK_LINK_COUNT]).get(FI_NVLINK_LINK_COUNT)
        if isinstance(links, tuple) and int(links[0]) > 0:
            dev.nvlink_links, dev.nvlink_reason = int(links[0]), ""
        else:
            dev.nvlink_links, dev.nvlink_reason = 0, REASON_NO_NVLINK

    def read(self, dev: DeviceState, values: dict[str, float], errors: dict[str, str]) -> None:
        """PCIe and NVLink bytes per second, each way."""
        now = self._clock()
        ids: list[int | tuple[int, int]] = []
        if dev.pcie_mode == "counters":
            ids += [FI_PCIE_COUNT_TX_BYTES, FI_PCIE_COUNT_RX_BYTES]
        if dev.nvlink_links:
            ids += [(FI_NVLINK_THROUGHPUT_DATA_TX, SCOPE_ALL_LINKS), (FI_NVLINK_THROUGHPUT_DATA_RX, SCOPE_ALL_LINKS)]
        read = self.field_values(dev.handle, ids) if ids else {}

        if dev.pcie_mode == "counters":
            tx, rx = read.get(FI_PCIE_COUNT_TX_BYTES), read.get(FI_PCIE_COUNT_RX_BYTES)
            if isinstance(tx, tuple) and isinstance(rx, tuple):
                self._rate(dev, values, errors, "pcie_tx_bytes_per_s", tx, now, 1.0)
                self._rate(dev, values, errors, "pcie_rx_bytes_per_s", rx, now, 1.0)
            else:
                # The cumulative counters are newer than the 20 ms throughput call; fall back for good.
                dev.pcie_mode = "throughput"
        if dev.pcie_mode == "throughput":
            nvml = self._calls.nvml
            for name, counter in (("pcie_tx_bytes_per_s", nvml.NVML_PCIE_UTIL_TX_BYTES),
                                  ("pcie_rx_bytes_per_s", nvml.NVML_PCIE_UTIL_RX_BYTES)):
                kb_per_s = read_fields(self._calls, dev, errors, (name,), "nvmlDeviceGetPcieThroughput", counter)
                if kb_per_s is not None:
                    values[name] = float(kb_per_s) * 1000.0  # nvml.h: KB/s

        if not dev.nvlink_links:
            errors["nvlink_tx_bytes_per_s"] = errors["nvlink_rx_bytes_per_s"] = dev.nvlink_reason
            return
        for name, fid in (("nvlink_tx_bytes_per_s", FI_NVLINK_THROUGHPUT_DATA_TX),
                          ("nvlink_rx_bytes_per_s", FI_NVLINK_THROUGHPUT_DATA_RX)):
            kib = read.get(fid)
            if isinstance(kib, tuple):
                self._rate(dev, values, errors, name, kib, now, 1024.0)  # cumulative KiB
            else:
                errors[name] = kib if isinstance(kib, str) else "NVML returned no value"

    def _rate(self, dev: DeviceState, values: dict[str, float], errors: dict[str, str], name: str,
              reading: tuple[float, float], now: float, scale: float) -> None:
        counter, stamp = reading
        # Prefer the driver's own timestamp: it is when the counter was read, not when we asked.
        # Never diff a driver timestamp against our clock: they have different origins.
        t = stamp if stamp > 0 else now
        previous = dev.counters.get(name)
        if previous is not None and previous[2] != (stamp > 0):
            previous = None
        rate, reason = counter_rate(previous[:2] if previous else None, (counter, t))
        dev.counters[name] = (counter, t, stamp > 0)
        if rate is None:
            errors[name] = reason
        else:
            values[name] = rate * scale
