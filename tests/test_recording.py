"""The recording format: round trip, damage, bad files, permissions and a full disk."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from specwatch.perf import HingeParameters
from specwatch.recording import (
    FORMAT_VERSION,
    RecordingError,
    RecordingHeader,
    RecordingWriter,
    read_recording,
    write_recording,
)
from specwatch.telemetry.snapshot import SourceStatus, TargetSample, Snapshot
from specwatch.collectors.synthetic import SyntheticNode, generate, ramp

DATA = Path(__file__).parent / "data"
STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", gpus=2)
HEADER = RecordingHeader(data="synthetic", host="test-host", notes="a test recording", interval_s=1.0,
                         advisor={"method": "ngram"})


def snapshots(n: int = 60, seed: int = 0) -> list[Snapshot]:
    return list(generate(NODE, ramp(1, 64, 5)[:n], seed=seed))


class FakeClock:
    """Wall time for the writer's flush policy, advanced by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_round_trip_keeps_every_snapshot_and_the_header(tmp_path):
    snaps = snapshots()
    # an unreadable target and a GPU with errors must survive too
    snaps[10] = Snapshot(snaps[10].time, (TargetSample("http://x:8000", "connection_refused", "refused"),),
                         snaps[10].gpus, (SourceStatus("nvml", "no_driver", "no NVIDIA driver"),))
    path = tmp_path / "r.swrec"
    assert write_recording(path, HEADER, snaps) == len(snaps)
    rec = read_recording(path)
    assert rec.snapshots == snaps
    assert rec.warnings == []
    h = rec.header
    assert (h.data, h.host, h.notes, h.format_version, h.advisor) == ("synthetic", "test-host", "a test recording",
                                                                      FORMAT_VERSION, {"method": "ngram"})
    assert h.targets == (NODE.url,) and h.gpus == (NODE.gpu_name,) * 2  # filled in from the first Snapshot


def test_standard_tools_read_it_as_json_lines(tmp_path):
    path = tmp_path / "r.swrec"
    write_recording(path, HEADER, snapshots(5))
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f]
    assert lines[0]["kind"] == "specwatch-recording" and lines[0]["data"] == "synthetic"
    assert [line["kind"] for line in lines[1:]] == ["snapshot"] * 5
    if shutil.which("zcat"):
        out = subprocess.run(["zcat", str(path)], capture_output=True, text=True, check=True).stdout
        assert json.loads(out.splitlines()[0])["format_version"] == FORMAT_VERSION


def test_members_roll_over_and_each_starts_with_a_header(tmp_path):
    path = tmp_path / "r.swrec"
    with RecordingWriter(path, HEADER, member_seconds=20.0) as w:
        for s in snapshots(60):
            w.write(s)
    raw = path.read_bytes()
    members, rest = 0, raw
    while rest:
        d = zlib.decompressobj(31)
        text = d.decompress(rest)
        assert json.loads(text.split(b"\n")[0])["kind"] == "specwatch-recording"
        members += 1
        rest = d.unused_data
    assert members == 3
    assert read_recording(path).snapshots == snapshots(60)


def test_file_is_created_private(tmp_path):
    path = tmp_path / "r.swrec"
    old = os.umask(0)
    try:
        write_recording(path, HEADER, snapshots(2))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        path.chmod(0o644)
        write_recording(path, HEADER, snapshots(2), overwrite=True)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_an_existing_file_is_not_overwritten_unless_asked(tmp_path):
    path = tmp_path / "r.swrec"
    path.write_text("precious")
    with pytest.raises(RecordingError, match="already exists"):
        RecordingWriter(path, HEADER)
    assert path.read_text() == "precious"


