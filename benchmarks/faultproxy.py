"""A fault-injecting HTTP proxy between `specwatch export` (or `record`) and an engine's /metrics.

    python benchmarks/faultproxy.py --seed 7 --minutes 30 --print-schedule     # the schedule, as JSON
    python benchmarks/faultproxy.py --schedule FILE [--upstream http://vllm:8000] [--port N]

The upstream is a real server's base URL (--upstream), or, by default, the "moving capture": the
real vLLM 0.32 payload of tests/data whose counters grow on every scrape (bench_terminal.py's
MovingPayload), with /version and the captured /server_info beside it.

Faults follow a seeded, replayable schedule: a list of (start_s, duration_s, kind) windows counted
from the proxy's start, generated from a seed (Schedule.generate), printable as JSON and loadable
from it (Schedule.from_json). Each kind, how it is injected, and what the agent must say:

    kind        injected                                                   target_up while it lasts
    latency     each answer held 0.25 x the agent's --timeout, then sent   1 (slow, still inside the deadline)
    stall       the request read, nothing answered for 3 x --timeout       0 (timeout)
    reset       the request read, the socket closed with SO_LINGER 0: RST  0
    http_5xx    503 Service Unavailable                                    0 (http_5xx)
    truncated   Content-Length of the whole body, half of it sent, closed  0
    slow_drip   the body in 8 pieces, one each --timeout/4 (every read is  0 (timeout: only the whole-request
                inside the per-read timeout, the whole is twice over it)     deadline can stop it)
    oversize    more than the agent's --max-bytes: a chunked body with no  0 (payload_too_large)
                length in even windows, a Content-Length over it in odd
    restart     the capture's counters back to their starting values once  1 (a restart is not an outage)
    port_dead   the listening socket closed (and every open connection),   0 (connection_refused)
                reopened on the same port when the window ends
    dns         the agent's host name removed from the private /etc/hosts  0 (dns_failure)
                of its mount namespace (HostsFile), open connections
                closed so that the next poll must resolve it again
    gpu_lost    a file appears that the NVML double in the agent reads     1 (the engine still answers);
                (nvml_site/sitecustomize.py): GPU 1 falls off the bus        specwatch_gpu_lost 1 from then on

A real vLLM cannot be restarted by the proxy: with --upstream the schedule leaves `restart` out.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_terminal import DATA, VLLM_PAYLOAD, MovingPayload  # noqa: E402 - the benchmarks folder, just added

SERVER_INFO = DATA / "vllm-0.32-cpu-ngram-k4.server_info.json"
NVML_SITE = HERE / "nvml_site"  # a sitecustomize that puts the NVML double in a subprocess
TESTS = HERE.parent / "tests"
GPU_LOST_FILE_ENV = "SPECWATCH_SOAK_GPU_LOST_FILE"
TESTS_DIR_ENV = "SPECWATCH_SOAK_TESTS_DIR"
try:
    from specwatch.collectors.transport import DEFAULT_MAX_BYTES
except ImportError:  # run without specwatch installed: the product's cap as of this writing
    DEFAULT_MAX_BYTES = 32 * 1024 * 1024

KINDS = ("latency", "stall", "reset", "http_5xx", "truncated", "slow_drip", "oversize", "restart", "port_dead",
         "dns", "gpu_lost")
# the engine cannot be read while these last: specwatch_target_up must say 0
DOWN_KINDS = frozenset({"stall", "reset", "http_5xx", "truncated", "slow_drip", "oversize", "port_dead", "dns"})
# the engine stays readable: specwatch_target_up must stay 1
UP_KINDS = frozenset({"latency", "restart", "gpu_lost"})
# what the target's state label is expected to say during a window (reported beside what it said)
EXPECTED_STATES = {"stall": "timeout", "http_5xx": "http_5xx", "slow_drip": "timeout", "oversize": "payload_too_large",
                   "port_dead": "connection_refused", "dns": "dns_failure", "reset": "network_error",
                   "truncated": "network_error"}
# NVML has no way back for a GPU that fell off the bus: the collector keeps it lost, so once is enough
ONCE = frozenset({"gpu_lost"})
LATENCY_SHARE = 0.25  # of the agent's timeout
STALL_TIMES = 3.0  # x the agent's timeout
DRIP_PIECES = 8
HOST_NAME = "specwatch-soak-engine"


# ---- the schedule -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fault:
    start_s: float
    duration_s: float
    kind: str

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclasses.dataclass(frozen=True)
class Schedule:
    seed: int | None
    total_s: float
    faults: tuple[Fault, ...]

    @classmethod
    def generate(cls, seed: int, total_s: float, kinds: Iterable[str] = KINDS, *, warmup_s: float = 60.0,
                 tail_s: float = 60.0, down_s: tuple[float, float] = (20.0, 60.0),
                 up_s: tuple[float, float] = (10.0, 30.0), gap_s: tuple[float, float] = (30.0, 90.0),
                 gap_after_up_s: tuple[float, float] | None = None) -> Schedule:
        """Windows from `warmup_s` on, none ending later than `tail_s` before `total_s`: every kind
        once per round, each round in a seeded order; a fault lasts `down_s` (engine unreadable) or
        `up_s`, then a quiet gap (`gap_after_up_s` after a fault the engine stays readable through,
        which needs no time to recover)."""
        kinds = [k for k in KINDS if k in set(kinds)]
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds: {sorted(unknown)}")
        rng = random.Random(seed)
        faults: list[Fault] = []
        t, order, used = warmup_s, [], set()
        while kinds:
            if not order:
                order = [k for k in kinds if not (k in ONCE and k in used)]
                if not order:
                    break
                rng.shuffle(order)
            kind = order.pop()
            duration = rng.uniform(*(down_s if kind in DOWN_KINDS else up_s))
            if t + duration + tail_s > total_s:
                break
            faults.append(Fault(round(t, 1), round(duration, 1), kind))
            used.add(kind)
            gap = gap_s if kind in DOWN_KINDS or gap_after_up_s is None else gap_after_up_s
            t = round(t + duration, 1) + rng.uniform(*gap)
        return cls(seed, float(total_s), tuple(faults))

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "total_s": self.total_s, "faults": [dataclasses.asdict(f) for f in self.faults]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        d = json.loads(text)
        faults = tuple(Fault(float(f["start_s"]), float(f["duration_s"]), str(f["kind"])) for f in d["faults"])
        unknown = {f.kind for f in faults} - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds: {sorted(unknown)}")
        return cls(d.get("seed"), float(d.get("total_s", max((f.end_s for f in faults), default=0.0))), faults)

    def without(self, kinds: Iterable[str]) -> Schedule:
        drop = set(kinds)
        return dataclasses.replace(self, faults=tuple(f for f in self.faults if f.kind not in drop))

    def active(self, t: float) -> tuple[int, Fault] | None:
        """The window (its index and itself) that holds t seconds after the start, if any."""
        for i, f in enumerate(self.faults):
            if f.start_s <= t < f.end_s:
                return i, f
            if f.start_s > t:
                break
        return None


# ---- the upstreams ------------------------------------------------------------------------------


class MovingCapture:
    """The captured vLLM 0.32 payload with its counters growing on every scrape, /version and the
    captured /server_info: an engine without the engine. restart() sets its counters back to their
    starting values, as a restarted vLLM's are."""

    def __init__(self) -> None:
        wobble = ("vllm:num_requests_running", "vllm:kv_cache_usage_perc")
        self.payload = MovingPayload(VLLM_PAYLOAD.read_text(), wobble)
        self.server_info = SERVER_INFO.read_bytes()
        self.lock = threading.Lock()
        self.restarts = 0

    def fetch(self, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        route = path.split("?")[0]
        if route == "/metrics":
            with self.lock:
                return 200, "text/plain; version=0.0.4; charset=utf-8", self.payload.render()
        if route == "/version":
            return 200, "application/json", b'{"version":"0.32.0"}'
        if route == "/server_info":
            return 200, "application/json", self.server_info
        return 404, "application/json", b'{"detail":"Not Found"}'

    def sample(self) -> bytes:
        with self.lock:
            scrapes = self.payload.scrapes
            body = self.payload.render()
            self.payload.scrapes = scrapes
        return body

    def restart(self) -> None:
        with self.lock:
            self.payload.scrapes = 0  # the next render: every counter at its captured (starting) value
            self.restarts += 1

    def describe(self) -> str:
        return f"moving capture of {VLLM_PAYLOAD.name}"


class HttpUpstream:
    """A real server: each GET forwarded on a connection of the proxy thread's own."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"--upstream {url!r}: an http:// base URL")
        self.host, self.port = parts.hostname, parts.port or 80
        self.base = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.local = threading.local()
        self.url = url

    def fetch(self, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        sent = {k: v for k, v in headers.items() if k.lower() in ("accept", "authorization", "user-agent")}
        for attempt in (1, 2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                conn.request("GET", self.base + path, headers=sent)
                r = conn.getresponse()
                return r.status, r.getheader("Content-Type", "text/plain"), r.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    return 502, "text/plain", b"the proxy's upstream did not answer\n"
        raise AssertionError("unreachable")

    def sample(self) -> bytes:
        return self.fetch("/metrics", {})[2]

    def restart(self) -> None:
        raise NotImplementedError("a real server cannot be restarted by the proxy")

    def describe(self) -> str:
        return self.url


# ---- the host name that stops resolving -----------------------------------------------------------


class HostsFile:
    """A private /etc/hosts for the agent, bind-mounted over /etc/hosts in a mount namespace of its
    own (unshare -m as root, unshare -Urm otherwise: no edit of the machine's /etc/hosts). It names
    HOST_NAME 127.0.0.1; `resolving(False)` rewrites it in place (the bind mount holds the inode)
    without that line, and glibc's files backend, which reads the file on every lookup, stops
    resolving it; the dns backend then answers that the name does not exist."""

    def __init__(self, path: Path, name: str = HOST_NAME) -> None:
        self.path, self.name = Path(path), name
        try:
            self.base = Path("/etc/hosts").read_text()
        except OSError:
            self.base = "127.0.0.1 localhost\n"
        if not self.base.endswith("\n"):
            self.base += "\n"
        self.path.write_text(self.base + f"127.0.0.1 {name}\n")
        self.resolves = True

    def resolving(self, on: bool) -> None:
        text = (self.base + f"127.0.0.1 {self.name}\n") if on else self.base
        with open(self.path, "r+") as f:  # in place: a rename would leave the bind mount on the old file
            f.seek(0)
            f.write(text)
            f.truncate()
        self.resolves = on

    def wrap(self, argv: Sequence[str]) -> list[str]:
        flags = "-m" if os.geteuid() == 0 else "-Urm"
        return ["unshare", flags, "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(self.path), *argv]

    def check(self) -> str | None:
        """None when the wrapper works here (the name resolves inside it and stops resolving when
        removed), else why not."""
        if shutil.which("unshare") is None or shutil.which("getent") is None:
            return "unshare or getent is not installed"
        try:
            r = subprocess.run(self.wrap(["getent", "hosts", self.name]), capture_output=True, text=True, timeout=30)
            if r.returncode != 0 or "127.0.0.1" not in r.stdout:
                return f"a private /etc/hosts could not be mounted: {(r.stderr or r.stdout).strip()[:200]}"
            self.resolving(False)
            r = subprocess.run(self.wrap(["getent", "hosts", self.name]), capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                return f"{self.name} still resolves without its line (a DNS server answers for it)"
            return None
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unshare failed: {exc}"
        finally:
            self.resolving(True)


def nvml_double_env(lost_file: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that puts tests/nvml_double.py (two H100s) in place of pynvml in a Python
    subprocess: a sitecustomize on PYTHONPATH; GPU 1 is lost once `lost_file` exists."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(NVML_SITE), env.get("PYTHONPATH", "")) if p)
    env[GPU_LOST_FILE_ENV] = str(lost_file)
    env[TESTS_DIR_ENV] = str(TESTS)
    return env


# ---- the proxy ----------------------------------------------------------------------------------


def _free_port(host: str = "127.0.0.1") -> int:
    """A free port below the ephemeral range (so that no outgoing connection takes it while a
    port_dead window has it closed)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10000, max(10001, low - 1))
        with socket.socket() as s:
            try:
                s.bind((host, port))
                return port
            except OSError:
                continue
    raise OSError("no free port below the ephemeral range")


def _rst(conn: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a reset, not an orderly close."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    conn.close()


class FaultProxy:
    """The proxy. start() binds and starts the schedule's clock; faults follow `schedule` from then."""

    def __init__(self, upstream: Any, schedule: Schedule, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES,
                 host: str = "127.0.0.1", port: int | None = None, hosts: HostsFile | None = None,
                 gpu_lost_file: Path | None = None) -> None:
        self.upstream, self.schedule = upstream, schedule
        self.timeout_s, self.max_bytes = float(timeout_s), int(max_bytes)
        self.host, self.port = host, port or _free_port(host)
        self.hosts, self.gpu_lost_file = hosts, gpu_lost_file
        self.t0 = self.t0_wall = 0.0
        self.events: list[dict[str, Any]] = []  # what the controller did, when
        self.faulted: dict[int, int] = {}  # window index → requests it touched
        self.requests = 0
        self.errors: list[str] = []  # the proxy's own failures (none expected)
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._port_dead = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._oversize_chunk = b""
        self._armed = False

    # -- life ---------------------------------------------------------------------------------------

    def start(self, arm: bool = True) -> FaultProxy:
        """Listen and serve; the schedule's clock starts now, or at arm() (faults wait for it)."""
        self._listener = self._listen()
        sample = self.upstream.sample() or b"# empty\n"
        self._oversize_chunk = (sample * (65536 // len(sample) + 1))[:65536]
        if arm:
            self.arm()
        for target, name in ((self._accept_loop, "faultproxy-accept"), (self._control_loop, "faultproxy-control")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        if self.hosts is not None and not self.hosts.resolves:
            self.hosts.resolving(True)
        self._drop_connections()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}"

    def arm(self) -> None:
        """Start the schedule's clock: window 0 begins its start_s from now."""
        self.t0, self.t0_wall = time.monotonic(), time.time()
        self._armed = True

    def elapsed(self) -> float:
        return time.monotonic() - self.t0 if self._armed else -1.0

    # -- sockets ------------------------------------------------------------------------------------

    def _listen(self) -> socket.socket:
        deadline = time.monotonic() + 10.0
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((self.host, self.port))
            except OSError as exc:
                s.close()
                if time.monotonic() > deadline:
                    raise OSError(f"cannot bind {self.host}:{self.port} again: {exc}") from exc
                time.sleep(0.2)
                continue
            s.listen(128)
            s.settimeout(0.25)  # the accept loop looks at the port_dead flag four times a second
            return s

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            if self._port_dead:
                if self._listener is not None:
                    self._listener.close()  # closed here, in the thread that accepts: nothing blocks on it
                    self._listener = None
                self._stop.wait(0.1)
                continue
            if self._listener is None:
                try:
                    self._listener = self._listen()
                except OSError as exc:
                    self.errors.append(str(exc))
                    self._stop.wait(1.0)
                    continue
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            if self._port_dead:
                # accepted between the window's start (which dropped every connection) and the
                # listener's close: a dead process answers nothing
                _rst(conn)
                continue
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve_guarded, args=(conn,), name="faultproxy-conn", daemon=True).start()

    def _drop_connections(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- the schedule's transitions ----------------------------------------------------------------------

    def _control_loop(self) -> None:
        current: int | None = None
        while not self._stop.wait(0.1):
            hit = self.schedule.active(self.elapsed())
            index = hit[0] if hit else None
            if index == current:
                continue
            if current is not None:
                self._end(current, self.schedule.faults[current])
            if hit is not None:
                self._begin(*hit)
            current = index
        if current is not None:
            self._end(current, self.schedule.faults[current])

    def _event(self, index: int, fault: Fault, what: str) -> None:
        self.events.append({"window": index, "kind": fault.kind, "what": what, "t_s": round(self.elapsed(), 2),
                            "wall": round(time.time(), 3)})

    def _begin(self, index: int, fault: Fault) -> None:
        self._event(index, fault, "begin")
        if fault.kind == "port_dead":
            self._port_dead = True
            self._drop_connections()  # a dead process's connections die with it
            self.faulted[index] = self.faulted.get(index, 0) + 1
        elif fault.kind == "dns":
            if self.hosts is None:
                self.errors.append(f"window {index}: dns without a HostsFile")
                return
            self.hosts.resolving(False)
            self._drop_connections()  # kept-alive connections would never look the name up again
            self.faulted[index] = self.faulted.get(index, 0) + 1
        elif fault.kind == "restart":
            self.upstream.restart()
            self.faulted[index] = self.faulted.get(index, 0) + 1
        elif fault.kind == "gpu_lost":
            if self.gpu_lost_file is None:
                self.errors.append(f"window {index}: gpu_lost without the NVML double")
                return
            Path(self.gpu_lost_file).touch()
            self.faulted[index] = self.faulted.get(index, 0) + 1

    def _end(self, index: int, fault: Fault) -> None:
        self._event(index, fault, "end")
        if fault.kind == "port_dead":
            self._port_dead = False
        elif fault.kind == "dns" and self.hosts is not None:
            self.hosts.resolving(True)

    # -- one connection --------------------------------------------------------------------------

    def _serve_guarded(self, conn: socket.socket) -> None:
        try:
            self._serve(conn)
        except OSError:
            pass  # the client went away, or a window dropped the connection
        except Exception as exc:  # noqa: BLE001 - the proxy's own bug: counted, reported
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._conns.discard(conn)
            try:
                conn.close()
            except OSError:
                pass

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        while not self._stop.is_set():
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                if len(buf) > 65536:
                    return
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            try:
                method, path, _ = lines[0].split(" ", 2)
            except ValueError:
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            keep_alive = headers.get("connection", "").lower() != "close"
            self.requests += 1
            hit = self.schedule.active(self.elapsed())
            kind = hit[1].kind if hit else None
            if hit is not None and hit[1].kind not in ("restart", "port_dead", "dns", "gpu_lost"):
                with self._lock:
                    self.faulted[hit[0]] = self.faulted.get(hit[0], 0) + 1
            if method != "GET":
                self._send(conn, 405, "text/plain", b"GET only\n")
                continue
            if kind == "reset" or self._port_dead:
                # port_dead: a connection that slipped past the window's drop (accepted as it began)
                # dies with the process, as every other one did
                _rst(conn)
                return
            if kind == "stall":
                end = self.t0 + hit[1].end_s  # type: ignore[index]
                self._stop.wait(max(0.0, min(end - time.monotonic(), STALL_TIMES * self.timeout_s)))
                return
            if kind == "http_5xx":
                self._send(conn, 503, "text/plain", b"upstream unavailable\n")
                continue
            if kind == "latency":
                self._stop.wait(LATENCY_SHARE * self.timeout_s)
            status, ctype, body = self.upstream.fetch(path, headers)
            if kind == "truncated":
                self._send(conn, status, ctype, body[: len(body) // 2], length=len(body))
                return
            if kind == "oversize":
                self._oversize(conn, declared=hit[0] % 2 == 1)  # type: ignore[index]
                return
            if kind == "slow_drip":
                self._drip(conn, status, ctype, body)
                continue
            self._send(conn, status, ctype, body)
            if not keep_alive:
                return

    @staticmethod
    def _head(status: int, ctype: str, length: int | None) -> bytes:
        reason = http.client.responses.get(status, "Status")
        framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
        return f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n{framing}\r\n\r\n".encode()

    def _send(self, conn: socket.socket, status: int, ctype: str, body: bytes, length: int | None = None) -> None:
        conn.sendall(self._head(status, ctype, len(body) if length is None else length) + body)

    def _drip(self, conn: socket.socket, status: int, ctype: str, body: bytes) -> None:
        conn.sendall(self._head(status, ctype, len(body)))
        step = -(-len(body) // DRIP_PIECES)
        for i in range(0, len(body), step):
            if self._stop.wait(self.timeout_s / 4):
                return
            conn.sendall(body[i:i + step])

    def _oversize(self, conn: socket.socket, declared: bool) -> None:
        """More than max_bytes: with a Content-Length over the cap (refused on the headers), or
        chunked with no length (only the reader's own count can stop it)."""
        chunk = self._oversize_chunk
        total = self.max_bytes + len(chunk)
        ctype = "text/plain; version=0.0.4"
        conn.sendall(self._head(200, ctype, total if declared else None))
        sent = 0
        framed = chunk if declared else f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        while sent < total and not self._stop.is_set():
            conn.sendall(framed)
            sent += len(chunk)
        if not declared:
            conn.sendall(b"0\r\n\r\n")


# ---- by hand --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--schedule", type=Path, help="a schedule written by --print-schedule (replaces --seed)")
    p.add_argument("--print-schedule", action="store_true", help="print the schedule as JSON and exit")
    p.add_argument("--upstream", help="a real server's base URL (default: the moving capture)")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--timeout", type=float, default=5.0, help="the agent's --timeout (sizes the faults)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="the agent's --max-bytes")
    args = p.parse_args(argv)
    if args.schedule:
        schedule = Schedule.from_json(args.schedule.read_text())
    else:
        schedule = Schedule.generate(args.seed, args.minutes * 60, args.kinds.split(","))
    # by hand there is no private /etc/hosts and no NVML double: those two need soak.py's agent
    schedule = schedule.without({"dns", "gpu_lost"} | ({"restart"} if args.upstream else set()))
    if args.print_schedule:
        print(schedule.to_json())
        return 0
    upstream = HttpUpstream(args.upstream) if args.upstream else MovingCapture()
    with FaultProxy(upstream, schedule, timeout_s=args.timeout, max_bytes=args.max_bytes,
                    port=args.port or None) as proxy:
        print(f"faultproxy: {proxy.url()} -> {upstream.describe()}, {len(schedule.faults)} windows", file=sys.stderr)
        try:
            while proxy.elapsed() < schedule.total_s:
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        print(json.dumps({"events": proxy.events, "faulted": proxy.faulted, "errors": proxy.errors}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Fault", "Schedule", "FaultProxy", "MovingCapture", "HttpUpstream", "HostsFile", "nvml_double_env",
           "KINDS", "DOWN_KINDS", "UP_KINDS", "EXPECTED_STATES", "HOST_NAME"]
