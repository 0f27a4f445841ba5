"""The vLLM source: an async scrape of /metrics (and /version, /server_info once) per target.

The speculation setup rides in every TargetSample (`TargetSample.speculation`): the server's own
/server_info (only with VLLM_SERVER_DEV_MODE=1) read once, and again after the server restarts or
comes back; the operator's declaration (`declared`: --method, --draft-model, --draft-params) fills in
what the server does not expose; k comes from the metrics' per-position series when /server_info is
not there. Where the two disagree, /server_info wins (it is what the server runs) and the sample
carries the disagreement in words (see snapshot.resolve_speculation). The same read gives the
scheduler's token budget per step (`TargetSample.token_budget`), which the advisor weighs against the
operator's --max-num-batched-tokens.

Every failure becomes a TargetSample with a named state and a message an operator can act on;
nothing here raises to the caller. The bearer token is read from an environment variable or a file,
never from argv, and never appears in a state message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

import httpx

from specwatch.collectors.transport import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, PayloadTooLarge
from specwatch.collectors.transport import deadline_s as _deadline_s
from specwatch.collectors.transport import get_bounded as _get_bounded
from specwatch.collectors.engines import (
    AUTO,
    LABELS,
    TRTLLM,
    VLLM,
    AdapterState,
    MetricsReading,
    check_engine_choice,
    choose_engine,
    claims,
    dynamo_worker,
)
from specwatch.telemetry.exposition import ExpositionError, parse_payload
from specwatch.telemetry.urls import beside, redact, split_url
from specwatch.telemetry.snapshot import (
    FROM_METRICS,
    FROM_SERVER_INFO,
    TARGET_OK,
    EngineSample,
    ParallelLayout,
    SpeculationConfig,
    TargetSample,
    parallel_layout_from,
    resolve_speculation,
)

DEFAULT_URL = "http://localhost:8000"
DEFAULT_TOKEN_ENV = "SPECWATCH_TOKEN"


class TokenError(ValueError):
    """The token source named by the user could not be read."""


def not_an_engine_words(text: str, url: str) -> str | None:
    """What a /metrics without an engine's families is, where it is something specwatch knows: a
    specwatch agent (its specwatch_* series) or a Prometheus server (its own prometheus_* series),
    each pointed at the command that reads it. None for anything else."""
    def has(prefix: str) -> bool:
        return text.startswith(prefix) or f"\n{prefix}" in text or f"# TYPE {prefix}" in text

    if has("specwatch_"):
        return (f"{url} serves a specwatch agent's metrics (`specwatch export`), not a serving engine's: "
                f"read agents with `specwatch fleet --url {url}`, and check the engine the agent reads")
    if has("prometheus_"):
        return (f"{url} is a Prometheus server's own /metrics, not a serving engine's: read the agents it "
                f"scrapes with `specwatch fleet --prometheus {url}`")
    return None


def read_token(env_name: str | None = None, file: str | os.PathLike[str] | None = None) -> str | None:
    """A bearer token from a file (first line) or an environment variable; the file wins."""
    if file is not None:
        try:
            token = Path(file).read_text(encoding="utf-8").strip().splitlines()
        except OSError as exc:
            raise TokenError(f"cannot read the token file {file}: {exc.strerror or exc}") from exc
        if not token or not token[0].strip():
            raise TokenError(f"the token file {file} is empty")
        return token[0].strip()
    value = os.environ.get(env_name or DEFAULT_TOKEN_ENV, "").strip()
    return value or None


def normalise_url(url: str) -> tuple[str, str]:
    """A user's URL → (base URL, metrics URL). Accepts host:port, a base URL, or a /metrics URL; a
    URL that cannot be used is a ValueError with one line saying why (see specwatch.telemetry.urls)."""
    base, metrics, _ = split_url(url, "vLLM URL")
    return base, metrics


@dataclass
class TargetInfo:
    """What is learnt once per server start and kept: the version and, with dev mode, the spec config."""

    version: str | None = None
    speculative_config: dict | None = None  # /server_info's speculative_config, as the server wrote it
    speculation: SpeculationConfig | None = None  # the same, read
    probed: bool = False
    # process_start_time of the server the info was read from: a new one means a restart
    process_start_time: float | None = None
    # SGLang's /get_server_info as the server wrote it (its server arguments), when read
    server_info: dict | None = None
    # vLLM's scheduler budget per step, from /server_info (token_budget_from_server_info), when read
    token_budget: int | None = None
    # the device the engine runs on, from /server_info (device_from_server_info), when read
    device: str | None = None
    # the served weights' format, from /server_info (weights_from_server_info), when read
    weights: str | None = None
    # how the model is laid out over the GPUs, from /server_info (parallel_from_server_info)
    parallel: ParallelLayout | None = None


@dataclass
class VllmTarget:
    """One server to scrape. Despite the name (kept for its callers), any engine with an adapter
    (specwatch.collectors.engines): `engine` is the one forced by --engine, or "auto" to read it off the
    payload; `detected` is the one the last payload was read as."""

    url: str  # the base URL as shown and stored: credentials redacted
    metrics_url: str  # what is requested: credentials kept
    info: TargetInfo = field(default_factory=TargetInfo)
    request_base: str = ""  # the base URL requested, credentials kept ("" → url)
    engine: str = AUTO
    detected: str | None = None
    adapter_state: AdapterState = field(default_factory=AdapterState)
    # the operator said this is a disaggregated deployment's prefill worker (--prefill)
    prefill: bool = False
    # where the target sat in a deployment when last read, (namespace, role): a worker that stops
    # answering is shown down as the decode or prefill worker it was
    placed: tuple[str | None, str | None] = (None, None)

    @classmethod
    def from_url(cls, url: str, engine: str = AUTO, prefill: bool = False) -> VllmTarget:
        base, metrics, shown = split_url(url, "vLLM URL")
        target = cls(shown, metrics, request_base=base, engine=check_engine_choice(engine), prefill=prefill)
        if target.engine == TRTLLM:
            # TensorRT-LLM's Prometheus text; its /metrics is the draining JSON, never read when forced
            from specwatch.collectors.trtllm import prometheus_urls

            target.metrics_url, target.request_base, target.url = prometheus_urls(base, shown)
        return target

    @property
    def label(self) -> str:
        """How messages name the server: the engine forced, else the one last read, else "the server"
        (before its first payload it may be vLLM or SGLang)."""
        engine = self.engine if self.engine != AUTO else self.detected
        return LABELS.get(engine, engine) if engine else SERVER_LABEL


# How messages name a server whose engine is not known yet (neither forced nor read off a payload).
SERVER_LABEL = "the server"


def tls_verify(verify: bool | str | ssl.SSLContext) -> bool | ssl.SSLContext:
    """TLS verification as httpx takes it: True (the system CAs), False (--insecure), or a context
    holding the CA file. A CA file that is missing or not PEM raises ValueError saying so, before any
    connection (httpx would raise FileNotFoundError or SSLError from inside the first scrape)."""
    if not isinstance(verify, str):
        return verify
    try:
        return ssl.create_default_context(cafile=verify)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ValueError(f"cannot use the CA file {verify}: {why}") from None


def verify_from_flags(insecure: bool, ca_file: str | None, client_cert: str | None = None,
                      client_key: str | None = None) -> bool | ssl.SSLContext:
    """--insecure / --ca-file / --client-cert as httpx's `verify`: verification is on unless explicitly
    turned off. A client certificate (what a locked specwatch agent or an mTLS proxy asks for) rides in
    the same context. A bad CA file or certificate raises ValueError with a clear message."""
    if client_cert is None:
        if client_key is not None:
            raise ValueError("--client-key needs --client-cert")
        if insecure:
            return False
        return tls_verify(ca_file) if ca_file else True
    context = tls_verify(ca_file) if ca_file and not insecure else ssl.create_default_context()
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        context.load_cert_chain(client_cert, client_key)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ValueError(f"cannot use the client certificate {client_cert}"
                         f"{' and key ' + client_key if client_key else ''}: {why}") from None
    return context


def make_client(
    token: str | None = None, verify: bool | str | ssl.SSLContext = True, timeout_s: float = DEFAULT_TIMEOUT_S
) -> httpx.AsyncClient:
    """One client for all targets: connections are reused between polls."""
    headers = {"Accept": "text/plain;version=0.0.4", "User-Agent": "specwatch"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        headers=headers,
        verify=tls_verify(verify),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=False,
    )


def describe_http_error(exc: BaseException, url: str, engine_label: str = "the server") -> tuple[str, str]:
    """(state, message) for a transport failure, in the operator's words; the URL and the error's own
    text redacted (the caller may pass the URL it requested, credentials and all)."""
    where = redact(f"{engine_label} at {url}")
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", f"{where}: no answer within the timeout ({type(exc).__name__})"
    text = redact(str(exc))
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return "tls_error", f"{where}: TLS failed: {cause.reason or cause}"
        if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
            return "connection_refused", f"{where}: connection refused (is the server running?)"
        cause = cause.__cause__ or cause.__context__
    lowered = text.lower()
    if "certificate" in lowered or "ssl" in lowered or "tls" in lowered:
        return "tls_error", f"{where}: TLS failed: {text}"
    if "connection refused" in lowered or "connect call failed" in lowered:
        return "connection_refused", f"{where}: connection refused (is the server running?)"
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "name resolution" in lowered \
            or "getaddrinfo" in lowered:
        return "dns_failure", f"{where}: the host name does not resolve"
    return "network_error", f"{where}: {type(exc).__name__}: {text or 'connection failed'}"


def url_has_credentials(url: str) -> bool:
    """Whether a URL carries user-info (user:password@), which httpx sends as basic auth."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def describe_status(status: int, url: str, token_sent: bool = False, where: str | None = None,
                    path: str = "/metrics", engine_label: str = "the server",
                    url_credentials: bool = False) -> tuple[str, str]:
    """(state, message) for an HTTP status other than 200. A 401 or 403 says whether a token went
    with the request: "none was sent" and "it was rejected" need different fixes. `url_credentials`:
    the URL requested carried user:password (sent as basic auth), which the message names without
    repeating them."""
    where = where or f"{engine_label} at {url}"
    if status in (401, 403):
        word = "unauthorised" if status == 401 else "forbidden"
        if url_credentials:
            also = " (and the bearer token)" if token_sent else ""
            return f"http_{status}", (f"{where}: HTTP {status} {word}: the server refused the URL's credentials"
                                      f"{also}, sent as basic auth (check the user and password in the URL, "
                                      f"or use --token-env NAME or --token-file PATH)")
        if token_sent:
            return f"http_{status}", (f"{where}: HTTP {status} {word}: the bearer token was sent and rejected "
                                      f"(check the token, or its permission to read {path})")
        return f"http_{status}", (f"{where}: HTTP {status} {word}: no token was sent "
                                  "(set one with --token-env NAME or --token-file PATH)")
    if status == 404:
        what = "the server you meant" if engine_label == SERVER_LABEL else f"a {engine_label} server"
        return "http_404", f"{where}: HTTP 404 at {path} (is this {what}? check the URL)"
    if 500 <= status < 600:
        return "http_5xx", f"{where}: HTTP {status}: the server failed to produce its metrics"
    return "http_error", f"{where}: unexpected HTTP {status}"


