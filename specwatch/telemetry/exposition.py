"""Reading vLLM's Prometheus exposition text into EngineSamples, fast.

prometheus_client's text parser is the parser of record, but a full parse of one engine's /metrics
(about 60 KB, 660 lines) costs several milliseconds and an 8-engine payload ten times that, most of it
spent on families specwatch never reads (HTTP histograms, per-request size histograms, Python GC).

The scrape path therefore reads only the families in WANTED, one line at a time, and takes the fast
path only for lines in the canonical shape vLLM emits: `name{label="value",...} number`, with no
escapes, no timestamp and a plain number. Any wanted line outside that shape sends the wanted
families, and only those, through prometheus_client instead. A test checks that both paths give
values identical to a full prometheus_client parse on every sample of the real captures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import isfinite
from operator import itemgetter
from typing import Any, Iterable, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from specwatch.telemetry.snapshot import EngineSample, Histogram

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"

# The families specwatch reads, by the base name prometheus_client gives them (counters without
# `_total`), with old spellings kept beside the new ones (reference/vllm.md §1.6).
WANTED: dict[str, str] = {
    # speculative decoding, V1 (and the two V0 counters with the same names)
    "vllm:spec_decode_num_drafts": COUNTER,
    "vllm:spec_decode_num_draft_tokens": COUNTER,
    "vllm:spec_decode_num_accepted_tokens": COUNTER,
    "vllm:spec_decode_num_accepted_tokens_per_pos": COUNTER,
    # speculative decoding, V0 only (gone in 0.10)
    "vllm:spec_decode_num_emitted_tokens": COUNTER,
    "vllm:spec_decode_draft_acceptance_rate": GAUGE,
    "vllm:spec_decode_efficiency": GAUGE,
    # scheduler and cache
    "vllm:num_requests_running": GAUGE,
    "vllm:num_requests_waiting": GAUGE,
    "vllm:kv_cache_usage_perc": GAUGE,
    "vllm:gpu_cache_usage_perc": GAUGE,
    "vllm:num_preemptions": COUNTER,
    "vllm:prefix_cache_queries": COUNTER,
    "vllm:prefix_cache_hits": COUNTER,
    # their names before 0.9.2 (removed in 0.12)
    "vllm:gpu_prefix_cache_queries": COUNTER,
    "vllm:gpu_prefix_cache_hits": COUNTER,
    # tokens and requests
    "vllm:prompt_tokens": COUNTER,
    # prompt tokens served from a prefix cache: counted in prompt_tokens, never computed
    "vllm:prompt_tokens_cached": COUNTER,
    "vllm:generation_tokens": COUNTER,
    "vllm:request_success": COUNTER,
    # latency and step histograms
    "vllm:time_to_first_token_seconds": HISTOGRAM,
    "vllm:inter_token_latency_seconds": HISTOGRAM,
    "vllm:time_per_output_token_seconds": HISTOGRAM,
    "vllm:request_time_per_output_token_seconds": HISTOGRAM,
    "vllm:iteration_tokens_total": HISTOGRAM,
    # the request's life, V1 (0.7+): end to end, and its queue / prefill / decode / inference parts
    "vllm:e2e_request_latency_seconds": HISTOGRAM,
    "vllm:request_queue_time_seconds": HISTOGRAM,
    "vllm:request_prefill_time_seconds": HISTOGRAM,
    "vllm:request_decode_time_seconds": HISTOGRAM,
    "vllm:request_inference_time_seconds": HISTOGRAM,
    # request shape: one observation per finished request
    "vllm:request_prompt_tokens": HISTOGRAM,
    "vllm:request_generation_tokens": HISTOGRAM,
    # MFU counters (--enable-mfu-metrics)
    "vllm:estimated_flops_per_gpu": COUNTER,
    "vllm:estimated_read_bytes_per_gpu": COUNTER,
    "vllm:estimated_write_bytes_per_gpu": COUNTER,
    # the API server's start time: a change means the server restarted
    "process_start_time_seconds": GAUGE,
    # an info gauge (always 1) whose labels carry the KV-cache size
    "vllm:cache_config_info": GAUGE,
}

PER_POSITION_FAMILY = "vllm:spec_decode_num_accepted_tokens_per_pos"
START_TIME_FAMILY = "process_start_time_seconds"
CACHE_INFO_FAMILY = "vllm:cache_config_info"
# request_success carries a finished_reason label: besides the family total, each reason is kept as
# its own counter "<family>:<reason>" (stop, length, abort, ...), the shares an operator reads.
FINISH_REASON_FAMILY = "vllm:request_success"
FINISH_REASON_LABEL = "finished_reason"
# The numeric cache_config_info labels kept, as gauges named "<family>:<label>".
CACHE_INFO_LABELS = ("num_gpu_blocks", "block_size", "kv_cache_size_tokens")
# Draft positions beyond this are ignored: vLLM creates one per speculative token (k is a few, at most
# tens), and a bogus `position="9999999"` must not make a per-position tuple of millions of entries.
MAX_POSITIONS = 256


def _ascii_int(text: str) -> int | None:
    """A label value that is a plain decimal number (ASCII digits only), or None. str.isdigit alone
    admits "²" and other digits that int() and float() refuse."""
    return int(text) if text.isascii() and text.isdigit() else None

# The families without which a payload is not a usable vLLM scrape: at least one of each group.
REQUIRED_GROUPS: tuple[tuple[str, ...], ...] = (
    ("vllm:num_requests_running",),
    ("vllm:generation_tokens",),
)


def _sample_names() -> dict[str, tuple[str, str]]:
    """Sample name → (family, suffix role) for every sample name a wanted family can expose."""
    names: dict[str, tuple[str, str]] = {}
    for family, kind in WANTED.items():
        if kind == COUNTER:
            names[family + "_total"] = (family, "value")
            names[family] = (family, "value")
        elif kind == GAUGE:
            names[family] = (family, "value")
        else:
            names[family + "_bucket"] = (family, "bucket")
            names[family + "_sum"] = (family, "sum")
            names[family + "_count"] = (family, "count")
    return names


SAMPLE_NAMES = _sample_names()

# The canonical line shape: `name{label="value",...} number`. Label values may not hold a quote, a
# backslash or a newline; the value is a plain decimal or Inf/NaN; there is no timestamp. Everything
# else goes to prometheus_client. The dcgm-exporter reader reads its lines with the same pieces.
PLAIN_PAIR = r"[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"\\\n]*\""
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
PLAIN_VALUE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Inf|NaN)")
LABEL_PAIR = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"([^\"]*)\"")


class ExpositionError(ValueError):
    """The payload is not Prometheus text (or is broken inside a family specwatch reads)."""


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]  # shared between samples with the same label text: read, never modify
    value: float
    series: tuple[tuple[str, str], ...]  # the sorted label pairs: with the name, the series identity


def make_sample(name: str, labels: dict[str, str], value: float) -> Sample:
    return Sample(name, labels, value, tuple(sorted(labels.items())))


# Label text → (labels, sorted pairs), for label texts in the canonical shape. The same label
# texts come back on every scrape (only values change), so steady-state parsing skips label work.
# Bounded: a server that mints new label values each scrape just turns the cache over.
_LABEL_CACHE: dict[str, tuple[dict[str, str], tuple[tuple[str, str], ...]]] = {}
_LABEL_CACHE_MAX = 16384
_LABELS_SHAPE = re.compile(r"(?:" + PLAIN_PAIR + r"(?:," + PLAIN_PAIR + r")*,?)?")


def _labels(text: str) -> tuple[dict[str, str], tuple[tuple[str, str], ...]] | None:
    """Parsed canonical label text, or None when it is not canonical (or repeats a name)."""
    hit = _LABEL_CACHE.get(text)
    if hit is not None:
        return hit
    if _LABELS_SHAPE.fullmatch(text) is None:
        return None
    pairs = LABEL_PAIR.findall(text)
    labels = dict(pairs)
    if len(labels) != len(pairs):  # a repeated label name: prometheus_client rejects the line
        return None
    if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
        _LABEL_CACHE.clear()
    entry = _LABEL_CACHE[text] = (labels, tuple(sorted(pairs)))
    return entry


def _type_names() -> dict[str, str]:
    """Name on a `# TYPE` line → the wanted family it opens (counters may carry `_total` there)."""
    names: dict[str, str] = {}
    for family, kind in WANTED.items():
        names[family] = family
        if kind == COUNTER:
            names[family + "_total"] = family
    return names


TYPE_NAMES = _type_names()


def _lines_starting(body: str, prefix: str) -> int:
    return body.count("\n" + prefix) + body.startswith(prefix)


def select_samples(text: str) -> list[Sample]:
    """The samples of the WANTED families, with values identical to prometheus_client's parse.

    The fast path walks the payload family by family (`# TYPE` blocks, as every Prometheus client
    library groups them) and reads lines only inside the wanted blocks. It first checks, with
    C-speed substring counts, that every `vllm:` sample line sits in its own family's block; a
    payload that is not grouped, is indented or has CR line ends takes the line-by-line path.
    """
    wanted_lines = _grouped_wanted_lines(text)
    if wanted_lines is None:
        return _select_line_by_line(text)
    return _samples_of(wanted_lines)


def _grouped_wanted_lines(text: str) -> list[str] | None:
    """The sample lines of the wanted families' `# TYPE` blocks; None when the payload is not
    grouped family by family (or is indented, or has CR line ends): then it is read line by line."""
    if text[:1] in (" ", "\t") or "\n " in text or "\n\t" in text or "\r" in text:
        return None
    blocks = text.split("\n# TYPE ")
    if blocks[0].startswith("# TYPE "):
        blocks[0] = blocks[0][len("# TYPE "):]
    elif _lines_starting(blocks[0], "vllm:") or _lines_starting(blocks[0], START_TIME_FAMILY):
        return None  # samples before any TYPE line
    else:
        blocks = blocks[1:]
    wanted_lines: list[str] = []
    for block in blocks:
        head, _, body = block.partition("\n")
        name = head.split(" ", 1)[0]
        # The grouping check: every vllm:/process_start_time line of this block is of its family.
        tracked = _lines_starting(body, "vllm:") + _lines_starting(body, START_TIME_FAMILY)
        own = _lines_starting(body, name) if name.startswith("vllm:") or name == START_TIME_FAMILY else 0
        if own != tracked:
            return None
        if name in TYPE_NAMES:
            wanted_lines += [line for line in body.split("\n") if line and line[0] != "#"]
    return wanted_lines


def _samples_of(wanted_lines: list[str]) -> list[Sample]:
    """The samples of the wanted lines: line by line (a head seen before is read from _HEAD_CACHE),
    through prometheus_client when a line is not in the canonical shape."""
    samples: list[Sample] = []
    append = samples.append
    for line in wanted_lines:
        sample = _canonical_sample(line)
        if sample is None:
            return _parse_with_prometheus_client(wanted_lines)
        append(sample)
    return samples


_EMPTY_LABELS: tuple[dict[str, str], tuple[tuple[str, str], ...]] = ({}, ())


# `name{labels}` (or a bare name) of a line found canonical → its Sample's name, labels and series.
# Only the value changes between scrapes: a line whose head was seen has only its value left to read.
# Bounded like _LABEL_CACHE.
_HEAD_CACHE: dict[str, tuple[str, dict[str, str], tuple[tuple[str, str], ...]]] = {}


def _canonical_sample(line: str) -> Sample | None:
    """`name{labels} value` in the canonical shape, or None (the caller falls back)."""
    # A head is cached only when the line was `head value` with one space between: a line that
    # splits the same way at its last space, with a plain number after it, is canonical too.
    head, _, value = line.rpartition(" ")
    hit = _HEAD_CACHE.get(head)
    if hit is not None and PLAIN_VALUE.fullmatch(value) is not None:
        return Sample(hit[0], hit[1], float(value), hit[2])
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        close = line.rfind("}")
        if close < brace:
            return None
        name = line[:brace]
        parsed = _labels(line[brace + 1:close])
        rest = line[close + 1:]
    else:
        if space == -1:
            return None
        name = line[:space]
        parsed = _EMPTY_LABELS
        rest = line[space:]
    if parsed is None or name not in SAMPLE_NAMES or not rest[:1].isspace():
        return None
    value = rest.strip(" \t")
    if PLAIN_VALUE.fullmatch(value) is None:  # a timestamp, an underscore, an exotic spelling: fall back
        return None
    if len(rest) == len(value) + 1 and rest[0] == " ":
        if len(_HEAD_CACHE) >= _LABEL_CACHE_MAX:
            _HEAD_CACHE.clear()
        _HEAD_CACHE[line[:len(line) - len(rest)]] = (name, parsed[0], parsed[1])
    return Sample(name, parsed[0], float(value), parsed[1])


def _select_line_by_line(text: str) -> list[Sample]:
    samples: list[Sample] = []
    wanted_lines: list[str] = []
    needs_fallback = False
    # Split on "\n" alone, as prometheus_client does: str.splitlines() also breaks at \x1c-\x1e,
    # \x85 and \u2028, which may sit inside a label value.
    for line in text.split("\n"):
        line = line.strip()  # as prometheus_client does
        if not line or line[0] == "#":
            continue
        m = METRIC_NAME.match(line)
        if m is None or m.group() not in SAMPLE_NAMES:
            continue
        wanted_lines.append(line)
        if needs_fallback:
            continue
        sample = _canonical_sample(line)
        if sample is None:
            needs_fallback = True
            continue
        samples.append(sample)
    if needs_fallback:
        return _parse_with_prometheus_client(wanted_lines)
    return samples


def _parse_with_prometheus_client(lines: list[str]) -> list[Sample]:
    # Without the TYPE lines prometheus_client treats every sample as its own untyped family, which
    # keeps sample names exactly as exposed: what the fast path produces too.
    # A wanted family's block also holds series specwatch never reads (`_created`): dropped here, as
    # the fast path drops them, or build_engines would meet a name it does not know.
    try:
        return [
            make_sample(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families("\n".join(lines) + "\n")
            for s in family.samples
            if s.name in SAMPLE_NAMES
        ]
    except Exception as exc:  # prometheus_client raises ValueError, but also IndexError/KeyError
        raise ExpositionError(f"malformed line in a vLLM family: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ParsedPayload:
    engines: tuple[EngineSample, ...]
    process_start_time: float | None
    families_present: frozenset[str]

    def missing_required(self) -> list[str]:
        return [
            " or ".join(group)
            for group in REQUIRED_GROUPS
            if not any(f in self.families_present for f in group)
        ]


def parse_payload(text: str) -> ParsedPayload:
    """Exposition text → one EngineSample per (model_name, engine)."""
    if "\x00" in text:
        raise ExpositionError("the payload is binary, not Prometheus text")
    # Every scrape of a server after its first repeats the text between the values exactly: its
    # shape, whose filing is worked out once (_Shape); then only the values are read.
    literals, values = split_at_values(text)
    shape = _SHAPES.get(literals)
    if shape is not None:
        return shape.read(values)
    wanted_lines = _grouped_wanted_lines(text)
    if wanted_lines is None:
        samples = _select_line_by_line(text)
    else:
        samples = _samples_of(wanted_lines)
        shape = _learn_shape(literals, wanted_lines)
        if shape is not None:
            return shape.read(values)
    if not samples:
        _diagnose_empty(text)
    return build_engines(samples)


# A sample line's value where it ends its line after one space, as every client library writes it.
# Split at these, a payload leaves the text between its values: comments, names and labels.
TRAILING_VALUE = re.compile(" (" + PLAIN_VALUE.pattern + r")(?=\n|\Z)")


def split_at_values(text: str) -> tuple[tuple[str, ...], list[str]]:
    """(the text between a payload's trailing values, the values): the first is the payload's shape,
    which a later scrape of the same server repeats, and a dict key."""
    parts = TRAILING_VALUE.split(text)
    return tuple(parts[0::2]), parts[1::2]


def value_line_heads(literals: tuple[str, ...]) -> list[str]:
    """For each split value, its line up to the space before it: what follows the last line break
    of the text before the value."""
    return [literal.rpartition("\n")[2] for literal in literals[:-1]]


class _Shape:
    """A payload's text between its values, learnt from one scrape read the general way: which of
    its split values are the wanted lines' (in the wanted lines' order), and their _BuildPlan.

    A later payload with the same text between its values has the same lines with the same heads,
    each ending in a plain number after one space, and the same grouping: the general path would
    read it as the same samples, with only the values new."""

    __slots__ = ("positions", "plan", "pick")

    def __init__(self, positions: list[int], plan: _BuildPlan) -> None:
        self.positions = positions
        self.plan = plan
        self.pick = _picker(positions)

    def read(self, values: list[str]) -> ParsedPayload:
        return self.plan.build(list(map(float, self.pick(values))))


def _picker(positions: list[int]):
    """A function taking a list to its items at `positions`, in that order, as a tuple."""
    if len(positions) == 1:
        (only,) = positions
        return lambda items: (items[only],)
    return itemgetter(*positions)


def _learn_shape(literals: tuple[str, ...], wanted_lines: list[str]) -> _Shape | None:
    """The shape of a grouped payload whose wanted lines were all read the canonical way (each one
    `head value`, its head cached by _canonical_sample); None otherwise (a line the canonical reader
    refused, a value the split did not take): such a payload is read the general way each time."""
    if not wanted_lines:
        return None
    heads = value_line_heads(literals)
    positions: list[int] = []
    hits = []
    j = 0
    for line in wanted_lines:
        head = line.rpartition(" ")[0]
        hit = _HEAD_CACHE.get(head)
        if hit is None:
            return None
        # Wanted lines and split values both come in text order, and no other line has a wanted
        # line's head (the grouping check keeps each vLLM series in its own family's block).
        while j < len(heads) and heads[j] != head:
            j += 1
        if j == len(heads):
            return None
        positions.append(j)
        hits.append(hit)
        j += 1
    if len(_SHAPES) >= _SHAPES_MAX:
        _SHAPES.clear()
    shape = _SHAPES[literals] = _Shape(positions, _BuildPlan(hits))
    return shape


def _diagnose_empty(text: str) -> None:
    """No wanted family at all: say whether this is Prometheus text without vLLM, or not Prometheus."""
    stripped = text.lstrip()
    if not stripped:
        raise ExpositionError("the payload is empty")
    if stripped[:1] in "<{[":
        kind = "HTML" if stripped[:1] == "<" else "JSON"
        raise ExpositionError(f"the payload looks like {kind}, not Prometheus text")
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:
        raise ExpositionError(f"the payload is not Prometheus text: {exc}") from exc
    if not families:
        raise ExpositionError("the payload has no metrics")
    # Valid Prometheus text without vLLM families: the caller reports the missing families.


def build_engines(samples: Iterable[Sample]) -> ParsedPayload:
    samples = list(samples)
    return _BuildPlan([(s.name, s.labels, s.series) for s in samples]).build([s.value for s in samples])


_START, _SKIP = "start", None


class _BuildPlan:
    """How build_engines files the samples of one payload shape (the names and labels of its lines,
    in order): which value goes to which engine's dict under which key. It depends only on the
    names and labels, which every scrape of a server repeats: worked out once per shape, each
    scrape then only adds its values in (_Shape)."""

    __slots__ = ("steps", "engine_keys", "present", "cache_info", "starts", "dicts")

    def __init__(self, series: list[tuple[str, dict[str, str], tuple[tuple[str, str], ...]]]) -> None:
        # Keyed by the full label set first, so a duplicated series counts once (the last one wins).
        last: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        for i, (name, _, pairs) in enumerate(series):
            last[(name, pairs)] = i
        steps: list[tuple[int, str | None, tuple[str | None, str] | None, object, str | None]] = []
        engine_keys: dict[tuple[str | None, str], None] = {}
        present: set[str] = set()
        cache_info: dict[str, dict[str, float]] = {}
        routes = _ROUTES
        for identity, i in last.items():
            family, role = SAMPLE_NAMES[identity[0]]
            labels = series[i][1]
            present.add(family)
            if family == START_TIME_FAMILY:
                steps.append((i, _START, None, None, None))
                continue
            if family == CACHE_INFO_FAMILY:
                # it carries `engine` but no `model_name`: joined to the engines below
                cache_info[labels.get("engine", "0")] = {
                    f"{family}:{label}": float(number)
                    for label in CACHE_INFO_LABELS
                    if (number := _ascii_int(labels.get(label, ""))) is not None
                }
                continue
            route = routes.get(identity)
            if route is None:
                if len(routes) >= _LABEL_CACHE_MAX:
                    routes.clear()
                route = routes[identity] = _route(family, role, labels)
            key, slot, field, also = route
            engine_keys[key] = None  # an engine exists once any of its series is listed, whatever its value
            steps.append((i, slot if slot is not None else _SKIP, key, field if slot is not _BUCKETS else (family, field),
                          also))
        self.steps = steps
        self.engine_keys = sorted(engine_keys, key=_engine_order)
        self.present = frozenset(present)
        self.cache_info = cache_info
        self.starts = [i for i, slot, *_ in steps if slot is _START]
        self.dicts = self._dicts()

    def build(self, values: list[float]) -> ParsedPayload:
        if not isfinite(sum(values)):  # a NaN or ±Inf to leave out (or finite values summing past
            return self._build_step_by_step(values)  # the largest float: read exactly all the same)
        builders = {key: _EngineBuilder(engine=key[1], model_name=key[0]) for key in self.engine_keys}
        # Each dict starts as 0.0 + its first value, as in the steps: 0.0 + -0.0 is 0.0.
        plain = list(map(_ZERO.__add__, values))
        for key, attribute, family, keys, first, rest in self.dicts:
            d = dict(zip(keys, first(plain)))
            for k, later in rest:
                total = d[k]
                for i in later:
                    total += plain[i]
                d[k] = total
            b = builders[key]
            if family is None:
                setattr(b, attribute, d)
            else:
                b.buckets[family] = d
        start_time: float | None = None
        for i in self.starts:
            start_time = values[i]
        return self._finish(builders, start_time)

    def _build_step_by_step(self, values: list[float]) -> ParsedPayload:
        builders = {key: _EngineBuilder(engine=key[1], model_name=key[0]) for key in self.engine_keys}
        start_time: float | None = None
        for i, slot, key, field, also in self.steps:
            value = values[i]
            if slot is _START:
                start_time = value
                continue
            if slot is _SKIP or not isfinite(value):
                # NaN or ±Inf in a counter, gauge or bucket count means nothing usable; keeping it out
                # of the Snapshot keeps it out of every rate (the family still counts as present).
                continue
            b = builders[key]  # type: ignore[index]
            if slot is _COUNTERS:
                counters = b.counters
                counters[field] = counters.get(field, 0.0) + value  # type: ignore[index]
                if also is not None:
                    counters[also] = counters.get(also, 0.0) + value
            elif slot is _GAUGES:
                b.gauges[field] = b.gauges.get(field, 0.0) + value  # type: ignore[index]
            elif slot is _BUCKETS:
                family, le = field  # type: ignore[misc]
                per_le = b.buckets.setdefault(family, {})
                per_le[le] = per_le.get(le, 0.0) + value
            elif slot is _SUMS:
                b.sums[field] = b.sums.get(field, 0.0) + value  # type: ignore[index]
            elif slot is _COUNTS:
                b.counts[field] = b.counts.get(field, 0.0) + value  # type: ignore[index]
            elif slot is _POSITIONS:
                b.per_position[field] = b.per_position.get(field, 0.0) + value  # type: ignore[index]
        return self._finish(builders, start_time)

    def _finish(self, builders: dict[tuple[str | None, str], _EngineBuilder], start_time: float | None
                ) -> ParsedPayload:
        cache_info = self.cache_info
        for b in builders.values():
            b.gauges.update(cache_info.get(b.engine, {}))
        return ParsedPayload(tuple(b.build() for b in builders.values()), start_time, self.present)

    def _dicts(self) -> list[tuple[tuple[str | None, str], str, str | None, tuple[Any, ...], Any,
                                   list[tuple[Any, list[int]]]]]:
        """The steps as the dicts they fill, for a payload whose values are all finite: each engine
        dict (or bucket family's dict) with its keys in the order the steps first add to them, a
        picker of each key's first value, and the later values added to keys that take several."""
        per_dict: dict[tuple[Any, ...], dict[Any, list[int]]] = {}
        for i, slot, key, field, also in self.steps:
            if slot is _START or slot is _SKIP:
                continue
            if slot is _BUCKETS:
                family, le = field  # type: ignore[misc]
                per_dict.setdefault((key, _BUCKETS, family), {}).setdefault(le, []).append(i)
                continue
            indices = per_dict.setdefault((key, _ATTRIBUTES[slot], None), {})  # type: ignore[index]
            indices.setdefault(field, []).append(i)
            if also is not None:
                indices.setdefault(also, []).append(i)
        return [
            (key, attribute, family, tuple(indices), _picker([first for first, *_ in indices.values()]),
             [(k, later) for k, (_, *later) in indices.items() if later])
            for (key, attribute, family), indices in per_dict.items()
        ]


_ZERO = 0.0
# The _EngineBuilder attribute each slot fills.
_ATTRIBUTES = {"counters": "counters", "gauges": "gauges", "sums": "sums", "counts": "counts",
               "positions": "per_position"}


# Payload shapes seen (the text between their values) → their _Shape: one per server a watch reads,
# and a new one when a server's series change. Bounded: each key holds a payload's text.
_SHAPES: dict[tuple[str, ...], _Shape] = {}
_SHAPES_MAX = 16


# Where build_engines files a sample of each engine family: the dict of the engine it adds the value
# to, under which key (a family, a bucket's le, a draft position), and a second counter it adds to
# (a finish reason's own); None files nothing (a bucket whose le is not a number, a position past
# MAX_POSITIONS). Worked out once per series (sample name and labels): every scrape repeats them.
_COUNTERS, _GAUGES, _BUCKETS, _SUMS, _COUNTS, _POSITIONS = "counters", "gauges", "buckets", "sums", "counts", "positions"
_ROUTES: dict[tuple[str, tuple[tuple[str, str], ...]],
              tuple[tuple[str | None, str], str | None, str | float | int | None, str | None]] = {}


def _route(family: str, role: str, labels: dict[str, str]
           ) -> tuple[tuple[str | None, str], str | None, str | float | int | None, str | None]:
    key = (labels.get("model_name"), labels.get("engine", "0"))
    kind = WANTED[family]
    if family == PER_POSITION_FAMILY:
        pos = _ascii_int(labels.get("position", ""))
        return (key, _POSITIONS, pos, None) if pos is not None and pos < MAX_POSITIONS else (key, None, None, None)
    if kind == COUNTER:
        # series with extra labels (finished_reason, ...) are summed into the family total
        reason = labels.get(FINISH_REASON_LABEL) if family == FINISH_REASON_FAMILY else None
        also = f"{family}:{reason}" if reason and reason.isascii() and reason.isidentifier() else None
        return key, _COUNTERS, family, also
    if kind == GAUGE:
        return key, _GAUGES, family, None
    if role == "bucket":
        try:
            le = float(labels.get("le", ""))
        except ValueError:
            return key, None, None, None
        return key, _BUCKETS, le, None
    return key, _SUMS if role == "sum" else _COUNTS, family, None


def _engine_order(key: tuple[str | None, str]) -> tuple[str, int, str]:
    model, engine = key
    number = _ascii_int(engine)
    return (model or "", number if number is not None else 1 << 30, engine)


class _EngineBuilder:
    def __init__(self, engine: str, model_name: str | None) -> None:
        self.engine = engine
        self.model_name = model_name
        self.counters: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.buckets: dict[str, dict[float, float]] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}
        self.per_position: dict[int, float] = {}

    def build(self) -> EngineSample:
        histograms = {}
        for family in set(self.buckets) | set(self.counts):
            buckets = tuple(sorted(self.buckets.get(family, {}).items()))
            count = self.counts.get(family, buckets[-1][1] if buckets else 0.0)
            histograms[family] = Histogram(buckets, self.sums.get(family, 0.0), count)
        k = max(self.per_position) + 1 if self.per_position else 0
        return EngineSample(
            engine=self.engine,
            model_name=self.model_name,
            counters=self.counters,
            gauges=self.gauges,
            histograms=histograms,
            accepted_per_position=tuple(self.per_position.get(i, 0.0) for i in range(k)),
        )
