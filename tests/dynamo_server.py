"""A real NVIDIA Dynamo deployment for tests: its HTTP frontend and N "mocker" workers, on the CPU.

The mocker is Dynamo's own simulated engine: a real Dynamo worker process (runtime, request plane,
discovery, system-port /metrics) whose engine only simulates the timing of a vLLM-style scheduler, so
it needs no GPU and no weights, only a model folder with a config and a tokenizer. Everything runs
without etcd or NATS: discovery is a private directory (DYN_FILE_KV), the request plane is TCP and the
event plane ZMQ. Dynamo lives in its own venv (tests/setup_dynamo_venv.sh creates it); its
interpreter is found from SPECWATCH_DYNAMO_PYTHON, or ~/.cache/specwatch/dynamo-venv.

The model folder: any local Hugging Face-style folder with config.json and a tokenizer. The tiny
random Llama of tests/tiny_model.py does; `build_tiny_model(out)` builds it with the Dynamo venv's
Python (which has tokenizers, safetensors and numpy). HF_HUB_OFFLINE=1 is set: nothing is fetched.

    with DynamoDeployment(build_tiny_model(tmp / "tiny"), roles=["aggregated"]) as d:
        d.complete("one two three", max_tokens=16)
        frontend = d.frontend_metrics()      # dynamo_frontend_* and dynamo_component_router_*
        worker = d.worker_metrics(0)         # dynamo_component_* and vllm:* (from the mocker)
        d.kill_worker(0)                     # SIGKILL; the frontend drops it within ~10 s

Roles: "aggregated" (a normal worker), "prefill" and "decode" (a disaggregated pair: the frontend
detects the prefill worker and routes each request prefill-then-decode). Start-up takes under a
second on two cores (0.6-0.7 s measured); the wait is still generous, a failed start is retried once
on fresh ports, and the logs of every process are printed whenever it fails.

Ports: Dynamo 1.6 refuses a DYN_SYSTEM_PORT above 32767, so every port here is drawn from
20000-32000 (one that binds now). Each worker's system port is bound to 127.0.0.1 (DYN_SYSTEM_HOST).
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

import vllm_server

HERE = Path(__file__).parent
DEFAULT_VENV = Path.home() / ".cache" / "specwatch" / "dynamo-venv"
START_TIMEOUT_S = 300.0
ROLES = ("aggregated", "prefill", "decode")
LOW_PORTS = (20000, 32000)  # DYN_SYSTEM_PORT must stay below 32768 in Dynamo 1.6
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WORKER_ID = re.compile(r'^dynamo_component_uptime_seconds\{worker_id="([0-9a-f]+)"\}', re.MULTILINE)


def dynamo_python() -> str | None:
    """The interpreter of the Dynamo venv, or None when there is none."""
    explicit = os.environ.get("SPECWATCH_DYNAMO_PYTHON")
    candidate = Path(explicit) if explicit else DEFAULT_VENV / "bin" / "python"
    return str(candidate) if candidate.exists() else None


_taken: set[int] = set()  # ports handed out in this process: two deployments never share one


def low_free_port() -> int:
    """A port in 20000-32000 that binds now on every interface (workers' ZMQ and request-plane
    sockets bind 0.0.0.0), not handed out before by this process."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randint(*LOW_PORTS)
        if port in _taken:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("0.0.0.0", port))
        except OSError:
            continue
        _taken.add(port)
        return port
    raise RuntimeError(f"no free port in {LOW_PORTS[0]}-{LOW_PORTS[1]}")


def build_tiny_model(out: Path, python: str | None = None) -> Path:
    """tests/tiny_model.py's tiny Llama (config, tokenizer, random weights) in `out`, built with
    `python` (default: the Dynamo venv's), unless it is there already."""
    python = python or dynamo_python()
    if python is None:
        raise RuntimeError("no Python to build the tiny model with: set SPECWATCH_DYNAMO_PYTHON")
    if not (out / "tokenizer.json").exists():
        subprocess.run([python, str(HERE / "tiny_model.py"), str(out)], check=True, capture_output=True,
                       text=True, timeout=300)
    return out


class _Proc:
    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None