def test_truncated_file_replays_up_to_the_damage(tmp_path):
    snaps = snapshots(60)
    path = tmp_path / "r.swrec"
    clock = FakeClock()
    sizes = []
    with RecordingWriter(path, HEADER, clock=clock) as w:
        for s in snaps:
            clock.now += 1.0  # one second of wall time per Snapshot: every write is flushed
            w.write(s)
            sizes.append(w.bytes_written)
    raw = path.read_bytes()
    # cut at every flush boundary and in the middle of flushes: always a prefix, never an error
    for n, size in list(enumerate(sizes, start=1))[:-1:7]:
        cut = tmp_path / "cut.swrec"
        cut.write_bytes(raw[:size])
        rec = read_recording(cut)
        assert rec.snapshots == snaps[:n]
        assert rec.warnings and "closing marker" in rec.warnings[0]
        cut.write_bytes(raw[: size + (sizes[n] - size) // 2])  # halfway through the next flush
        rec = read_recording(cut)
        assert rec.snapshots == snaps[:n]
        assert rec.warnings


def test_kill_9_loses_at_most_the_last_second(tmp_path):
    """A recorder killed with SIGKILL: what it flushed is readable, and it flushed every second."""
    path = tmp_path / "killed.swrec"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from specwatch.perf import HingeParameters
        from specwatch.recording import RecordingHeader, RecordingWriter
        from specwatch.collectors.synthetic import SyntheticNode, generate
        node = SyntheticNode(step=HingeParameters(0.02, 134.0, 0.02 / 134, 0.0, 0.0))
        clock = [0.0]
        w = RecordingWriter({str(path)!r}, RecordingHeader(data="synthetic"), clock=lambda: clock[0])
        for i, s in enumerate(generate(node, [4.0] * 40)):
            clock[0] = s.time - 1_800_000_000.0  # wall time advances with the data, one second per poll
            w.write(s)
            if i == 29:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == -9, r.stderr
    rec = read_recording(path)
    # Snapshots 0..29 were written; the writer flushes once a second of wall time has passed, so at
    # most the Snapshots of the last second (here: the 30th) can be missing.
    assert 29 <= len(rec.snapshots) <= 30
    expected = list(generate(SyntheticNode(step=HingeParameters(0.02, 134.0, 0.02 / 134, 0.0, 0.0)), [4.0] * 40))
    assert rec.snapshots == expected[: len(rec.snapshots)]
    assert rec.warnings


def write_gz(path: Path, text: bytes) -> None:
    with gzip.open(path, "wb") as f:
        f.write(text)


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"),
    (b"hello, world\n", "not gzip-compressed"),
    (b"\x1f\x8b\x08\x00garbage that is not deflate at all", "corrupt"),
])
def test_bad_raw_files_get_a_clear_message(tmp_path, content, message):
    path = tmp_path / "bad.swrec"
    path.write_bytes(content)
    with pytest.raises(RecordingError, match=message):
        read_recording(path)


def test_foreign_gzip_files_are_named_as_such(tmp_path):
    path = tmp_path / "log.gz"
    write_gz(path, b"Jan 1 00:00:00 kernel: hello\n" * 100)
    with pytest.raises(RecordingError, match="not a specwatch recording"):
        read_recording(path)
    write_gz(path, b'{"some": "other json lines"}\n')
    with pytest.raises(RecordingError, match="without a specwatch header"):
        read_recording(path)


def test_newer_format_asks_for_an_upgrade(tmp_path):
    path = tmp_path / "r.swrec"
    header = dict(HEADER.to_dict(), format_version=FORMAT_VERSION + 1, specwatch_version="9.0")
    write_gz(path, json.dumps(header).encode() + b"\n")
    with pytest.raises(RecordingError, match=rf"format {FORMAT_VERSION + 1} by specwatch 9\.0.*upgrade"):
        read_recording(path)


def test_other_snapshot_layout_is_refused_clearly(tmp_path):
    path = tmp_path / "r.swrec"
    header = dict(HEADER.to_dict(), snapshot_version=99)
    write_gz(path, json.dumps(header).encode() + b"\n")
    with pytest.raises(RecordingError, match="snapshot layout 99"):
        read_recording(path)


