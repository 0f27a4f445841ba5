import math
from pathlib import Path

import pytest

from payloads import DOCS_EXAMPLE, NGRAM_K4, multi_engine_payload, read
from exposition_oracle import full_parse_samples, same_values, samples_by_series
from specwatch.telemetry.exposition import (
    ExpositionError,
    parse_payload,
    select_samples,
)


def _assert_identical(fast, oracle):
    assert fast.keys() == oracle.keys()
    assert same_values(fast, oracle), [k for k in oracle if not same_values({k: fast[k]}, {k: oracle[k]})]


PAYLOADS = {
    "real-ngram-k4": lambda: read(NGRAM_K4),
    "docs-example": lambda: read(DOCS_EXAMPLE),
    "8-engines": lambda: multi_engine_payload(8),
}


@pytest.mark.parametrize("name", PAYLOADS)
def test_fast_path_values_identical_to_prometheus_client(name):
    text = PAYLOADS[name]()
    fast = samples_by_series(select_samples(text))
    oracle = samples_by_series(full_parse_samples(text))
    assert len(oracle) > 10
    _assert_identical(fast, oracle)


@pytest.mark.parametrize(
    "odd_line",
    [
        'vllm:num_requests_running{engine="0",model_name="a\\"b"} 3',  # escaped quote
        'vllm:num_requests_running{engine="0",model_name="m"} 3 1700000000000',  # timestamp
        'vllm:num_requests_running{engine="0", model_name="m"} 3',  # space after comma
        '   vllm:num_requests_running{engine="0",model_name="m"} 3',  # leading blanks
        'vllm:num_requests_running{engine="0",model_name="m"} +Inf',
        'vllm:num_requests_running{engine="0",model_name="m}x"} 2',  # brace inside a value
    ],
)
def test_lines_outside_the_canonical_shape_still_match_the_oracle(odd_line):
    text = read(NGRAM_K4).replace(
        'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0', odd_line
    )
    _assert_identical(samples_by_series(select_samples(text)), samples_by_series(full_parse_samples(text)))


@pytest.mark.parametrize(
    "odd_value",
    [" 1_000", " 3 1700000000000", " 0x10", "  3", "\t3", " 3 ", " 1e3", " -.5", " NaN", " infinity", " +Inf", " 7"],
)
def test_a_line_seen_on_an_earlier_scrape_is_read_as_closely(odd_value):
    """The reader remembers the heads (`name{labels}`) of lines it has read: the next scrape's line
    with the same head and another value spelling must still read as prometheus_client reads it."""
    line = 'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0'
    text = read(NGRAM_K4)
    assert line in text
    select_samples(text)  # this head is now known
    changed = text.replace(line, line[: -len(" 0.0")] + odd_value)
    try:
        oracle = samples_by_series(full_parse_samples(changed))
    except Exception:  # noqa: BLE001 - prometheus_client refuses the line: so must the reader
        with pytest.raises(ExpositionError):
            select_samples(changed)
        return
    _assert_identical(samples_by_series(select_samples(changed)), oracle)


def test_real_sample_engine_figures():
    parsed = parse_payload(read(NGRAM_K4))
    assert len(parsed.engines) == 1
    e = parsed.engines[0]
    assert e.engine == "0" and e.model_name == "tiny-llama"
    assert e.accepted_per_position == (135.0, 67.0, 40.0, 30.0)
    assert e.counters["vllm:spec_decode_num_drafts"] == 301.0
    assert e.counters["vllm:spec_decode_num_draft_tokens"] == 1037.0
    assert e.counters["vllm:spec_decode_num_accepted_tokens"] == 272.0
    # request_success has one series per finished_reason: they are summed
    assert e.counters["vllm:request_success"] == 20.0
    h = e.histograms["vllm:iteration_tokens_total"]
    assert h.buckets[-1][0] == math.inf and h.buckets[-1][1] == h.count
    assert parsed.process_start_time is not None
    assert not parsed.missing_required()
    # _created series are never read
    assert not any(name.endswith("_created") for name in e.counters)


def test_eight_engines_are_kept_apart():
    parsed = parse_payload(multi_engine_payload(8))
    assert [e.engine for e in parsed.engines] == [str(i) for i in range(8)]
    drafts = [e.counters["vllm:spec_decode_num_drafts"] for e in parsed.engines]
    assert drafts == [301.0 * (1 + i) for i in range(8)]
    assert all(len(e.accepted_per_position) == 4 for e in parsed.engines)


def test_old_names_without_engine_label():
    parsed = parse_payload(read(DOCS_EXAMPLE))
    (e,) = parsed.engines
    assert e.engine == "0"
    assert e.gauges["vllm:num_requests_running"] == 8.0


def test_duplicate_series_count_once():
    line = 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 20.0'
    base = read(NGRAM_K4)
    assert line in base
    parsed = parse_payload(base.replace(line, line + "\n" + line))
    assert parsed.engines[0].counters["vllm:request_success"] == 20.0


