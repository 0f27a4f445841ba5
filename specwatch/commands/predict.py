"""`specwatch predict`: the verdict for a configuration with no live node (DESIGN §5).

Flags and exit statuses only: `specwatch.advice.predict` resolves the inputs, `specwatch.perf.decide`
decides. Exit statuses: 0 no change (on or hold), 1 speculation costs at this load (off),
2 not enough data (no acceptance given), 64 bad input (one line on stderr), as every command.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from specwatch import perf
from specwatch.commands.options import ExitCode, print_error
from specwatch.perf.hardware import known_model_names
from specwatch.advice.predict import predict

__all__ = ["add_arguments", "run"]

# flag name → predict() keyword; every flag is optional to argparse and checked by predict(), so
# bad input exits with the usage status and one line, as argparse's own errors do.
_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--gpu", "gpu", "NVML name or short form (H100 = SXM part, A100 = 80 GB SXM, L40S, ...)"),
    ("--peak-flops", "peak_flops", "a GPU by its peak figures: dense BF16 FLOP/s (with --memory-bandwidth)"),
    ("--memory-bandwidth", "memory_bandwidth", "a GPU by its peak figures: DRAM bytes/s (with --peak-flops)"),
    ("--gpu-memory", "gpu_memory", "GPU memory in bytes (e.g. 48GiB): KV capacity for a custom GPU"),
    ("--model", "model", f"known architecture: {', '.join(known_model_names())}"),
    ("--params", "params", "total parameters, e.g. 70e9 or 70B (instead of --model)"),
    ("--active-params", "active_params", "parameters used per token (MoE), shared experts included; default: "
                                         "--params"),
    ("--experts", "experts", "routed experts per MoE layer (with --experts-per-token and --active-params below "
                             "--params: the expert reads are priced; with --model it replaces the table's)"),
    ("--experts-per-token", "experts_per_token", "routed experts each token uses (the router's top-k, t in the reasons; "
                                                  "not the draft length --k), below --experts"),
    ("--kv-bytes-per-token", "kv_bytes_per_token", "BF16 KV-cache bytes per context token, whole model (an MLA "
                                                   "model from the table keeps it whole on every GPU)"),
    ("--tp", "tp", "tensor-parallel degree (default 1); with --dp-attention, attention's inside each DP group"),
    ("--ep", "ep", "expert-parallel degree: the GPUs the routed experts are spread over, each holding its share "
                   "whole (without --dp-attention it divides --tp; with it, it is the deployment's GPUs)"),
    ("--batch", "batch", "running sequences (concurrency); with --dp-attention, one DP rank's"),
    ("--waiting", "waiting", "requests waiting (the node is full): judged on throughput at the batch each mode holds"),
    ("--k", "k", "draft tokens per step"),
    ("--acceptance-length", "acceptance_length", "mean acceptance length L = 1 + accepted/drafts (1..k+1)"),
    ("--acceptance-rate", "acceptance_rate", "vLLM's draft acceptance rate, accepted/draft tokens (0..1): "
                                             "L = 1 + k·rate"),
    ("--acceptance-per-position", "acceptance_per_position", "vLLM's per-position acceptance rates, comma-separated "
                                                             "(position 1 first): L at every k′ measured, and the "
                                                             "best k searched over all of them"),
    ("--alpha", "alpha", "the papers' per-token acceptance probability α (0..1): L = (1 − α^(k+1))/(1 − α)"),
    ("--method", "method", "ngram, suffix, mtp, eagle, eagle3, medusa or draft (default: priced as a draft head)"),
    ("--draft-model", "draft_model", "draft model architecture (method draft): its size and KV cache"),
    ("--draft-params", "draft_params", "draft model parameters (method draft)"),
    ("--draft-kv-bytes-per-token", "draft_kv_bytes_per_token", "the draft model's KV bytes per context token"),
    ("--draft-context", "draft_context", "tokens of context the draft keeps per sequence (default: all of it)"),
    ("--draft-ratio", "draft_ratio", "draft cost per draft token as a fraction of a target step (override)"),
    ("--draft-scale", "draft_scale", "measured draft cost over the modelled one (calibrates the draft's roofline)"),
    ("--context", "context", "mean context tokens per sequence (default 0: KV reads ignored)"),
    ("--tree-tokens", "tree_tokens", "positions verified per sequence with tree drafts (≥ k+1)"),
    ("--max-running", "max_running", "the engine's cap on running requests under speculation"),
    ("--prompt-tokens", "prompt_tokens", "prompt tokens per request (with --output-tokens: end-to-end speedup)"),
    ("--output-tokens", "output_tokens", "output tokens per request"),
    ("--max-num-batched-tokens", "max_num_batched_tokens", "the engine's token budget per step (vLLM's "
                                                           "max_num_batched_tokens): prefill chunks and verified "
                                                           "positions share it (needs --prompt-tokens/--output-tokens)"),
    ("--tpot-ms", "tpot_ms", "the plain decode step (TPOT without speculation) measured on this deployment, in ms: "
                             "the law's fixed latency is moved to match it (a constant added to every step, plain and "
                             "verify alike, where it is longer; the law's own scaled down where shorter), the reads "
                             "and math kept"),
    ("--tpot-batch", "tpot_batch", "the running requests --tpot-ms was measured at (default: --batch)"),
    ("--role", "role", "a disaggregated deployment's pool: decode (its steps carry no prefill) or prefill (what "
                       "speculation adds to each request's prefill and KV handover; needs --prompt-tokens and "
                       "--output-tokens); default: aggregated"),
    ("--prefill-tp", "prefill_tp", "with --role: the prefill pool's tensor-parallel degree, when it is laid out apart "
                                   "from the decode pool (default: --tp); its prefill and the drafter's are priced "
                                   "on it"),
    ("--prefill-ep", "prefill_ep", "with --role: the prefill pool's expert-parallel degree (default: the decode "
                                   "pool's layout)"),
    ("--engine", "engine", "the serving engine: vllm (default: prefill chunks share the decode steps), trtllm "
                           "(the same, in-flight batching) or sglang (prefill batches of their own, which pause "
                           "every decode: with --prompt-tokens/--output-tokens each request waits out the "
                           "prefills of the requests in flight)"),
    ("--verifier", "verifier", "how the engine verifies: multi-query (one KV read per sequence; default) or "
                               "batch-expansion (vLLM V0 before its multi-query scorer: a KV read per position)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, dest, words in _FLAGS:
        parser.add_argument(flag, dest=dest, help=words)
    parser.add_argument("--dtype", help=f"weights: {', '.join(perf.WEIGHT_FORMATS)} (default: the format a --model "
                                        "is released in, e.g. fp8 for DeepSeek-V3; else bf16)")
    parser.add_argument("--draft-dtype", help="the draft model's weights (default: --dtype)")
    parser.add_argument("--dp-attention", action="store_true",
                        help="attention data-parallel (SGLang's --enable-dp-attention, TensorRT-LLM's "
                             "enable_attention_dp): each rank runs its own requests with the non-expert weights "
                             "whole, the experts spread over --ep GPUs")
    parser.add_argument("--prefill-dp-attention", action="store_true",
                        help="with --role and --prefill-ep: the prefill pool runs attention data-parallel")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _count(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _batch_words(verdict: dict[str, Any], inputs: dict[str, Any]) -> str:
    """The batch the speedup is for: the one asked for, or the one the KV memory holds, said so."""
    batch = verdict.get("batch") or {}
    if not batch.get("capped"):
        return f"batch {inputs['batch']:g}"
    plain, spec = batch["plain"], batch["speculative"]
    words = f"batch {_count(plain)}" if _count(plain) == _count(spec) else \
        f"batch {_count(plain)} plain, {_count(spec)} speculative"
    return f"{words} ({batch['why']})"


def _summary(result: dict[str, Any]) -> str:
    verdict = result["verdict"]
    inputs = result["inputs"]
    lines = [f"speculation: {verdict['speculation']} (confidence {verdict['confidence']:.2f})"]
    numbers = []
    if verdict["expected_speedup"] is not None:
        numbers.append(f"expected speedup {verdict['expected_speedup']:.2f}× at {_batch_words(verdict, inputs)}")
    if verdict.get("request_speedup") is not None:
        numbers.append(f"end to end {verdict['request_speedup']:.2f}×")
    if verdict.get("throughput_speedup") is not None:
        numbers.append(f"requests per second {verdict['throughput_speedup']:.2f}×")
    if verdict["break_even_length"] is not None:
        numbers.append(f"break-even L {verdict['break_even_length']:.2f}")
    if verdict["crossover_concurrency"] is not None:
        numbers.append(f"crossover ≈ {verdict['crossover_concurrency']:.0f} running")
    if numbers:
        lines.append(" · ".join(numbers))
    lines.append(f"bound: {result['bound']['state']}")
    lines.extend(f"- {reason}" for reason in verdict["reasons"])
    return "\n".join(lines)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run `specwatch predict`: print JSON (--json) or a short summary; return the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    keywords = {dest: getattr(args, dest, None) for _, dest, _ in _FLAGS}
    keywords["tp"] = keywords["tp"] if keywords["tp"] is not None else 1
    try:
        result = predict(keywords.pop("gpu"), dtype=getattr(args, "dtype", None),
                         draft_dtype=getattr(args, "draft_dtype", None),
                         dp_attention=getattr(args, "dp_attention", False),
                         prefill_dp_attention=getattr(args, "prefill_dp_attention", False), **keywords)
    except (ValueError, TypeError, ArithmeticError) as error:
        print_error("predict", str(error), file=err)
        return ExitCode.USAGE
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2), file=out)
    else:
        print(_summary(result), file=out)
    state = result["verdict"]["speculation"]
    if state == "unknown":
        return ExitCode.NOT_ENOUGH_DATA
    if state == "off":
        return ExitCode.CHANGE
    return ExitCode.OK