def test_corrupt_member_in_the_middle_replays_up_to_it(tmp_path):
    snaps = snapshots(60)
    path = tmp_path / "r.swrec"
    with RecordingWriter(path, HEADER, member_seconds=20.0) as w:
        for s in snaps:
            w.write(s)
    raw = bytearray(path.read_bytes())
    d = zlib.decompressobj(31)
    d.decompress(bytes(raw))
    second = len(raw) - len(d.unused_data)  # where the second member starts
    raw[second + 200: second + 260] = b"\xff" * 60
    path.write_bytes(bytes(raw))
    rec = read_recording(path)
    assert rec.snapshots[:20] == snaps[:20] and len(rec.snapshots) < 60
    assert any("damaged" in w or "unreadable" in w for w in rec.warnings)


def test_garbage_snapshot_line_stops_with_a_warning(tmp_path):
    path = tmp_path / "r.swrec"
    good = [json.dumps(HEADER.to_dict())]
    for s in snapshots(3):
        good.append(json.dumps(dict({"kind": "snapshot", "time": s.time}, targets=[t.to_dict() for t in s.targets],
                                    gpus=[], sources=[])))
    write_gz(path, ("\n".join(good[:3] + ['{"kind": "snapshot", "time": "soon"}'] + good[3:]) + "\n").encode())
    rec = read_recording(path)
    assert len(rec.snapshots) == 2
    assert "damaged Snapshot" in rec.warnings[0]


