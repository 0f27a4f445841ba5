"""The unattended export agent under network faults, measured: a soak through benchmarks/faultproxy.py.

    python benchmarks/soak.py --minutes 10 [--seed 1] [--upstream http://vllm:8000]
                              [--table soak.md] [--plot soak.svg] [--schedule FILE] [--keep DIR]

`specwatch export --url PROXY --listen 127.0.0.1:0 --interval 1 --no-dcgm` and `specwatch record`
beside it both read the engine through the fault proxy (the moving capture of a real vLLM payload,
or --upstream); a real Prometheus (a temporary config and TSDB) scrapes the agent every second.
Faults follow the seeded schedule (faultproxy.Schedule, printed in the output). Where the schedule
has `dns` faults, both processes run in a mount namespace of their own whose /etc/hosts names the
proxy, with the NVML
double of tests/nvml_double.py in place of pynvml (the `gpu_lost` fault: two H100s, GPU 1 lost); where
`unshare` cannot mount, `dns` is left out, and --no-gpu-fault gives the plain `--no-nvml` agent.
Every few seconds /proc gives the agent's RSS, open descriptors, threads and CPU ticks (and the
recorder's, and Prometheus'). At the end one JSON object goes to stdout:

- agent.rss_slope_mb_per_h: least squares over the samples after the first ten minutes (after the
  first third of a run shorter than 30 min); fds and threads: min and max after that warm-up;
  fd_check: the descriptors once the last fault has settled against the warm-up's (before the
  first fault) maximum, a leak past FD_ALLOWANCE; core_pct: the share of one core;
- scrapes: the share of Prometheus' scrapes of the agent that succeeded (`up`, /api/v1/query_range);
- windows, by_kind: per fault window, whether specwatch_target_up said 0 within the agent's
  timeout + interval (+ one scrape interval and --slack) of its start and held it, came back up
  as fast after its end (for a fault the engine stays readable through: stayed 1), the state label
  it gave, and how long the verdict took to say unknown (a verdict is held through one failed
  evaluation, flag reading_failed: by design, so reported, not judged); gpu_lost: specwatch_gpu_lost;
- outside: outside every window (and its recovery margin): the share of samples with target_up 1,
  the share with the verdict series present, and staleness: gaps in specwatch_target_up longer
  than 3 scrape intervals;
- exit codes, and `hang` for a process still there 30 s after SIGTERM: its threads' kernel states
  from /proc, then faulthandler's Python stacks in its log (SIGABRT) before SIGKILL;
- tracebacks in the agent's and the recorder's logs; recording: Snapshots lost outside the windows
  (gaps over 3 intervals), and whether `specwatch replay --headless --json` replays it to verdicts;
- ok and problems: every check above in one word and the list of what failed.

--table FILE writes a markdown summary, --plot FILE an SVG (RSS, descriptors, threads, target_up,
with the windows shaded; no plotting library). The harness itself (proxy, sampler) costs a few
percent of a core (harness_core_pct), so it can run for hours beside other work (--hours 2).
tests/test_soak.py runs a three-minute version of it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from faultproxy import (  # noqa: E402 - the benchmarks folder, just added
    DEFAULT_MAX_BYTES,
    DOWN_KINDS,
    EXPECTED_STATES,
    HOST_NAME,
    KINDS,
    FaultProxy,
    HostsFile,
    HttpUpstream,
    MovingCapture,
    Schedule,
    nvml_double_env,
)

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 1e6
TRACEBACK = "Traceback (most recent call last)"
SERVING = re.compile(r"serving (https?://\S+)/metrics")
# descriptors the agent may hold once the faults settled beyond the warm-up's most (a connection
# being replaced, Prometheus' scrape connection mid-accept); one per fault is a leak
FD_ALLOWANCE = 3
# the replayed verdicts must be the agent's at this share of its samples outside the faults: two processes
# evaluating on their own 5 s clocks differ only for an evaluation or two around each change
VERDICT_AGREEMENT = 0.9
EVALUATE_EVERY_S = 5.0  # the Monitor's default cadence: a failed reading is held through one evaluation
JOB = "specwatch-soak"


# ---- /proc ------------------------------------------------------------------------------------------


@dataclass
class ProcSample:
    t: float  # seconds since the schedule's start
    rss_mb: float
    fds: int
    threads: int
    ticks: int


def proc_sample(pid: int, t: float) -> ProcSample | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError, IndexError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return ProcSample(t, rss_pages * PAGE_MB, fds, int(fields[17]), int(fields[11]) + int(fields[12]))


class Sampler:
    """Samples named processes from /proc every `every_s` in a thread of its own."""

    def __init__(self, pids: dict[str, int], clock: Any, every_s: float = 5.0) -> None:
        self.pids, self.clock, self.every_s = pids, clock, every_s
        self.samples: dict[str, list[ProcSample]] = {name: [] for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def sample_now(self) -> None:
        t = self.clock()
        for name, pid in self.pids.items():
            s = proc_sample(pid, t)
            if s is not None:
                self.samples[name].append(s)

    def _run(self) -> None:
        while True:
            self.sample_now()
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            self.sample_now()


def slope_per_h(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx * 3600.0


def leak_check(samples: Sequence[ProcSample], warmup_end_s: float, settled_from_s: float,
               allowed: int = FD_ALLOWANCE, what: str = "fds") -> dict[str, Any]:
    """Whether `what` (fds, threads) grew: the least of it once the faults settled (from
    `settled_from_s`) against the most of it in the warm-up (before `warmup_end_s`). A leak is
    lasting, so the least after still shows it; what a fault holds for a moment does not count."""
    before = [getattr(s, what) for s in samples if s.t < warmup_end_s]
    after = [getattr(s, what) for s in samples if s.t >= settled_from_s]
    if not before or not after:
        return {"warmup_max": max(before, default=None), "settled_min": min(after, default=None), "grew_by": None,
                "allowed": allowed, "leak": None, "samples_after": len(after)}
    grew = min(after) - max(before)
    return {"warmup_max": max(before), "settled_min": min(after), "grew_by": grew, "allowed": allowed,
            "leak": grew > allowed, "samples_after": len(after)}


def process_summary(samples: Sequence[ProcSample], warm_s: float, elapsed_s: float) -> dict[str, Any]:
    if not samples:
        return {"samples": 0}
    after = [s for s in samples if s.t >= warm_s] or list(samples)
    span = samples[-1].t - samples[0].t
    cpu = (samples[-1].ticks - samples[0].ticks) / TICKS_PER_S
    slope = slope_per_h([(s.t, s.rss_mb) for s in after])
    return {
        "samples": len(samples),
        "rss_mb": {"first": round(samples[0].rss_mb, 1), "after_warmup_first": round(after[0].rss_mb, 1),
                   "last": round(samples[-1].rss_mb, 1), "max": round(max(s.rss_mb for s in samples), 1)},
        "rss_slope_mb_per_h": None if slope is None else round(slope, 2),
        "slope_from_s": round(warm_s, 1),
        "fds": {"min": min(s.fds for s in after), "max": max(s.fds for s in after)},
        "threads": {"min": min(s.threads for s in after), "max": max(s.threads for s in after)},
        "core_pct": round(100.0 * cpu / span, 2) if span > 0 else None,
    }


# ---- Prometheus ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)


class Prometheus:
    """A real Prometheus on loopback scraping one target, with a temporary config and TSDB."""

    def __init__(self, binary: str, directory: Path, target: str, scrape_interval_s: float) -> None:
        self.directory, self.binary = directory, binary
        interval = f"{int(scrape_interval_s * 1000)}ms"
        self.config = directory / "prometheus.yml"
        self.config.write_text(
            "global:\n"
            f"  scrape_interval: {interval}\n"
            f"  scrape_timeout: {interval}\n"
            "scrape_configs:\n"
            f"  - job_name: {JOB}\n"
            "    static_configs:\n"
            f"      - targets: ['{target}']\n")
        self.log = directory / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, startup_s: float = 90.0) -> None:
        for attempt in (1, 2):
            port = _free_port()
            self.url = f"http://127.0.0.1:{port}"
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.binary, f"--config.file={self.config}",
                     f"--storage.tsdb.path={self.directory / f'tsdb-{attempt}'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + startup_s
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with urllib.request.urlopen(self.url + "/-/ready", timeout=2.0) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
                time.sleep(0.25)
            self.stop()
        raise RuntimeError("Prometheus did not become ready; its log:\n" + self.log.read_text(errors="replace"))

    def wait_for_scrape(self, timeout_s: float = 90.0) -> None:
        """Until the first scrape of the target succeeded (Prometheus' discovery hands targets to
        the scrapers up to 5 s after it starts)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.api("/api/v1/query", query=f'up{{job="{JOB}"}}')["result"]
            if result and result[0]["value"][1] == "1":
                return
            time.sleep(0.25)
        raise RuntimeError(f"Prometheus did not scrape the agent in {timeout_s:g} s")

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=60.0) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def raw(self, selector: str, start: float, end: float, chunk_s: int = 1800) -> list[tuple[dict, list]]:
        """Every stored sample of `selector` from start to end: [(labels, [(t, value)])]."""
        series: dict[tuple, tuple[dict, dict[float, float]]] = {}
        t = end
        while t > start:
            width = int(min(chunk_s, math.ceil(t - start)))
            for s in self.api("/api/v1/query", query=f"{selector}[{width}s]", time=f"{t:.3f}")["result"]:
                key = tuple(sorted(s["metric"].items()))
                entry = series.setdefault(key, (s["metric"], {}))
                for ts, v in s["values"]:
                    entry[1][float(ts)] = float(v)
            t -= width
        return [(labels, sorted(values.items())) for labels, values in series.values()]

    def range(self, expr: str, start: float, end: float, step: float) -> list[tuple[dict, list]]:
        out = []
        t = start
        while t < end:  # 11,000 points a query at most
            stop = min(end, t + step * 10000)
            for s in self.api("/api/v1/query_range", query=expr, start=f"{t:.3f}", end=f"{stop:.3f}",
                              step=f"{step}")["result"]:
                out.append((s["metric"], [(float(ts), float(v)) for ts, v in s["values"]]))
            t = stop + step
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# ---- judging the windows --------------------------------------------------------------------------