async def scrape_target(
    client: httpx.AsyncClient,
    target: VllmTarget,
    max_bytes: int = DEFAULT_MAX_BYTES,
    probe_info: bool = True,
    declared: SpeculationConfig | None = None,
) -> TargetSample:
    """One scrape of one target. Never raises for anything the network or the payload does."""
    sample = await _scrape_target(client, target, max_bytes, probe_info, declared)
    if not sample.ok:
        # what the server runs is re-read when it answers again: it may come back configured otherwise
        target.info.probed = False
        # a target whose engine is known (forced, or read so before) stays named so while it is down,
        # and a deployment's worker stays placed: a killed decode worker is shown down, not judged
        known = target.engine if target.engine != AUTO else target.detected
        engine = known if known not in (None, VLLM) else sample.engine
        deployment, role = target.placed
        if role is None and target.prefill:
            role = "prefill"
        return dataclasses.replace(sample, speculation=declared, engine=engine, deployment=deployment, role=role)
    target.placed = (sample.deployment, sample.role)
    return sample


async def _scrape_target(
    client: httpx.AsyncClient,
    target: VllmTarget,
    max_bytes: int,
    probe_info: bool,
    declared: SpeculationConfig | None,
) -> TargetSample:
    started = time.perf_counter()
    deadline_s = _deadline_s(client)
    try:
        # httpx's timeout bounds each read, not the whole answer: a server trickling a byte a second
        # (a slow-loris /metrics) would hold the scrape forever. The deadline bounds all of it.
        async with asyncio.timeout(deadline_s):
            response = await _get_bounded(client, target.metrics_url, max_bytes)
    except TimeoutError:
        return TargetSample(
            target.url, "timeout",
            f"{target.label} at {target.url}: no answer within the timeout (all of /metrics must arrive within "
            f"{deadline_s:g} s)",
            version=target.info.version,
        )
    except PayloadTooLarge as exc:
        return TargetSample(
            target.url, "payload_too_large",
            f"{target.label} at {target.url}: /metrics is larger than the cap of {max_bytes} bytes "
            f"({exc.args[0]} read)",
            version=target.info.version,
        )
    except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
        state, message = describe_http_error(exc, target.url, target.label)
        return TargetSample(target.url, state, message, version=target.info.version)
    elapsed = time.perf_counter() - started
    if response.status_code == 404 and TRTLLM in (target.engine, target.detected):
        from specwatch.collectors.trtllm import PROMETHEUS_PATH, SWITCH_ON

        return TargetSample(target.url, "http_404",
                            f"TensorRT-LLM at {target.url}: HTTP 404 at {PROMETHEUS_PATH}: trtllm-serve mounts its "
                            f"Prometheus metrics only when asked ({SWITCH_ON})",
                            version=target.info.version, payload_bytes=len(response.content), engine=TRTLLM)
    if response.status_code != 200:
        state, message = describe_status(response.status_code, target.url,
                                         token_sent="authorization" in client.headers, engine_label=target.label,
                                         url_credentials=url_has_credentials(target.metrics_url))
        return TargetSample(target.url, state, message, version=target.info.version,
                            payload_bytes=len(response.content))
    body = response.content
    if target.engine == AUTO and target.detected in (None, TRTLLM):
        from specwatch.collectors.trtllm import looks_like_iteration_stats, prometheus_urls

        if looks_like_iteration_stats(body):
            # trtllm-serve's JSON iteration stats: this one read told the engine apart (and took
            # the iterations buffered since the last reader's, as any read of it does). Its
            # Prometheus text is read from now on, and /metrics never again.
            target.detected = TRTLLM
            target.metrics_url, target.request_base, target.url = prometheus_urls(target.request_base or target.url,
                                                                                  target.url)
            return await _scrape_target(client, target, max_bytes, probe_info, declared)
    text = body.decode("utf-8", errors="replace")
    target.detected = choose_engine(target.engine, text)
    if target.detected != VLLM:
        from specwatch.collectors.engine_scrape import scrape_engine

        return await scrape_engine(client, target, text, len(body), elapsed, probe_info, declared)
    try:
        parsed = VLLM_ADAPTER.read_metrics(text, target.adapter_state, time.monotonic())
    except ExpositionError as exc:
        return TargetSample(target.url, "not_prometheus", f"vLLM at {target.url}: {exc}",
                            version=target.info.version, payload_bytes=len(body))
    missing = parsed.missing
    unjudged = None
    if missing and parsed.engines and dynamo_worker(text):
        # a Dynamo worker passing through part of vLLM's families (the mocker): read what is there
        from specwatch.collectors.dynamo import PARTIAL_VLLM_UNJUDGED

        unjudged, missing = PARTIAL_VLLM_UNJUDGED.format(missing=", ".join(missing)), ()
    if missing:
        return TargetSample(
            target.url, "families_missing",
            not_an_engine_words(text, target.url) or
            f"vLLM at {target.url}: /metrics lacks {', '.join(missing)} (is this a vLLM server?)",
            version=target.info.version, payload_bytes=len(body),
        )
    if target.info.process_start_time != parsed.process_start_time:
        target.info.probed = False  # a restarted server: its version and config may have changed
    if probe_info and not target.info.probed:
        await probe_target_info(client, target)
        target.info.process_start_time = parsed.process_start_time
    observed = with_metrics_k(target.info.speculation, parsed.engines)
    from specwatch.collectors.dynamo import placed_in_deployment

    return placed_in_deployment(target, text, TargetSample(
        url=target.url,
        state=TARGET_OK,
        version=target.info.version,
        engines=parsed.engines,
        process_start_time=parsed.process_start_time,
        scrape_seconds=elapsed,
        payload_bytes=len(body),
        speculation=resolve_speculation(observed, declared),
        token_budget=target.info.token_budget,
        device=target.info.device,
        weights=target.info.weights,
        unjudged=unjudged,
        parallel=target.info.parallel,
    ))


