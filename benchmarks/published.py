"""Published speculative-decoding measurements vs what `specwatch predict` says for them.

Run `python benchmarks/published.py` to regenerate benchmarks/published.md. Every row calls
specwatch.predict.predict() with the configuration the source describes; where the source leaves an
input out (batch, context, k, acceptance), the row says what was assumed. Where acceptance was not
published, it is calibrated on one row of the same source (the acceptance length that makes the
model reproduce that row's speedup) and the other rows of that source are then true predictions.
Calibration rows are marked and left out of the error summary.

Sources are the ones in the project's reference notes (model.md §3–4); "(2nd)" marks numbers seen
only through a write-up.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch import perf
from specwatch.hardware import GPUS, MODELS, custom_gpu
from specwatch.predict import predict

OUTPUT = Path(__file__).with_name("published.md")

# Parts the table does not carry, given through the override (dense BF16 FP32-accumulate FLOP/s,
# DRAM bytes/s).
RTX_3090 = custom_gpu(71e12, 936e9, name="RTX 3090", memory_bytes=24e9)  # model.md: ridge ≈ 76
A40 = custom_gpu(149.7e12, 696e9, name="A40", memory_bytes=48e9)  # NVIDIA A40 datasheet: BF16 149.7 dense


@dataclass(frozen=True)
class Row:
    source: str
    setup: str
    load: str
    published: float  # speedup over no speculation (a 1.4× slowdown is 1/1.4)
    inputs: dict[str, Any]  # predict() keyword arguments, except acceptance when calibrated
    assumptions: str
    calibration_group: str | None = None  # rows sharing a group share one calibrated acceptance length
    calibrates: bool = False  # this row sets the group's acceptance length
    extra: dict[str, Any] = field(default_factory=dict)


def _self_spec_ratio(gpu, model_name: str, tp: int, batch: float, context: float, budget: float) -> float:
    """MagicDec's self-speculation: the draft is the target with a StreamingLLM KV budget, so a draft
    token costs the target's step with `budget` tokens of context instead of `context`."""
    prior = perf.prior_for_model(gpu, MODELS[model_name], tp=tp)
    return float(prior.step_time(batch, batch * budget)) / float(prior.step_time(batch, batch * context))


def _small_draft_ratio(gpu, target: str, draft: str, tp: int, batch: float, context: float, dtype: str = "bf16",
                       draft_dtype: str = "bf16") -> float:
    """A separate draft model with its own full KV cache: the ratio of the two step-time priors."""
    target_prior = perf.prior_for_model(gpu, MODELS[target], tp=tp, dtype=dtype)
    draft_prior = perf.prior_for_model(gpu, MODELS[draft], tp=tp, dtype=draft_dtype)
    return float(draft_prior.step_time(batch, batch * context)) / float(target_prior.step_time(batch, batch * context))


