"""The health panel: the latency breakdown, the request shape and finish reasons, the load carried
(requests and preemptions per second, prefix-cache hits, KV size), goodput against the SLO and
energy per output token of the selected target over the window, each with what switching
speculation would do at this load. Fits 80 columns in 15 lines."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from specwatch.readings.health import SHARE_POINT_WIDTH
from specwatch.widgets.format import MISSING, num, pct, rate, seconds
from specwatch.widgets.panel import Panel
from specwatch.widgets.view import DashboardView

LATENCY_ROWS = ("e2e", "queue", "ttft", "prefill", "decode", "tpot", "itl")


def _line(label: str, *parts: tuple[str, str]) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label:<9}", style="dim")
    for text, style in parts:
        line.append(text, style=style)
    return line


def latency_lines(block: dict) -> list[Text]:
    rows = block.get("latency") or {}
    if not rows:
        return [_line("latency", ("no requests finished in the window", "dim"))]
    lines = [_line("latency", (f"{'p50':>9}{'p90':>9}{'p99':>9}{'mean':>9}", "dim"))]
    for name in LATENCY_ROWS:
        row = rows.get(name)
        if row is None:
            continue
        bounds = row.get("bounds") or {}
        lines.append(_line(f"  {name}", ("".join(f"{_BOUND_MARK.get(bounds.get(k), '') + seconds(row[k]):>9}"
                                                 for k in ("p50_s", "p90_s", "p99_s", "mean_s")), "bold")))
    if any(row.get("bounds") for row in rows.values()):
        lines.append(Text("≤ at most (held to what the mean allows)  ≥ at least (past the last bucket)", style="dim"))
    return lines


# A quantile whose figure is a bound (readings.health.LatencyRow.bounds), marked before it.
_BOUND_MARK = {"at_most": "≤", "at_least": "≥"}


def shape_line(block: dict) -> Text:
    shape = block.get("request_shape")
    reasons = block.get("finish_reasons") or {}
    total = sum(reasons.values())
    finished = ", ".join(f"{reason} {count / total:.0%}" for reason, count in
                         sorted(reasons.items(), key=lambda kv: -kv[1])) if total else MISSING
    if shape is None:
        return _line("requests", ("finished: ", "dim"), (finished, "bold"))
    ratio = shape["input_output_ratio"]
    line = _line("requests", (f"{num(shape['requests'])}", "bold"),
                 (" · prompt ", "dim"), (num(shape["prompt_mean_tokens"]), "bold"),
                 (" / out ", "dim"), (num(shape["output_mean_tokens"]), "bold"),
                 (f" tok ({ratio:.1f}:1)" if ratio is not None else " tok", "dim"),
                 (" · ", "dim"), (finished, "bold"))
    if block.get("truncated_share") is not None and block["truncated_share"] >= 0.5:
        line.append("  cut at max_tokens", style="bold")
    return line


def prefill_share_line(block: dict) -> Text | None:
    """The share of requests whose prompt is over 10× their output: bounds, since the length
    histograms do not pair prompts with outputs. None without both histograms."""
    shape = block.get("request_shape")
    if shape is None:
        return None
    heavy = _heavy_share(shape.get("prefill_heavy_share_low"), shape.get("prefill_heavy_share_high"))
    if heavy is None:
        return None
    bounds = shape["prefill_heavy_share_high"] - shape["prefill_heavy_share_low"] >= 0.005
    return _line("prefill", (heavy, "bold"),
                 (f" of requests: prompt > {shape.get('prefill_heavy_ratio', 10):.0f}× output", "dim"),
                 (" (bounds; lengths unpaired)" if bounds else "", "dim"))


def traffic_line(block: dict) -> Text | None:
    """The load the node carried: requests finished and preemptions per second, the prefix cache's
    hit rate and the KV cache's size in tokens. None when the server exports none of them."""
    t = block.get("traffic") or {}
    if all(t.get(k) is None for k in ("requests_per_s", "preemptions_per_s", "prefix_cache_hit_rate",
                                      "kv_capacity_tokens")):
        return None
    kv = t.get("kv_capacity_tokens")
    return _line("load", (rate(t.get("requests_per_s"), " req/s"), "bold"),
                 (" · preempted ", "dim"), (rate(t.get("preemptions_per_s")), "bold"),
                 (" · prefix cache ", "dim"), (pct(t.get("prefix_cache_hit_rate")), "bold"),
                 (" hits · KV ", "dim"), (rate(kv, "") if kv is not None else MISSING, "bold"), (" tok", "dim"))


