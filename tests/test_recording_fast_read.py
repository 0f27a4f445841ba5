"""The fast reading of a recording (orjson, histograms paired with their bounds and GPUs made when
first read, objects set through their slots) gives what a plain reading gives: the same Snapshots,
and a headless replay prints the same bytes as the Snapshots themselves fed straight to a Monitor."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import io
import json
import math
import pickle
from argparse import Namespace

import pytest

from specwatch.commands.replay import _print_timeline, play_headless, replay_monitor
from specwatch.perf import HingeParameters
from specwatch.recording import RecordingHeader, RecordingWriter, read_recording
from specwatch.recording import reader
from specwatch.telemetry.snapshot import Histogram, Snapshot
from specwatch.collectors.synthetic import SyntheticNode, generate

# n-gram, k=4 on an A100-like hinge: the speedup crosses 1 near 54 running, so a load that moves
# between 8 and 128 turns the verdict both ways (each stretch outlasts the banner's dwell)
NODE = SyntheticNode(step=HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134,
                                          kv_s_per_token=0.0, per_token_s=0.0),
                     gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1), gpus=4)
LOAD = [8.0] * 40 + [128.0] * 330 + [8.0] * 330 + [float(1 + i % 60) for i in range(200)]
HEADER = RecordingHeader(data="synthetic", interval_s=1.0, notes="fast read", advisor={"method": "ngram"})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The Snapshots as made, and a recording of them in several members."""
    snapshots = list(generate(NODE, LOAD, seed=5))
    path = tmp_path_factory.mktemp("fast") / "run.swrec"
    with RecordingWriter(path, HEADER, member_seconds=120.0) as writer:
        for snapshot in snapshots:
            writer.write(snapshot)
    return snapshots, path


def _straight_timeline(snapshots, as_json: bool) -> str:
    """The timeline of the Snapshots as made, fed to the Monitor a replay of their recording builds."""
    out = io.StringIO()
    _print_timeline("run.swrec", snapshots, replay_monitor(HEADER), as_json, out, "replay", [])
    return out.getvalue()


def _replayed(path, as_json: bool) -> str:
    out = io.StringIO()
    play_headless(path, Namespace(json=as_json, window=None, evaluate_every=None), "replay", out)
    text = out.getvalue()
    if not as_json:
        assert text.startswith("# run.swrec: SYNTHETIC data")
        text = text.split("\n", 1)[1]
    return text


@pytest.mark.parametrize("as_json", [True, False])
@pytest.mark.parametrize("parser", ["orjson", "stdlib"])
def test_a_headless_replay_prints_what_the_snapshots_themselves_give(recorded, monkeypatch, as_json, parser):
    snapshots, path = recorded
    if parser == "stdlib":
        monkeypatch.setattr(reader, "_fast_loads", None)
    expected = _straight_timeline(snapshots, as_json)
    changes = [json.loads(line) for line in _straight_timeline(snapshots, True).splitlines()]
    assert [c["speculation"] for c in changes].count("off") >= 1  # the timeline has something to match
    assert [c["speculation"] for c in changes].count("on") >= 2
    assert _replayed(path, as_json) == expected


def test_the_fast_reading_gives_the_snapshots_as_made(recorded, monkeypatch):
    snapshots, path = recorded
    fast = read_recording(path).snapshots
    monkeypatch.setattr(reader, "_fast_loads", None)
    plain = read_recording(path).snapshots
    assert fast == snapshots
    assert plain == snapshots
    # histograms written against their layout stand for Histograms in every way a caller sees
    engine = fast[-1].targets[0].engines[0]
    written = [h for h in engine.histograms.values() if isinstance(h, reader._WrittenHistogram)]
    assert written, "format 2 writes histograms against their bucket bounds"
    made = snapshots[-1].targets[0].engines[0].histograms
    for name, h in engine.histograms.items():
        assert h == made[name] and made[name] == h
        assert hash(h) == hash(made[name])
        assert repr(h) == repr(made[name])
        assert h.to_dict() == made[name].to_dict()
        assert type(copy.deepcopy(h)) is Histogram and copy.deepcopy(h) == made[name]
        assert type(pickle.loads(pickle.dumps(h))) is Histogram and pickle.loads(pickle.dumps(h)) == made[name]


