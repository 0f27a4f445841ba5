"""The fleet table's columns (specwatch.outputs.fleet): which it has, how wide each is, and which of
them a narrow terminal leaves out.

A terminal too narrow for every column loses whole columns, the least telling first, rather than
scrolling the row sideways so that the figures on its right are cut mid-word: the node, its verdict
and why it needs someone always stay, and the attention words are the last column cut if even those
three do not fit.
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

from rich.cells import cell_len
from rich.text import Text

# "attention" comes right after the verdict so that why a row needs someone is on screen at 80
# columns; the figures behind the verdict follow.
COLUMNS = ("node", "target", "verdict", "attention", "L", "break-even", "running / crossover", "bound")
# The columns a narrow terminal drops, first dropped first: the bound state, the load against the
# crossover, the break-even, the acceptance length, then the target (its node is still named).
DROP_ORDER = ("bound", "running / crossover", "break-even", "L", "target")
# What DataTable draws around each cell's text: one column of padding on either side.
CELL_PADDING = 2


def short_target(target: str) -> str:
    """The target as the table shows it: the scheme is the same on every row and costs columns."""
    return target.removeprefix("http://")


def last_good_words(when: float | None, now: float) -> str:
    """When a target that cannot be read now last answered, in the words the table and the detail
    share: a target never read says so in two words, which keeps the table's reason within 80
    columns."""
    if when is None or not math.isfinite(when):
        return "never read"
    seconds = max(0.0, now - when)
    if seconds < 120:
        ago = f"{seconds:.0f} s ago"
    elif seconds < 7200:
        ago = f"{seconds / 60:.0f} min ago"
    else:
        ago = time.strftime("%H:%M", time.localtime(when))
    return f"last good reading {ago}"


def cell_width(cell: Any) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(str(cell))


def shown_columns(rows: Sequence[Any], cells: Sequence[Sequence[Any]]) -> list[int]:
    """The indices of COLUMNS the table shows: all of them, but the target when every row's target
    cell repeats its node (URLs read directly name each node by its address), whose 20-odd columns
    the attention words need at 80 columns."""
    target = COLUMNS.index("target")
    repeats = bool(rows) and all(str(c[target]) == row.node for row, c in zip(rows, cells))
    return [i for i in range(len(COLUMNS)) if not (repeats and i == target)]


def column_widths(shown: Sequence[int], cells: Sequence[Sequence[Any]]) -> dict[int, int]:
    """Each shown column (an index of COLUMNS) as wide as its header or its widest cell."""
    return {i: max([cell_len(COLUMNS[i])] + [cell_width(row[i]) for row in cells]) for i in shown}


def fit_columns(shown: Sequence[int], widths: dict[int, int], room: int) -> tuple[list[int], dict[int, int]]:
    """`shown` less whole columns, in DROP_ORDER, until the rest fit `room` terminal columns (each
    with its padding), and the widths they are shown at: never fewer than the node, the verdict and
    the attention words, which are narrowed to what is left (their end cut) if even those do not fit."""
    kept = list(shown)
    widths = dict(widths)

    def width() -> int:
        return sum(widths[i] + CELL_PADDING for i in kept)

    for name in DROP_ORDER:
        if room <= 0 or width() <= room:
            break
        index = COLUMNS.index(name)
        if index in kept:
            kept.remove(index)
    attention = COLUMNS.index("attention")
    if room > 0 and width() > room and attention in kept:
        widths[attention] = max(cell_len(COLUMNS[attention]), widths[attention] - (width() - room))
    return kept, widths