def build_rows() -> list[Row]:
    rows: list[Row] = []
    h100, a100 = GPUS["H100-SXM"], GPUS["A100-80GB-SXM"]

    # vLLM blog, 2024-10-17: Llama-3-70B on 4×H100, V0 engine.
    blog = "vLLM blog 2024-10-17"
    sharegpt = dict(gpu=h100, model="Llama-3-70B", tp=4, k=5, method="draft", draft_params=0.5e9, context=600,
                    acceptance_rate=0.535)
    rows.append(Row(blog, "ShareGPT, Qwama-0.5B draft", "QPS 1 (batch ≈ 4)", 1.5, dict(sharegpt, batch=4),
                    "k=5 from the post's code sample; acceptance rate 0.535 from SqueezeBits (2nd, 70B + same draft "
                    "on 4×A100); batch 4 and 600 tokens of context assumed"))
    rows.append(Row(blog, "ShareGPT, Qwama-0.5B draft", "high QPS (batch ≈ 128)", 1 / 1.4, dict(sharegpt, batch=128),
                    "as above; 'high QPS' not quantified in the post, batch 128 assumed",
                    extra={"solve_batch": True}))
    cnn = dict(gpu=h100, model="Llama-3-70B", tp=4, k=5, method="ngram", context=1000)
    rows.append(Row(blog, "CNN/DailyMail, n-gram", "QPS 1 (batch ≈ 2)", 2.8, dict(cnn, batch=2),
                    "acceptance not published: calibrated here; k=5, batch 2, 1,000 tokens of context assumed",
                    calibration_group="blog-cnn", calibrates=True))
    rows.append(Row(blog, "CNN/DailyMail, n-gram", "high QPS (batch ≈ 128)", 1 / 1.8, dict(cnn, batch=128),
                    "acceptance from the QPS 1 row; batch 128 assumed", calibration_group="blog-cnn",
                    extra={"solve_batch": True}))

    # EAGLE-3 paper (2503.01840) Table 3: 1×H100, SGLang 0.4.4, Llama-3.1-8B, chain of 3, MT-bench.
    eagle_sglang = dict(gpu=h100, model="Llama-3.1-8B", k=3, method="eagle3", context=500)
    for batch, published in ((2, 1.81), (4, 1.82), (8, 1.62), (16, 1.48), (24, 1.39), (32, 1.32), (48, 1.38),
                             (56, 1.34), (64, 1.38)):
        rows.append(Row("EAGLE-3 Table 3", "H100, SGLang, Llama-3.1-8B, chain 3", f"batch {batch}", published,
                        dict(eagle_sglang, batch=batch),
                        "acceptance calibrated on batch 2; 500 tokens of context assumed (MT-bench)",
                        calibration_group="eagle3-sglang", calibrates=batch == 2))

    # EAGLE-3 paper Table 5: RTX 3090, vLLM, chain of 2. The model is assumed to be Llama-3.1-8B.
    eagle_vllm = dict(gpu=RTX_3090, model="Llama-3.1-8B", k=2, context=500)
    for method, group, points in (("eagle3", "eagle3-vllm", ((2, 1.75), (56, 1.01))),
                                  ("eagle", "eagle1-vllm", ((2, 1.30), (56, 0.71)))):
        label = "EAGLE-3" if method == "eagle3" else "EAGLE-1"
        for batch, published in points:
            rows.append(Row("EAGLE-3 Table 5", f"RTX 3090, vLLM, {label}, chain 2", f"batch {batch}", published,
                            dict(eagle_vllm, method=method, batch=batch),
                            "acceptance calibrated on batch 2; model (Llama-3.1-8B) and context assumed",
                            calibration_group=group, calibrates=batch == 2,
                            extra={"published_crossover": "24–32"} if method == "eagle" else {}))

    # MagicDec (2408.11049): Llama-3.1-8B self-speculation with a StreamingLLM draft, 32K context, 8 GPUs.
    for gpu, points in ((a100, ((32, 1.22), (64, 1.38), (128, 1.47))), (h100, ((32, 1.23), (64, 1.43)))):
        for batch, published in points:
            gamma = 3 if batch == 32 else 4  # "optimal γ rises with batch (3→4)"
            ratio = _self_spec_ratio(gpu, "Llama-3.1-8B", 8, batch, 32000, 512)
            rows.append(Row("MagicDec", f"8×{gpu.name}, Llama-3.1-8B self-spec, 32K", f"batch {batch}", published,
                            dict(gpu=gpu, model="Llama-3.1-8B", tp=8, k=gamma, method="draft", draft_ratio=ratio,
                                 context=32000, acceptance_length=perf.expected_length(0.80, gamma), batch=batch),
                            f"acceptance α = 0.80 (paper: 0.84→0.79 for 4K→100K); γ={gamma}; TP 8 and a 512-token "
                            f"draft KV budget assumed; r = {ratio:.3f} from the step-time prior"))
    for batch, published in ((32, 1.29), (64, 1.57), (128, 1.66)):
        ratio = _small_draft_ratio(a100, "Llama-2-7B", "TinyLlama-1.1B", 8, batch, 8000)
        rows.append(Row("MagicDec", "8×A100, Llama-2-7B + TinyLlama-1.1B, 8K", f"batch {batch}", published,
                        dict(gpu=a100, model="Llama-2-7B", tp=8, k=3, method="draft", draft_ratio=ratio, context=8000,
                             batch=batch),
                        f"acceptance calibrated on batch 32; γ=3, TP 8 assumed; r = {ratio:.3f} from the priors",
                        calibration_group="magicdec-tinyllama", calibrates=batch == 32))

    # vLLM PR #26504 comment: Qwen2.5-7B fp16 target, AWQ (4-bit) self-draft, A40, ShareGPT, greedy, k=4.
    for batch, published in ((1, 1.67), (32, 735 / 868)):
        ratio = _small_draft_ratio(A40, "Qwen2.5-7B", "Qwen2.5-7B", 1, batch, 600, draft_dtype="int4")
        rows.append(Row("vLLM PR #26504", "A40, Qwen2.5-7B + AWQ self-draft, k=4", f"batch {batch}", published,
                        dict(gpu=A40, model="Qwen2.5-7B", k=4, method="draft", draft_ratio=ratio, context=600,
                             acceptance_rate=0.88, batch=batch),
                        f"acceptance 0.86–0.91 (0.88 used); 600 tokens of context assumed; r = {ratio:.3f} from the "
                        "int4 vs bf16 priors"))

    # SpecDecode-Bench (2601.11580, 2nd): H100, vLLM 0.10.1.1, EAGLE, k=3.
    for model_name, tp, setup, points in (
        ("Llama-3.1-8B", 1, "H100, vLLM, EAGLE Llama-3.1-8B, GSM8K", ((1, 1.73), (128, 1.21))),
        ("Llama-3-70B", 4, "H100, vLLM, EAGLE Llama-3-70B, ShareGPT", ((1, 1.96), (128, 1.72))),
    ):
        group = f"specbench-{model_name}"
        for batch, published in points:
            rows.append(Row("SpecDecode-Bench (2nd)", setup, f"batch {batch}", published,
                            dict(gpu=h100, model=model_name, tp=tp, k=3, method="eagle", batch=batch, context=600),
                            f"acceptance calibrated on batch 1; TP {tp} and 600 tokens of context assumed",
                            calibration_group=group, calibrates=batch == 1))
    return rows