@dataclass
class Timeline:
    """What Prometheus stored of the agent, as (wall time, ...) lists sorted by time."""

    target_up: list[tuple[float, float, str]] = field(default_factory=list)  # (t, value, state)
    verdict: dict[float, str] = field(default_factory=dict)  # t → the state at 1
    gpu_lost: list[tuple[float, float]] = field(default_factory=list)  # GPU 1
    nvml_up: list[tuple[float, float, str]] = field(default_factory=list)
    up: list[tuple[float, float]] = field(default_factory=list)  # Prometheus' own `up` (query_range)


def read_timeline(prom: Prometheus, start: float, end: float, step: float) -> Timeline:
    tl = Timeline()
    for labels, values in prom.raw("specwatch_target_up", start, end):
        tl.target_up.extend((t, v, labels.get("state", "")) for t, v in values)
    tl.target_up.sort()
    for labels, values in prom.raw("specwatch_verdict", start, end):
        for t, v in values:
            if v == 1.0:
                tl.verdict[t] = labels.get("state", "")
            else:
                tl.verdict.setdefault(t, "")  # present, this state at 0
    for labels, values in prom.raw('specwatch_gpu_lost{gpu="1"}', start, end):
        tl.gpu_lost.extend(values)
    tl.gpu_lost.sort()
    for labels, values in prom.raw('specwatch_source_up{kind="nvml"}', start, end):
        tl.nvml_up.extend((t, v, labels.get("state", "")) for t, v in values)
    tl.nvml_up.sort()
    for _, values in prom.range(f'up{{job="{JOB}"}}', start, end, step):
        tl.up.extend(values)
    return tl