def goodput_line(block: dict, width: int = 200) -> Text:
    """The share of requests within the SLO, and with speculation toggled. In a narrow panel the SLO
    is named rather than spelled out, then the toggled share goes, so neither figure is cut."""
    g = block.get("goodput")
    if g is None:
        return _line("goodput", ("no SLO given (--slo-ttft, --slo-tpot)", "dim"))
    slo = " ".join(part for part in (
        f"TTFT≤{seconds(g['slo_ttft_s'])}" if g["slo_ttft_s"] is not None else "",
        f"TPOT≤{seconds(g['slo_tpot_s'])}" if g["slo_tpot_s"] is not None else "") if part)
    line = Text()
    toggled_to = block.get("speculation_toggled_to")
    for within, toggle_words, with_toggled in ((f" within {slo}", f" · spec {toggled_to}: ", True),
                                               (" within SLO", f" · spec {toggled_to}: ", True),
                                               (" in SLO", f" · spec {toggled_to} ", True),
                                               (" within SLO", "", False)):
        parts: list[tuple[str, str]] = [(_share(g["share_low"], g["share_high"]), "bold"), (within, "dim")]
        if g.get("share_high_if_toggled") is not None and with_toggled:
            parts += [(toggle_words, "dim"),
                      (_share(g["share_low_if_toggled"], g["share_high_if_toggled"]), "bold")]
        line = _line("goodput", *parts)
        if line.cell_len <= width:
            break
    return line


def energy_line(block: dict, width: int = 200) -> Text:
    """Energy per output token, with speculation toggled and computed per emitted token. In a
    narrow panel (the overview's Engine panel) the line gives way rather than being cut: first the
    computed/emitted ratio goes, then the words shorten, then the toggled figure goes."""
    e = block.get("energy")
    if e is None:
        return _line("energy", ("no GPU energy counter read", "dim"))
    toggled = e.get("joules_per_token_if_toggled")
    ratio = e.get("computed_per_emitted")
    toggled_to = block.get("speculation_toggled_to")
    line = Text()
    for per, toggle_words, with_toggled, with_ratio in (
            (" per output token", f" · spec {toggled_to}: ", True, True),
            (" per output token", f" · spec {toggled_to}: ", True, False),
            ("/token", f" · spec {toggled_to}: ", True, False),
            ("/tok", f" · spec {toggled_to} ", True, False),
            ("/tok", f" · {toggled_to} ", True, False),
            (" per output token", "", False, False)):
        parts: list[tuple[str, str]] = [(_joules(e["joules_per_token"]), "bold"), (per, "dim")]
        if toggled is not None and with_toggled:
            parts += [(toggle_words, "dim"), (_joules(toggled), "bold")]
        if ratio is not None and with_ratio:
            parts += [(" · ", "dim"), (f"{ratio:.2f}", "bold"), (" computed/emitted", "dim")]
        line = _line("energy", *parts)
        if line.cell_len <= width:
            break
    return line


def _share(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return MISSING
    return pct(high) if abs(high - low) < 0.005 else f"{pct(low)}–{pct(high)}"


def _heavy_share(low: float | None, high: float | None) -> str | None:
    """A share known between bounds: one figure when they are close ("≈" when not equal)."""
    if low is None or high is None:
        return None
    if high - low < 0.005:
        return pct(high)
    if high - low <= SHARE_POINT_WIDTH:
        return "≈" + pct((low + high) / 2)
    return f"{pct(low)}–{pct(high)}"


def _joules(value: float | None) -> str:
    return MISSING if value is None else f"{value:.3g} J"


class HealthPanel(Panel):
    BORDER_TITLE = "Health"

    def layout_key(self, view: DashboardView) -> object:
        block = view.health
        return None if block is None else tuple(sorted(block.get("latency") or {}))

    def render_view(self, view: DashboardView, width: int) -> RenderableType:
        block = view.health
        if block is None:
            return Text("health figures need two readings a window apart", style="dim")
        footer = Text(f"window {block['window_s']:.0f} s · quantiles and goodput estimated from histogram buckets", style="dim",
                      no_wrap=True, overflow="ellipsis")
        heavy = prefill_share_line(block)
        load = traffic_line(block)
        return Group(*latency_lines(block), shape_line(block), *((heavy,) if heavy is not None else ()),
                     *((load,) if load is not None else ()), goodput_line(block), energy_line(block), footer)