def test_full_disk_keeps_the_file_valid_to_the_last_flush(tmp_path):
    """A real, small tmpfs filled up by the recorder (skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    try:
        path = mount / "full.swrec"
        clock = FakeClock()
        written = []
        with pytest.raises(RecordingError, match="disk is full.*valid") as info:
            w = RecordingWriter(path, HEADER, clock=clock)
            # different seeds per Snapshot defeat the compressor's window, so the disk fills quickly
            for i, s in enumerate(generate(NODE, [float(1 + i % 50) for i in range(5000)], seed=3)):
                clock.now += 1.0
                written.append(s)
                w.write(s)
        assert w.closed
        rec = read_recording(path)
        assert 0 < len(rec.snapshots) < len(written)
        assert rec.snapshots == written[: len(rec.snapshots)]
        assert "Snapshots up to" in str(info.value)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_released_format_1_file_stays_readable():
    """tests/data keeps one file per released format version; each must read without warnings."""
    rec = read_recording(DATA / "recording-format-1.swrec")
    assert rec.header.format_version == 1
    assert rec.header.data == "synthetic"
    assert len(rec.snapshots) == 30 and rec.warnings == []
    _written_from_the_released_generator(rec.snapshots)


def _written_from_the_released_generator(snapshots) -> None:
    """The file was written by the synthetic generator of its release (whose counters have changed
    since): a Snapshot a second, running sequences following ramp(1, 64, 5), counters that only grow."""
    assert [s.time for s in snapshots] == [1_800_000_000.0 + i for i in range(30)]
    engines = [s.targets[0].engines[0] for s in snapshots]
    assert [e.gauges["vllm:num_requests_running"] for e in engines] == ramp(1, 64, 5)[:30]
    for name in ("vllm:generation_tokens", "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens"):
        values = [e.counters[name] for e in engines]
        assert values == sorted(values) and values[-1] > values[0] > 0


def test_released_format_2_file_stays_readable():
    """Format 2 (compact engines and histograms), in three members: reads as format 1 does."""
    rec = read_recording(DATA / "recording-format-2.swrec")
    assert rec.header.format_version == 2
    assert rec.header.data == "synthetic"
    assert len(rec.snapshots) == 30 and rec.warnings == []
    _written_from_the_released_generator(rec.snapshots)
    assert rec.snapshots == read_recording(DATA / "recording-format-1.swrec").snapshots


def test_compact_engines_and_histograms_round_trip_exactly(tmp_path):
    """What format 2 writes compactly (unchanged counters and histograms, bucket bounds once per
    member, plateaus of cumulative counts, whole "same" lists) comes back value for value, type
    for type, through layout changes, a second engine, a target going down and member boundaries."""
    import dataclasses

    from specwatch.telemetry.snapshot import Histogram

    snaps = snapshots(40)
    base = snaps[0].targets[0].engines[0]
    rebinned = Histogram(((0.5, 1.0), (2.0, 3.0), (float("inf"), 3.0)), 4.0, 3.0)
    for i in range(10, 16):  # a histogram whose bounds change, then change back
        s = snaps[i]
        t = s.targets[0]
        e = t.engines[0]
        e = dataclasses.replace(e, histograms=dict(e.histograms, **{"vllm:time_to_first_token_seconds": rebinned}))
        second = dataclasses.replace(base, engine="1")  # a second engine, unchanged between Snapshots
        snaps[i] = dataclasses.replace(s, targets=(dataclasses.replace(t, engines=(e, second)),))
    snaps[20] = Snapshot(snaps[20].time, (TargetSample(NODE.url, "timeout", "timed out"),), snaps[20].gpus,
                         snaps[20].sources)
    snaps[22] = dataclasses.replace(snaps[21], time=snaps[22].time)  # every entry as before: lists "same"
    for i, power, util in ((31, 0.0, 0.5), (32, -0.0, 0.25)):  # power changes only in the sign of zero
        gpu = snaps[i].gpus[0]
        values = dict(snaps[30].gpus[0].values, power_w=power, util_gpu=util)
        gpus = (dataclasses.replace(gpu, values=values),) + snaps[i].gpus[1:]
        snaps[i] = dataclasses.replace(snaps[i], gpus=gpus)
    path = tmp_path / "r.swrec"
    with RecordingWriter(path, HEADER, member_seconds=15.0) as w:
        for s in snaps:
            w.write(s)
    rec = read_recording(path)
    assert rec.warnings == []
    assert rec.snapshots == snaps
    for got, want in zip(rec.snapshots, snaps):
        for tg, tw in zip(got.targets, want.targets):
            for eg, ew in zip(tg.engines, tw.engines):
                for name, h in ew.histograms.items():
                    assert [(type(le), type(c)) for le, c in eg.histograms[name].buckets] == \
                        [(type(le), type(c)) for le, c in h.buckets]
    assert str(rec.snapshots[32].gpus[0].values["power_w"]) == "-0.0"
    with gzip.open(path, "rt") as f:
        lines = [json.loads(line) for line in f]
    assert any(line.get("gpus") == "same" for line in lines)  # whole lists written as "same"
    engines = [e for line in lines if isinstance(line.get("targets"), list)
               for t in line["targets"] if isinstance(t, dict) for e in t.get("engines", ())]
    histograms = [h for e in engines
                  for h in (e["histograms"] if isinstance(e["histograms"], list) else e["histograms"].values())]
    assert any(isinstance(h, list) for h in histograms)  # compact histograms
    assert any(h == "same" for h in histograms)  # an engine's unchanged histogram
    assert any(isinstance(e["counters"], list) for e in engines)  # counter values without their names
    assert any(isinstance(g, dict) and "changed" in g for line in lines if isinstance(line.get("gpus"), list)
               for g in line["gpus"])  # GPUs as the values that changed


def test_nan_and_infinities_are_spelled_as_the_snapshot_spells_them(tmp_path):
    import dataclasses
    import math

    snaps = snapshots(3)
    target = snaps[1].targets[0]
    engine = target.engines[0]
    odd = {**engine.gauges, "nan_gauge": math.nan, "up": math.inf, "down": -math.inf}
    engine = dataclasses.replace(engine, gauges=odd)
    snaps[1] = dataclasses.replace(snaps[1], targets=(dataclasses.replace(target, engines=(engine,)),))
    path = tmp_path / "r.swrec"
    write_recording(path, HEADER, snaps)
    gauges = read_recording(path).snapshots[1].targets[0].engines[0].gauges
    assert math.isnan(gauges["nan_gauge"]) and gauges["up"] == math.inf and gauges["down"] == -math.inf
    written = gzip.decompress(path.read_bytes()).decode()
    for spelling in ("NaN", "+Inf", "-Inf"):
        assert json.dumps(spelling) in json.dumps(engine.to_dict())  # the Snapshot's own spelling …
        assert json.dumps(spelling) in written  # … is the recording's