def _first(points: Iterable[tuple], lo: float, hi: float, test: Any) -> float | None:
    for p in points:
        if lo <= p[0] < hi and test(p):
            return p[0]
    return None


def judge_windows(schedule: Schedule, t0_wall: float, tl: Timeline, margin_s: float,
                  lag_s: float = 0.0) -> list[dict[str, Any]]:
    """Each window against what the agent said. `margin_s`: how long the agent may take to say a
    change (its timeout + interval + a scrape interval + slack). `lag_s`: how much later than its
    time stamp a sample's page may have been drawn. Prometheus stamps a sample with the scrape's
    start, and an agent starved for a core (a CPU vLLM beside it) may draw the page up to the scrape
    timeout later, after the fault began or ended. So the windows' edges move by it where a late
    page could make the agent look wrong."""
    out = []
    for i, f in enumerate(schedule.faults):
        s, e = t0_wall + f.start_s, t0_wall + f.end_s
        row: dict[str, Any] = {"window": i, "kind": f.kind, "start_s": f.start_s, "duration_s": f.duration_s}
        inside = [p for p in tl.target_up if s <= p[0] < e]
        row["samples"] = len(inside)
        verdicts = [tl.verdict.get(p[0]) for p in inside]
        row["verdict_present_share"] = round(sum(1 for v in verdicts if v) / len(verdicts), 3) if verdicts else None
        if f.kind in DOWN_KINDS:
            down_at = _first(tl.target_up, s - lag_s, e + margin_s, lambda p: p[1] == 0.0)
            held = [p[1] for p in tl.target_up if s + margin_s <= p[0] < e - lag_s]
            up_at = _first(tl.target_up, e - lag_s, math.inf, lambda p: p[1] == 1.0)
            unknown_at = _first(sorted(tl.verdict.items()), s, e + margin_s, lambda p: p[1] == "unknown")
            states = Counter(p[2] for p in tl.target_up if s <= p[0] < e + margin_s and p[1] == 0.0)
            row.update(
                detect_s=None if down_at is None else round(down_at - s, 2),
                held_down_share=round(held.count(0.0) / len(held), 3) if held else None,
                recovery_s=None if up_at is None else round(up_at - e, 2),
                states=dict(states), expected_state=EXPECTED_STATES.get(f.kind),
                verdict_unknown_after_s=None if unknown_at is None else round(unknown_at - s, 2),
            )
            row["right"] = (down_at is not None and down_at - s <= margin_s and row["held_down_share"] in (None, 1.0)
                            and up_at is not None and up_at - e <= margin_s)
        else:
            following = [t0_wall + g.start_s for g in schedule.faults[i + 1:i + 2]]
            during = [p for p in tl.target_up if s <= p[0] < min([e + margin_s] + [t - lag_s for t in following])]
            row["up_share"] = round(sum(1 for p in during if p[1] == 1.0) / len(during), 3) if during else None
            row["right"] = bool(during) and row["up_share"] == 1.0
            if f.kind == "gpu_lost":
                lost_at = _first(tl.gpu_lost, s, math.inf, lambda p: p[1] == 1.0)
                after = [v for t, v in tl.gpu_lost if lost_at is not None and t >= lost_at]
                nvml = Counter(p[2] for p in tl.nvml_up if p[0] >= s + margin_s)
                row.update(gpu_lost_after_s=None if lost_at is None else round(lost_at - s, 2),
                           gpu_lost_stayed=bool(after) and all(v == 1.0 for v in after), nvml_states=dict(nvml))
                row["right"] = (row["right"] and lost_at is not None and lost_at - s <= margin_s
                                and row["gpu_lost_stayed"])
        out.append(row)
    return out


