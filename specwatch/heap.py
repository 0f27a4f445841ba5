"""Garbage collection for a process that runs for hours at a steady rate (the dashboard, the
export agent).

Most of what such a process keeps is made at start-up: the imported modules, Textual's DOM and
stylesheets, the parsers' caches. Python's oldest-generation collection walks every tracked object,
start-up's included: in a dashboard watching 8 engines and 8 GPUs about 100,000 objects, some 70 ms
of CPU about once a minute, over a tenth of the dashboard's whole cost. Frozen into the permanent
generation, those objects are never walked again; only what is made after them is.
"""

from __future__ import annotations

import gc


def freeze_start_up_objects() -> None:
    """Collect, then move every object alive now into the permanent generation. Collected first
    because a frozen object in a reference cycle is never collected (reference counting still frees
    everything that is in none)."""
    gc.collect()
    gc.freeze()
