"""The compute processes on a device (a GPU or a MIG device): their pids and GPU memory from NVML,
their names from /proc, as an operator recognises them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from specwatch.collectors.nvml_calls import NvmlCallFailed, NvmlCalls
from specwatch.collectors.nvml_device import DeviceState
from specwatch.telemetry.snapshot import GpuProcess

_PYTHON_NAMES = ("python", "pypy")


def process_display_name(comm: str | None, cmdline: Sequence[str]) -> str:
    """A name an operator recognises: "VLLM::EngineCore", "python3: vllm", "python3: sglang.launch_server".

    /proc/<pid>/comm is cut at 15 characters, which truncates setproctitle names such as vLLM's
    "VLLM::EngineCore"; the full name is then argv[0]. A bare interpreter name says nothing, so
    append the script or `-m` module it runs.
    """
    comm = (comm or "").strip()
    argv0 = cmdline[0] if cmdline else ""
    if comm and len(comm) == 15 and argv0.startswith(comm) and argv0.split():
        return argv0.split()[0]
    name = comm or os.path.basename(argv0)
    if not name:
        return ""
    if name.startswith(_PYTHON_NAMES) and len(cmdline) > 1:
        args = list(cmdline[1:])
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-m" and i + 1 < len(args):
                return f"{name}: {args[i + 1]}"
            if arg.startswith("-m") and len(arg) > 2:
                return f"{name}: {arg[2:]}"
            if arg == "-c":  # inline code: nothing more telling than the interpreter
                return name
            if arg in ("-X", "-W"):  # options that take a value
                i += 2
                continue
            if arg.startswith("-"):
                i += 1
                continue
            return f"{name}: {os.path.basename(arg)}"
    return name


def read_process_name(pid: int, proc_root: str = "/proc") -> str:
    """The display name of a host process, or "pid not visible" (another PID namespace)."""
    base = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(base, "comm"), encoding="utf-8", errors="replace") as f:
            comm = f.read().strip()
    except OSError:
        return "pid not visible"
    cmdline: list[str] = []
    try:
        with open(os.path.join(base, "cmdline"), "rb") as f:
            raw = f.read()
        cmdline = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    except OSError:
        pass
    return process_display_name(comm, cmdline) or "pid not visible"


class ProcessReader:
    """Lists a device's compute processes, largest GPU memory first, named from `proc_root`."""

    def __init__(self, calls: NvmlCalls, proc_root: str = "/proc") -> None:
        self._calls = calls
        self._proc_root = proc_root

    def read(self, dev: DeviceState, errors: dict[str, str]) -> tuple[GpuProcess, ...]:
        """The processes, or () with errors["processes"] set; raises NvmlCallFailed only when the
        GPU is lost."""
        try:
            procs = self._calls.call("nvmlDeviceGetComputeRunningProcesses", dev.handle)
        except NvmlCallFailed as failed:
            if failed.lost:
                raise
            errors["processes"] = failed.reason
            return ()
        out = []
        for p in procs:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(pid=pid, name=read_process_name(pid, self._proc_root),
                                  used_memory_bytes=int(used) if used is not None else None))
        return tuple(sorted(out, key=lambda p: -(p.used_memory_bytes or 0)))
