"""MIG devices (compute instances of a MIG-enabled GPU): found once at start, each with its profile,
ids and share of its GPU's SMs and memory; then, every poll, its own memory and processes.
"""

from __future__ import annotations

import re
from typing import Any

from specwatch.collectors.nvml_calls import REASON_NOT_FOUND, NvmlCallFailed, NvmlCalls
from specwatch.collectors.nvml_device import SOURCE_NAME, DeviceState, lost_sample, read_fields, text
from specwatch.collectors.nvml_processes import ProcessReader
from specwatch.telemetry.snapshot import GPU_FIELDS, GpuProcess, GpuSample, MigInstance

MIB_BYTES = 1024 * 1024
# A MIG device's name as NVML gives it: "NVIDIA H100 80GB HBM3 MIG 3g.40gb" (the profile last)
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")


class MigDevices:
    """Finds and polls the MIG devices of MIG-enabled GPUs. `processes` is None when processes are
    not read."""

    def __init__(self, calls: NvmlCalls, processes: ProcessReader | None) -> None:
        self._calls = calls
        self._processes = processes

    # -- read once at start ------------------------------------------------------------------------

    def discover(self, parent: DeviceState, first_index: int) -> list[DeviceState]:
        """The MIG devices (compute instances) of a MIG-enabled GPU, numbered from `first_index`
        on, after the whole GPUs. A layout changed later (instances made or destroyed while
        specwatch runs) is not followed: its calls fail, and say so."""
        try:
            slots = int(self._calls.call("nvmlDeviceGetMaxMigDeviceCount", parent.handle))
        except NvmlCallFailed as failed:
            parent.static_errors["mig_devices"] = failed.reason
            return []
        devices: list[DeviceState] = []
        for slot in range(slots):
            try:
                handle = self._calls.call("nvmlDeviceGetMigDeviceHandleByIndex", parent.handle, slot)
            except NvmlCallFailed as failed:
                if failed.reason != REASON_NOT_FOUND:  # an empty slot is NotFound: nothing to say
                    parent.static_errors["mig_devices"] = failed.reason
                if failed.lost:
                    break
                continue
            devices.append(self._read_static(parent, handle, first_index + len(devices), slots))
        return devices

    def _read_static(self, parent: DeviceState, handle: Any, index: int, slots: int) -> DeviceState:
        dev = DeviceState(index=index, handle=handle, parent=parent, compute_capability=parent.compute_capability)

        def read(function: str, key: str) -> Any:
            try:
                return self._calls.call(function, handle)
            except NvmlCallFailed as failed:
                dev.static_errors[key] = failed.reason
                if failed.lost:
                    dev.lost = True
                return None

        raw_name = read("nvmlDeviceGetName", "name")
        uuid = read("nvmlDeviceGetUUID", "uuid")
        dev.uuid = text(uuid) if uuid is not None else None
        gpu_instance = read("nvmlDeviceGetGpuInstanceId", "mig_gpu_instance_id")
        compute_instance = read("nvmlDeviceGetComputeInstanceId", "mig_compute_instance_id")
        attributes = read("nvmlDeviceGetAttributes", "mig_shares")
        memory = read("nvmlDeviceGetMemoryInfo", "memory_total_bytes")
        if memory is not None:
            dev.static_values["memory_total_bytes"] = float(memory.total)

        profile = None
        match = _MIG_PROFILE.search(text(raw_name)) if raw_name is not None else None
        if match:
            profile = match.group(1)
        elif attributes is not None and int(attributes.gpuInstanceSliceCount) > 0:
            profile = f"{int(attributes.gpuInstanceSliceCount)}g.{int(attributes.memorySizeMB) / 1024:.0f}gb"
        sm_fraction = memory_fraction = None
        if attributes is not None:
            # MIG guide: an instance's SMs are its compute slices out of the GPU's (7 on A100/H100,
            # as many as MIG devices it can hold); its memory and bandwidth are its memory slices'
            compute_slices = int(attributes.computeInstanceSliceCount)
            if slots > 0 and 0 < compute_slices <= slots:
                sm_fraction = compute_slices / slots
            parent_memory = parent.static_values.get("memory_total_bytes")
            instance_memory = float(attributes.memorySizeMB) * MIB_BYTES
            if parent_memory and 0 < instance_memory <= parent_memory:
                memory_fraction = instance_memory / parent_memory
            if sm_fraction is None or memory_fraction is None:
                dev.static_errors["mig_shares"] = (
                    f"NVML gave {compute_slices} of {slots} compute slices and {attributes.memorySizeMB} MiB of "
                    f"{(parent_memory or 0) / MIB_BYTES:.0f} MiB: no share to scale the GPU's peaks by")
        dev.name = f"{parent.name} · MIG {profile or 'device'} (GPU {parent.index})"
        dev.mig = MigInstance(
            parent_index=parent.index, parent_name=parent.name, profile=profile,
            gpu_instance_id=int(gpu_instance) if gpu_instance is not None else None,
            compute_instance_id=int(compute_instance) if compute_instance is not None else None,
            sm_count=int(attributes.multiprocessorCount) if attributes is not None else None,
            sm_fraction=sm_fraction, memory_fraction=memory_fraction)
        return dev

    # -- per poll ------------------------------------------------------------------------------------

    def poll(self, dev: DeviceState) -> GpuSample:
        """A MIG device's own readings: its memory and its processes. Power, clocks, temperature,
        PCIe and NVLink belong to the whole GPU (its parent's sample); utilisation and GPM are not
        given per instance by these calls."""
        parent = dev.parent
        if dev.lost or (parent is not None and parent.lost):
            dev.lost = True
            return lost_sample(dev)
        values: dict[str, float] = dict(dev.static_values)
        errors: dict[str, str] = dict(dev.static_errors)
        processes: tuple[GpuProcess, ...] = ()
        try:
            memory = read_fields(self._calls, dev, errors, ("memory_used_bytes",), "nvmlDeviceGetMemoryInfo")
            if memory is not None:
                values["memory_used_bytes"] = float(memory.used)
                values["memory_total_bytes"] = float(memory.total)
                errors.pop("memory_total_bytes", None)
            if self._processes is not None:
                processes = self._processes.read(dev, errors)
        except NvmlCallFailed:
            dev.lost = True
            return lost_sample(dev)
        whole_gpu = f"per GPU, not per MIG device: see GPU {parent.index}" if parent is not None else \
            "per GPU, not per MIG device"
        for name in GPU_FIELDS:
            if name not in values and name not in errors:
                errors[name] = whole_gpu
        return GpuSample(index=dev.index, name=dev.name, uuid=dev.uuid, source=SOURCE_NAME, values=values,
                         errors=errors, processes=processes, compute_capability=dev.compute_capability,
                         mig=dev.mig)
