"""What the commands share: the flags every live command takes, the token and TLS settings, the
advisor's configuration from flags (and a recording's header), the live session, the exit status and
the one way an error is printed.

Heavy modules (httpx, numpy, textual) are imported inside the functions that need them, so that
`specwatch --help` and a usage error stay quick.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Mapping, NoReturn, Sequence, TextIO

if TYPE_CHECKING:
    from specwatch.advice.advisor import AdvisorConfig
    from specwatch.collectors.gpus import GpuPoller
    from specwatch.collectors.vllm import VllmSource
    from specwatch.advice.monitor import Monitor
    from specwatch.telemetry.snapshot import SourceStatus
    from specwatch.collectors.sources import LiveSource


class ExitCode(IntEnum):
    """The exit status of every command (the README's "Exit status" table lists the commands)."""

    OK = 0  # done; for check and predict: no change recommended
    CHANGE = 1  # check, predict: a change is recommended (turn speculation on or off)
    NOT_ENOUGH_DATA = 2  # check, predict, tune: the data cannot support an answer yet
    UNREADABLE = 3  # the target, a file, the token, URL or CA file, or the listen address could not be used
    INCOMPLETE = 4  # sweep: it stopped before every tier was measured (partial results are kept)
    WRITE_FAILED = 5  # record: a write failed; the file is valid up to its last flush
    USAGE = 64  # a usage error: an unknown flag, a bad flag value, an unknown GPU or model (sysexits EX_USAGE)
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as shells report it; a recording or sweep is left valid


class CommandError(Exception):
    """Ends a command: `specwatch.cli.main` prints the message and exits with the status."""

    def __init__(self, message: str, status: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class UsageError(CommandError):
    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.USAGE)


def print_error(command: str, message: str, file: TextIO | None = None) -> None:
    """The one spelling of a command's message on stderr: `specwatch <command>: message`, with the
    credentials of any URL in it redacted (specwatch.telemetry.urls.redact)."""
    from specwatch.telemetry.urls import redact

    prefix = f"specwatch {command}" if command else "specwatch"
    print(f"{prefix}: {redact(message)}", file=file or sys.stderr)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors ending in ExitCode.USAGE instead of argparse's own 2 (which
    `check` uses for "not enough data"), as one line spelt like every other message. What the
    message echoes of the command line (a bad value, an unrecognized argument) is redacted: a
    mistyped URL still carries its password."""

    def error(self, message: str) -> NoReturn:
        from specwatch.telemetry.urls import redact

        self.exit(ExitCode.USAGE, f"{self.prog}: {redact(message)} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's, but arguments a command does not take are that command's error (`specwatch
        predict: unrecognized arguments: …, see specwatch predict --help`), not the top parser's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # the parser of each command, by name, when cli.build_parser made this one
            commands = getattr(self, "command_parsers", {})
            commands.get(getattr(parsed, "command", None) or "", self).error(
                f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def terminal_is_dumb() -> bool:
    """TERM=dumb: a terminal that cannot move the cursor or take colour escapes."""
    return os.environ.get("TERM", "").strip().lower() == "dumb"


# What each dashboard's plain form is, for a stdout that cannot show the dashboard.
PLAIN_FORMS = {
    "watch": "`specwatch check` (the verdict as text or --json) or `specwatch record -o FILE`",
    "replay": "`specwatch replay --headless FILE` (the verdict timeline as text, or --json)",
    "demo": "`specwatch demo --headless` (the verdict timeline as text, or --json)",
    "fleet": "`specwatch fleet --json` (one reading of the fleet as JSON)",
}


def require_terminal(command: str = "watch") -> None:
    """The dashboards draw with escape codes: into a file or a pipe that is noise, and a TERM=dumb
    terminal cannot show them, so they refuse (a usage error) and name the command's plain form."""
    plain = PLAIN_FORMS.get(command, PLAIN_FORMS["watch"])
    if not stdout_is_terminal():
        raise UsageError(f"the dashboard needs a terminal, and stdout is not one; for a file or a pipe use {plain}")
    if terminal_is_dumb():
        raise UsageError(f"the dashboard needs a terminal that can draw, and TERM is dumb; use {plain}")


