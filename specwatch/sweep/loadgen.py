"""A closed-loop load generator for OpenAI-compatible servers (vLLM's /v1/completions and
/v1/chat/completions), streaming, so every request's TTFT and TPOT come from its own chunk timings.

One tier = `concurrency` workers, each sending its next request as soon as the previous one ends
(closed loop), until a request count or a duration is spent. The first `warmup` requests of a tier
run at the tier's concurrency but are left out of its figures. Prompts are taken in order from a
fixed list, so two servers driven with the same settings see the same prompts in the same order
with the same max tokens.

Nothing here raises for what the network or the server does: timeouts, HTTP errors, malformed
streams and a server that dies are counted per failure kind, and a tier whose server stops
answering ends early with `server_dead` set. Everything is bounded: the per-request timeout, the
bytes read per response, the prompt file's size and line count, the tier's duration.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx
import numpy as np

from specwatch.collectors.vllm import describe_http_error

API_COMPLETIONS = "completions"
API_CHAT = "chat"
APIS = (API_COMPLETIONS, API_CHAT)

DEFAULT_MAX_TOKENS = 128
# vLLM's streamed responses are a few hundred bytes per token: 4 MiB allows ~10k tokens per request
# and keeps a runaway stream from costing unbounded memory.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# A user prompt file is read whole: bounded in bytes and in prompts kept.
MAX_PROMPT_FILE_BYTES = 256 * 1024 * 1024
MAX_PROMPTS = 100_000
MAX_PROMPT_CHARS = 1_000_000
MAX_TOKENS_LIMIT = 1_000_000
# After this many consecutive connection failures with no success in between, the server is taken
# for dead (in-flight requests of the dying server fail too, so at least `concurrency` of them).
DEAD_AFTER_CONNECTION_FAILURES = 3
# A worker that failed to connect waits this long before its next request, so a dead server in a
# duration-bounded tier costs a handful of attempts, not thousands.
CONNECTION_RETRY_PAUSE_S = 0.2

# Failure kinds, as counted in TierStats.failures.
FAIL_TIMEOUT = "timeout"
FAIL_CONNECTION = "connection"
FAIL_INCOMPLETE = "incomplete"  # the stream ended (or the connection dropped) before [DONE]
FAIL_STREAM = "stream_error"  # an error event or an unreadable chunk inside the stream
FAIL_TOO_LARGE = "too_large"
FAIL_EMPTY = "no_tokens"  # a complete answer with no output token in it


class PromptFileError(ValueError):
    """The user's prompt file cannot be used; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's input: plain text (completions) or chat messages, and its max tokens."""

    text: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    max_tokens: int | None = None  # None: the tier's setting

    def as_text(self) -> str:
        """The prompt for /v1/completions; chat messages are written one `role: content` per line."""
        if self.text is not None:
            return self.text
        lines = [f"{m['role']}: {m['content']}" for m in self.messages or ()]
        return "\n".join(lines) + "\nassistant:"

    def as_messages(self) -> list[dict[str, str]]:
        """The messages for /v1/chat/completions; plain text becomes one user message."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.text or ""}]


# --------------------------------------------------------------------------------------------------
# Built-in prompt sets: deterministic, generated here, nothing downloaded
# --------------------------------------------------------------------------------------------------

_TOPICS = (
    "the cache", "the scheduler", "the network link", "the billing service", "the build system",
    "the database replica", "the load balancer", "the nightly backup", "the search index", "the model server",
)
_EVENTS = (
    "reported a timeout", "was restarted by the operator", "ran out of disk space", "recovered on its own",
    "served stale data for ten minutes", "doubled its latency", "dropped a third of its requests",
    "was rolled back to the previous release", "logged a warning about memory", "paged the on-call engineer",
)
_OPEN_QUESTIONS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky looks blue at noon and red at sunset.",
    "Describe a city two hundred years from now.",
    "What would you pack for a month alone on a small island, and why?",
    "Give advice to someone starting their first job as a software engineer.",
    "Invent a new board game and explain its rules.",
    "Compare travelling by train and by plane for a trip of five hundred kilometres.",
    "Write a letter from a cat to its owner about the new dog.",
    "Describe the taste of a fruit that does not exist.",
    "Why do people enjoy music that makes them sad?",
)
_CODE_NAMES = ("items", "records", "values", "rows", "events", "users", "orders", "paths")
_CODE_OPS = ("sum of", "largest of", "count of even", "sorted unique", "average of", "first negative of")


