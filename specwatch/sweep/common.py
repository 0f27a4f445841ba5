"""The sweep's shared vocabulary: schema, sides, tiers, crossing states and its errors."""

from __future__ import annotations

from specwatch.perf.decision import MAX_BATCH


__all__ = [
    "SCHEMA",
    "READABLE_SCHEMAS",
    "SIDES",
    "DEFAULT_TIERS",
    "MAX_TIERS",
    "DEFAULT_REPEAT",
    "MAX_ROUNDS",
    "JSON_NAME",
    "CSV_NAME",
    "PLOT_NAME",
    "MAX_BENCH_FILE_BYTES",
    "PREDICTED_GRID_POINTS",
    "PREDICTED_MAX_BATCH",
    "SPEEDUP_PLOT_CLIP",
    "CROSSES",
    "PAYS_THROUGHOUT",
    "NEVER_PAYS",
    "NO_DATA",
    "BASIS_DATASHEET",
    "BASIS_FITTED",
    "SweepError",
    "SweepFileError",
]


SCHEMA = "specwatch.sweep/2"
# Earlier files `watch --sweep` still reads: tiers without rounds or intervals.
READABLE_SCHEMAS = ("specwatch.sweep/1", SCHEMA)
SIDES = ("baseline", "speculative")
DEFAULT_TIERS = (1, 2, 4, 8, 16, 32, 64)
MAX_TIERS = 64
# Rounds per tier: three is the fewest whose t-interval is not dominated by its own quantile
# (t = 12.7 at two rounds, 4.3 at three); the cap bounds an adaptive stop that cannot resolve.
DEFAULT_REPEAT = 3
MAX_ROUNDS = 50
JSON_NAME = "sweep.json"
CSV_NAME = "sweep.csv"
PLOT_NAME = "sweep.txt"
# Bench result files are small (a few KB; tens of MB with --save-detailed): the cap keeps a stray
# huge file from being read whole.
MAX_BENCH_FILE_BYTES = 256 * 1024 * 1024
# Points on the predicted curve between the lowest and the highest tier.
PREDICTED_GRID_POINTS = 33
PREDICTED_MAX_BATCH = MAX_BATCH  # one batch cap for every command (specwatch.perf.decision)
# The speedup panel's ceiling: a TPOT near zero (chunks that arrive together) would otherwise squash
# every other point onto the break-even line.
SPEEDUP_PLOT_CLIP = 4.0

# Crossing states: why a crossing is or is not there.
CROSSES = "crosses"
PAYS_THROUGHOUT = "pays_throughout"  # speedup ≥ 1 at every measured tier
NEVER_PAYS = "never_pays"  # speedup < 1 from the lowest tier on
NO_DATA = "no_data"

# Prediction bases.
BASIS_DATASHEET = "datasheet"
BASIS_FITTED = "fitted"


class SweepError(Exception):
    """The sweep cannot go on; the message is for the operator."""


class SweepFileError(ValueError):
    """A sweep or bench file cannot be used; the message names it."""