def with_metrics_k(config: SpeculationConfig | None, engines: Sequence[EngineSample]) -> SpeculationConfig | None:
    """The config with k from the per-position series (one per drafted position, created at start-up)
    where /server_info did not give it."""
    k = max((len(e.accepted_per_position) for e in engines), default=0)
    if k == 0 or (config is not None and config.k is not None):
        return config
    if config is None:
        return SpeculationConfig.known(FROM_METRICS, k=k)
    return dataclasses.replace(config, k=k, sources=config.sources + (("k", FROM_METRICS),))


async def probe_target_info(client: httpx.AsyncClient, target: VllmTarget) -> None:
    """/version once; /server_info too, which only answers with VLLM_SERVER_DEV_MODE=1 and is the
    only place the speculation method and draft model can be read (vllm.md §2). Each is bounded by
    the same whole-request deadline as /metrics."""
    try:
        async with asyncio.timeout(_deadline_s(client)):
            await _probe_target_info(client, target)
    except TimeoutError:
        target.info.probed = False  # try again on a later poll


async def _probe_target_info(client: httpx.AsyncClient, target: VllmTarget) -> None:
    target.info.probed = True
    try:
        r = await client.get(beside(target.request_base or target.url, "/version", target.metrics_url))
        if r.status_code == 200:
            version = r.json().get("version")
            target.info.version = str(version) if version is not None else None
    except (httpx.HTTPError, OSError, ValueError, AttributeError):
        target.info.probed = False  # try again on a later poll
        return
    target.info.speculative_config = target.info.speculation = target.info.token_budget = None
    target.info.device = target.info.weights = target.info.parallel = None
    try:
        # the whole vllm_config with the environment: ~30 KB, bounded like /metrics all the same
        r = await _get_bounded(client, beside(target.request_base or target.url, "/server_info?config_format=json",
                                              target.metrics_url), DEFAULT_MAX_BYTES)
        if r.status_code == 200:  # 404 without dev mode: the flags and the metrics are all there is
            info = r.json()
            target.info.speculative_config = _speculative_config_from_server_info(info)
            target.info.speculation = speculation_from_server_info(target.info.speculative_config)
            target.info.token_budget = token_budget_from_server_info(info)
            target.info.device = device_from_server_info(info)
            target.info.weights = weights_from_server_info(info)
            target.info.parallel = parallel_from_server_info(info)
    except ValueError:
        pass  # a 200 that is not JSON: not vLLM's /server_info, and asking again will not change it
    except (httpx.HTTPError, OSError, PayloadTooLarge):
        target.info.probed = False  # try again on a later poll