def test_a_snapshot_whose_gpus_are_made_when_read_stands_for_the_snapshot_as_made(recorded):
    snapshots, path = recorded
    read = read_recording(path).snapshots
    lazy = [(got, made) for got, made in zip(read, snapshots) if isinstance(got, reader._ReadSnapshot)]
    assert len(lazy) > len(read) // 2, "lines whose GPU values moved keep their GpuSamples until read"
    got, made = lazy[-1]
    assert got == made and made == got
    assert repr(got) == repr(made)
    assert got.to_dict() == made.to_dict()
    assert got.gpus is got.gpus  # made once
    for copied in (copy.deepcopy(got), pickle.loads(pickle.dumps(got))):
        assert type(copied) is Snapshot and copied == made
    # dataclasses.replace() (the demo playlist renames targets) makes one from another
    renamed = dataclasses.replace(lazy[0][0], targets=())
    assert renamed.gpus == lazy[0][1].gpus and renamed.targets == () and renamed.time == lazy[0][1].time
    assert renamed != lazy[0][1]


def test_written_histogram_repeats_the_last_count_written_for_the_buckets_left_out():
    h = reader._WrittenHistogram((1.0, 2.0, 4.0, math.inf), [3.0, 5.0], 9.5, 5.0)
    assert h.buckets == ((1.0, 3.0), (2.0, 5.0), (4.0, 5.0), (math.inf, 5.0))
    assert h == Histogram(((1.0, 3.0), (2.0, 5.0), (4.0, 5.0), (math.inf, 5.0)), 9.5, 5.0)
    assert h != Histogram(((1.0, 3.0), (2.0, 5.0), (4.0, 5.0), (math.inf, 6.0)), 9.5, 5.0)
    # its bucket count without pairing the buckets (the window asks it of every histogram it subtracts)
    unpaired = reader._WrittenHistogram((1.0, 2.0, 4.0, math.inf), [3.0, 5.0], 9.5, 5.0)
    assert unpaired.bucket_count == 4 == len(h.buckets)
    with pytest.raises(AttributeError):
        reader._HISTOGRAM_BUCKETS.__get__(unpaired)  # still unpaired


def test_reading_a_recording_inflates_in_one_worker_that_ends_with_the_reading(recorded):
    """The next chunk inflates in a worker thread while this one's lines are read: a reading stopped
    early (a dashboard seeking away) ends its worker too, and a whole reading has joined its own
    before it returns."""
    import threading

    def workers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("specwatch-inflate")}

    snapshots, path = recorded
    before = workers()  # an earlier test's reading may not have been collected yet
    lines = reader.iter_lines(path, [])
    next(lines)
    (worker,) = workers() - before
    lines.close()
    worker.join(timeout=10)
    assert not worker.is_alive()
    before = workers()
    assert len(read_recording(path).snapshots) == len(snapshots)
    # a reading read to its end has joined its worker before it returns: none is left to wait for
    assert not {t for t in workers() - before if t.is_alive()}


@pytest.mark.parametrize("line", [
    b'{"a":0.1,"b":5e-324,"c":1.7976931348623157e308,"d":2.2250738585072011e-308,"e":-0.0,"f":[1,2.5e10]}',
    b'{"x":0.30000000000000004,"y":123456789012345678,"z":1e22,"w":9007199254740993}',
    b'{"s":"caf\\u00e9 \\ud83d\\ude00","t":"\xc3\xa9"}',
    b'{"lone":"\\ud800"}',  # a lone surrogate: orjson refuses, the stdlib reads it
    b'{"n":NaN,"i":Infinity}',  # not JSON: orjson refuses, the stdlib reads it (as it always did)
    b'{"k":1,"k":2}',  # the last of a repeated key, as the stdlib takes it
])
def test_a_line_reads_as_the_stdlib_reads_it(line):
    fast = reader._loads_line(line)
    plain = json.loads(line)
    assert repr(fast) == repr(plain)  # repr: NaN is not equal to itself, and -0.0 == 0.0


def test_an_integer_beyond_64_bits_reads_as_its_nearest_float():
    """The one value orjson reads otherwise than the stdlib: no recorder writes one, and the float
    is what float() of the stdlib's int gives."""
    line = b'{"big":123456789012345678901234567890,"fits":18446744073709551615}'
    fast, plain = reader._loads_line(line), json.loads(line)
    assert fast["fits"] == plain["fits"] and type(fast["fits"]) is int
    assert fast["big"] == float(plain["big"])