def _echo_prompt(rng: random.Random) -> str:
    """A passage and a request to repeat or summarise it: output reuses the prompt (n-gram friendly)."""
    sentences = [f"On day {rng.randint(1, 30)} {rng.choice(_TOPICS)} {rng.choice(_EVENTS)}."
                 for _ in range(rng.randint(4, 8))]
    task = rng.choice((
        "Repeat the incident log above exactly, line by line.",
        "Summarise the incident log above, keeping the original wording where you can.",
        "Copy the log above and then list each component that it mentions.",
    ))
    return "Incident log:\n" + "\n".join(sentences) + "\n\n" + task + "\n"


def _code_prompt(rng: random.Random) -> str:
    """A small function to complete or rewrite: code repeats identifiers, which lookup drafts like."""
    name = rng.choice(_CODE_NAMES)
    op = rng.choice(_CODE_OPS)
    fn = op.replace(" ", "_")
    body = (
        f"def {fn}_{name}({name}):\n"
        f"    \"\"\"Return the {op} {name}.\"\"\"\n"
        f"    result = None\n"
        f"    for item in {name}:\n"
        f"        if item is None:\n"
        f"            continue\n"
    )
    task = rng.choice((
        "Complete this Python function, then write three unit tests for it.",
        "Rewrite this Python function with type hints and a docstring example.",
        "Finish the function and explain each line.",
    ))
    return f"{task}\n\n```python\n{body}"


def _open_prompt(rng: random.Random) -> str:
    """Open-ended generation: little of the output is in the prompt, so lookup drafts rarely match."""
    return rng.choice(_OPEN_QUESTIONS)


SYNTHETIC_SETS: dict[str, Callable[[random.Random], str]] = {
    "echo": _echo_prompt,
    "code": _code_prompt,
    "open": _open_prompt,
}
# "mixed" interleaves the three, in a fixed order.
PROMPT_SET_NAMES = (*SYNTHETIC_SETS, "mixed")


def synthetic_prompts(name: str, count: int, seed: int = 0) -> list[Prompt]:
    """`count` prompts of a built-in set, the same for the same (name, count, seed)."""
    if name not in PROMPT_SET_NAMES:
        raise ValueError(f"unknown prompt set {name!r}; known: {', '.join(PROMPT_SET_NAMES)}")
    if not 1 <= count <= MAX_PROMPTS:
        raise ValueError(f"prompt count must be in 1..{MAX_PROMPTS}, got {count}")
    rng = random.Random(f"{name}:{seed}")
    makers = list(SYNTHETIC_SETS.values())
    out = []
    for i in range(count):
        make = makers[i % len(makers)] if name == "mixed" else SYNTHETIC_SETS[name]
        out.append(Prompt(text=make(rng)))
    return out


# --------------------------------------------------------------------------------------------------
# User prompt files: JSONL of prompts or chat messages, or ShareGPT JSON
# --------------------------------------------------------------------------------------------------

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}