def _calibrated_length(row: Row) -> float:
    """The acceptance length at which the model reproduces the row's published speedup."""
    unknown = predict(**{key: value for key, value in row.inputs.items()
                         if key not in ("acceptance_length", "acceptance_rate")})
    return row.published * unknown["details"]["required_acceptance_length"]


MATCH_MAX_BATCH = 4096.0


def _batch_matching(inputs: dict[str, Any], target: float, max_batch: float = MATCH_MAX_BATCH) -> float | None:
    """The batch at which the model's speedup falls to the published value (bisection on predict;
    the speedup falls with batch once past the knee). None if it never gets that low."""

    def speedup_at(batch: float) -> float:
        return predict(**dict(inputs, batch=batch))["verdict"]["expected_speedup"]

    low, high = 1.0, max_batch
    if speedup_at(high) > target or speedup_at(low) < target:
        return None
    for _ in range(40):
        middle = math.sqrt(low * high)
        if speedup_at(middle) > target:
            low = middle
        else:
            high = middle
    return math.sqrt(low * high)


@dataclass(frozen=True)
class Outcome:
    row: Row
    length: float
    length_note: str
    predicted: float
    verdict: str
    crossover: float | None
    calibration: bool
    matching_batch: float | None = None
    floor_speedup: float | None = None  # the model's speedup at MATCH_MAX_BATCH, for rows it cannot match


