"""What `specwatch watch` costs as a real process in a real terminal, beside a peer in the same run.

    python benchmarks/bench_terminal.py [--seconds 60] [--settle 10] [--sizes 80x24,160x45]
                                        [--engines 1,8] [--vllmstat PATH] [--profile DIR]
                                        [--baseline-python PYTHON] [--py-spy PATH]

A loopback HTTP server serves the real vLLM 0.32 payload in tests/data/ with its counters moving on
every scrape (each counter and histogram sample grows by 1 % of its captured value per scrape, so
rates stay constant and histograms stay cumulative), and an 8-engine version of it (the samples of
engine 0 repeated for engines 0–7) with an 8-GPU dcgm-exporter payload (the captured L4 lines
repeated for GPUs 0–7, their utilisation moving). For each terminal size and engine count,
`specwatch watch --interval 1` runs in a tmux session of that size; when a vllmstat executable is
found (--vllmstat, or `vllmstat` on PATH) it runs in a second tmux session of the same size,
polling the same server, during the same minute. After --settle seconds of start-up, the CPU ticks
(utime + stime) of each process tree are read from /proc, again --seconds later: the share of one
core each took, and the ratio specwatch / vllmstat. Prints one JSON object.

The machine's other load slows both the same way within one run: quote the ratio. It is a
benchmark, not a test: it asserts nothing. With --profile DIR, specwatch runs under cProfile and
writes DIR/specwatch-ENGINESe-WxH.prof (its CPU figures then include the profiler's overhead, and
the profile its start-up). With --py-spy PATH (py-spy, installed apart: `pip install py-spy`), each
specwatch (this one and the baseline) is sampled over the measured span alone, without stopping it,
and the case gets `*_profile_split`: the share of the samples whose innermost Python frame lies in
each part (the scrape, the parse, the window, the advisor, specwatch's views, Textual and Rich, the
event loop), and that share of the measured CPU in ms per second: where the CPU goes once it has
started (py-spy leaves out threads that wait, so the samples follow the CPU ticks).

vllmstat is installed in a virtual environment of its own, outside the repository:
    python3 -m venv VENV && VENV/bin/pip install vllmstat
    python benchmarks/bench_terminal.py --vllmstat VENV/bin/vllmstat

To measure a change, run the specwatch it changes beside it in the same minute (--baseline-python:
an interpreter whose environment has the other specwatch installed, which runs from a directory of
its own so that it imports that one):
    git worktree add ../base BASE && python3 -m venv BASEVENV && BASEVENV/bin/pip install ../base
    python benchmarks/bench_terminal.py --baseline-python BASEVENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
VLLM_PAYLOAD = DATA / "vllm-0.32-cpu-ngram-k4.metrics.txt"
DCGM_PAYLOAD = DATA / "dcgm-exporter-L4-idle.prom"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SAMPLE = re.compile(r"^([^\s{]+)(\{[^}]*\})?\s+(\S+)(.*)$")
GROWTH_PER_SCRAPE = 0.01


class MovingPayload:
    """A captured exposition whose counters grow on every render; gauges named in `wobble` move
    around their captured value."""

    def __init__(self, text: str, wobble: tuple[str, ...] = ()) -> None:
        self.parts: list[tuple[str, float, str]] = []  # (text before the value, value, how it moves)
        counters: set[str] = set()
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                if kind in ("counter", "histogram", "summary"):
                    counters.add(name)
            match = SAMPLE.match(line) if not line.startswith("#") else None
            if match is None:
                self.parts.append((line + "\n", 0.0, "text"))
                continue
            name, labels, value, rest = match.groups()
            family = re.sub(r"(_total|_bucket|_sum|_count)$", "", name)
            moving = "counter" if (family in counters or name in counters) and not name.endswith("_created") \
                else "wobble" if any(name.startswith(w) for w in wobble) else "still"
            self.parts.append((f"{name}{labels or ''} ", float(value), moving))
        self.scrapes = 0

    def render(self) -> bytes:
        self.scrapes += 1
        n = self.scrapes
        out = []
        for prefix, value, moving in self.parts:
            if moving == "text":
                out.append(prefix)
            elif moving == "counter":
                out.append(f"{prefix}{value * (1 + GROWTH_PER_SCRAPE * n)!r}\n")
            elif moving == "wobble":
                out.append(f"{prefix}{value * (1 + 0.2 * ((n % 7) - 3) / 3) + (n % 5)!r}\n")
            else:
                out.append(f"{prefix}{value!r}\n")
        return "".join(out).encode()


def eight_engines(text: str) -> str:
    """The payload with every engine="0" sample repeated for engines 0–7, under one HELP/TYPE."""
    out = []
    for line in text.splitlines():
        if 'engine="0"' in line and not line.startswith("#"):
            out.extend(line.replace('engine="0"', f'engine="{i}"') for i in range(8))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def eight_gpus(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith("DCGM_FI") and 'gpu="0"' in line:
            for i in range(8):
                out.append(line.replace('gpu="0"', f'gpu="{i}"').replace("GPU-c2f76b33", f"GPU-c2f76b3{i}")
                           .replace('device="nvidia0"', f'device="nvidia{i}"'))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


class LoopbackServer:
    """/metrics, /8/metrics (eight engines) and /dcgm/metrics (eight GPUs) on 127.0.0.1."""

    def __init__(self) -> None:
        vllm = VLLM_PAYLOAD.read_text()
        wobble = ("vllm:num_requests_running", "vllm:kv_cache_usage_perc")
        self.routes = {
            "/metrics": MovingPayload(vllm, wobble),
            "/8/metrics": MovingPayload(eight_engines(vllm), wobble),
            "/dcgm/metrics": MovingPayload(eight_gpus(DCGM_PAYLOAD.read_text()),
                                   ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE")),
        }
        self.lock = threading.Lock()
        routes, lock = self.routes, self.lock

        class Handler(BaseHTTPRequestHandler):
            # keep-alive, as vLLM's uvicorn serves /metrics: a client that keeps its connection
            # open is not charged a TCP handshake per poll
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
                payload = routes.get(self.path.split("?")[0])
                if payload is None:
                    self.send_error(404)
                    return
                with lock:
                    body = payload.render()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, utime + stime in ticks) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _live_processes() -> dict[int, tuple[int, int]]:
    """Every live process: pid → (parent pid, CPU ticks)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(int(entry))
            if s is not None:
                stats[int(entry)] = s
    return stats