class DynamoDeployment:
    """One Dynamo frontend and one mocker process per entry of `roles`, sharing a private discovery
    directory. `frontend_url` is the OpenAI API and the frontend's /metrics; `worker_urls[i]` is
    worker i's system port (its /metrics, /health)."""

    def __init__(
        self,
        model: Path,
        roles: Sequence[str] = ("aggregated",),
        served_name: str = "tiny",
        python: str | None = None,
        log_dir: Path | None = None,
        router_mode: str = "round-robin",
        mocker_args: Sequence[str] = (),
        frontend_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        bad = [r for r in roles if r not in ROLES]
        if bad or not roles:
            raise ValueError(f"roles must be a non-empty list of {ROLES}, not {list(roles)}")
        self.model = Path(model)
        if not (self.model / "config.json").is_file():
            # a name that is not a local folder makes Dynamo try a hub download, HF_HUB_OFFLINE or not
            raise ValueError(f"{self.model} is not a local model folder (no config.json)")
        self.roles = list(roles)
        self.served_name = served_name
        self.router_mode = router_mode
        self.mocker_args = list(mocker_args)  # e.g. ["--speedup-ratio", "10"]
        self.frontend_args = list(frontend_args)
        self.env = dict(env or {})
        self.python = python or dynamo_python()
        if self.python is None:
            raise RuntimeError("no Dynamo venv: set SPECWATCH_DYNAMO_PYTHON or run tests/setup_dynamo_venv.sh")
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="specwatch-dynamo-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.kv_dir: Path | None = None
        self.frontend: _Proc | None = None
        self.workers: list[_Proc] = []
        self._starts = 0
        self._ports()

    def _ports(self) -> None:
        """Fresh ports for every process (a retry never reuses a port the failed try had)."""
        if self.frontend is None:
            self.frontend = _Proc("frontend", low_free_port())
            self.workers = [_Proc(f"{role}{i}", low_free_port()) for i, role in enumerate(self.roles)]
            return
        for p in [self.frontend, *self.workers]:
            p.port = low_free_port()

    # -- addresses ----------------------------------------------------------------------------

    @property
    def frontend_url(self) -> str:
        return f"http://127.0.0.1:{self.frontend.port}"

    @property
    def worker_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{w.port}" for w in self.workers]

    # -- processes ----------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "ETCD_", "NATS_"))}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", DO_NOT_TRACK="1",
                   DYN_FILE_KV=str(self.kv_dir), NO_COLOR="1")
        env.update(self.env)
        return env

    def _launch(self, p: _Proc, cmd: list[str], env: dict[str, str]) -> None:
        p.log_path = self.log_dir / f"{p.name}-{p.port}-{self._starts}.log"
        with open(p.log_path, "wb") as log:
            # its own session, so stop() ends it with any children, and kill_worker hits only it
            p.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True, cwd=self.log_dir)

    def _spawn(self) -> None:
        self._starts += 1
        self.kv_dir = Path(tempfile.mkdtemp(prefix="kv-", dir=self.log_dir))
        planes = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
        self._launch(self.frontend, [
            self.python, "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
            "--http-port", str(self.frontend.port), *planes, "--router-mode", self.router_mode,
            *self.frontend_args,
        ], self._base_env())
        for w, role in zip(self.workers, self.roles):
            mode = {"aggregated": "agg"}.get(role, role)
            env = dict(self._base_env(), DYN_SYSTEM_PORT=str(w.port), DYN_SYSTEM_HOST="127.0.0.1")
            self._launch(w, [
                self.python, "-m", "dynamo.mocker", "--model-path", str(self.model),
                "--model-name", self.served_name, "--disaggregation-mode", mode, *planes,
                *self.mocker_args,
            ], env)

    def _exited(self) -> str | None:
        for p in [self.frontend, *self.workers]:
            if p.proc is not None and p.proc.poll() is not None:
                return f"{p.name} exited with {p.proc.returncode}"
        return None

    def ready(self) -> bool:
        """/v1/models lists the model, every worker's /metrics answers 200, and the frontend's
        /health lists every worker's `generate` endpoint (so a prefill worker is routed to, too)."""
        try:
            models = httpx.get(self.frontend_url + "/v1/models", timeout=2.0).json()
            if self.served_name not in {m.get("id") for m in models.get("data", [])}:
                return False
            health = httpx.get(self.frontend_url + "/health", timeout=2.0).json()
            routed = {int(i["instance_id"]) for i in health.get("instances", []) if i.get("endpoint") == "generate"}
            for i in range(len(self.workers)):
                wid = self.worker_id(i)
                if wid is None or int(wid, 16) not in routed:
                    return False
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return False
        return True

    def _wait_ready(self, timeout_s: float) -> str | None:
        """None when ready, else why not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            why = self._exited()
            if why:
                return why
            if self.ready():
                return None
            time.sleep(0.5)
        return f"not ready after {timeout_s:.0f} s"

    def start(self, timeout_s: float = START_TIMEOUT_S, retries: int = 1) -> DynamoDeployment:
        for attempt in range(retries + 1):
            self._spawn()
            why = self._wait_ready(timeout_s)
            if why is None:
                return self
            log = self.log_tail()
            self.stop()
            print(f"Dynamo failed to start (attempt {attempt + 1}: {why}); its logs:\n{log}", file=sys.stderr)
            self._ports()
        raise RuntimeError(f"Dynamo did not start after {retries + 1} attempts; logs:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Workers first, then the frontend (SIGTERM, SIGKILL after `timeout_s`)."""
        from specwatch.sweep import stop_process_group

        for p in [*self.workers, self.frontend]:
            stop_process_group(p.proc, timeout_s)
            p.proc = None

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i (its process group): no deregistration, the frontend finds out by itself
        (its requests fail at once, the model is dropped when the discovery entry expires, ~10 s)."""
        p = self.workers[i]
        if p.proc is None:
            return
        try:
            os.killpg(p.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.proc.wait(timeout=10)

    def worker_alive(self, i: int) -> bool:
        p = self.workers[i].proc
        return p is not None and p.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for p in [self.frontend, *self.workers]:
            if p.log_path is None or not p.log_path.exists():
                out.append(f"--- {p.name}: (no log)")
                continue
            text = _ANSI.sub("", p.log_path.read_text(errors="replace"))
            out.append(f"--- {p.name} ({p.log_path.name}):\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(out)

    def __enter__(self) -> DynamoDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- driving and reading it ----------------------------------------------------------------

    def complete(self, prompt: str, max_tokens: int = 32) -> dict:
        """A completion through the frontend. The mocker emits token ids, not text: `text` is ""
        and usage.completion_tokens is `max_tokens`."""
        r = httpx.post(self.frontend_url + "/v1/completions", timeout=120.0, json={
            "model": self.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
        })
        r.raise_for_status()
        return r.json()

    def complete_streamed(self, prompt: str, max_tokens: int = 32) -> int:
        """A streamed completion read to its end; the number of `data:` lines (with [DONE])."""
        chunks = 0
        with httpx.stream("POST", self.frontend_url + "/v1/completions", timeout=120.0, json={
            "model": self.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "stream": True,
        }) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                chunks += line.startswith("data: ")
        return chunks

    def frontend_metrics(self) -> str:
        r = httpx.get(self.frontend_url + "/metrics", timeout=30.0)
        r.raise_for_status()
        return r.text

    def worker_metrics(self, i: int) -> str:
        r = httpx.get(self.worker_urls[i] + "/metrics", timeout=30.0)
        r.raise_for_status()
        return r.text

    def worker_id(self, i: int) -> str | None:
        """Worker i's id as its own /metrics writes it (16 hex digits, the `worker_id` label of its
        dynamo_component_* series), or None when it does not answer. The frontend writes the same
        id in decimal on dynamo_frontend_worker_last_*: str(int(hex_id, 16))."""
        try:
            m = _WORKER_ID.search(self.worker_metrics(i))
        except httpx.HTTPError:
            return None
        return m.group(1) if m else None


# The load: vllm_server's, which drives anything with complete() and complete_streamed() (here the
# frontend's OpenAI API)
Traffic = vllm_server.Traffic