def evaluate(rows: list[Row]) -> list[Outcome]:
    calibrated: dict[str, float] = {}
    for row in rows:
        if row.calibrates and row.calibration_group:
            calibrated[row.calibration_group] = _calibrated_length(row)
    outcomes = []
    for row in rows:
        inputs = dict(row.inputs)
        note = ""
        if row.calibration_group:
            k = inputs["k"]
            length = calibrated[row.calibration_group]
            note = f"L = {length:.2f} (calibrated)"
            if length > k + 1:
                # No acceptance reaches the published number with this k under the model: a miss
                # in itself; use the ceiling so the other rows still say something.
                note = f"L = {k + 1} (ceiling; calibration wanted {length:.2f})"
                length = k + 1
            inputs["acceptance_length"] = length
        result = predict(**inputs)
        verdict = result["verdict"]
        solve = bool(row.extra.get("solve_batch"))
        matching = _batch_matching(inputs, row.published) if solve else None
        floor = (
            predict(**dict(inputs, batch=MATCH_MAX_BATCH))["verdict"]["expected_speedup"]
            if solve and matching is None
            else None
        )
        outcomes.append(
            Outcome(
                row=row,
                length=result["inputs"]["acceptance_length"],
                length_note=note or f"L = {result['inputs']['acceptance_length']:.2f}",
                predicted=verdict["expected_speedup"],
                verdict=verdict["speculation"],
                crossover=verdict["crossover_concurrency"],
                calibration=row.calibrates,
                matching_batch=matching,
                floor_speedup=floor,
            )
        )
    return outcomes


def _table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| # | source | setup | load | published | predicted | pred/pub | verdict | acceptance | assumptions |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index, outcome in enumerate(outcomes, 1):
        row = outcome.row
        ratio = "calibration" if outcome.calibration else f"{outcome.predicted / row.published:.2f}"
        lines.append(
            f"| {index} | {row.source} | {row.setup} | {row.load} | {row.published:.2f}× | {outcome.predicted:.2f}× | "
            f"{ratio} | {outcome.verdict} | {outcome.length_note} | {row.assumptions} |"
        )
    return lines


def _summary(outcomes: list[Outcome]) -> list[str]:
    tested = [outcome for outcome in outcomes if not outcome.calibration]
    errors = [math.log(outcome.predicted / outcome.row.published) for outcome in tested]
    within_20 = sum(1 for error in errors if abs(error) <= math.log(1.2))
    # Direction: does the verdict agree with whether the published run gained (>1.05), lost (<0.95)
    # or was a wash?
    def published_state(value: float) -> str:
        return "on" if value >= 1.05 else "off" if value <= 0.95 else "hold"

    agree = sum(1 for outcome in tested if published_state(outcome.row.published) == outcome.verdict)
    geometric = math.exp(sum(abs(error) for error in errors) / len(errors))
    lines = [
        f"- Predicted rows (calibration rows excluded): {len(tested)}.",
        f"- Within ±20 % of the published speedup: {within_20} of {len(tested)}.",
        f"- Mean absolute error, as a factor: {geometric:.2f}×.",
        f"- Verdict agrees with the published direction (gain ≥ 1.05, loss ≤ 0.95, else hold): {agree} of {len(tested)}.",
    ]
    seen: set[str] = set()
    for outcome in outcomes:
        if outcome.matching_batch is not None:
            lines.append(
                f"- {outcome.row.setup}, {outcome.row.load}: the model reaches the published "
                f"{outcome.row.published:.2f}× only at batch ≈ {outcome.matching_batch:.0f}."
            )
        if outcome.floor_speedup is not None:
            lines.append(
                f"- {outcome.row.setup}, {outcome.row.load}: the model never falls to the published "
                f"{outcome.row.published:.2f}×; at batch {MATCH_MAX_BATCH:.0f} it still says {outcome.floor_speedup:.2f}×."
            )
        crossover = outcome.row.extra.get("published_crossover")
        if crossover and outcome.crossover is not None and outcome.row.setup not in seen:
            seen.add(outcome.row.setup)
            lines.append(
                f"- {outcome.row.setup}: published crossover batch {crossover}, predicted "
                f"{outcome.crossover:.0f}."
            )
    return lines