def _vllm_config_from_server_info(info: object) -> dict | None:
    """/server_info's vllm_config (an object, or that object written as a JSON string), or None."""
    if not isinstance(info, dict):
        return None
    config = info.get("vllm_config", info)
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    return config if isinstance(config, dict) else None


def _speculative_config_from_server_info(info: object) -> dict | None:
    config = _vllm_config_from_server_info(info)
    spec = config.get("speculative_config") if config is not None else None
    return spec if isinstance(spec, dict) else None


def token_budget_from_server_info(info: object) -> int | None:
    """The scheduler's token budget per step from /server_info: vllm_config.scheduler_config's
    max_num_scheduled_tokens (what vLLM's V1 scheduler hands out per step, the running requests'
    verified positions first; it defaults to max_num_batched_tokens and may be set lower for
    speculation's extra slots), else max_num_batched_tokens (releases without the former); the
    smaller where both are given. Values of the wrong type (a bool, a number below 1, not a whole
    number) are left out, not guessed; None when neither is usable."""
    config = _vllm_config_from_server_info(info)
    scheduler = config.get("scheduler_config") if config is not None else None
    if not isinstance(scheduler, dict):
        return None

    def whole(key: str) -> int | None:
        value = scheduler.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    budgets = [b for b in (whole("max_num_scheduled_tokens"), whole("max_num_batched_tokens")) if b is not None]
    return min(budgets) if budgets else None