@pytest.mark.parametrize(
    "payload, fragment",
    [
        ("", "empty"),
        ("<html><body>Not Found</body></html>", "HTML"),
        ('{"detail": "nope"}', "JSON"),
        ("\x00\x01\x02binary", "binary"),
        ("this is { not prometheus", "not Prometheus"),
    ],
)
def test_not_prometheus_text_says_what_it_is(payload, fragment):
    with pytest.raises(ExpositionError, match=fragment):
        parse_payload(payload)


def test_prometheus_text_without_vllm_families_reports_missing():
    parsed = parse_payload("# TYPE up gauge\nup 1\n")
    assert parsed.engines == ()
    assert parsed.missing_required() == ["vllm:num_requests_running", "vllm:generation_tokens"]


def test_truncated_inside_a_wanted_family_is_an_error_not_a_traceback():
    text = read(NGRAM_K4)
    cut = text.index('vllm:num_requests_running{engine="0"') + 30
    with pytest.raises(ExpositionError, match="malformed"):
        parse_payload(text[:cut])


def test_ungrouped_family_still_matches_the_oracle():
    """A vLLM series placed inside another family's block (not grouped, as no client library emits)
    sends the payload down the line-by-line path, which still reads it."""
    text = read(NGRAM_K4)
    moved = 'vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 0.0'
    assert moved in text
    text = text.replace(moved + "\n", "")
    text = text.replace("# TYPE python_info gauge\n", "# TYPE python_info gauge\n" + moved.replace("0.0", "7.0") + "\n")
    samples = select_samples(text)
    assert any(s.name == "vllm:num_requests_waiting" and s.value == 7.0 for s in samples)
    _assert_identical(samples_by_series(samples), samples_by_series(full_parse_samples(text)))


def test_crlf_payload_matches_the_oracle():
    text = read(NGRAM_K4).replace("\n", "\r\n")
    _assert_identical(samples_by_series(select_samples(text)), samples_by_series(full_parse_samples(text)))


def test_non_finite_values_are_kept_out_of_engine_samples():
    text = read(NGRAM_K4)
    text = text.replace('vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0',
                        'vllm:num_requests_running{engine="0",model_name="tiny-llama"} NaN')
    text = text.replace('vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny-llama"} 301.0',
                        'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny-llama"} +Inf')
    parsed = parse_payload(text)
    e = parsed.engines[0]
    assert "vllm:num_requests_running" not in e.gauges
    assert "vllm:spec_decode_num_drafts" not in e.counters
    assert "vllm:num_requests_running" in parsed.families_present


CORPUS_METRICS = Path(__file__).parent / "corpus" / "metrics"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS_METRICS.glob("*.prom")) + ["real-ngram-k4", "8-engines"])
def test_a_scrape_read_with_what_earlier_scrapes_taught_reads_as_a_first_one(name, monkeypatch):
    """Line heads and where each series is filed are remembered between scrapes: what a payload
    reads as must not depend on what was read before it (the bad-input corpus included)."""
    import specwatch.telemetry.exposition as exposition

    text = PAYLOADS[name]() if name in PAYLOADS else (CORPUS_METRICS / name).read_text(errors="replace")

    def read(payload):
        try:
            return parse_payload(payload)
        except ExpositionError as exc:
            return str(exc)

    warm = [read(text), read(text)]  # the second reads with the first one's heads and routes
    for cache in ("_HEAD_CACHE", "_ROUTES", "_LABEL_CACHE", "_SHAPES"):
        monkeypatch.setattr(exposition, cache, {})
    cold = read(text)
    assert warm[0] == cold and warm[1] == cold


def wanted(samples: list) -> list:
    """prometheus_client's samples of the families specwatch reads (the others it never files)."""
    from specwatch.telemetry.exposition import SAMPLE_NAMES

    return [s for s in samples if s.name in SAMPLE_NAMES]


def _changed_values(text: str, step: int) -> str:
    """The payload as a later scrape gives it: every sample's value moved, some to NaN, +Inf or −0.0
    (non-finite values are filed nowhere), the heads (names and labels) as they were."""
    out = []
    for n, line in enumerate(text.split("\n")):
        if line and line[0] != "#" and " " in line:
            head, _, value = line.rpartition(" ")
            try:
                number = float(value)
            except ValueError:
                out.append(line)
                continue
            moved = ("NaN" if (n + step) % 97 == 0 else "+Inf" if (n + step) % 89 == 0
                     else "-0.0" if (n + step) % 83 == 0 else repr(number * (1 + step / 10) + step))
            out.append(f"{head} {moved}")
        else:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_payload_of_a_shape_seen_before_is_built_as_from_prometheus_clients_samples(name, monkeypatch):
    """After the first scrape, a payload with the same text between its values is built from the
    shape kept for it, reading only the values: every later scrape must give the engines, start
    time and families present that prometheus_client's samples of that payload give."""
    from specwatch.telemetry import exposition
    from specwatch.telemetry.exposition import build_engines

    text = PAYLOADS[name]()
    parse_payload(text)  # the shape is learnt
    for step in range(1, 4):
        later = _changed_values(text, step)
        with monkeypatch.context() as m:  # read through the shape: the general path is not taken
            m.setattr(exposition, "_grouped_wanted_lines", None)
            m.setattr(exposition, "_select_line_by_line", None)
            parse_payload(later)
        shapes = len(exposition._SHAPES)
        fast = parse_payload(later)
        assert len(exposition._SHAPES) <= shapes + 1  # the shape is known: no new shape each time
        oracle = build_engines(wanted(full_parse_samples(later)))
        assert fast.families_present == oracle.families_present
        assert fast.process_start_time == oracle.process_start_time or (
            math.isnan(fast.process_start_time) and math.isnan(oracle.process_start_time))
        assert fast.engines == oracle.engines
    assert any(len(shape.positions) > 10 for shape in exposition._SHAPES.values())