# ==================================================================================================
# flag types
# ==================================================================================================


def whole_number(minimum: int):
    """An argparse type: a whole number no smaller than `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number ≥ {minimum}, got {value}")
        return value

    return parse


def positive_number(text: str) -> float:
    """An argparse type: a finite number greater than 0 (a duration, a rate, a speed)."""
    value = _finite_number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


# The longest --window: the span a verdict averages over. An hour already mixes loads that changed;
# longer only holds more readings in memory (a day at 1 Hz is 86 400 Snapshots) for a worse answer.
MAX_WINDOW_S = 3600.0


def window_seconds(text: str) -> float:
    """An argparse type: a --window in seconds, > 0 and at most MAX_WINDOW_S."""
    value = positive_number(text)
    if value > MAX_WINDOW_S:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_WINDOW_S:.0f} seconds (an hour), got {text!r}: the window is the span a "
            "verdict averages over, not how much of a recording is read")
    return value


def non_negative_number(text: str) -> float:
    """An argparse type: a finite number of at least 0 (a cost ratio, a margin)."""
    value = _finite_number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return value


def _finite_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _url_type(what: str, metrics: bool = False):
    """An argparse type: a URL read the one way every source reads it (specwatch.telemetry.urls.split_url);
    a bad one is a usage error of one line. `metrics`: the value becomes the /metrics URL."""

    def parse(text: str) -> str:
        from specwatch.telemetry.urls import split_url

        try:
            base, metrics_url, _ = split_url(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return metrics_url if metrics else text.strip()

    parse.__name__ = what  # argparse names the type in some messages
    return parse


vllm_url = _url_type("server URL")  # a vLLM or an SGLang server
dcgm_url = _url_type("dcgm-exporter URL", metrics=True)
prometheus_url = _url_type("Prometheus URL")
server_url = _url_type("server URL")
node_url = _url_type("node URL")


def method_name(text: str) -> str:
    """An argparse type: a speculation method, in any of the usual spellings, as the performance
    model names it; a wrong one lists what is accepted."""
    from specwatch.perf import canonical_method

    try:
        return canonical_method(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def weight_format_name(text: str) -> str:
    """An argparse type: a weight format the datasheet prior prices (bf16, fp8, w4a16, ...), lower
    case; a wrong one lists what is accepted."""
    from specwatch.perf import weight_format_key

    try:
        return weight_format_key(text.strip(), "weight format")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ==================================================================================================
# shared flags
# ==================================================================================================


def add_connection_arguments(p: Any, token_env: str, what: str = "", default_words: str | None = None) -> None:
    """--token-env/--token-file and --ca-file/--insecure: a token never comes from argv, and TLS is
    verified unless turned off explicitly. `p` is a parser or an argument group. `default_words`: the
    default variable in the help's words, where it depends on the mode (fleet's two)."""
    to = f" for {what}" if what else ""
    # no default on the flag itself: a variable the operator named and did not set is an error,
    # while the default one unset just means no token
    p.set_defaults(default_token_env=token_env)
    p.add_argument("--token-env", metavar="NAME",
                   help=f"environment variable holding a bearer token{to} (default {default_words or token_env})")
    p.add_argument("--token-file", metavar="PATH", help=f"file whose first line is a bearer token{to}")
    p.add_argument("--ca-file", metavar="PATH", help=f"CA bundle for HTTPS{' ' + what if what else ' targets'}")
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates (not recommended)")
    p.add_argument("--client-cert", metavar="PATH",
                   help="client certificate (PEM) to present over HTTPS, for servers that ask for one: a "
                        "specwatch agent behind a web config's client_ca_file, an mTLS proxy. Basic auth goes "
                        "in the URL (https://user:password@host, best from --url-file)")
    p.add_argument("--client-key", metavar="PATH", help="the client certificate's key, where --client-cert holds none")


def add_url_file_argument(p: Any, what: str) -> None:
    """--url-file PATH (repeatable): the URLs of a file, one a line, as if each were given with --url
    (after those), so that credentials in them stay out of the process list. `what` names them in
    messages (the --url flag's own name: "vLLM URL", "node URL"). Read by `read_url_files`."""
    p.set_defaults(url_file_what=what)
    p.add_argument("--url-file", action="append", dest="url_files", metavar="PATH",
                   help="file of URLs, one a line (# starts a comment), used as if each were given with --url; "
                        "keeps credentials out of the process list")


def read_url_files(args: argparse.Namespace) -> None:
    """Append the URLs of every --url-file to `args.urls`, read as --url reads them. A file that
    cannot be read, or holds no URL, is CommandError(UNREADABLE); a bad URL in it is a UsageError
    naming the file and line, with the URL's credentials redacted. A file readable by other users is
    a warning on stderr when it holds credentials."""
    from specwatch.telemetry.urls import split_url

    paths = getattr(args, "url_files", None) or []
    what = getattr(args, "url_file_what", "URL")
    urls = list(getattr(args, "urls", None) or [])
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise CommandError(f"cannot read the URL file {path}: {reason}", ExitCode.UNREADABLE) from None
        found = []
        for number, line in enumerate(lines, 1):
            text = line.split(" #", 1)[0].split("\t#", 1)[0].strip()
            if not text or text.startswith("#"):
                continue
            try:
                split_url(text, what)
            except ValueError as exc:
                raise UsageError(f"--url-file {path}, line {number}: {exc}") from None
            found.append(text)
        if not found:
            raise CommandError(f"the URL file {path} holds no URL", ExitCode.UNREADABLE)
        if any("@" in url for url in found):
            warn_if_shared(args, path, "URL file")
        urls.extend(found)
    if paths:
        args.urls = urls


def warn_if_shared(args: argparse.Namespace, path: str, what: str) -> None:
    """A warning on stderr when the file at `path`, which holds a secret, is readable by its group or
    by everyone (POSIX permissions; nothing is said where there are none)."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if os.name == "posix" and mode & (stat.S_IRGRP | stat.S_IROTH):
        print_error(getattr(args, "command", None) or "",
                    f"warning: the {what} {path} is readable by other users (chmod 600 {path})")


def add_advisor_arguments(p: Any, overriding: str | None = None) -> None:
    """What the operator knows that the telemetry may not say: the method and k, the step's token
    budget, the draft's cost and size, the GPU, the served model and the tensor-parallel degree.
    `overriding` names what the flags win over (e.g. "the recording's"); every default is None, so a
    flag not given leaves it alone."""
    over = f"; overrides {overriding}" if overriding else ""
    p.add_argument("--method", type=method_name,
                   help="the speculation method, when the server does not expose it (no /get_server_info "
                        "on SGLang, no /server_info on vLLM outside dev mode, or a proxy passing only /metrics): "
                        f"ngram, suffix, eagle, eagle3, mtp, medusa, draft_model, ...; the server's word wins{over}")
    p.add_argument("--k", type=whole_number(1), metavar="N",
                   help="draft tokens per step (num_speculative_tokens), when neither the server's counters nor "
                        f"its server info say it; what the server says wins{over}")
    p.add_argument("--max-num-batched-tokens", dest="token_budget", type=whole_number(1), metavar="N",
                   help="vLLM's token budget per step, when the server's /server_info does not give it (no dev "
                        "mode): the verified positions take it first and the prefill gets what is left; "
                        f"what the server says wins{over}")
    p.add_argument("--device", choices=("cpu", "gpu"),
                   help="what the engine runs on, when the server's /server_info does not say it (no dev mode): "
                        "cpu judges with a CPU's step time, in which every verified position costs its compute; "
                        f"what the server says wins{over}")
    p.add_argument("--draft-ratio", type=non_negative_number, metavar="R",
                   help=f"draft cost per draft token relative to a target step, when known (r){over}")
    p.add_argument("--draft-params", metavar="N", help=f"the draft model's parameter count (e.g. 1B){over}")
    p.add_argument("--gpu", metavar="NAME", help="the GPU model, overriding what NVML or DCGM report "
                                                 f"(H100, H200, A100, L40S, ...){over}")
    p.add_argument("--model", dest="model_name", metavar="NAME",
                   help="the served model's architecture (Llama-3.1-70B, Qwen2.5-7B, ...): "
                        f"enables the datasheet step-time prior{over}")
    p.add_argument("--tp", type=whole_number(1), metavar="N", help=f"tensor-parallel degree (default 1){over}")
    p.add_argument("--ep", type=whole_number(1), metavar="N",
                   help="expert-parallel degree of a mixture of experts, for the datasheet prior: the GPUs its "
                        f"routed experts are spread over (with --dp-attention, the deployment's){over}")
    p.add_argument("--dp-attention", action="store_true", default=None,
                   help="attention data-parallel (SGLang's --enable-dp-attention, TensorRT-LLM's "
                        f"enable_attention_dp): the running requests read are one rank's{over}")
    p.add_argument("--dtype", type=weight_format_name, metavar="FORMAT",
                   help="the served weights' format, for the datasheet prior: bf16, fp8, w8a16, w4a16, awq, gptq, "
                        f"... (default: the format the --model is released in, e.g. fp8 for DeepSeek-V3){over}")
    p.add_argument("--slo-ttft", type=positive_number, metavar="SECONDS",
                   help=f"time-to-first-token target: goodput counts the requests within it{over}")
    p.add_argument("--slo-tpot", type=positive_number, metavar="SECONDS",
                   help=f"time-per-output-token target: goodput counts the requests within it{over}")


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of every command that reads a live node (check, watch, record, export, tune)."""
    from specwatch.collectors.engines import ENGINE_CHOICES
    from specwatch.collectors.vllm import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, DEFAULT_TOKEN_ENV, DEFAULT_URL

    p.add_argument("--url", action="append", dest="urls", metavar="URL", type=vllm_url,
                   help="the server: vLLM, SGLang, TensorRT-LLM, Triton's TensorRT-LLM backend, a Dynamo frontend "
                        "or worker system port (base URL or its /metrics URL); repeat for several "
                        f"(default {DEFAULT_URL})")
    add_url_file_argument(p, "server URL")
    add_connection_arguments(p, DEFAULT_TOKEN_ENV)
    p.add_argument("--timeout", type=positive_number, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="per-request timeout (default %(default)s)")
    p.add_argument("--max-bytes", type=whole_number(1), default=DEFAULT_MAX_BYTES, metavar="N",
                   help="largest /metrics payload accepted (default %(default)s)")
    p.add_argument("--draft-model", help="the draft model, when the server does not expose it")
    p.add_argument("--engine", choices=ENGINE_CHOICES, default="auto",
                   help="the serving engine: read off each /metrics payload (auto, the default) or forced; "
                        "trtllm reads trtllm-serve's /prometheus/metrics and never its draining JSON /metrics; "
                        "dynamo a Dynamo frontend (its workers' system ports are read as the engine they wrap)")
    p.add_argument("--prefill", action="append", default=[], metavar="URL", type=vllm_url,
                   help="a disaggregated deployment's prefill worker (read like --url, never judged: the "
                        "speculation verdict belongs to the decode workers); repeat for several. A Dynamo "
                        "worker whose labels say prefill needs no flag")
    p.add_argument("--dcgm", metavar="URL", type=dcgm_url,
                   help="dcgm-exporter /metrics URL (default: try localhost:9400 quietly)")
    p.add_argument("--no-dcgm", action="store_true", help="do not read a dcgm-exporter")
    p.add_argument("--no-nvml", action="store_true", help="do not read local GPUs through NVML")
    add_advisor_arguments(p)


# ==================================================================================================
# token and TLS
# ==================================================================================================


@dataclass(frozen=True)
class ConnectionSettings:
    token: str | None
    verify: Any  # httpx's `verify`: True, False, or an SSLContext holding the CA file


def connection_settings(args: argparse.Namespace) -> ConnectionSettings:
    """The token and TLS settings the flags name. A token or CA file that cannot be read is
    CommandError(UNREADABLE), with the reader's message."""
    from specwatch.collectors.vllm import TokenError, read_token, verify_from_flags

    import os

    named = getattr(args, "token_env", None)
    if named and args.token_file is None and not os.environ.get(named, "").strip():
        raise CommandError(f"--token-env names {named}, which is not set in the environment "
                           "(export it, or use --token-file PATH)", ExitCode.UNREADABLE)
    try:
        token = read_token(named or getattr(args, "default_token_env", None), args.token_file)
        verify = verify_from_flags(args.insecure, args.ca_file, getattr(args, "client_cert", None),
                                   getattr(args, "client_key", None))
    except (TokenError, ValueError) as exc:
        raise CommandError(str(exc), ExitCode.UNREADABLE) from None
    if args.token_file is not None:
        warn_if_shared(args, args.token_file, "token file")
    return ConnectionSettings(token, verify)


# ==================================================================================================
# the advisor's configuration
# ==================================================================================================

# flag attribute → the key a recording's header stores it under
_ADVISOR_FLAGS = (("method", "method"), ("k", "k"), ("draft_ratio", "draft_ratio"), ("draft_params", "draft_params"),
                  ("gpu", "gpu"), ("model_name", "model"), ("tp", "tp"), ("ep", "ep"), ("dp_attention", "dp_attention"),
                  ("slo_ttft", "slo_ttft_s"), ("slo_tpot", "slo_tpot_s"), ("token_budget", "max_num_batched_tokens"),
                  ("device", "device"), ("dtype", "dtype"))


def advisor_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The advisor flags that were given, as a recording's header stores them (so a replay judges as
    the live run did). A tensor-parallel degree of 1 is the default and is not stored."""
    settings = {key: getattr(args, attr, None) for attr, key in _ADVISOR_FLAGS}
    return {k: v for k, v in settings.items()
            if v is not None and not (k == "tp" and v == 1) and not (k == "dp_attention" and not v)}


def advisor_config(args: argparse.Namespace | None, stored: Mapping[str, Any] | None = None,
                   recorded: bool = False) -> AdvisorConfig:
    """The advisor's configuration: `stored` (a recording header's advisor settings, or what the
    server says about itself) under the flags, which win. `recorded`: `stored` is a recording's
    header, whose settings the config then names as such (AdvisorConfig.from_recording). An unknown
    GPU or model, or a draft size that is not a quantity, is a UsageError."""
    from specwatch.advice.advisor import AdvisorConfig
    from specwatch.perf.hardware import lookup, lookup_model
    from specwatch.advice.predict import parse_quantity
    from specwatch.perf.layout import parallel_layout

    settings = {k: v for k, v in (stored or {}).items() if v is not None}
    from_recording = frozenset(settings) if recorded else frozenset()
    if args is not None:
        # every flag given wins, an explicit --tp 1 included
        given = {key: v for key, v in ((key, getattr(args, attr, None)) for attr, key in _ADVISOR_FLAGS)
                 if v is not None}
        settings.update(given)
        from_recording -= given.keys()
    gpu = model = None
    if settings.get("gpu"):
        gpu = lookup(settings["gpu"])
        if gpu is None:
            raise UsageError(f"unknown GPU {settings['gpu']!r} (try H100, H200, A100, L40S, L4, ...)")
    if settings.get("model"):
        model = lookup_model(settings["model"])
        if model is None:
            raise UsageError(f"unknown model {settings['model']!r} "
                             "(try Llama-3.1-8B, Llama-3.1-70B, Qwen2.5-7B, ...)")
    draft_params = settings.get("draft_params")
    if isinstance(draft_params, str):
        try:
            draft_params = parse_quantity(draft_params, "draft params")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        draft_ratio = None if settings.get("draft_ratio") is None else float(settings["draft_ratio"])
        tp = int(settings.get("tp") or 1)
        k = None if settings.get("k") is None else whole_number(1)(str(settings["k"]))
        token_budget = None if settings.get("max_num_batched_tokens") is None \
            else whole_number(1)(str(settings["max_num_batched_tokens"]))
        slo = {key: positive_number(str(settings[key])) if settings.get(key) is not None else None
               for key in ("slo_ttft_s", "slo_tpot_s")}
        device = settings.get("device")
        if device is not None and device not in ("cpu", "gpu"):
            raise ValueError(f"device must be cpu or gpu, not {device!r}")
        dtype = None if settings.get("dtype") is None else weight_format_name(str(settings["dtype"]))
        ep = None if settings.get("ep") is None else whole_number(1)(str(settings["ep"]))
        dp_attention = bool(settings.get("dp_attention"))
        if ep is not None or dp_attention:  # a layout that does not hold together is one line now, not per poll
            parallel_layout(tp, ep, dp_attention, model is None or model.is_moe, model.experts if model else None)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
        raise UsageError(f"bad advisor setting: {exc}") from None
    return AdvisorConfig(method=settings.get("method"), k=k, draft_ratio=draft_ratio, draft_params=draft_params,
                         gpu=gpu, model=model, tp=tp, ep=ep, dp_attention=dp_attention, token_budget=token_budget,
                         device=device, dtype=dtype,
                         from_recording=from_recording, **slo)


# ==================================================================================================
# the live session
# ==================================================================================================


class _NvmlOff:
    """Stands in for the NVML collector under --no-nvml: no GPUs, and a state saying why."""

    reads_devices = False  # polled in place, not in a thread

    def poll(self) -> tuple[tuple, SourceStatus]:
        from specwatch.telemetry.snapshot import SourceStatus

        return (), SourceStatus("nvml", "off", "NVML reading turned off (--no-nvml)")

    def close(self) -> None:
        pass


def gpu_poller(args: argparse.Namespace) -> GpuPoller | None:
    """NVML plus dcgm-exporter, as the flags ask; None when both are off."""
    from specwatch.collectors.gpus import GpuPoller
    from specwatch.collectors.nvml import NvmlCollector

    if args.no_nvml and args.no_dcgm:
        return None
    collector = _NvmlOff() if args.no_nvml else NvmlCollector()
    return GpuPoller(collector, dcgm_url=args.dcgm, dcgm=not args.no_dcgm)


@dataclass
class LiveSession:
    """A live node as the flags describe it: the servers' scraper, the source that adds the GPUs, and
    the Monitor that judges what the source reads."""

    vllm: VllmSource
    source: LiveSource
    monitor: Monitor
    urls: list[str]


def live_session(
    args: argparse.Namespace,
    *,
    interval_s: float,
    window_s: float,
    one_target: str | None = None,
    evaluate_every_s: float | None = None,
    advisor_overrides: Mapping[str, Any] | None = None,
) -> LiveSession:
    """Build the live session; nothing is read yet. `one_target`, when given, is why the command
    takes a single --url (a UsageError for several). Usage errors come before unreadable files."""
    import dataclasses

    from specwatch.collectors.vllm import DEFAULT_URL, VllmSource
    from specwatch.advice.monitor import DEFAULT_EVALUATE_EVERY_S, Monitor
    from specwatch.collectors.sources import LiveSource

    # prefill workers alone (--prefill) are a target list of their own: no default server beside them
    urls = list(args.urls or ([] if getattr(args, "prefill", None) else [DEFAULT_URL]))
    if one_target and len(urls) > 1:
        raise UsageError(one_target)
    config = advisor_config(args)
    if advisor_overrides:
        config = dataclasses.replace(config, **advisor_overrides)
    from specwatch.telemetry.snapshot import SpeculationConfig

    connection = connection_settings(args)
    # what the operator declared fills in what the server's /server_info does not say, in every sample
    declared = SpeculationConfig.from_flags(config.method, getattr(args, "draft_model", None), config.draft_params,
                                            k=config.k)
    try:
        vllm = VllmSource(urls, token=connection.token, verify=connection.verify, timeout_s=args.timeout,
                          max_bytes=args.max_bytes, declared=declared, engine=getattr(args, "engine", "auto"),
                          prefill=getattr(args, "prefill", None) or ())
    except ValueError as exc:  # a URL that is not http(s)
        raise UsageError(str(exc)) from None
    source = LiveSource(vllm, gpu_poller(args), interval_s=interval_s, gpu_timeout_s=args.timeout)
    monitor = Monitor(window_s=window_s, advisor_config=config,
                      evaluate_every_s=DEFAULT_EVALUATE_EVERY_S if evaluate_every_s is None else evaluate_every_s)
    from specwatch.telemetry.urls import redact

    # what is shown and stored (a recording's header) carries no credentials; the requests do
    return LiveSession(vllm, source, monitor, [redact(u) for u in urls])