def by_kind(windows: list[dict[str, Any]]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for w in windows:
        k = kinds.setdefault(w["kind"], {"windows": 0, "right": 0})
        k["windows"] += 1
        k["right"] += bool(w["right"])
        for name in ("detect_s", "recovery_s", "verdict_unknown_after_s", "gpu_lost_after_s"):
            if w.get(name) is not None:
                k[f"{name}_max"] = max(k.get(f"{name}_max", -math.inf), w[name])
        if "states" in w:
            states = Counter(k.get("states", {}))
            states.update(w["states"])
            k["states"] = dict(states)
    return kinds


def fault_spans(schedule: Schedule, t0_wall: float, margin_s: float, lag_s: float = 0.0) -> list[tuple[float, float]]:
    """The windows and their recovery margins, from `lag_s` before each (a sample stamped just before a
    fault may show it: judge_windows)."""
    return [(t0_wall + f.start_s - lag_s, t0_wall + f.end_s + margin_s) for f in schedule.faults]


def _outside(t: float, spans: list[tuple[float, float]]) -> bool:
    return not any(a <= t < b for a, b in spans)


def judge_outside(tl: Timeline, spans: list[tuple[float, float]], begin: float, end: float,
                  scrape_s: float) -> dict[str, Any]:
    points = [p for p in tl.target_up if begin <= p[0] < end and _outside(p[0], spans)]
    bad = [p for p in points if p[1] != 1.0]
    states = Counter(tl.verdict.get(p[0]) or "absent" for p in points)
    gaps = []
    times = sorted({p[0] for p in tl.target_up if begin <= p[0] < end})
    for a, b in zip([begin] + times, times + [end]):
        if b - a > 3 * scrape_s and not any(x < b and a < y for x, y in spans):
            gaps.append((round(a - begin, 1), round(b - a, 2)))
    up_out = [v for t, v in tl.up if begin <= t < end and _outside(t, spans)]
    return {
        "samples": len(points),
        "up_share": round(1 - len(bad) / len(points), 4) if points else None,
        "not_up": [{"t_s": round(p[0] - begin, 1), "state": p[2]} for p in bad[:10]],
        "verdict_present_share": round(1 - states.get("absent", 0) / len(points), 4) if points else None,
        "verdict_states": dict(states),
        "stale_gaps": {"count": len(gaps), "max_s": max((g for _, g in gaps), default=0.0),
                       "at_s": [a for a, _ in gaps[:10]]},
        "scrape_success_share": round(sum(up_out) / len(up_out), 4) if up_out else None,
    }


# ---- the recording -------------------------------------------------------------------------------


def judge_recording(path: Path, spans: list[tuple[float, float]], begin: float, end: float, interval_s: float,
                    python: str, cwd: Path, agent_verdicts: dict[float, str] | None = None) -> dict[str, Any]:
    """The recording over [begin, end): Snapshots lost outside the faults, targets not read there,
    whether `specwatch replay --headless --json` replays the whole file to verdicts, and whether
    those are the agent's: at each of the agent's verdict samples outside the faults (Prometheus'
    specwatch_verdict), the replayed verdict then. The recorder and the agent judge the same readings
    on their own 5 s evaluation clocks, so around a change they may differ for an evaluation or two."""
    from specwatch.recording import RecordingError, read_recording

    try:
        rec = read_recording(path)
    except RecordingError as exc:
        return {"readable": False, "error": str(exc)}
    snapshots = [s for s in rec.snapshots if begin <= s.time < end]
    times = [s.time for s in snapshots]
    lost, max_gap = 0, 0.0
    for a, b in zip(times, times[1:]):
        if _outside(a, spans) and _outside(b, spans) and not any(a < y and x < b for x, y in spans):
            max_gap = max(max_gap, b - a)
            if b - a > 3 * interval_s:
                lost += round((b - a) / interval_s) - 1
    not_ok = [round(s.time - begin, 1) for s in snapshots
              if _outside(s.time, spans) and not all(t.ok for t in s.targets)]
    r = subprocess.run([python, "-m", "specwatch", "replay", "--headless", "--json", str(path)], cwd=cwd,
                       capture_output=True, text=True, timeout=600)
    changes = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return {
        "readable": True, "snapshots": len(rec.snapshots), "snapshots_in_run": len(times), "warnings": rec.warnings[:5],
        "lost_outside_faults": lost, "max_gap_outside_s": round(max_gap, 2),
        "targets_not_ok_outside": len(not_ok), "not_ok_at_s": not_ok[:10],
        "replay_exit_code": r.returncode, "replay_changes": len(changes),
        "replay_states": dict(Counter(c.get("speculation") for c in changes)),
        "replay_traceback": TRACEBACK in r.stderr,
        "replays_to_verdicts": r.returncode == 0 and any(c.get("speculation") not in (None, "unknown")
                                                         for c in changes),
        **verdict_agreement(changes, agent_verdicts or {}, spans),
    }


def verdict_agreement(changes: list[dict], agent_verdicts: dict[float, str],
                      spans: list[tuple[float, float]]) -> dict[str, Any]:
    """The share of the agent's verdict samples outside `spans` that the replay's timeline (its
    verdict changes, by data time: the recorder's wall clock) agrees with."""
    import bisect

    timeline = sorted((float(c["time"]), c.get("speculation")) for c in changes if "time" in c)
    times = [t for t, _ in timeline]
    compared = agreed = 0
    differing: Counter = Counter()
    for t, state in sorted(agent_verdicts.items()):
        if not state or not _outside(t, spans):
            continue
        i = bisect.bisect_right(times, t) - 1
        if i < 0:
            continue  # before the recording's first verdict
        compared += 1
        replayed = timeline[i][1]
        if replayed == state:
            agreed += 1
        else:
            differing[f"agent {state}, replay {replayed}"] += 1
    return {"verdict_samples_compared": compared,
            "verdicts_agree_share": round(agreed / compared, 4) if compared else None,
            "verdicts_differing": dict(differing.most_common(5))}


# ---- the run -------------------------------------------------------------------------------------------


@dataclass
class SoakConfig:
    total_s: float = 600.0
    seed: int = 1
    kinds: tuple[str, ...] = KINDS
    schedule: Schedule | None = None  # None: generated from the seed with the timings below
    upstream: str | None = None
    interval_s: float = 1.0
    timeout_s: float = 2.0
    max_bytes: int = DEFAULT_MAX_BYTES
    scrape_interval_s: float = 1.0
    sample_every_s: float = 5.0
    slack_s: float = 2.0
    gpu_fault: bool = True
    warmup_s: float | None = None  # the RSS slope's and min/max's warm-up; None: 10 min, or a third
    fault_timing: dict[str, Any] = field(default_factory=dict)  # Schedule.generate's keyword arguments
    python: str = sys.executable
    progress: bool = False

    @property
    def margin_s(self) -> float:
        return self.timeout_s + self.interval_s + self.scrape_interval_s + self.slack_s


def default_timing(total_s: float) -> dict[str, Any]:
    """Windows for a benchmark run: from an hour on, 20-60 s faults and 30-90 s gaps past the first
    2 minutes; shorter runs, 10-25 s faults and 15-30 s gaps, so that ten minutes see every kind."""
    warm = min(120.0, total_s / 10)
    if total_s >= 3600:
        return {"warmup_s": warm, "tail_s": 60.0, "down_s": (20.0, 60.0), "up_s": (10.0, 30.0),
                "gap_s": (30.0, 90.0), "gap_after_up_s": (15.0, 40.0)}
    return {"warmup_s": warm, "tail_s": 30.0, "down_s": (10.0, 25.0), "up_s": (8.0, 15.0), "gap_s": (15.0, 30.0),
            "gap_after_up_s": (8.0, 15.0)}


class Child:
    """A specwatch subprocess writing to a log file."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str], cwd: Path) -> None:
        self.log = log
        self._file = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._file, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        self.hang = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 30.0) -> int | None:
        """Stop it with `sig`; the exit status, or None when it outlived SIGKILL too. One that is still
        there `grace_s` on is described (`hang`: its threads' kernel states, and their Python stacks, which
        faulthandler writes to the log on SIGABRT) before it is killed, so that a hang says where."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            if not self._waited(grace_s):
                self.hang = process_state(self.proc.pid)
                self.proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to the log
                if not self._waited(grace_s / 3):
                    self.hang += "; after SIGABRT: " + process_state(self.proc.pid)
                    self.proc.kill()
                    if not self._waited(60):
                        self.hang += "; still there 60 s after SIGKILL: " + process_state(self.proc.pid)
        self._file.close()
        return self.proc.returncode

    def _waited(self, timeout_s: float) -> bool:
        try:
            self.proc.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False


def process_state(pid: int) -> str:
    """Each thread's scheduler state and kernel wait channel from /proc ('D' with a wait channel is a
    process the kernel holds, which no signal moves), or why they could not be read."""
    threads = []
    try:
        for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name)):
            try:
                comm = (task / "comm").read_text().strip()
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                wchan = (task / "wchan").read_text().strip() or "-"
            except OSError as exc:
                threads.append(f"{task.name}: {exc.strerror}")
                continue
            threads.append(f"{task.name} {comm} {state} {wchan}")
    except OSError as exc:
        return f"pid {pid}: {exc.strerror or exc}"
    return f"pid {pid}: " + ", ".join(threads)


