"""The engine's token budget per step that the advisor prices a step's prefill with: the server's
own where its /server_info gives it (TargetSample.token_budget), else the operator's
--max-num-batched-tokens. As with the speculation config (snapshot.resolve_speculation), the server
wins, since it is what runs, and a flag it contradicts is said in the verdict's reasons. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specwatch.perf.hardware import GpuSpec
from specwatch.telemetry.snapshot import FROM_FLAGS, FROM_SERVER_INFO, TargetSample

# The operator's flag, as the reasons name it (vLLM's own name for the budget).
BUDGET_FLAG = "--max-num-batched-tokens"
# Where neither the server nor the operator says it: vLLM's own default, which most servers run.
FROM_VLLM_DEFAULT = "vllm_default"
# Where the budget came from, as the decision's reason says it: "the step's token budget (2048, ...)".
_FROM_WORDS = {FROM_SERVER_INFO: "from the server's /server_info", FROM_FLAGS: f"from {BUDGET_FLAG}",
               FROM_VLLM_DEFAULT: f"vLLM's default for its API server on this hardware; give {BUDGET_FLAG} if "
                                  "the server runs another"}
# vLLM's API-server default (EngineArgs.get_batch_defaults): 8192 tokens a step on a device with at
# least 70 GiB that is not an A100 (larger budgets cost A100s throughput, vLLM PR #17885), else 2048
# (the CPU wheel's capture in tests/data says 2048).
VLLM_DEFAULT_BUDGET_LARGE, VLLM_DEFAULT_BUDGET = 8192, 2048
_LARGE_DEVICE_BYTES = 70 * 2**30


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """The budget a verdict is judged with (None: not known, so no budget cuts the prefill), where it
    came from (FROM_SERVER_INFO or FROM_FLAGS), and `note`: the operator's flag in words where the
    server contradicted it or it does not apply, for the verdict's reasons."""

    tokens: int | None = None
    source: str | None = None
    note: str | None = None

    @property
    def words(self) -> str:
        """Where the budget came from, in the decision's words ("" without a budget)."""
        return _FROM_WORDS.get(self.source or "", "") if self.tokens is not None else ""

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "source": self.source}


NO_BUDGET = TokenBudget()


def vllm_default_token_budget(gpu: GpuSpec | None, version: str | None = None) -> int | None:
    """vLLM's default budget per step for its API server on `gpu` (None: a device without GPU
    memory to speak of, such as a CPU), for the vLLM `version` the server reports (None: not read,
    taken as a current one). The rule by device came with vLLM 0.9; the V1 engine of 0.8 gave its API
    server 2048 on every device; before 0.8 the V0 engine prefilled apart from the decodes unless
    chunked prefill was turned on, so no default is assumed for it (None)."""
    release = _release(version)
    if release is not None and release < (0, 8):
        return None
    if release is not None and release < (0, 9):
        return VLLM_DEFAULT_BUDGET
    large = gpu is not None and (gpu.memory_bytes or 0.0) >= _LARGE_DEVICE_BYTES \
        and "a100" not in f"{gpu.key} {gpu.name}".lower()
    return VLLM_DEFAULT_BUDGET_LARGE if large else VLLM_DEFAULT_BUDGET


def _release(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version string such as "0.32.0" or "0.8.5.post1"; None when unreadable."""
    parts = (version or "").strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


# A default budget is a guess at the server's flag: a window whose steps computed this much more on
# average than it (the computed positions are estimated from the counters) says the server runs a
# larger one.
STEPS_OVER_DEFAULT = 1.05


def checked_against_steps(budget: TokenBudget, tokens_per_step: float | None) -> TokenBudget:
    """`budget`, unless it is vLLM's default (a guess) and the engine's steps computed more tokens
    on average than it holds: then the server runs a larger budget, and none is applied (a budget
    the steps exceed would price a verify step the engine has been running as one it cannot)."""
    if budget.source != FROM_VLLM_DEFAULT or budget.tokens is None or tokens_per_step is None \
            or not tokens_per_step > budget.tokens * STEPS_OVER_DEFAULT:
        return budget
    return TokenBudget(note=f"the engine's steps computed {tokens_per_step:.0f} tokens on average, more than "
                            f"vLLM's default budget of {budget.tokens} on this hardware holds: the server runs a "
                            f"larger one, so no budget is applied (give {BUDGET_FLAG} to price it)")


# Engines that prefill in batches of their own beside speculative decode steps, which pause every
# decode while they run: SGLang (its mixed chunked prefill is off under speculation). vLLM chunks
# prefill into the steps under its token budget; TensorRT-LLM's in-flight batching puts context
# chunks beside the generation phase in one iteration.
PREFILLS_APART = frozenset({"sglang"})


def prefills_apart(engine_name: str | None) -> bool:
    """Whether this engine prefills apart from its speculative decode steps (PREFILLS_APART)."""
    return engine_name in PREFILLS_APART


def resolve_token_budget(target: TargetSample | None, declared: int | None,
                         default: int | None = None) -> TokenBudget:
    """The budget for this target: its server's, else `declared` (the operator's flag), else
    `default` (vLLM's own for the hardware, where the caller knows it), else none.

    An SGLang target gets none: SGLang does not put prefill chunks into its speculative steps (its
    mixed chunked prefill is off under speculation), so the budget the model prices, shared by the
    verified positions and the prefill, is vLLM's alone; a flag given for it is said to be unused."""
    if target is not None and prefills_apart(target.engine_name):
        if declared is None:
            return NO_BUDGET
        return TokenBudget(note=f"{BUDGET_FLAG} {declared} was given, but SGLang does not put prefill into its "
                                "speculative steps: no token budget is applied")
    server = target.token_budget if target is not None else None
    if server is not None:
        note = None
        if declared is not None and declared != server:
            note = (f"{BUDGET_FLAG} {declared} was given, but the server's /server_info says {server}: "
                    f"judged with {server}")
        return TokenBudget(server, FROM_SERVER_INFO, note)
    if declared is not None:
        return TokenBudget(declared, FROM_FLAGS)
    if default is not None:
        return TokenBudget(default, FROM_VLLM_DEFAULT)
    return NO_BUDGET
