"""Property-based tests of the exposition reader, with prometheus_client as the oracle (issue 9).

The generator writes valid Prometheus text for the families specwatch reads, grouped as client
libraries emit them (a HELP and a TYPE line, then the family's series), with random label values
(escapes and any unicode), random values (NaN, ±Inf, exponents, integers), optional timestamps, and
random foreign families interleaved. `select_samples` must give exactly what prometheus_client gives
on every sample; and `parse_payload` must never raise anything but ExpositionError on any input.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exposition_oracle import full_parse_samples, same_values, samples_by_series
from specwatch.telemetry.exposition import (
    COUNTER,
    GAUGE,
    SAMPLE_NAMES,
    WANTED,
    ExpositionError,
    parse_payload,
    select_samples,
)

# -- the oracle comparison (as in tests/test_exposition.py) -----------------------------------------


def _assert_identical(fast, oracle):
    assert fast.keys() == oracle.keys()
    assert same_values(fast, oracle), [k for k in oracle if not same_values({k: fast[k]}, {k: oracle[k]})]


# -- generators ---------------------------------------------------------------------------------------

# any unicode except surrogates (not encodable); the text format escapes only \ " and newline
label_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
plain_label_text = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_./ ", max_size=12)
label_value = st.one_of(plain_label_text, label_text, st.sampled_from(['a\\b', 'q"q', 'n\nl', '}', '{', ',', '=', ' ']))
label_name = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: not n.startswith("__") and n not in ("le", "quantile", "model_name", "engine"))


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@st.composite
def number(draw) -> str:
    kind = draw(st.sampled_from(["float", "int", "exp", "special", "repr"]))
    if kind == "special":
        return draw(st.sampled_from(["NaN", "+Inf", "-Inf", "Inf", "nan", "inf", "+inf", "-inf"]))
    if kind == "int":
        return str(draw(st.integers(-10**12, 10**15)))
    if kind == "exp":
        mantissa = draw(st.floats(-1e3, 1e3, allow_nan=False))
        return f"{mantissa:{draw(st.sampled_from(['e', 'E', '.3e', '.17g']))}}"
    value = draw(st.floats(allow_nan=False, allow_infinity=False, width=64))
    return repr(value) if kind == "repr" else f"{value:.6f}"


@st.composite
def labels_text(draw, fixed: dict[str, str]) -> str:
    extra = draw(st.dictionaries(label_name, label_value, max_size=3))
    pairs = {**extra, **fixed}
    items = list(pairs.items())
    if draw(st.booleans()):
        items = draw(st.permutations(items))
    if not items:
        return ""
    sep = draw(st.sampled_from([",", ", "])) if draw(st.integers(0, 4)) == 0 else ","
    body = sep.join(f'{k}="{escape(v)}"' for k, v in items)
    if draw(st.integers(0, 6)) == 0:
        body += ","  # a trailing comma is valid
    return "{" + body + "}"


@st.composite
def sample_line(draw, name: str, fixed: dict[str, str]) -> str:
    line = f"{name}{draw(labels_text(fixed))} {draw(number())}"
    if draw(st.integers(0, 5)) == 0:
        line += f" {draw(st.integers(0, 2 * 10**12))}"  # a timestamp in ms
    return line


@st.composite
def wanted_family(draw) -> list[str]:
    family = draw(st.sampled_from(sorted(WANTED)))
    kind = WANTED[family]
    exposed = family + "_total" if kind == COUNTER and draw(st.booleans()) else family
    kind_word = {COUNTER: "counter", GAUGE: "gauge"}.get(kind, "histogram")
    lines = [f"# HELP {exposed} {draw(label_text).replace(chr(10), ' ').replace(chr(92), '/')}",
             f"# TYPE {exposed} {kind_word}"]
    engines = draw(st.lists(st.sampled_from(["0", "1", "2", "10"]), min_size=1, max_size=3, unique=True))
    model = draw(st.one_of(st.just("m"), label_value))
    for engine in engines:
        fixed = {"model_name": model, "engine": engine}
        if kind == COUNTER:
            sample_name = family + "_total"
            if family.endswith("_per_pos"):
                for pos in range(draw(st.integers(1, 4))):
                    lines.append(draw(sample_line(sample_name, {**fixed, "position": str(pos)})))
            else:
                lines.append(draw(sample_line(sample_name, fixed)))
            if draw(st.integers(0, 3)) == 0:
                lines.append(draw(sample_line(family + "_created", fixed)))
        elif kind == GAUGE:
            lines.append(draw(sample_line(family, fixed)))
        else:
            bounds = sorted(set(draw(st.lists(st.floats(1e-4, 1e4), max_size=5))))
            for le in [*map(repr, bounds), "+Inf"]:
                lines.append(draw(sample_line(family + "_bucket", {**fixed, "le": le})))
            lines.append(draw(sample_line(family + "_sum", fixed)))
            lines.append(draw(sample_line(family + "_count", fixed)))
    return lines


@st.composite
def foreign_family(draw) -> list[str]:
    name = draw(st.sampled_from(["python_gc_objects_collected", "http_requests", "process_cpu_seconds",
                                 "vllm_unrelated", "up", "process_virtual_memory_bytes"]))
    kind = draw(st.sampled_from(["counter", "gauge", "untyped"]))
    exposed = name + "_total" if kind == "counter" else name
    lines = [f"# HELP {exposed} a foreign family", f"# TYPE {exposed} {kind}"]
    for _ in range(draw(st.integers(1, 3))):
        lines.append(draw(sample_line(exposed, {})))
    return lines


@st.composite
def exposition(draw) -> str:
    wanted = draw(st.lists(wanted_family(), min_size=1, max_size=6,
                           unique_by=lambda lines: lines[1].split()[2].removesuffix("_total")))
    foreign = draw(st.lists(foreign_family(), max_size=3, unique_by=lambda lines: lines[1].split()[2]))
    blocks = draw(st.permutations(wanted + foreign))
    end = draw(st.sampled_from(["\n", "\n", "\n", "\r\n"]))
    indent = draw(st.sampled_from(["", "", "", "  "]))
    return end.join(indent + line for block in blocks for line in block) + end


# -- properties ----------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exposition())
def test_select_samples_equals_prometheus_client_on_every_sample(text):
    oracle = samples_by_series(full_parse_samples(text))
    fast = samples_by_series(select_samples(text))
    _assert_identical(fast, oracle)
    if "\x00" in text:
        return  # parse_payload refuses any NUL as a binary payload, by design
    # and parse_payload accepts it: the engines it builds hold only finite numbers
    parsed = parse_payload(text)
    for e in parsed.engines:
        assert all(math.isfinite(v) for v in [*e.counters.values(), *e.gauges.values()])


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400))
def test_parse_payload_raises_only_exposition_error_on_any_text(text):
    try:
        parse_payload(text)
    except ExpositionError:
        pass


wanted_ish = st.lists(
    st.one_of(
        st.sampled_from(sorted(SAMPLE_NAMES)).map(lambda n: n + "{"),
        st.sampled_from(["# TYPE ", "# HELP ", "\n", "\r", " ", '"', "\\", "}", "=", ",", "le=", "position=",
                         'engine="', "NaN", "+Inf", "1e309", "0x1", "1_0", "\x00", "\u2028", "²", "９"]),
        st.text(max_size=5),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(wanted_ish)
def test_parse_payload_raises_only_exposition_error_on_near_miss_text(text):
    try:
        parse_payload(text)
    except ExpositionError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parse_payload_raises_only_exposition_error_on_any_bytes(data):
    try:
        parse_payload(data.decode("utf-8", errors="replace"))  # as the scraper decodes a body
    except ExpositionError:
        pass
