"""A recording's histograms as a format-2 line writes them, made when they are read.

A line writes an engine's histograms as compact rows against the bucket bounds of its layout
([sum, count or null, cumulative counts...], in the order of the engine's earlier reading). Seven
histograms a line, 86 400 lines a day, while a replay reads every reading's counts (a count that fell
means a restart) and the buckets of few (the first and last reading of a window at each
evaluation): `line_histograms` checks a line's rows at once and keeps them as written, and each
Histogram, and its (bound, count) pairs, is made when first read.
"""

from __future__ import annotations

import inspect
from operator import gt, itemgetter
from typing import Any, Iterator, Mapping

from specwatch.telemetry.snapshot import Histogram, HistogramsInOrder

__all__ = ["LineHistograms", "WRITTEN_HISTOGRAM_SETTERS", "WrittenHistogram", "line_histograms"]


_HISTOGRAM_BUCKETS = Histogram.__dict__["buckets"]  # the dataclass's slot, under the property below


class WrittenHistogram(Histogram):
    """A Histogram as a format-2 line writes it (counts against the bucket bounds of its layout):
    the (bound, count) pairs are made when first read. Seven histograms a line, 86 400 lines a day,
    and a Window reads the buckets of few of them (the first and last reading of a window at each
    evaluation), while pairing them was a fifth of reading a line. Equal to, hashed, shown and
    copied as the Histogram it stands for."""

    __slots__ = ("_bounds", "_counts")

    def __init__(self, bounds: tuple[float, ...], counts: list[float], sum: float, count: float) -> None:
        set_ = object.__setattr__
        set_(self, "_bounds", bounds)
        set_(self, "_counts", counts)  # as many as bounds, or fewer: the rest repeat the last
        set_(self, "sum", sum)
        set_(self, "count", count)

    @property
    def buckets(self) -> tuple[tuple[float, float], ...]:  # type: ignore[override]
        try:
            return _HISTOGRAM_BUCKETS.__get__(self)
        except AttributeError:
            pass
        bounds = self._bounds
        counts = [c if c.__class__ is float else float(c) for c in self._counts]
        missing = len(bounds) - len(counts)
        buckets = tuple(zip(bounds, counts + [counts[-1]] * missing if missing else counts))
        _HISTOGRAM_BUCKETS.__set__(self, buckets)
        return buckets

    @property
    def bucket_count(self) -> int:
        return len(self._bounds)  # the counts not written repeat the last: one a bound

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self.buckets, self.sum, self.count) == (other.buckets, other.sum, other.count)

    def __hash__(self) -> int:
        return hash((self.buckets, self.sum, self.count))

    def __repr__(self) -> str:
        return f"Histogram(buckets={self.buckets!r}, sum={self.sum!r}, count={self.count!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Histogram, (self.buckets, self.sum, self.count)


# WrittenHistogram's setters, in its __init__'s order (seven histograms a line, made in line)
WRITTEN_HISTOGRAM_SETTERS = tuple(inspect.getattr_static(WrittenHistogram, f).__set__
                                   for f in ("_bounds", "_counts", "sum", "count"))


# A layout of an engine's histograms, shared by its readings while it holds: the names in order (the
# same tuple object, which is how two readings are known to share it), each name's position, each
# one's bucket bounds, and the most items a row may have (sum, count and one count a bound).
Layout = tuple[tuple[str, ...], dict[str, int], tuple[tuple[float, ...], ...], tuple[int, ...]]

_new_object = object.__new__
_sum = sum
_BUCKET_COUNTS = itemgetter(slice(2, None))
_SUM = itemgetter(0)


class LineHistograms(HistogramsInOrder):
    """One line's histograms of one engine, as written: each WrittenHistogram made when first read."""

    __slots__ = ("names", "counts", "_layout", "_rows", "_sums", "_made")

    def __init__(self, layout: Layout, rows: list[list[Any]], sums: list[float], counts: list[float]) -> None:
        self.names = layout[0]
        self.counts = counts
        self._layout = layout
        self._rows = rows
        self._sums = sums
        self._made: dict[str, WrittenHistogram] | None = None

    def __getitem__(self, name: str) -> Histogram:
        made = self._made
        if made is None:
            made = self._made = {}
        else:
            h = made.get(name)
            if h is not None:
                return h
        i = self._layout[1][name]  # KeyError, as a dict's
        h = _new_object(WrittenHistogram)
        set_bounds, set_counts, set_sum, set_count = WRITTEN_HISTOGRAM_SETTERS
        set_bounds(h, self._layout[2][i])
        set_counts(h, _BUCKET_COUNTS(self._rows[i]))
        set_sum(h, self._sums[i])
        set_count(h, self.counts[i])
        made[name] = h
        return h

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get would go through a KeyError
        return self[name] if name in self._layout[1] else default

    def __contains__(self, name: object) -> bool:
        return name in self._layout[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def line_histograms(earlier: Mapping[str, Histogram], rows: list[Any],
                    bounds: Mapping[str, tuple[float, ...]]) -> LineHistograms | None:
    """A line's histogram rows, written in the order of the engine's `earlier` reading against the
    bucket `bounds` last written for each name, as LineHistograms; None unless every row is a list
    of numbers that fits its bounds (the reader then reads the line one histogram at a time, which
    takes text such as "NaN" and says what is wrong with a bad file). The checks are those the
    one-at-a-time reading makes, made on all rows at once."""
    layout = earlier._layout if earlier.__class__ is LineHistograms else None  # type: ignore[attr-defined]
    if layout is None:
        names = tuple(earlier)
        try:
            layout_bounds = tuple([bounds[name] for name in names])
        except KeyError:
            return None
        layout = (names, {name: i for i, name in enumerate(names)}, layout_bounds,
                  tuple([len(b) + 2 for b in layout_bounds]))
    if len(rows) != len(layout[0]):
        return None
    for row in rows:
        if row.__class__ is not list:
            return None  # "same", or a histogram written whole
    lengths = list(map(len, rows))
    if not lengths or min(lengths) < 3 or any(map(gt, lengths, layout[3])):
        return None  # no bucket count, or more counts than bounds
    try:
        _sum(map(_sum, map(_BUCKET_COUNTS, rows)), 0.0)  # every bucket count a number
        sums = list(map(float, map(_SUM, rows)))
        # a count written as null is the last bucket's
        counts = list(map(float, [row[1] if row[1] is not None else row[-1] for row in rows]))
    except (TypeError, ValueError, OverflowError):
        return None
    return LineHistograms(layout, rows, sums, counts)