def device_from_server_info(info: object) -> str | None:
    """The device the engine runs on from /server_info: vllm_config.device_config.device as vLLM
    writes it ("cpu" on the CPU wheel; "cuda", "xpu", "tpu" elsewhere), lower-cased; None where it is
    missing, not text, or "auto" (vLLM's unresolved default, which says nothing)."""
    config = _vllm_config_from_server_info(info)
    device_config = config.get("device_config") if config is not None else None
    device = device_config.get("device") if isinstance(device_config, dict) else None
    if not isinstance(device, str) or not device.strip() or device.strip().lower() == "auto":
        return None
    return device.strip().lower()


def parallel_from_server_info(info: object) -> ParallelLayout | None:
    """How vLLM lays the model out, from /server_info's parallel_config: tensor_parallel_size and,
    with enable_expert_parallel, experts spread over TP × DP GPUs (vLLM's EP size); data_parallel_size
    above 1 runs attention data-parallel (each DP rank its own requests). None where tp is not given."""
    config = _vllm_config_from_server_info(info)
    parallel = config.get("parallel_config") if config is not None else None
    if not isinstance(parallel, dict):
        return None
    tp, dp = parallel.get("tensor_parallel_size"), parallel.get("data_parallel_size", 1)
    dp = dp if isinstance(dp, int) and not isinstance(dp, bool) and dp >= 1 else 1
    expert_parallel = parallel.get("enable_expert_parallel") is True
    ep = tp * dp if expert_parallel and isinstance(tp, int) and not isinstance(tp, bool) else None
    return parallel_layout_from(tp, ep, dp > 1, "/server_info")