def run_soak(config: SoakConfig, workdir: Path) -> dict[str, Any]:
    """Run the soak in `workdir` (logs, the recording, Prometheus' TSDB); returns the result."""
    binary = prometheus_binary()
    if binary is None:
        raise RuntimeError("prometheus is not installed (Debian: apt-get install -y prometheus)")
    workdir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    kinds = set(config.kinds)
    # the agent and the recorder run in a mount namespace of their own only for the name faults: a run
    # without them reaches the proxy by address, as plain processes
    hosts: HostsFile | None = HostsFile(workdir / "hosts") if "dns" in kinds else None
    why = hosts.check() if hosts is not None else None
    if why is not None:
        notes.append(f"dns left out: {why}")
        kinds.discard("dns")
        hosts = None
    if config.upstream:
        notes.append("restart left out: a real server cannot be restarted by the proxy")
        kinds.discard("restart")
    if not config.gpu_fault:
        kinds.discard("gpu_lost")
    schedule = config.schedule or Schedule.generate(config.seed, config.total_s, kinds,
                                                    **(config.fault_timing or default_timing(config.total_s)))
    schedule = schedule.without(set(KINDS) - kinds)
    total_s = schedule.total_s
    upstream = HttpUpstream(config.upstream) if config.upstream else MovingCapture()
    lost_file = workdir / "gpu-lost"
    lost_file.unlink(missing_ok=True)
    env = nvml_double_env(lost_file) if config.gpu_fault else dict(os.environ)
    env["PYTHONFAULTHANDLER"] = "1"  # a child that will not stop dumps its threads' stacks on SIGABRT (Child.stop)
    proxy = FaultProxy(upstream, schedule, timeout_s=config.timeout_s, max_bytes=config.max_bytes, hosts=hosts,
                       gpu_lost_file=lost_file if config.gpu_fault else None)
    proxy.start(arm=False)  # the schedule's clock starts once the rest is up
    url = proxy.url(HOST_NAME if hosts is not None else None)
    common = ["--url", url, "--interval", str(config.interval_s), "--timeout", str(config.timeout_s),
              "--max-bytes", str(config.max_bytes), "--no-dcgm"] + ([] if config.gpu_fault else ["--no-nvml"])

    def wrap(argv: list[str]) -> list[str]:
        return hosts.wrap(argv) if hosts is not None else argv

    recording = workdir / "soak.swrec"
    agent = Child(wrap([config.python, "-m", "specwatch", "export", "--listen", "127.0.0.1:0", "--node", "soak",
                        *common]), workdir / "agent.log", env, workdir)
    recorder = Child(wrap([config.python, "-m", "specwatch", "record", "-o", str(recording), "--force", *common]),
                     workdir / "recorder.log", env, workdir)
    prom: Prometheus | None = None
    sampler: Sampler | None = None
    try:
        deadline = time.monotonic() + 120
        agent_url = ""
        while not agent_url:
            match = SERVING.search(agent.text())
            if match:
                agent_url = match.group(1)
            elif agent.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the export agent did not start:\n" + agent.text())
            else:
                time.sleep(0.1)
        prom = Prometheus(binary, workdir, agent_url.split("://", 1)[1], config.scrape_interval_s)
        prom.start()
        prom.wait_for_scrape()
        proxy.arm()  # the schedule counts from here
        t0_wall = proxy.t0_wall
        harness0 = os.times()
        sampler = Sampler({"agent": agent.pid, "recorder": recorder.pid, "prometheus": prom.proc.pid},
                          proxy.elapsed, config.sample_every_s).start()
        next_note = 60.0
        while proxy.elapsed() < total_s:
            time.sleep(min(1.0, max(0.05, total_s - proxy.elapsed())))
            if config.progress and proxy.elapsed() >= next_note:
                a = sampler.samples["agent"][-1] if sampler.samples["agent"] else None
                print(f"soak: {proxy.elapsed() / 60:.0f} min"
                      + (f", agent RSS {a.rss_mb:.1f} MB, {a.fds} fds, {a.threads} threads" if a else ""),
                      file=sys.stderr, flush=True)
                next_note += 60.0
            if agent.proc.poll() is not None or recorder.proc.poll() is not None:
                notes.append(f"a process ended early at {proxy.elapsed():.0f} s")
                break
        elapsed = proxy.elapsed()
        sampler.stop()
        harness1 = os.times()
        end_wall = time.time()
        time.sleep(2 * config.scrape_interval_s)  # the last scrapes stored
        tl = read_timeline(prom, t0_wall, end_wall, config.scrape_interval_s)
    finally:
        if sampler is not None:
            sampler.stop()
        agent_exit = agent.stop()
        recorder_exit = recorder.stop()
        proxy.close()
        if prom is not None:
            prom.stop()
    margin = config.margin_s
    # Prometheus gives up on a scrape after scrape_timeout (= its interval here): the most a page lags its stamp
    lag = config.scrape_interval_s
    spans = fault_spans(schedule, t0_wall, margin, lag)
    windows = judge_windows(schedule, t0_wall, tl, margin, lag)
    warm = config.warmup_s if config.warmup_s is not None else (600.0 if elapsed >= 1800 else elapsed / 3)
    first_fault = schedule.faults[0].start_s if schedule.faults else elapsed / 3
    settled = max((f.end_s for f in schedule.faults), default=elapsed / 3) + margin
    result: dict[str, Any] = {
        "duration_s": round(elapsed, 1),
        "config": {"interval_s": config.interval_s, "timeout_s": config.timeout_s, "max_bytes": config.max_bytes,
                   "scrape_interval_s": config.scrape_interval_s, "sample_every_s": config.sample_every_s,
                   "margin_s": margin, "upstream": upstream.describe(), "url": url,
                   "gpus": "tests/nvml_double.py, 2 x H100" if config.gpu_fault else "--no-nvml"},
        "notes": notes,
        "schedule": schedule.to_dict(),
        "t0_wall": t0_wall,  # the schedule's 0 on the wall clock (Prometheus' and the recording's time)
    }
    for name in ("agent", "recorder", "prometheus"):
        result[name] = process_summary(sampler.samples[name], warm, elapsed) if sampler else {}
    agent_samples = sampler.samples["agent"] if sampler else []
    result["agent"]["fd_check"] = leak_check(agent_samples, first_fault, settled)
    # reported, not judged: asyncio's default executor (the name look-ups) grows to its bound on its own
    result["agent"]["thread_check"] = leak_check(agent_samples, first_fault, settled, allowed=2, what="threads")
    for name, child, code in (("agent", agent, agent_exit), ("recorder", recorder, recorder_exit)):
        text = child.text()
        result[name].update(exit_code=code, tracebacks=text.count(TRACEBACK), hang=child.hang,
                            log_tail=text[-(6000 if child.hang else 600):]
                            if TRACEBACK in text or code not in (0, None) else "")
    result["harness_core_pct"] = round(100.0 * ((harness1.user - harness0.user) + (harness1.system - harness0.system))
                                       / elapsed, 2)
    up = [v for _, v in tl.up]
    result["scrapes"] = {"samples": len(up), "success_share": round(sum(up) / len(up), 4) if up else None}
    result["outside"] = judge_outside(tl, spans, t0_wall, t0_wall + elapsed, config.scrape_interval_s)
    result["windows"] = windows
    result["by_kind"] = by_kind(windows)
    result["recording"] = judge_recording(recording, spans, t0_wall, t0_wall + elapsed, config.interval_s,
                                          config.python, workdir, tl.verdict)
    result["proxy"] = {"requests": proxy.requests, "errors": proxy.errors[:10],
                       "untouched_windows": [i for i in range(len(schedule.faults)) if not proxy.faulted.get(i)]}
    problems = []
    if result["agent"].get("tracebacks") or result["recorder"].get("tracebacks"):
        problems.append("a traceback in the agent's or the recorder's log")
    if agent_exit != 0 or recorder_exit != 0:
        problems.append(f"exit codes: agent {agent_exit}, recorder {recorder_exit}")
    if result["agent"]["fd_check"]["leak"]:
        problems.append(f"descriptors grew by {result['agent']['fd_check']['grew_by']}")
    problems += [f"window {w['window']} ({w['kind']}) not right" for w in windows if not w["right"]]
    out = result["outside"]
    if out["up_share"] != 1.0:
        problems.append(f"target_up not 1 outside the faults: share {out['up_share']}")
    if out["verdict_present_share"] != 1.0:
        problems.append(f"verdict series missing outside the faults: present share {out['verdict_present_share']}")
    if out["stale_gaps"]["count"]:
        problems.append(f"{out['stale_gaps']['count']} stale gaps outside the faults")
    rec = result["recording"]
    if not rec.get("replays_to_verdicts") or rec.get("lost_outside_faults"):
        problems.append("the recording lost Snapshots outside the faults or does not replay to verdicts")
    if rec.get("verdicts_agree_share") is not None and rec["verdicts_agree_share"] < VERDICT_AGREEMENT:
        problems.append(f"the replayed verdicts agree with the agent's in {rec['verdicts_agree_share']:.1%} "
                        "of its samples outside the faults")
    if result["proxy"]["errors"] or result["proxy"]["untouched_windows"]:
        problems.append("the proxy failed, or a window touched no request")
    result["problems"] = problems
    result["ok"] = not problems
    result["_samples"] = {name: [vars(s) for s in sampler.samples[name]] for name in sampler.samples} \
        if sampler else {}
    result["_timeline"] = {"t0_wall": t0_wall, "target_up": [(round(t - t0_wall, 2), v) for t, v, _ in tl.target_up]}
    return result


