"""The GPU panel: per device, SM and tensor activity, DRAM bandwidth, utilisation, power against its
limit, clocks with throttle reasons, and memory. NVML's utilisation is shown but never read as
saturation (DESIGN §7).

Rows are laid out by hand in fixed columns rather than with a Rich Table: with 8 GPUs at 1 Hz the
table's measuring pass was most of this panel's cost.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.telemetry.gpu_events import is_performance_limited
from specwatch.telemetry.snapshot import GpuSample
from specwatch.widgets.format import MISSING, bar, finite, gigabytes, pct
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView

# The fields whose absence is worth a footnote, and the short column name each one has.
NOTED_FIELDS = {"sm_active": "SM", "tensor_active": "tensor", "dram_bw_util": "DRAM", "power_w": "power",
                "sm_clock_mhz": "clock"}
WIDE = 110  # from this width on: name, utilisation and clocks columns too


def activity(g: GpuSample, name: str, width: int) -> str:
    value = g.get(name)
    if not finite(value):
        return MISSING.rjust(width + 5)
    return f"{bar(value, width)} {pct(value):>4}"


def power(g: GpuSample) -> str:
    used, limit = g.get("power_w"), g.get("power_limit_w")
    if not finite(used):
        return MISSING
    return f"{used:.0f}/{limit:.0f} W" if finite(limit) else f"{used:.0f} W"


def clocks(g: GpuSample) -> str:
    sm, top = g.get("sm_clock_mhz"), g.get("sm_clock_max_mhz")
    text = MISSING if not finite(sm) else (f"{sm:.0f}/{top:.0f}" if finite(top) else f"{sm:.0f}")
    if g.throttle_reasons:
        text += " " + ",".join(g.throttle_reasons)
    return text


def memory(g: GpuSample) -> str:
    used, total = g.get("memory_used_bytes"), g.get("memory_total_bytes")
    if not finite(used):
        return MISSING
    return f"{gigabytes(used)}/{gigabytes(total)} GB" if finite(total) else f"{gigabytes(used)} GB"


def footnotes(gpus: tuple[GpuSample, ...]) -> list[str]:
    """Why fields are N/A, once per distinct reason (NVML says the same for every device)."""
    reasons: dict[str, list[str]] = {}
    for g in gpus:
        for name, label in NOTED_FIELDS.items():
            why = g.errors.get(name)
            if why and label not in reasons.setdefault(why, []):
                reasons[why].append(label)
    return [f"{'/'.join(labels)}: {why}" for why, labels in reasons.items() if labels]


def told_line(view: DashboardView) -> Text | None:
    """The GPU the advisor reasons with when the operator named it (--gpu) rather than NVML or DCGM."""
    told = view.gpu_told
    if told is None:
        return None
    line = Text("advisor's GPU: ", style="dim", no_wrap=True, overflow="ellipsis")
    line.append(f"{told.name} (from --gpu)", style="bold")
    if view.gpus:
        line.append(", not the GPUs read here", style="dim")
    return line


def no_gpus(view: DashboardView) -> RenderableType:
    lines = [Text("No GPU readings.", style="bold")]
    for s in view.sources:
        if s.state != "ok":
            lines.append(Text(f"{s.name}: {s.message or s.state}"))
    told = told_line(view)
    if told is not None:
        lines.append(told)
        lines.append(Text("The roofs and ridge are that GPU's datasheet's; activity, power and memory are not read.",
                          style="dim"))
    else:
        lines.append(Text("The verdict uses the engine's own metrics alone; the bound state is then less certain.",
                          style="dim"))
    return Group(*lines)


# The columns besides the three activity bars, wide layout: index, name, util, power, clocks, memory
# and the gaps between them.
WIDE_FIXED = 3 + 19 + 3 * 7 + 6 + 12 + 12 + 9
MAX_BAR = 32


def bar_width_for(width: int) -> int:
    """The activity bars take the room the panel has: 4 cells under WIDE, from 8 up to MAX_BAR above
    (about 11 at 120 columns, 32 at 200), so a wide panel is not a narrow table and a blank half."""
    if width < WIDE:
        return 4
    return max(8, min(MAX_BAR, (width - WIDE_FIXED) // 3))


def gpu_rows(gpus: tuple[GpuSample, ...], width: int) -> list[Text]:
    wide = width >= WIDE
    bar_width = bar_width_for(width)
    act = bar_width + 5
    name_width = 18
    head = f"{'#':>2} " + (f"{'name':<{name_width}} " if wide else "")
    head += f"{'SM':<{act}}  {'tensor':<{act}}  {'DRAM bw':<{act}}  "
    head += (f"{'util':>4}  " if wide else "") + f"{'power':>10}  "
    head += (f"{'SM MHz':<10}  " if wide else "") + f"{'memory':>9}"
    rows = [Text(head, style="dim", no_wrap=True, overflow="ellipsis")]
    for g in gpus:
        line = Text(f"{g.index:>2} ", no_wrap=True, overflow="ellipsis")
        if wide:
            # a MIG device by its parent and profile: its full name would not fit the column
            label = f"GPU{g.mig.parent_index} MIG {g.mig.profile or 'device'}" if g.mig is not None \
                else g.name.removeprefix('NVIDIA ')
            line.append(f"{label[:name_width]:<{name_width}} ")
        if g.lost:
            line.append("GPU is lost: the others keep polling", style="bold")
            rows.append(line)
            continue
        line.append(f"{activity(g, 'sm_active', bar_width)}  {activity(g, 'tensor_active', bar_width)}  "
                    f"{activity(g, 'dram_bw_util', bar_width)}  ")
        if wide:
            line.append(f"{pct(g.get('util_gpu')):>4}  ")
        line.append(f"{power(g):>10}  ")
        if wide:
            line.append(f"{clocks(g):<10}  ", style="bold" if is_performance_limited(g.throttle_reasons) else "")
        line.append(f"{memory(g):>9}")
        rows.append(line)
    return rows


def extra_lines(gpus: tuple[GpuSample, ...], width: int) -> list[Text]:
    notes = [Text(n, style="dim", no_wrap=True, overflow="ellipsis") for n in footnotes(gpus)]
    # an idle GPU also lowers its clocks: only a cap that costs work is called throttling
    throttled = [g for g in gpus if is_performance_limited(g.throttle_reasons)]
    if throttled and width < WIDE:
        notes.append(Text("throttled: " + ", ".join(f"{g.index} ({','.join(g.throttle_reasons)})"
                                                    for g in throttled), style="bold", no_wrap=True,
                          overflow="ellipsis"))
    return notes


def summary_rows(gpus: tuple[GpuSample, ...], width: int) -> list[Text]:
    """The node's GPUs in two lines: per model, the mean activity as bars with the lowest–highest
    across devices (a straggler shows as a wide spread), the power and memory summed; then what
    needs a look (lost or throttled devices). For an overview with no room for a row per GPU."""
    live = [g for g in gpus if not g.lost]
    names = sorted({g.name.removeprefix("NVIDIA ") for g in gpus})
    bar_width = 12 if width >= 150 else 6 if width >= WIDE else 4
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{len(gpus)}× {names[0] if len(names) == 1 else 'mixed'}", style="bold")
    spread = Text("   across GPUs:", style="dim", no_wrap=True, overflow="ellipsis")
    for field, label in (("sm_active", "SM"), ("tensor_active", "tensor"), ("dram_bw_util", "DRAM bw")):
        values = [g.get(field) for g in live if finite(g.get(field))]
        mean = sum(values) / len(values) if values else None
        line.append(f"  {label} ", style="dim")
        line.append(f"{bar(mean, bar_width)} {pct(mean):>4}")
        low, high = (pct(min(values)), pct(max(values))) if values else (MISSING, MISSING)
        spread.append(f"  {label} " + (f"all {high}" if low == high else f"{low.removesuffix('%')}–{high}"),
                      style="dim")
    used = [g.get("power_w") for g in live if finite(g.get("power_w"))]
    limits = [g.get("power_limit_w") for g in live if finite(g.get("power_limit_w"))]
    if used:
        line.append("  power ", style="dim")
        line.append(f"{sum(used):,.0f}" + (f"/{sum(limits):,.0f} W" if len(limits) == len(used) else " W"))
    memory_used = [g.get("memory_used_bytes") for g in live if finite(g.get("memory_used_bytes"))]
    memory_total = [g.get("memory_total_bytes") for g in live if finite(g.get("memory_total_bytes"))]
    if memory_used:
        line.append("  mem ", style="dim")
        line.append(f"{gigabytes(sum(memory_used))}" + (f"/{gigabytes(sum(memory_total))} GB"
                                                        if len(memory_total) == len(memory_used) else " GB"))
    lost = [g.index for g in gpus if g.lost]
    throttled = [g.index for g in live if is_performance_limited(g.throttle_reasons)]
    if lost:
        spread.append(f"  LOST: {', '.join(map(str, lost))}", style="bold")
    if throttled:
        spread.append(f"  throttled: {', '.join(map(str, throttled))}", style="bold")
    spread.append("  (key 2: each GPU)", style="dim")
    return [line, spread]


class GpuPanel(Panel):
    """`summary_from`: with this many GPUs or more, and a screen under `summary_below_rows` rows,
    the panel sums the GPUs up in two lines instead of a row each (the overview at 120×36, where a
    row per GPU of an 8-GPU node would push the trends off the screen)."""

    BORDER_TITLE = "GPUs"
    LINE_BY_LINE = True  # a row per device: a poll that moves one device repaints its row alone

    def __init__(self, *, id: str | None = None, classes: str | None = None, summary_from: int | None = None,
                 summary_below_rows: int = 40) -> None:
        super().__init__(id=id, classes=classes)
        self.summary_from = summary_from
        self.summary_below_rows = summary_below_rows

    def summarised(self, view: DashboardView) -> bool:
        return (self.summary_from is not None and len(view.gpus) >= self.summary_from
                and self.is_mounted and self.app.size.height < self.summary_below_rows)

    def layout_key(self, view: DashboardView) -> object:
        told = view.gpu_told is not None
        if not view.gpus:
            return ("none", len(view.sources), told)
        if self.summarised(view):
            return ("summary", len(footnotes(view.gpus)), told)
        return (len(view.gpus), len(footnotes(view.gpus)),
                any(is_performance_limited(g.throttle_reasons) for g in view.gpus), told)

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        if not view.gpus:
            return no_gpus(view)
        told = [line for line in (told_line(view),) if line is not None]
        if self.summarised(view):
            return Group(*summary_rows(view.gpus, width), *footnotes_lines(view.gpus), *told)
        return Group(*gpu_rows(view.gpus, width), *extra_lines(view.gpus, width), *told)


def footnotes_lines(gpus: tuple[GpuSample, ...]) -> list[Text]:
    return [Text(n, style="dim", no_wrap=True, overflow="ellipsis") for n in footnotes(gpus)]