# vLLM's quantisation methods (model_config.quantization) whose name tells the weights' format, as
# specwatch.perf prices it. MXFP4 (gpt-oss) is priced as W4A16, the nearest; the rest
# (compressed-tensors, quark, modelopt_fp4, bitsandbytes, gguf, ...) name a container or a format
# not priced, and say nothing here.
_QUANTIZATION_WEIGHTS = {
    "fp8": "fp8", "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8", "fp8_per_tensor": "fp8", "fp8_per_block": "fp8",
    "fp8_per_channel": "fp8", "deepseek_v4_fp8": "fp8", "modelopt": "fp8", "modelopt_mxfp8": "fp8", "mxfp8": "fp8",
    "awq": "awq", "auto_awq": "awq", "awq_marlin": "awq",
    "gptq": "gptq", "auto_gptq": "gptq", "gptq_marlin": "gptq",
    "mxfp4": "w4a16", "gpt_oss_mxfp4": "w4a16",
    "experts_int8": "w8a16", "int8_per_channel_weight_only": "w8a16",
}


def weights_from_server_info(info: object) -> str | None:
    """The served weights' format from /server_info: vllm_config.model_config.quantization mapped to
    the format specwatch prices (fp8, awq, gptq; a GPTQ of 8 bits, from its quantization_config, as
    w8a16); None where it is missing (unquantised), not text, or a method that does not tell."""
    config = _vllm_config_from_server_info(info)
    model_config = config.get("model_config") if config is not None else None
    method = model_config.get("quantization") if isinstance(model_config, dict) else None
    if not isinstance(method, str):
        return None
    weights = _QUANTIZATION_WEIGHTS.get(method.strip().lower())
    quantization_config = model_config.get("quantization_config")
    if weights == "gptq" and isinstance(quantization_config, dict) and quantization_config.get("bits") == 8:
        return "w8a16"
    return weights