ANALYSIS = """\
## Where the model misses, and why

The datasheet prior is right in shape and off in level (model.md §0 expects 20–70 %). The rows
above show where the shape itself is too simple. Note that a calibrated acceptance length is an
*effective* L: it absorbs whatever the model leaves out at the calibration load (e.g. the EAGLE-3
SGLang rows calibrate to L ≈ 2.1 for a chain of 3, well below what EAGLE-3 accepts, because real
draft overhead at batch 2 is larger than r = 0.05).

- **High-QPS slowdowns (vLLM blog).** The model gets the direction wrong at the assumed batch of
  128 and cannot reproduce the published slowdowns at any batch: its compute-bound floor is
  L / (k+1 + k·r), which with k = 5 stays above 1/1.4 (draft) and close to 1/1.8 (n-gram). Losses
  that deep need costs that grow with tokens per step beyond the GEMMs: the V0 engine's proposer
  and rejection-sampler work per token, and the memory that draft KV and k+1 slots per sequence
  take, which shrinks the batch the engine can hold and turns load into queueing and preemption.
  None of that is in T(N, C). The low-QPS draft-model row is over-predicted for a related reason:
  with a 53.5 % acceptance rate the published 1.5× implies r ≈ 0.3 per draft token, while the model
  prices a 0.5B draft at bytes + 0.05 ≈ 0.057. V0 ran the draft step by step through the full
  scheduler; set `--draft-ratio` from a measurement when you have one.
- **Per-token overheads before the knee (EAGLE-3 Table 3, SGLang).** Measured speedups fall from
  1.8× at batch 2 to ~1.35× by batch 24, although 24 × 4 = 96 tokens per step is far below the
  H100 knee. The prior's only per-token term is a 2 µs sampling/bookkeeping cost, so it keeps the
  speedup nearly flat to ~250 tokens per step (over-predicting by up to a third at batch 16–32) and
  then falls. Small-M GEMM inefficiency, tree/rejection kernels and scheduler work grow with tokens
  per step well before the roofline knee; the online hinge fit's `per_token` term is there to learn
  exactly this from the node, which the datasheet cannot know.
- **Quantised self-draft on the A40 (vLLM PR #26504).** The worst miss: the model says 1.8× at
  batch 32 where the measurement lost 15 %. The draft is priced by its int4 bytes, but AWQ kernels
  dequantise on the fly and become compute-heavy as the batch grows, so the draft's cost rises with
  load much faster than a bytes ratio; acceptance alone (0.86–0.91, flat) would never have flagged
  it, which is the PR's point and the reason specwatch measures step times rather than trusting r.
- **Long context (MagicDec).** The mechanism is right: KV reads keep verification cheap and the
  predicted speedup *grows* with batch, as published. The level is high by 1.3–1.5× for
  self-speculation, which rests on assumed inputs (α = 0.80, a 512-token draft KV budget, TP 8) and
  ignores that verification attention over k+1 query tokens is not free in practice (model.md
  §5.4's ν ≈ 1–2). With a TinyLlama draft the level is close and the rise with batch a little slow.
- **Where it works.** On the RTX 3090 (a low-ridge GDDR part) the calibrated model lands within
  ~10 % at batch 56 and puts the EAGLE-1 crossover inside the published 24–32. SpecDecode-Bench's
  8B row at batch 128 is within ~6 %; its 70B row is under-predicted (a secondary source; ShareGPT
  contexts there are likely longer than the 600 tokens assumed, which would keep verification
  cheaper).

The lesson the tool acts on: use `predict` for the shape (where the knee is, how context and k move
the crossover) and for a first verdict, and trust the live fit of T(N, C) from the node's own steps
for the level.
"""


def render(outcomes: list[Outcome]) -> str:
    parts = [
        "# Published measurements vs `specwatch predict`",
        "",
        "Generated by `python benchmarks/published.py`; do not edit by hand. Each row runs",
        "`specwatch.predict.predict()` on the configuration the source describes. Speedups are",
        "per-sequence decode speedups over the same engine without speculation (a 1.4× slowdown is",
        "0.71×). Where a source does not publish acceptance, it is calibrated on one of its rows",
        "(marked *calibration*: predicted = published by construction) and the source's other rows are",
        "predictions. Assumed inputs are listed per row.",
        "",
        "## Table",
        "",
        *_table(outcomes),
        "",
        "## Summary",
        "",
        *_summary(outcomes),
        "",
        ANALYSIS,
    ]
    return "\n".join(parts)


def main() -> int:
    outcomes = evaluate(build_rows())
    OUTPUT.write_text(render(outcomes), encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(outcomes)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
