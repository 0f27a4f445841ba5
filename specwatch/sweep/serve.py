"""`serve`: launching vLLM here, without and with speculation (a subprocess, no shell, arguments validated)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Sequence

import httpx

from specwatch.sweep.common import SIDES, SweepError
from specwatch.sweep.report import SweepRecord
from specwatch.sweep.live import Endpoint, LiveSweep, ProgressFn, stderr_progress

__all__ = [
    "sweep_serve",
    "START_TIMEOUT_S",
    "validate_model_argument",
    "validate_speculative_config",
    "validate_serve_args",
    "stop_process_group",
    "LaunchedServer",
]


# Flags the launcher sets itself; a user's extra argument may not set them again.
_RESERVED_SERVE_FLAGS = ("--model", "--port", "--host", "--speculative-config", "--served-model-name")
START_TIMEOUT_S = 900.0


def validate_model_argument(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValueError("--serve needs a model (a Hugging Face id or a local folder)")
    if model.startswith("-") or any(ch in model for ch in "\x00\n\r"):
        raise ValueError(f"not a model name or path: {model!r}")
    return model.strip()


def validate_speculative_config(text: str | dict) -> dict:
    """The --speculative-config JSON as an object with a method or a draft model."""
    if isinstance(text, dict):
        config = text
    else:
        try:
            config = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--speculative-config is not valid JSON: {exc}") from None
    if not isinstance(config, dict) or not config:
        raise ValueError("--speculative-config must be a JSON object, e.g. "
                         '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\'')
    if "method" not in config and "model" not in config:
        raise ValueError("--speculative-config needs a \"method\" (ngram, eagle, mtp, draft_model, ...) or a \"model\"")
    return config


def validate_serve_args(args: Sequence[str]) -> list[str]:
    out = []
    for arg in args:
        if not isinstance(arg, str) or any(ch in arg for ch in "\x00\n\r"):
            raise ValueError(f"not a usable vLLM argument: {arg!r}")
        flag = arg.split("=", 1)[0]
        if flag in _RESERVED_SERVE_FLAGS:
            raise ValueError(f"{flag} is set by specwatch sweep --serve; leave it out of --serve-arg")
        out.append(arg)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process_group(proc: subprocess.Popen | None, timeout_s: float = 30.0) -> None:
    """SIGTERM to a process group started with start_new_session, SIGKILL after `timeout_s`, then
    make sure the group is gone: vLLM's engine core can outlive its API server for a moment."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LaunchedServer:
    """One vLLM API server started here: `python -m vllm.entrypoints.openai.api_server` (the module,
    not the `vllm` script, which some distributions do not install), no shell, its own process
    group so that stopping it also ends its engine-core children."""

    def __init__(self, python: str, model: str, *, speculative_config: dict | None = None,
                 extra_args: Sequence[str] = (), log_path: Path, start_timeout_s: float = START_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> None:
        self.python = python
        self.model = validate_model_argument(model)
        self.speculative_config = None if speculative_config is None else validate_speculative_config(speculative_config)
        self.extra_args = validate_serve_args(extra_args)
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("VLLM_NO_USAGE_STATS", "1")
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
               "--host", "127.0.0.1", "--port", str(self.port)]
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
        return cmd + self.extra_args

    def start(self, progress: ProgressFn = stderr_progress) -> str:
        """Start and wait for /health; SweepError (with the log's tail) when it does not come up."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        progress(f"starting vLLM: {' '.join(self.command())} (log: {self.log_path})")
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise SweepError(f"cannot run {self.python}: {exc.strerror or exc}") from None
        deadline = time.monotonic() + self.start_timeout_s
        started = time.monotonic()
        last_report = started
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise SweepError(f"vLLM exited with status {code} before it was ready; the end of its log:\n"
                                 f"{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                    progress(f"vLLM ready at {self.url} after {time.monotonic() - started:.0f} s")
                    return self.url
            except httpx.HTTPError:
                pass
            if time.monotonic() - last_report >= 30:
                progress(f"… still waiting for vLLM ({time.monotonic() - started:.0f} s)")
                last_report = time.monotonic()
            time.sleep(1.0)
        self.stop()
        raise SweepError(f"vLLM was not ready within {self.start_timeout_s:g} s; the end of its log:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        stop_process_group(self.proc, timeout_s)
        self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


async def sweep_serve(sweep: LiveSweep, servers: dict[str, LaunchedServer], served_model_name: str | None) -> SweepRecord:
    """Launch the baseline, run every tier `plan.repeat` times, stop it; then the same with
    speculation. One server runs at a time here (both may not fit on the GPUs), so the rounds cannot
    be interleaved: round i pairs the i-th run of each side, and a drift between the two launches
    is not cancelled (run two servers and give their URLs for interleaved rounds)."""
    for side in SIDES:
        server = servers[side]
        try:
            url = await asyncio.to_thread(server.start, sweep.progress)
        except SweepError as exc:
            sweep.record.stopped = f"{side}: {exc}"
            return sweep.record
        try:
            endpoint = Endpoint(side, url, served_model_name)
            await sweep.prepare(endpoint)
            sweep.record.servers[side]["command"] = server.command()
            for concurrency in sweep.plan.tiers:
                for _ in range(sweep.plan.repeat):
                    if not await sweep.run_tier(endpoint, concurrency):
                        return sweep.record
        except SweepError as exc:
            sweep.record.stopped = f"{side}: {exc}"
            return sweep.record
        finally:
            sweep.progress(f"stopping the {side} server")
            await asyncio.to_thread(server.stop)
    return sweep.record