@pytest.mark.parametrize("line", [b'{"a":1', b'{"a":1}x', b'{"a":"\xff"}', b'[1,2]x', b'{"a":1}{"b":2}'])
def test_a_bad_line_fails_as_the_stdlib_fails(line):
    with pytest.raises((ValueError, UnicodeDecodeError)) as fast:
        reader._loads_line(line)
    with pytest.raises((ValueError, UnicodeDecodeError)) as plain:
        json.loads(line)
    assert type(fast.value) is type(plain.value)
    assert str(fast.value) == str(plain.value)


def _rewritten(path, out, edit):
    """The recording at `path` with every Snapshot line passed through `edit`, member by member."""
    members: list[list[str]] = []
    for line in gzip.decompress(path.read_bytes()).decode().splitlines():
        obj = json.loads(line)
        if obj.get("kind") != "snapshot":
            members.append([])
        members[-1].append(json.dumps(edit(obj) if obj.get("kind") == "snapshot" else obj, separators=(",", ":")))
    out.write_bytes(b"".join(gzip.compress(("\n".join(m) + "\n").encode()) for m in members))
    return out


def _numbers_spelled(spelled):
    """An edit that spells every number of the compact histograms, the counters written as a list
    and the per-position counts with `spelled`, as a file no recorder writes may hold them."""
    def edit(obj):
        for target in obj["targets"] if isinstance(obj.get("targets"), list) else ():
            for engine in target.get("engines", ()) if isinstance(target, dict) else ():
                for name in ("counters", "accepted_per_position"):
                    if isinstance(engine.get(name), list):
                        engine[name] = [spelled(v) if isinstance(v, float) else v for v in engine[name]]
                written = engine.get("histograms")
                for h in written if isinstance(written, list) else written.values():
                    if isinstance(h, list):
                        h[:] = [spelled(v) if isinstance(v, float) else v for v in h]
                    elif isinstance(h, dict) and "h" in h:
                        h["h"] = [spelled(v) if isinstance(v, float) else v for v in h["h"]]
        return obj

    return edit


@pytest.mark.parametrize("spelled, mark", [
    (lambda v: int(v) if v.is_integer() else v, ",0,"),  # whole numbers as ints, the rest as floats
    (repr, '"0.0"'),  # every number as text, which float() reads back to the same value
])
def test_histogram_numbers_written_as_ints_or_text_read_as_the_floats(recorded, tmp_path, spelled, mark):
    """Counts are checked in bulk as the line is read and made floats when the buckets are first
    read, counters and per-position counts pass through float() in C: an int or a number written
    as text must still come back as the float, type and all."""
    snapshots, path = recorded
    edited = _rewritten(path, tmp_path / "spelled.swrec", _numbers_spelled(spelled))
    assert mark in gzip.decompress(edited.read_bytes()).decode()  # the file does spell them so
    read = read_recording(edited)
    assert read.warnings == []
    assert read.snapshots == snapshots
    for got in read.snapshots[::37]:
        engine = got.targets[0].engines[0]
        assert all(type(v) is float for v in engine.counters.values())
        assert engine.accepted_per_position and all(type(v) is float for v in engine.accepted_per_position)
        for h in engine.histograms.values():
            assert all(type(le) is float and type(c) is float for le, c in h.buckets)
            assert type(h.sum) is float and type(h.count) is float
            assert repr(h) == repr(Histogram(h.buckets, h.sum, h.count))


@pytest.mark.parametrize("bad", [None, [1.0], {"x": 1.0}, "many", True])
def test_a_count_that_is_no_number_is_a_damaged_line(recorded, tmp_path, bad):
    """The bulk check lets through only what float() reads (True, as float(True) did before)."""
    snapshots, path = recorded

    def spoil(obj):
        if obj["time"] == snapshots[300].time:
            h = obj["targets"][0]["engines"][0]["histograms"]
            written = [w if isinstance(w, list) else w["h"] for w in (h if isinstance(h, list) else h.values())]
            longest = max(written, key=len)
            assert len(longest) > 3
            longest[2] = bad  # the first count: only the buckets, read later, would meet it
        return obj

    read = read_recording(_rewritten(path, tmp_path / "bad.swrec", spoil))
    if bad is True:
        assert read.warnings == [] and len(read.snapshots) == len(snapshots)
        return
    assert len(read.snapshots) == 300
    assert len(read.warnings) == 1 and "damaged Snapshot" in read.warnings[0]
