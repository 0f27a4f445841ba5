"""A datasheet step law anchored to one measured plain step: the operator's TPOT without
speculation at one load moves the law's fixed latency, as the live fit moves its fixed part.

Why the fixed part, and added where the step is longer: an engine's decode step at low load is mostly
fixed latency (the per-step and per-layer launches, the host's scheduling, a MoE layer's routing,
the collectives), and that is what engines, versions and GPU vendors differ in most (the same
8×H200 DeepSeek node measured 23–33 ms a step at batch 1 in SGLang in early 2025, where the
datasheet law says 11.6 ms); the weight and KV reads and the math are the datasheet's. The live
fit's base is such a constant, paid by a plain and a verify step alike. On AMD's DeepSeek-V3 MTP
rows (benchmarks/published.py) an anchor at concurrency 1 took their level error from 0.109 to
0.062; scaling the fixed part instead (which also widens the MoE floor the expert reads hide
under) gave 0.084. A step shorter than the law's says its own fixed latency (the MoE floor set on
SGLang) is too dear for the engine: TensorRT-LLM's DeepSeek-R1 on 8×B200 runs 9.0 ms at batch 1
where the law says 11.2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specwatch.perf.steptime import StepTimePrior

__all__ = ["AnchoredLaw", "anchor_fixed_latency"]


@dataclass(frozen=True)
class AnchoredLaw:
    """The law anchored, and what the anchor did: the time it added to the step at the anchor's load
    (negative: took off) and the law's step there before it."""

    prior: StepTimePrior
    added_s: float
    step_s: float  # the measured plain step
    tokens: float  # the load it was measured at: tokens a step (the running requests)
    datasheet_step_s: float  # the unanchored law's step at that load

    def words(self) -> str:
        if self.added_s >= 0:
            moved = f"raised by {self.added_s * 1e3:.1f} ms, in a plain and a verify step alike,"
        else:
            moved = (f"lowered by {-self.added_s * 1e3:.1f} ms (the per-step overhead and the MoE layers' floor "
                     "scaled down together)")
        return (f"the step's fixed latency {moved} to the measured plain step of {self.step_s * 1e3:.1f} ms at "
                f"{self.tokens:g} running (the datasheet's {self.datasheet_step_s * 1e3:.1f} ms); the weight reads "
                "and the math are the datasheet's")


def anchor_fixed_latency(prior: StepTimePrior, step_s: float, tokens: float,
                         context_tokens: float = 0.0) -> AnchoredLaw:
    """`prior` with its fixed latency moved so that a plain step of `tokens` tokens over
    `context_tokens` of KV takes `step_s`. A longer step adds a constant to every step (overhead_s:
    the host's scheduling and the launches the datasheet does not know, as the live fit's base); a
    shorter one says the law's own fixed latency is too dear for this engine, and scales it down
    (overhead_s and the MoE layers' expert_floor_s together). Raises ValueError when even none of
    it would do: a step shorter than the reads and math alone."""
    if not (step_s > 0 and tokens > 0 and context_tokens >= 0):
        raise ValueError("a measured step needs a time, a load above 0 and a context of 0 or more")

    def scaled(scale: float) -> StepTimePrior:
        return replace(prior, overhead_s=prior.overhead_s * scale, expert_floor_s=prior.expert_floor_s * scale)

    def step(law: StepTimePrior) -> float:
        return float(law.step_time(tokens, context_tokens))

    datasheet = step(prior)
    if step_s >= datasheet:
        law = replace(prior, overhead_s=prior.overhead_s + (step_s - datasheet))
    else:
        reads = step(scaled(0.0))
        if step_s < reads:
            raise ValueError(f"a plain step of {step_s * 1e3:.2f} ms at {tokens:g} running is shorter than the "
                             f"weight reads and math alone on this layout ({reads * 1e3:.2f} ms): check the time "
                             "(in ms, without speculation), the GPU, the model and the parallelism")
        low, high = 0.0, 1.0
        for _ in range(50):  # the step grows with the scale: bisection to well under a microsecond
            middle = 0.5 * (low + high)
            low, high = (middle, high) if step(scaled(middle)) < step_s else (low, middle)
        law = scaled(0.5 * (low + high))
    return AnchoredLaw(law, step_s - datasheet, step_s, tokens, datasheet)