def process_tree(root: int, stats: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """`root` and its live descendants, nearest first."""
    stats = _live_processes() if stats is None else stats
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tree, i = [root], 0
    while i < len(tree):
        tree.extend(children.get(tree[i], ()))
        i += 1
    return tree


def tree_ticks(root: int) -> int:
    """CPU ticks of `root` and every live descendant."""
    stats = _live_processes()
    return sum(stats[pid][1] for pid in process_tree(root, stats) if pid in stats)


class TmuxPane:
    """A command in a detached tmux session of its own, on a server of its own."""

    def __init__(self, command: list[str], width: int, height: int, env: dict[str, str],
                 cwd: Path | None = None) -> None:
        self.socket = f"specwatch-bench-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={_quote(v)}" for k, v in env.items())
        line = f"exec env {exports} " + " ".join(_quote(c) for c in command)
        where = ["-c", str(cwd)] if cwd is not None else []
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", "bench",
                        "-x", str(width), "-y", str(height), *where, line], check=True)
        out = subprocess.run(["tmux", "-L", self.socket, "list-panes", "-t", "bench", "-F", "#{pane_pid}"],
                             check=True, capture_output=True, text=True).stdout
        self.pid = int(out.split()[0])

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t", "bench"],
                              capture_output=True, text=True).stdout

    def capture_output(self, path: Path | None) -> None:
        """Append what the program writes to its terminal from now on to `path` (tmux pipe-pane);
        None stops it."""
        command = ["tmux", "-L", self.socket, "pipe-pane", "-t", "bench"]
        if path is not None:
            command += ["-o", f"cat >> {_quote(str(path))}"]
        subprocess.run(command, check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "bench", "q"], capture_output=True)
        time.sleep(1.0)
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def imported_specwatch(python: str, cwd: Path | None) -> str | None:
    """Where `python -m specwatch` started in `cwd` imports specwatch from (`python -m` puts the
    directory it starts in first on the path: from a checkout's root, that checkout), or None."""
    result = subprocess.run([python, "-c", "import specwatch; print(specwatch.__file__)"], cwd=cwd,
                            capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None


# The parts of a sampled profile, by the file of a sample's innermost Python frame (first match).
PROFILE_PARTS = (
    ("scrape (httpx, httpcore, h11, sockets)", ("/httpx/", "/httpcore/", "/h11/", "/anyio/", "/socket.py", "/ssl.py")),
    # An editable install runs collectors/ and widgets/ from the checkout, and py-spy names them
    # without the specwatch/ above them. prometheus_client's text parser is what a payload with odd
    # lines falls back to, and what older trees parsed with.
    ("parse (exposition, collectors)", ("/specwatch/exposition", "/specwatch/collectors/", "/collectors/",
                                        "/specwatch/sources", "/prometheus_client/parser")),
    ("window and figures", ("/specwatch/window", "/specwatch/figures", "/specwatch/health")),
    ("advisor and model", ("/specwatch/advisor", "/specwatch/perf/", "/specwatch/monitor", "/specwatch/verdict",
                           "/specwatch/gpu_events", "/specwatch/sweep_evidence", "/specwatch/hardware")),
    ("views (specwatch's app and widgets)", ("/specwatch/", "/widgets/")),
    ("Textual and Rich (layout, paint, compositor)", ("/textual/", "/rich/")),
    ("event loop (asyncio, selectors, threads)", ("/asyncio/", "/selectors.py", "/threading.py", "/concurrent/")),
)


def python_pid(pid: int) -> int:
    """The Python process of a pane: the pane's own process, or the nearest of its descendants that
    is one (a shell may stand between)."""
    for current in process_tree(pid):
        try:
            if b"python" in Path(f"/proc/{current}/cmdline").read_bytes().split(b"\0")[0]:
                return current
        except OSError:
            continue
    return pid


def profile_split(raw: Path) -> dict[str, object]:
    """py-spy's raw stacks ("frame;frame;... count", innermost last) as each part's share."""
    counts = dict.fromkeys([name for name, _ in PROFILE_PARTS] + ["other"], 0)
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        # "function (path:line)", the path relative to its package root or a full one
        where = "/" + (leaf[leaf.rfind("(") + 1:] if "(" in leaf else leaf)
        part = next((name for name, marks in PROFILE_PARTS if any(m in where for m in marks)), "other")
        counts[part] += int(count)
        total += int(count)
    return {"samples": total,
            "share_pct": {name: round(100 * n / total, 1) for name, n in counts.items() if n} if total else {}}


def run_case(server: LoopbackServer, engines: int, width: int, height: int, args: argparse.Namespace,
             vllmstat: str | None) -> dict[str, object]:
    url = server.url("/metrics" if engines == 1 else "/8/metrics")
    gpu_flags = ["--no-dcgm"] if engines == 1 else ["--dcgm", server.url("/dcgm/metrics")]
    python = [sys.executable]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        python += ["-m", "cProfile", "-o", str(args.profile / f"specwatch-{engines}e-{width}x{height}.prof")]
    watch = ["-m", "specwatch", "watch", "--url", url, "--interval", "1", "--no-nvml", *gpu_flags]
    env = {"TERM": "xterm-256color", "COLORTERM": "truecolor", "LANG": "C.UTF-8"}
    written = Path(tempfile.mkdtemp(prefix="specwatch-bench-"))
    panes = {"specwatch": TmuxPane(python + watch, width, height, env)}
    if args.baseline_python:
        panes["baseline"] = TmuxPane([args.baseline_python, *watch], width, height, env, cwd=written)
    if vllmstat:
        base = url[: -len("/metrics")]
        panes["vllmstat"] = TmuxPane([vllmstat, "-u", base, "-i", "1", "--no-gpu", *args.vllmstat_args.split()],
                                     width, height, env)
    try:
        time.sleep(args.settle)
        for name, p in panes.items():
            p.capture_output(written / name)
        samplers = {}
        if args.py_spy:
            for name in ("specwatch", "baseline"):
                if name in panes:
                    raw = written / f"{name}.spy"
                    samplers[name] = (raw, subprocess.Popen(
                        [args.py_spy, "record", "--pid", str(python_pid(panes[name].pid)), "--duration",
                         str(max(1, round(args.seconds))), "--rate", "500", "--nonblocking", "--format", "raw",
                         "--output", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        before = {name: tree_ticks(p.pid) for name, p in panes.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        after = {name: tree_ticks(p.pid) for name, p in panes.items()}
        wall = time.monotonic() - t0
        splits = {}
        for name, (raw, sampler) in samplers.items():
            sampler.wait(timeout=60)
            splits[name] = profile_split(raw) if raw.exists() else {"error": f"py-spy exited {sampler.returncode}"}
        for p in panes.values():
            p.capture_output(None)
        screens = {name: p.screen() for name, p in panes.items()}
        # what each wrote to its terminal: what an SSH session carries and a terminal emulator parses
        sizes = {name: (written / name).stat().st_size if (written / name).exists() else 0 for name in panes}
    finally:
        for p in panes.values():
            p.close()
        shutil.rmtree(written, ignore_errors=True)
    result: dict[str, object] = {"engines": engines, "size": f"{width}x{height}", "seconds": round(wall, 1)}
    for name in panes:
        result[f"{name}_core_pct"] = round(100 * (after[name] - before[name]) / TICKS_PER_S / wall, 2)
        result[f"{name}_terminal_bytes_per_s"] = round(sizes[name] / wall)
        # a pane that shows a traceback or an error measured nothing: show its top lines to tell
        result[f"{name}_screen_top"] = [line.rstrip() for line in screens[name].splitlines() if line.strip()][:2]
        if name in splits:
            split = splits[name]
            core_pct = float(result[f"{name}_core_pct"])  # type: ignore[arg-type]
            # each part's CPU in ms per second of the span: its share of the samples of the CPU measured
            split["ms_per_s"] = {part: round(share * core_pct / 10, 2)
                                 for part, share in split.get("share_pct", {}).items()}
            result[f"{name}_profile_split"] = split
    for ratio, (ours, theirs) in RATIOS.items():
        if result.get(theirs):  # the other program ran, and measured something
            result[ratio] = round(float(result[ours]) / float(result[theirs]), 3)  # type: ignore[arg-type]
    return result


# The ratios each case reports, where the other program ran: (specwatch's figure, the other's).
RATIOS = {
    "ratio_specwatch_to_vllmstat": ("specwatch_core_pct", "vllmstat_core_pct"),
    "ratio_specwatch_to_baseline": ("specwatch_core_pct", "baseline_core_pct"),
    "ratio_terminal_bytes_specwatch_to_vllmstat": ("specwatch_terminal_bytes_per_s", "vllmstat_terminal_bytes_per_s"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured span (default 60)")
    parser.add_argument("--settle", type=float, default=10.0, help="start-up left out first (default 10)")
    parser.add_argument("--sizes", default="80x24,160x45")
    parser.add_argument("--engines", default="1,8")
    parser.add_argument("--vllmstat", help="the vllmstat executable (default: vllmstat on PATH, if any)")
    parser.add_argument("--vllmstat-args", default="",
                        help="more arguments for vllmstat (it is run with -u URL -i 1 --no-gpu)")
    parser.add_argument("--profile", type=Path, help="run specwatch under cProfile, writing .prof files here")
    parser.add_argument("--py-spy", metavar="PATH",
                        help="py-spy, to sample each specwatch over the measured span (its profile split)")
    parser.add_argument("--baseline-python",
                        help="an interpreter with another specwatch installed, run beside this one (a base commit)")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print(json.dumps({"error": "tmux is not installed"}))
        return 1
    if args.baseline_python:
        ours, theirs = imported_specwatch(sys.executable, None), imported_specwatch(args.baseline_python, Path("/"))
        if theirs is None or theirs == ours:
            print(json.dumps({"error": f"the baseline interpreter imports {theirs or 'no specwatch'}, and this "
                                       f"run imports {ours}: the baseline must be another specwatch"}))
            return 1
    vllmstat = args.vllmstat or shutil.which("vllmstat")
    server = LoopbackServer()
    results = []
    try:
        for engines in (int(e) for e in args.engines.split(",")):
            for size in args.sizes.split(","):
                width, height = (int(v) for v in size.lower().split("x"))
                results.append(run_case(server, engines, width, height, args, vllmstat))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        server.close()
    print(json.dumps({"vllmstat": vllmstat, "cases": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