# ---- the outputs ---------------------------------------------------------------------------------


def write_table(result: dict[str, Any], path: Path) -> None:
    a = result["agent"]
    out, rec, sc = result["outside"], result["recording"], result["scrapes"]
    lines = [
        f"# specwatch export soak: {result['duration_s'] / 60:.1f} min, seed {result['schedule']['seed']}",
        "",
        "| figure | value |", "| --- | --- |",
        f"| agent RSS (first → last, max) | {a['rss_mb']['first']} → {a['rss_mb']['last']} MB, {a['rss_mb']['max']} MB |",
        f"| agent RSS slope after {a['slope_from_s']:.0f} s | {a['rss_slope_mb_per_h']} MB/h |",
        f"| agent fds after warm-up (min–max) | {a['fds']['min']}–{a['fds']['max']} |",
        f"| agent fds: warm-up max → settled min | {a['fd_check']['warmup_max']} → {a['fd_check']['settled_min']} |",
        f"| agent threads after warm-up (min–max) | {a['threads']['min']}–{a['threads']['max']} |",
        f"| agent CPU | {a['core_pct']} % of a core |",
        f"| recorder CPU, Prometheus CPU, harness CPU | {result['recorder'].get('core_pct')} %, "
        f"{result['prometheus'].get('core_pct')} %, {result['harness_core_pct']} % |",
        f"| scrape success (all, outside faults) | {sc['success_share']}, {out['scrape_success_share']} |",
        f"| target_up 1 outside faults | {out['up_share']} of {out['samples']} samples |",
        f"| verdict series present outside faults | {out['verdict_present_share']} ({out['verdict_states']}) |",
        f"| stale gaps outside faults (> 3 scrapes) | {out['stale_gaps']['count']} |",
        f"| tracebacks (agent, recorder) | {a['tracebacks']}, {result['recorder']['tracebacks']} |",
        f"| recording: Snapshots, lost outside faults, replays to verdicts | {rec.get('snapshots')}, "
        f"{rec.get('lost_outside_faults')}, {rec.get('replays_to_verdicts')} |",
        f"| replayed verdicts = the agent's, outside faults | {rec.get('verdicts_agree_share')} of "
        f"{rec.get('verdict_samples_compared')} samples |",
        f"| all right | {result['ok']} |",
        "",
        "| fault | windows | right | down after (max s) | up again after (max s) | verdict unknown after (max s) | states |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, k in sorted(result["by_kind"].items()):
        lines.append(f"| {kind} | {k['windows']} | {k['right']} | {k.get('detect_s_max', '')} | "
                     f"{k.get('recovery_s_max', '')} | {k.get('verdict_unknown_after_s_max', '')} | "
                     f"{', '.join(f'{s} {n}' for s, n in sorted(k.get('states', {}).items()))} |")
    if result["problems"]:
        lines += ["", "Problems:", ""] + [f"- {p}" for p in result["problems"]]
    path.write_text("\n".join(lines) + "\n")


PALETTE = {"latency": "#9ecae1", "stall": "#fc9272", "reset": "#fdae6b", "http_5xx": "#fdd0a2", "truncated": "#bcbddc",
           "slow_drip": "#a1d99b", "oversize": "#fa9fb5", "restart": "#c7e9c0", "port_dead": "#d9d9d9",
           "dns": "#fee391", "gpu_lost": "#c6dbef"}


def write_svg(result: dict[str, Any], path: Path) -> None:
    """RSS, descriptors, threads and target_up against minutes, the fault windows shaded."""
    samples = result["_samples"].get("agent", [])
    span = max(result["duration_s"], 1.0)
    width, left, panel, gap = 960, 70, 110, 30
    rows = [("agent RSS (MB)", [(s["t"], s["rss_mb"]) for s in samples]),
            ("agent open fds", [(s["t"], s["fds"]) for s in samples]),
            ("agent threads", [(s["t"], s["threads"]) for s in samples]),
            ("specwatch_target_up", [(t, v) for t, v in result["_timeline"]["target_up"]])]
    height = 40 + len(rows) * (panel + gap) + 80
    plot_w = width - left - 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14">specwatch export soak: {span / 60:.1f} min, seed '
             f'{result["schedule"]["seed"]}, all right: {result["ok"]}</text>']

    def x(t: float) -> float:
        return left + plot_w * t / span

    for r, (title, points) in enumerate(rows):
        top = 40 + r * (panel + gap)
        for f in result["schedule"]["faults"]:
            parts.append(f'<rect x="{x(f["start_s"]):.1f}" y="{top}" width="{max(1.0, x(f["start_s"] + f["duration_s"]) - x(f["start_s"])):.1f}" '
                         f'height="{panel}" fill="{PALETTE.get(f["kind"], "#eee")}" opacity="0.6"/>')
        parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{panel}" fill="none" stroke="#888"/>')
        parts.append(f'<text x="{left}" y="{top - 4}">{title}</text>')
        if not points:
            continue
        lo, hi = min(v for _, v in points), max(v for _, v in points)
        if title == "specwatch_target_up":
            lo, hi = 0.0, 1.0
        if hi == lo:
            lo, hi = lo - 1, hi + 1
        pad = (hi - lo) * 0.08
        lo, hi = lo - pad, hi + pad

        def y(v: float, top: float = top, lo: float = lo, hi: float = hi) -> float:
            return top + panel - panel * (v - lo) / (hi - lo)

        step = max(1, len(points) // 4000)
        path_d = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points[::step])
        parts.append(f'<polyline fill="none" stroke="#08519c" stroke-width="1.2" points="{path_d}"/>')
        for v in (lo + pad, hi - pad):
            parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.4g}</text>')
    bottom = 40 + len(rows) * (panel + gap)
    for m in range(0, int(span / 60) + 1, max(1, int(span / 60) // 10 or 1)):
        parts.append(f'<text x="{x(m * 60):.1f}" y="{bottom - gap + 14}" text-anchor="middle">{m} min</text>')
    lx, ly = left, bottom + 8
    for kind in sorted({f["kind"] for f in result["schedule"]["faults"]}):
        if lx > width - 140:
            lx, ly = left, ly + 20
        parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{PALETTE.get(kind, "#eee")}"/>'
                     f'<text x="{lx + 16}" y="{ly + 10}">{kind}</text>')
        lx += 16 + 8 * len(kind) + 14
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    length = p.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float)
    length.add_argument("--hours", type=float)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--schedule", type=Path, help="a schedule as JSON (faultproxy.py --print-schedule)")
    p.add_argument("--kinds", default=",".join(KINDS), help="the fault kinds (default: all)")
    p.add_argument("--upstream", help="a real server's base URL instead of the moving capture")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=2.0, help="the agent's --timeout (default %(default)s)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="the agent's --max-bytes")
    p.add_argument("--scrape-interval", type=float, default=1.0)
    p.add_argument("--sample-every", type=float, default=5.0)
    p.add_argument("--slack", type=float, default=2.0, help="seconds past timeout+interval+scrape allowed")
    p.add_argument("--no-gpu-fault", action="store_true", help="--no-nvml for the agent, no gpu_lost fault")
    p.add_argument("--table", type=Path)
    p.add_argument("--plot", type=Path, help="an SVG")
    p.add_argument("--keep", type=Path, help="keep the logs, recording and TSDB in this folder")
    args = p.parse_args(argv)
    total = 3600 * args.hours if args.hours else 60 * (args.minutes or 10.0)
    schedule = Schedule.from_json(args.schedule.read_text()) if args.schedule else None
    config = SoakConfig(total_s=total, seed=args.seed, kinds=tuple(args.kinds.split(",")), schedule=schedule,
                        upstream=args.upstream, interval_s=args.interval, timeout_s=args.timeout,
                        max_bytes=args.max_bytes, scrape_interval_s=args.scrape_interval,
                        sample_every_s=args.sample_every, slack_s=args.slack, gpu_fault=not args.no_gpu_fault,
                        progress=True)
    with tempfile.TemporaryDirectory(prefix="specwatch-soak-") as tmp:
        workdir = args.keep or Path(tmp)
        result = run_soak(config, workdir)
    if args.table:
        write_table(result, args.table)
    if args.plot:
        write_svg(result, args.plot)
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