def _with_line(text: str, find: str, change) -> str:
    """The payload with the first line that starts with `find` changed by `change`."""
    lines = text.split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith(find))
    lines[i:i + 1] = change(lines[i])
    return "\n".join(lines)


# Later scrapes that differ from the learnt shape in more than their values: each must be read the
# general way, as prometheus_client reads it (a shape that took them would misread them).
_NOT_THE_SHAPE = {
    "a timestamp after a value": lambda t: _with_line(
        t, "vllm:num_requests_running{", lambda line: [line + " 1700000000000"]),
    "two spaces before a value": lambda t: _with_line(
        t, "vllm:num_requests_running{", lambda line: [line.replace(" ", "  ", 1) if "} " not in line
                                                       else line.replace("} ", "}  ")]),
    "a value spelled the other way": lambda t: _with_line(
        t, "vllm:generation_tokens_total{", lambda line: [line.rpartition(" ")[0] + " 1.5E+3"]),
    "a value spelled outside the plain numbers": lambda t: _with_line(
        t, "vllm:generation_tokens_total{", lambda line: [line.rpartition(" ")[0] + " +inf"]),
    "a series added": lambda t: _with_line(
        t, "vllm:num_requests_running{", lambda line: [line, line.replace('engine="0"', 'engine="1"')]),
    "a series gone": lambda t: _with_line(t, "vllm:num_requests_waiting{", lambda line: []),
    "a label value changed": lambda t: _with_line(
        t, "vllm:num_requests_running{", lambda line: [line.replace("tiny-llama", "other-model")]),
    "a comment changed": lambda t: _with_line(t, "# HELP vllm:num_requests_running", lambda line: [line + "!"]),
    "CR line ends": lambda t: t.replace("\n", "\r\n"),
}


@pytest.mark.parametrize("change", _NOT_THE_SHAPE)
def test_a_later_scrape_that_is_not_the_shape_seen_is_read_the_general_way(change):
    from specwatch.telemetry.exposition import build_engines

    text = read(NGRAM_K4)
    parse_payload(text)  # the shape is learnt
    later = _NOT_THE_SHAPE[change](_changed_values(text, 1))
    assert later != text
    parsed = parse_payload(later)
    oracle = build_engines(wanted(full_parse_samples(later)))
    assert parsed.engines == oracle.engines
    assert parsed.families_present == oracle.families_present


def test_a_duplicated_series_counts_once_on_the_plan_path_too():
    """A series listed twice in one payload counts once, its last value, on every scrape."""
    from specwatch.telemetry.exposition import build_engines

    text = read(NGRAM_K4)
    line = 'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0'
    doubled = text.replace(line, line + "\n" + line.replace(" 0.0", " 5.0"))
    for value in ("5.0", "7.0"):
        payload = doubled.replace('model_name="tiny-llama"} 5.0', f'model_name="tiny-llama"}} {value}')
        parsed = parse_payload(payload)
        assert parsed.engines == build_engines(wanted(full_parse_samples(payload))).engines
        assert parsed.engines[0].gauges["vllm:num_requests_running"] == float(value)


def _finite_changes(text: str, step: int) -> str:
    """A later scrape with every value moved and some set to -0.0, none to NaN or ±Inf."""
    out = []
    for n, line in enumerate(text.split("\n")):
        head, _, value = line.rpartition(" ")
        if line and line[0] != "#" and head:
            try:
                number = float(value)
            except ValueError:
                out.append(line)
                continue
            out.append(f"{head} {'-0.0' if (n + step) % 7 == 0 else repr(number * (1 + step / 10) + step)}")
        else:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("name", PAYLOADS)
def test_the_dicts_built_at_once_are_those_built_sample_by_sample(name):
    """A payload without NaN or ±Inf has its engine dicts built a dict at a time; they must be the
    dicts the sample-by-sample filing gives, down to key order and the sign of a zero (0.0 + -0.0
    is 0.0 there). Compared as repr: == would take -0.0 for 0.0 and ignore order."""
    from specwatch.telemetry import exposition

    text = PAYLOADS[name]()
    parse_payload(text)
    for step in range(1, 3):
        later = _finite_changes(text, step)
        literals, split_values = exposition.split_at_values(later)
        shape = exposition._SHAPES[literals]
        values = list(map(float, shape.pick(split_values)))
        assert any(str(v) == "-0.0" for v in values)
        at_once = shape.plan.build(values)
        by_sample = shape.plan._build_step_by_step(values)
        assert repr(at_once) == repr(by_sample)
        assert repr(parse_payload(later)) == repr(by_sample)
