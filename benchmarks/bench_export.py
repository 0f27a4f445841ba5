"""The export agent's own CPU at a 1 Hz poll, measured in one run.

    python benchmarks/bench_export.py [--seconds 60] [--scrape-every 5]

Starts a loopback fake vLLM whose /metrics is the real vLLM 0.32 capture (n-gram k=4) with every
counter, histogram count and sum growing from scrape to scrape (so the window and the advisor do
their full work each poll), starts `specwatch export --url <fake> --interval 1 --no-nvml --no-dcgm`
in a subprocess, scrapes the agent's /metrics every few seconds the way Prometheus would, and reads
the agent's CPU time (user + system, from /proc) over the measured span after a warm-up.

Also prints the agent's resident memory and its peak (what deploy/kubernetes/ sizes the container
from). Budget: at most 0.5 % of one core. Exit status 1 when over it. NVML is off because this machine may
have no GPU; on a GPU node add --nvml to include the NVML thread (its own cost is in bench_nvml.py).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = (ROOT / "tests" / "data" / "vllm-0.32-cpu-ngram-k4.metrics.txt").read_text()
BUDGET_CORE_FRACTION = 0.005
# Cumulative series: counters (_total), histogram buckets, counts and sums. Scaling them all by the
# same growing factor keeps every histogram's buckets cumulative and every rate plausible.
GROWING = re.compile(r"^(vllm:\S*?(?:_total|_bucket|_count|_sum)(?:\{[^}]*\})?) (\S+)$", re.MULTILINE)


def growing_payload(step: int) -> bytes:
    factor = 1.0 + 0.02 * step

    def grow(match: re.Match[str]) -> str:
        if "_created" in match.group(1):
            return match.group(0)
        return f"{match.group(1)} {float(match.group(2)) * factor!r}"

    return GROWING.sub(grow, PAYLOAD).encode()


class FakeVllm:
    def __init__(self) -> None:
        scrapes = [0]

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.startswith("/metrics"):
                    scrapes[0] += 1
                    body, kind = growing_payload(scrapes[0]), "text/plain; version=0.0.4"
                elif self.path.startswith("/version"):
                    body, kind = b'{"version": "0.32.0"}', "application/json"
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.scrapes = scrapes
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat (fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    """Resident set now (VmRSS) and its peak (VmHWM) of a process, in KiB, from /proc/PID/status."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured span (default %(default)s)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring (default %(default)s)")
    parser.add_argument("--scrape-every", type=float, default=5.0,
                        help="seconds between scrapes of the agent, as Prometheus would (default %(default)s)")
    parser.add_argument("--nvml", action="store_true", help="keep NVML on (a GPU node)")
    args = parser.parse_args()

    vllm = FakeVllm()
    log = open(os.devnull, "wb")
    command = [sys.executable, "-m", "specwatch", "export", "--url", vllm.url, "--interval", "1", "--listen", "127.0.0.1:0",
               "--no-dcgm"] + ([] if args.nvml else ["--no-nvml"])
    agent = subprocess.Popen(command, stdout=log, stderr=subprocess.PIPE, text=True)
    try:
        line = agent.stderr.readline() if agent.stderr else ""
        match = re.search(r"serving (http://\S+)/metrics", line)
        if not match:
            print(f"bench_export: the agent did not start: {line}", file=sys.stderr)
            return 2
        metrics_url = match.group(1) + "/metrics"
        time.sleep(args.warmup)
        scrapes, start_polls = 0, vllm.scrapes[0]
        wall0, cpu0 = time.monotonic(), cpu_seconds(agent.pid)
        next_scrape = wall0
        while time.monotonic() - wall0 < args.seconds:
            if time.monotonic() >= next_scrape:
                text = httpx.get(metrics_url, timeout=5.0, trust_env=False).text
                if "specwatch_verdict{" not in text:
                    print("bench_export: the agent serves no verdict", file=sys.stderr)
                    return 2
                scrapes += 1
                next_scrape += args.scrape_every
            time.sleep(0.05)
        wall, cpu = time.monotonic() - wall0, cpu_seconds(agent.pid) - cpu0
        polls = vllm.scrapes[0] - start_polls
        memory = memory_kib(agent.pid)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(15)
        except subprocess.TimeoutExpired:
            agent.kill()
        vllm.close()
        log.close()
    fraction = cpu / wall
    verdict_line = re.search(r'specwatch_verdict\{[^}]*state="(\w+)"[^}]*\} 1\.0', text)
    print(f"export agent at 1 Hz over {wall:.1f} s: {polls} polls of vLLM, {scrapes} scrapes of the agent, "
          f"verdict {verdict_line.group(1) if verdict_line else '?'}")
    print(f"  CPU {cpu:.3f} s = {fraction:.3%} of one core ({cpu / max(polls, 1) * 1000:.2f} ms per poll); "
          f"budget {BUDGET_CORE_FRACTION:.1%}: {'OK' if fraction <= BUDGET_CORE_FRACTION else 'OVER'}")
    # what a container's memory request and limit are sized from (deploy/kubernetes/)
    print(f"  memory: resident {memory.get('VmRSS', 0) / 1024:.1f} MiB, peak {memory.get('VmHWM', 0) / 1024:.1f} MiB")
    return 0 if fraction <= BUDGET_CORE_FRACTION else 1


if __name__ == "__main__":
    raise SystemExit(main())
