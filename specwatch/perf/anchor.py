"""A datasheet step law anchored to one measured plain step: the operator's TPOT without
speculation at one load moves the law's fixed latency, as the live fit moves its fixed part.

Why the fixed part, and added where the step is longer: an engine's decode step at low load is mostly
fixed latency (the per-step and per-layer launches, the host's scheduling, a MoE layer's routing,
the collectives), and that is what engines, versions and GPU vendors differ in most (SGLang ran
DeepSeek-V3 at 22.9 ms a step at batch 1 on 8×H200 in early 2025, by its NextN PR's own figures,
where the datasheet law says 6.4 ms); the weight and KV reads and the math are the datasheet's. The
live fit's base is such a constant, paid by a plain and a verify step alike. Anchored at its own
baseline step, the SGLang docs' 1.8× at batch 1 (k = 1) asks an acceptance length of 1.96 (the PR
says about 1.9), where the unanchored law, pricing today's faster engines, cannot reach it below
L = 2.17; AMD's MI300X rows (benchmarks/published.py) are anchored the same way. A step shorter
than the law's says its own fixed latency is too dear for the engine, and scales it down.
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
            moved = (f"lowered by {-self.added_s * 1e3:.1f} ms (the per-step overhead and the MoE layers' fixed "
                     "latency scaled down together)")
        return (f"the step's fixed latency {moved} to the measured plain step of {self.step_s * 1e3:.1f} ms at "
                f"{self.tokens:g} running (the datasheet's {self.datasheet_step_s * 1e3:.1f} ms); the weight reads "
                "and the math are the datasheet's")


def anchor_fixed_latency(prior: StepTimePrior, step_s: float, tokens: float,
                         context_tokens: float = 0.0) -> AnchoredLaw:
    """`prior` with its fixed latency moved so that a plain step of `tokens` tokens over
    `context_tokens` of KV takes `step_s`. A longer step adds a constant to every step (overhead_s:
    the host's scheduling and the launches the datasheet does not know, as the live fit's base); a
    shorter one says the law's own fixed latency is too dear for this engine, and scales it down
    (overhead_s and the MoE layers' expert_latency_s together). Raises ValueError when even none of
    it would do: a step shorter than the reads and math alone."""
    if not (step_s > 0 and tokens > 0 and context_tokens >= 0):
        raise ValueError("a measured step needs a time, a load above 0 and a context of 0 or more")

    def scaled(scale: float) -> StepTimePrior:
        return replace(prior, overhead_s=prior.overhead_s * scale, expert_latency_s=prior.expert_latency_s * scale)

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