def _max_tokens_field(item: dict, where: str) -> int | None:
    for key in ("max_tokens", "output_len", "max_completion_tokens"):
        if key in item and item[key] is not None:
            value = item[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_LIMIT:
                raise PromptFileError(f"{where}: {key} must be an integer in 1..{MAX_TOKENS_LIMIT}, got {value!r}")
            return value
    return None


def _messages(raw: Any, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(raw, list) or not raw:
        raise PromptFileError(f"{where}: 'messages' must be a non-empty list")
    out = []
    for m in raw:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise PromptFileError(f"{where}: each message needs a string 'role' and a string 'content'")
        out.append({"role": m["role"], "content": m["content"][:MAX_PROMPT_CHARS]})
    return tuple(out)


def _sharegpt_prompt(item: dict, where: str) -> Prompt | None:
    """ShareGPT: the conversation up to (not including) the last assistant turn is the prompt.

    As `vllm bench serve --dataset-name sharegpt` does, only the opening exchange is used: the
    first human turn is the prompt. Conversations without one are skipped (None).
    """
    turns = item.get("conversations", item.get("conversation"))
    if not isinstance(turns, list):
        raise PromptFileError(f"{where}: 'conversations' must be a list")
    for turn in turns:
        if not isinstance(turn, dict):
            raise PromptFileError(f"{where}: each conversation turn must be an object")
        role = _SHAREGPT_ROLES.get(str(turn.get("from", turn.get("role", ""))).lower())
        value = turn.get("value", turn.get("content"))
        if role == "user" and isinstance(value, str) and value.strip():
            return Prompt(messages=({"role": "user", "content": value[:MAX_PROMPT_CHARS]},),
                          max_tokens=_max_tokens_field(item, where))
    return None


def _prompt_from_item(item: Any, where: str) -> Prompt | None:
    if isinstance(item, str):
        if not item.strip():
            raise PromptFileError(f"{where}: empty prompt")
        return Prompt(text=item[:MAX_PROMPT_CHARS])
    if not isinstance(item, dict):
        raise PromptFileError(f"{where}: expected a string or an object, got {type(item).__name__}")
    if "messages" in item:
        return Prompt(messages=_messages(item["messages"], where), max_tokens=_max_tokens_field(item, where))
    if "conversations" in item or "conversation" in item:
        return _sharegpt_prompt(item, where)
    for key in ("prompt", "text"):
        if key in item:
            text = item[key]
            if not isinstance(text, str) or not text.strip():
                raise PromptFileError(f"{where}: '{key}' must be a non-empty string")
            return Prompt(text=text[:MAX_PROMPT_CHARS], max_tokens=_max_tokens_field(item, where))
    raise PromptFileError(f"{where}: no 'prompt', 'messages' or 'conversations' field")


def load_prompt_file(path: str | Path, limit: int = MAX_PROMPTS) -> list[Prompt]:
    """Prompts from a user file, in file order, at most `limit` of them.

    Accepted: JSONL with one prompt per line (a string, {"prompt": ...}, {"messages": [...]} or a
    ShareGPT record), or one JSON array of such items (ShareGPT's own files are an array of
    {"conversations": [{"from": "human", "value": ...}, ...]}). A line may set its own max_tokens.
    Raises PromptFileError naming the file and line.
    """
    file = Path(path)
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise PromptFileError(f"cannot read the prompt file {file}: {exc.strerror or exc}") from exc
    if size > MAX_PROMPT_FILE_BYTES:
        raise PromptFileError(f"the prompt file {file} is {size} bytes, over the cap of {MAX_PROMPT_FILE_BYTES}")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptFileError(f"cannot read the prompt file {file}: {exc}") from exc
    prompts: list[Prompt] = []
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise PromptFileError(f"{file}: not valid JSON: {exc}") from exc
        for i, item in enumerate(items):
            prompt = _prompt_from_item(item, f"{file} item {i + 1}")
            if prompt is not None:
                prompts.append(prompt)
            if len(prompts) >= limit:
                break
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{file} line {number}"
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise PromptFileError(f"{where}: not valid JSON: {exc}") from exc
            prompt = _prompt_from_item(item, where)
            if prompt is not None:
                prompts.append(prompt)
            if len(prompts) >= limit:
                break
    if not prompts:
        raise PromptFileError(f"the prompt file {file} holds no usable prompt")
    return prompts


# --------------------------------------------------------------------------------------------------
# One streamed request
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """What every request of a run shares."""

    model: str
    api: str = API_COMPLETIONS
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    ignore_eos: bool = True  # a vLLM extension: every request produces max_tokens, on both servers
    timeout_s: float = 120.0
    max_response_bytes: int = MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        if not 1 <= self.max_tokens <= MAX_TOKENS_LIMIT:
            raise ValueError(f"max tokens must be in 1..{MAX_TOKENS_LIMIT}, got {self.max_tokens}")
        if not (math.isfinite(self.temperature) and 0 <= self.temperature <= 10):
            raise ValueError(f"temperature must be in 0..10, got {self.temperature}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError("the request timeout must be greater than 0")


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request: its timings (seconds, from a monotonic clock) or why it failed."""

    index: int  # position of the prompt in the prompt list
    ok: bool
    start: float
    end: float
    ttft_s: float | None = None
    # time from the first to the last token-bearing chunk, which TPOT divides by output_tokens − 1
    decode_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int | None = None
    chunks: int = 0
    failure: str | None = None
    message: str = ""
    warmup: bool = False

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first, as `vllm bench serve` defines it."""
        if not self.ok or self.decode_s is None or self.output_tokens < 2:
            return None
        return self.decode_s / (self.output_tokens - 1)


def _request_body(prompt: Prompt, settings: RequestSettings) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": prompt.max_tokens or settings.max_tokens,
        "temperature": settings.temperature,
        "stream": True,
        # the final chunk then carries usage, so the output token count is exact even when one
        # chunk holds several tokens (speculation commits several per step)
        "stream_options": {"include_usage": True},
    }
    if settings.ignore_eos:
        body["ignore_eos"] = True
    if settings.api == API_CHAT:
        body["messages"] = prompt.as_messages()
        return "/v1/chat/completions", body
    body["prompt"] = prompt.as_text()
    return "/v1/completions", body


def _chunk_text(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    parts = []
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            parts.append(choice["text"])
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    parts.append(delta[key])
    return "".join(parts)


def _chunk_holds_generated_text(chunk: dict) -> bool:
    """Whether a chunk carries a generated piece, even one whose text is empty.

    vLLM streams a chunk per step in which the sequence got new tokens; a token that decodes to no
    text yet (part of a multi-byte character, a special token) still comes as a chunk with
    `"text": ""`, and the final usage says how many tokens there were. Such chunks time the decode
    as any other. Chat's opening chunk (the role, sent before any token) and finish-only chunks do not.
    """
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict) or choice.get("finish_reason"):
            continue
        if isinstance(choice.get("text"), str):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and "role" not in delta and isinstance(delta.get("content"), str):
            return True
    return False


def _chunk_token_ids(chunk: dict) -> int:
    """Tokens a chunk carries when the server says (vLLM's `token_ids` with return_token_ids)."""
    total = 0
    for choice in chunk.get("choices") or []:
        if isinstance(choice, dict) and isinstance(choice.get("token_ids"), list):
            total += len(choice["token_ids"])
    return total


async def stream_request(
    client: httpx.AsyncClient, base_url: str, prompt: Prompt, index: int, settings: RequestSettings,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestResult:
    """Send one streamed request and time it chunk by chunk. Never raises for network or server faults."""
    path, body = _request_body(prompt, settings)
    start = clock()
    first: float | None = None
    last: float | None = None
    chunks = 0
    counted_tokens = 0
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    done = False
    size = 0

    def failed(kind: str, message: str) -> RequestResult:
        return RequestResult(index, False, start, clock(), ttft_s=None if first is None else first - start,
                             output_tokens=usage_tokens or counted_tokens, prompt_tokens=prompt_tokens,
                             chunks=chunks, failure=kind, message=message)

    try:
        async with client.stream("POST", base_url + path, json=body,
                                 timeout=httpx.Timeout(settings.timeout_s)) as response:
            if response.status_code != 200:
                detail = (await response.aread())[:300].decode("utf-8", "replace").strip()
                return failed(f"http_{response.status_code}", f"HTTP {response.status_code}: {detail}")
            async for line in response.aiter_lines():
                size += len(line) + 1
                if size > settings.max_response_bytes:
                    return failed(FAIL_TOO_LARGE, f"response over {settings.max_response_bytes} bytes")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                now = clock()
                try:
                    chunk = json.loads(data)
                except ValueError:
                    return failed(FAIL_STREAM, f"unreadable stream chunk: {data[:120]!r}")
                if not isinstance(chunk, dict):
                    return failed(FAIL_STREAM, f"unexpected stream chunk: {data[:120]!r}")
                if "error" in chunk:
                    error = chunk["error"]
                    text = error.get("message") if isinstance(error, dict) else error
                    return failed(FAIL_STREAM, f"the server reported an error mid-stream: {str(text)[:200]}")
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    if isinstance(usage.get("completion_tokens"), int):
                        usage_tokens = usage["completion_tokens"]
                    if isinstance(usage.get("prompt_tokens"), int):
                        prompt_tokens = usage["prompt_tokens"]
                text = _chunk_text(chunk)
                ids = _chunk_token_ids(chunk)
                if text or ids or _chunk_holds_generated_text(chunk):
                    chunks += 1
                    counted_tokens += ids or 1
                    if first is None:
                        first = now
                    last = now
    except httpx.TimeoutException as exc:
        return failed(FAIL_TIMEOUT, f"no answer within {settings.timeout_s:g} s ({type(exc).__name__})")
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        kind = FAIL_INCOMPLETE if chunks or first is not None else FAIL_CONNECTION
        return failed(kind, f"the connection dropped: {exc or type(exc).__name__}")
    except (httpx.HTTPError, OSError) as exc:
        _, message = describe_http_error(exc, base_url)
        return failed(FAIL_CONNECTION, message)
    if not done:
        return failed(FAIL_INCOMPLETE, "the stream ended before [DONE]")
    end = clock()
    tokens = usage_tokens if usage_tokens is not None else counted_tokens
    if first is None or tokens <= 0:
        return RequestResult(index, False, start, end, output_tokens=0, prompt_tokens=prompt_tokens,
                             failure=FAIL_EMPTY, message="the answer held no output token")
    return RequestResult(index, True, start, end, ttft_s=first - start, decode_s=(last or first) - first,
                         output_tokens=tokens, prompt_tokens=prompt_tokens, chunks=chunks)


# --------------------------------------------------------------------------------------------------
# A tier: closed loop at fixed concurrency
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TierPlan:
    """How long a tier runs: a request count, a duration, or both (whichever ends first)."""

    concurrency: int
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 4096:
            raise ValueError(f"concurrency must be in 1..4096, got {self.concurrency}")
        if self.requests is None and self.duration_s is None:
            raise ValueError("a tier needs a request count or a duration")
        if self.requests is not None and not 1 <= self.requests <= 1_000_000:
            raise ValueError(f"requests per tier must be in 1..1000000, got {self.requests}")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and 0 < self.duration_s <= 86_400):
            raise ValueError(f"tier duration must be in (0, 86400] s, got {self.duration_s}")
        if not 0 <= self.warmup <= 100_000:
            raise ValueError(f"warm-up requests must be in 0..100000, got {self.warmup}")


@dataclass(slots=True)
class TierRun:
    """What one tier against one server produced."""

    concurrency: int
    results: list[RequestResult] = field(default_factory=list)
    server_dead: bool = False
    dead_message: str = ""
    wall_s: float = 0.0

    @property
    def measured(self) -> list[RequestResult]:
        return [r for r in self.results if not r.warmup]


async def run_tier(
    client: httpx.AsyncClient,
    base_url: str,
    prompts: Sequence[Prompt],
    plan: TierPlan,
    settings: RequestSettings,
    clock: Callable[[], float] = time.perf_counter,
    on_result: Callable[[RequestResult], None] | None = None,
) -> TierRun:
    """Drive one server at `plan.concurrency` in a closed loop. Prompts are used in list order,
    starting from the first, wrapping round when the tier needs more than the list holds.
    `on_result` sees every result as it comes (for a progress display)."""
    if not prompts:
        raise ValueError("no prompts to send")
    run = TierRun(plan.concurrency)
    total = None if plan.requests is None else plan.warmup + plan.requests
    next_index = 0
    consecutive_connection_failures = 0
    started = clock()
    # the duration counts from the end of the warm-up, so warm-up does not eat the measured time
    deadline: float | None = None if plan.duration_s is None or plan.warmup else started + plan.duration_s
    stop = asyncio.Event()

    def take() -> tuple[int, bool] | None:
        nonlocal next_index
        if stop.is_set() or (total is not None and next_index >= total):
            return None
        if deadline is not None and next_index >= plan.warmup and clock() >= deadline:
            return None
        i = next_index
        next_index += 1
        return i, i < plan.warmup

    async def worker() -> None:
        nonlocal consecutive_connection_failures, deadline
        while (job := take()) is not None:
            sequence, is_warmup = job
            prompt_index = sequence % len(prompts)
            result = await stream_request(client, base_url, prompts[prompt_index], prompt_index, settings, clock)
            if is_warmup:
                result = _as_warmup(result)
            run.results.append(result)
            if on_result is not None:
                on_result(result)
            if is_warmup and deadline is None and plan.duration_s is not None and \
                    sum(1 for r in run.results if r.warmup) >= plan.warmup:
                deadline = clock() + plan.duration_s
            if result.ok:
                consecutive_connection_failures = 0
            elif result.failure in (FAIL_CONNECTION, FAIL_INCOMPLETE):
                consecutive_connection_failures += 1
                if consecutive_connection_failures >= max(DEAD_AFTER_CONNECTION_FAILURES, plan.concurrency) \
                        and not await _answers(client, base_url):
                    run.server_dead = True
                    run.dead_message = f"the server at {base_url} stopped answering: {result.message}"
                    stop.set()
                    return
                await asyncio.sleep(CONNECTION_RETRY_PAUSE_S)

    await asyncio.gather(*(worker() for _ in range(plan.concurrency)))
    run.wall_s = clock() - started
    return run


def _as_warmup(r: RequestResult) -> RequestResult:
    return RequestResult(r.index, r.ok, r.start, r.end, r.ttft_s, r.decode_s, r.output_tokens, r.prompt_tokens,
                         r.chunks, r.failure, r.message, warmup=True)


async def _answers(client: httpx.AsyncClient, base_url: str) -> bool:
    """Whether the server still answers at all (/health, which vLLM serves, or anything with a status)."""
    try:
        response = await client.get(base_url + "/health", timeout=httpx.Timeout(5.0))
        return response.status_code < 500
    except (httpx.HTTPError, OSError):
        return False


# --------------------------------------------------------------------------------------------------
# A tier's figures
# --------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation, as numpy (and vllm bench) compute it."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


@dataclass(frozen=True, slots=True)
class TierStats:
    """The figures of one tier against one server (seconds; tokens/s)."""

    concurrency: int
    requests_ok: int
    requests_failed: int
    failures: dict[str, int]
    output_tokens: int
    duration_s: float | None  # from the first measured request's start to the last one's end
    output_tokens_per_s: float | None
    requests_per_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    tpot_p50_s: float | None
    tpot_p95_s: float | None
    tpot_mean_s: float | None
    latency_p50_s: float | None
    prompt_tokens_mean: float | None
    first_failure: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests_ok": self.requests_ok,
            "requests_failed": self.requests_failed,
            "failures": dict(self.failures),
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p95_s": self.ttft_p95_s,
            "tpot_p50_s": self.tpot_p50_s,
            "tpot_p95_s": self.tpot_p95_s,
            "tpot_mean_s": self.tpot_mean_s,
            "latency_p50_s": self.latency_p50_s,
            "prompt_tokens_mean": self.prompt_tokens_mean,
            "first_failure": self.first_failure,
        }


def tier_stats(run: TierRun) -> TierStats:
    measured = run.measured
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    failures: dict[str, int] = {}
    for r in failed:
        failures[r.failure or "unknown"] = failures.get(r.failure or "unknown", 0) + 1
    tokens = sum(r.output_tokens for r in ok)
    duration = None
    if measured:
        duration = max(r.end for r in measured) - min(r.start for r in measured)
    tpots = [t for t in (r.tpot_s for r in ok) if t is not None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    prompt_tokens = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    return TierStats(
        concurrency=run.concurrency,
        requests_ok=len(ok),
        requests_failed=len(failed),
        failures=failures,
        output_tokens=tokens,
        duration_s=duration,
        output_tokens_per_s=tokens / duration if duration and ok else None,
        requests_per_s=len(ok) / duration if duration and ok else None,
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p95_s=percentile(ttfts, 95),
        tpot_p50_s=percentile(tpots, 50),
        tpot_p95_s=percentile(tpots, 95),
        tpot_mean_s=float(np.mean(tpots)) if tpots else None,
        latency_p50_s=percentile([r.end - r.start for r in ok], 50),
        prompt_tokens_mean=float(np.mean(prompt_tokens)) if prompt_tokens else None,
        first_failure=failed[0].message if failed else None,
    )