# Methods that draft by lookup, not with a model: vLLM fills their "model" with the method's own name
# (and draft_model_config with the target's), so neither names a draft model.
_LOOKUP_METHODS = ("ngram", "suffix")


def speculation_from_server_info(spec: object) -> SpeculationConfig | None:
    """/server_info's speculative_config (vLLM's SpeculativeConfig as JSON) → a SpeculationConfig.

    vLLM 0.32 writes method ("ngram", "eagle3", "draft_model", "deepseek_mtp", ...), model (the draft
    model's path; the method's own name for n-gram), num_speculative_tokens, prompt_lookup_min/max and
    speculative_token_tree (for tree drafting). Values of the wrong type are left out, not guessed."""
    if not isinstance(spec, dict):
        return None

    def text(key: str) -> str | None:
        value = spec.get(key)
        return value.strip() if isinstance(value, str) and value.strip() else None

    def whole(key: str) -> int | None:
        value = spec.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    config = SpeculationConfig.known(
        FROM_SERVER_INFO,
        method=text("method"),
        k=whole("num_speculative_tokens"),
        prompt_lookup_min=whole("prompt_lookup_min"),
        prompt_lookup_max=whole("prompt_lookup_max"),
        token_tree=text("speculative_token_tree"),
    )
    model = text("model")
    if model is not None and config.method not in _LOOKUP_METHODS and model != text("method"):
        config = dataclasses.replace(config, draft_model=model,
                                     sources=config.sources + (("draft_model", FROM_SERVER_INFO),))
    return None if config.empty else config


class VllmAdapter:
    """vLLM's payload as the window reads it: its own family names, as read (the first adapter of
    specwatch.collectors.engines; the vLLM info probe is probe_target_info)."""

    name = VLLM
    label = "vLLM"
    info_paths = ("/version", "/server_info?config_format=json")

    def claims(self, text: str) -> bool:
        return claims(VLLM, text)

    def read_metrics(self, text: str, state: AdapterState, now: float) -> MetricsReading:
        """Raises ExpositionError (a ValueError) for text that is not Prometheus exposition."""
        parsed = parse_payload(text)
        return MetricsReading(parsed.engines, parsed.process_start_time, tuple(parsed.missing_required()))


VLLM_ADAPTER = VllmAdapter()


class VllmSource:
    """Scrapes several vLLM targets concurrently, with one shared client."""

    def __init__(
        self,
        urls: Sequence[str],
        token: str | None = None,
        verify: bool | str = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        declared: SpeculationConfig | None = None,
        engine: str = AUTO,
        prefill: Sequence[str] = (),
    ) -> None:
        # engine: "auto" reads each target's engine off its payload; a name forces it. `prefill`: the
        # URLs of a disaggregated deployment's prefill workers (--prefill), read like the others
        prefill_bases = {split_url(u, "prefill URL")[0] for u in prefill}
        self.targets = [VllmTarget.from_url(u, engine, split_url(u, "vLLM URL")[0] in prefill_bases)
                        for u in dict.fromkeys([*urls, *prefill])]
        self.max_bytes = max_bytes
        # what the operator declared about the speculation setup (SpeculationConfig.from_flags)
        self.declared = declared
        self._client_args = (token, tls_verify(verify), timeout_s)  # a bad CA file fails here
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> VllmSource:
        self._client = make_client(*self._client_args)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def scrape(self) -> tuple[TargetSample, ...]:
        if self._client is None:
            self._client = make_client(*self._client_args)
        results = await asyncio.gather(
            *(scrape_target(self._client, t, self.max_bytes, declared=self.declared) for t in self.targets)
        )
        from specwatch.collectors.dynamo import disaggregated_roles

        # a disaggregated deployment's decode workers, told apart by its frontend read in the same poll
        return disaggregated_roles(results)

    def info(self, url: str) -> TargetInfo | None:
        for t in self.targets:
            if t.url == url:
                return t.info
        return None
