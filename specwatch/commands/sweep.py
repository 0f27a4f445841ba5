"""`specwatch sweep`: baseline vs speculative across concurrency, and where the curves cross.

    specwatch sweep --baseline URL --speculative URL [--tiers 1,2,4,8,16,32,64] [-o DIR] [--json]
    specwatch sweep --serve MODEL --speculative-config JSON [--serve-arg ARG ...] [...]
    specwatch sweep --from-bench BASELINE_DIR SPECULATIVE_DIR [-o DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from specwatch.commands.options import (
    CommandError,
    ExitCode,
    UsageError,
    add_connection_arguments,
    advisor_config,
    connection_settings,
    method_name,
    non_negative_number,
    positive_number,
    print_error,
    server_url,
    whole_number,
)


def _tiers(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"tiers must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 or v > 4096 for v in values):
        raise argparse.ArgumentTypeError("tiers must be integers in 1..4096")
    return tuple(sorted(set(values)))


_positive_int = whole_number(1)
_nonnegative_int = whole_number(0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `specwatch sweep`."""
    from specwatch import sweep as sw
    from specwatch.sweep import loadgen

    targets = p.add_argument_group("targets (one of)")
    targets.add_argument("--baseline", metavar="URL", type=server_url, help="the server without speculation")
    targets.add_argument("--speculative", metavar="URL", type=server_url, help="the same server with speculation")
    targets.add_argument("--serve", metavar="MODEL",
                         help="launch vLLM here for MODEL twice: without, then with --speculative-config")
    targets.add_argument("--from-bench", nargs=2, metavar=("BASELINE_DIR", "SPECULATIVE_DIR"),
                         help="build the report from `vllm bench serve --save-result` JSON files; "
                              "each file's max_concurrency is its tier")

    serve = p.add_argument_group("--serve")
    serve.add_argument("--speculative-config", metavar="JSON",
                       help='vLLM\'s --speculative-config for the second launch, e.g. '
                            '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\'')
    serve.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                       help="one more argument for both vLLM launches (repeat; use --serve-arg=--flag for flags)")
    serve.add_argument("--vllm-python", metavar="PATH", default=sys.executable,
                       help="the Python that has vLLM installed (default: this one)")
    serve.add_argument("--start-timeout", type=positive_number, default=sw.START_TIMEOUT_S, metavar="SECONDS",
                       help="how long to wait for each vLLM launch to be ready (default %(default)s)")

    load = p.add_argument_group("load")
    load.add_argument("--tiers", type=_tiers, default=sw.DEFAULT_TIERS, metavar="C,C,...",
                      help="concurrency tiers (default 1,2,4,8,16,32,64)")
    load.add_argument("--requests", type=_positive_int, metavar="N",
                      help="measured requests per tier (default max(16, 4 × concurrency) unless --duration)")
    load.add_argument("--duration", type=positive_number, metavar="SECONDS",
                      help="measured seconds per tier (with --requests, whichever ends first)")
    load.add_argument("--warmup", type=_nonnegative_int, metavar="N",
                      help="warm-up requests per tier, not counted (default: one per concurrent worker)")
    load.add_argument("--repeat", type=_positive_int, default=sw.DEFAULT_REPEAT, metavar="N",
                      help="rounds per tier, each running both servers (interleaved A B, B A, …); with "
                           "--budget, the rounds before the adaptive stop may end a tier (default %(default)s)")
    load.add_argument("--budget", type=positive_number, metavar="SECONDS",
                      help="wall time for the whole sweep: each tier keeps adding rounds until its speedup's "
                           "95 %% interval is clear of 1 or its share of the budget is spent (two servers only)")
    load.add_argument("--max-tokens", type=_positive_int, default=loadgen.DEFAULT_MAX_TOKENS, metavar="N",
                      help="max tokens per request, the same on both servers (default %(default)s)")
    load.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    load.add_argument("--api", choices=loadgen.APIS, default=loadgen.API_COMPLETIONS,
                      help="/v1/completions or /v1/chat/completions (default %(default)s)")
    load.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                      help="let requests stop at end-of-sequence (by default every request runs to --max-tokens)")
    load.add_argument("--prompts", choices=loadgen.PROMPT_SET_NAMES, default="mixed",
                      help="built-in prompt set: echo (summarise/repeat), code, open (open-ended) or mixed "
                           "(default %(default)s)")
    load.add_argument("--prompt-file", metavar="PATH",
                      help="JSONL of prompts or chat messages, or a ShareGPT JSON file (overrides --prompts)")
    load.add_argument("--num-prompts", type=_positive_int, default=512, metavar="N",
                      help="prompts to take from the set or the file (default %(default)s)")
    load.add_argument("--seed", type=int, default=0, help="seed of the built-in prompt sets (default 0)")
    load.add_argument("--served-model", metavar="NAME",
                      help="the model name to request (default: the first one /v1/models lists)")
    load.add_argument("--request-timeout", type=positive_number, default=300.0, metavar="SECONDS",
                      help="per-request timeout (default %(default)s)")
    load.add_argument("--scrape-interval", type=positive_number, default=1.0, metavar="SECONDS",
                      help="how often /metrics is read during a tier (default %(default)s)")
    from specwatch.collectors.vllm import DEFAULT_TOKEN_ENV

    add_connection_arguments(load, DEFAULT_TOKEN_ENV)

    model = p.add_argument_group("the predicted curve (datasheet with --gpu and --model; else fitted)")
    model.add_argument("--gpu", metavar="NAME", help="the GPU (H100, H200, A100, L40S, ...)")
    model.add_argument("--model", dest="model_name", metavar="NAME",
                       help="the served model's architecture (Llama-3.1-8B, Qwen2.5-7B, ...)")
    model.add_argument("--tp", type=_positive_int, default=1, metavar="N", help="tensor-parallel degree (default 1)")
    model.add_argument("--dtype", help="weight format (default: the format the --model is released in, e.g. fp8 "
                                       "for DeepSeek-V3)")
    model.add_argument("--method", type=method_name, help="the speculation method (ngram, eagle, mtp, draft_model, ...), "
                                        "when neither --speculative-config nor the server says")
    model.add_argument("--draft-ratio", type=non_negative_number, metavar="R", help="draft cost per draft token, when measured")
    model.add_argument("--draft-params", metavar="N", help="the draft model's parameter count (e.g. 1B)")
    model.add_argument("--k", type=_positive_int, metavar="K", help="draft tokens per step, when /metrics lacks it")

    out = p.add_argument_group("output")
    out.add_argument("-o", "--output", metavar="DIR",
                     help="folder for sweep.json, sweep.csv and sweep.txt (default ./specwatch-sweep-TIME)")
    out.add_argument("--json", action="store_true", help="print the specwatch.sweep/2 JSON on stdout")
    out.add_argument("--width", type=_positive_int, default=78, help="plot width in columns (default 78)")
    out.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _prediction_inputs(args: argparse.Namespace, method: str | None) -> Any:
    from specwatch import sweep as sw

    if bool(args.gpu) != bool(args.model_name):
        raise UsageError("the datasheet curve needs both --gpu and --model (without them it is fitted)")
    # the same checks and messages as every command: an unknown GPU or model, a bad --draft-params
    draft_params = advisor_config(args).draft_params
    if args.draft_ratio is not None and not (math.isfinite(args.draft_ratio) and args.draft_ratio >= 0):
        raise UsageError("--draft-ratio must be ≥ 0")
    chosen = args.method or method
    if chosen is not None:
        from specwatch.perf import canonical_method

        try:
            canonical_method(chosen)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return sw.PredictionInputs(gpu=args.gpu, model=args.model_name, tp=args.tp, dtype=args.dtype,
                               method=chosen, draft_ratio=args.draft_ratio, draft_params=draft_params, k=args.k)


def _target_mode(args: argparse.Namespace) -> str:
    modes = [m for m, given in (("urls", args.baseline or args.speculative), ("serve", args.serve),
                                ("bench", args.from_bench)) if given]
    if len(modes) != 1:
        raise UsageError("give one target: --baseline URL --speculative URL, --serve MODEL, "
                              "or --from-bench BASELINE_DIR SPECULATIVE_DIR")
    mode = modes[0]
    if mode == "urls" and not (args.baseline and args.speculative):
        raise UsageError("--baseline and --speculative go together")
    if mode == "serve" and not args.speculative_config:
        raise UsageError("--serve needs --speculative-config for its second launch")
    if mode != "serve" and (args.speculative_config or args.serve_arg):
        raise UsageError("--speculative-config and --serve-arg only apply with --serve")
    if mode != "urls" and args.budget is not None:
        raise UsageError("--budget needs two running servers (--baseline and --speculative): its rounds "
                         "alternate between them")
    return mode


def _output_dir(args: argparse.Namespace) -> Path:
    if args.output:
        return Path(args.output)
    return Path(f"specwatch-sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}")


def _prompts(args: argparse.Namespace) -> tuple[list[Any], str]:
    from specwatch.sweep import loadgen

    if args.prompt_file:
        prompts = loadgen.load_prompt_file(args.prompt_file, limit=min(args.num_prompts, loadgen.MAX_PROMPTS))
        return prompts, f"file {args.prompt_file}"
    return loadgen.synthetic_prompts(args.prompts, min(args.num_prompts, loadgen.MAX_PROMPTS), args.seed), \
        f"built-in {args.prompts} (seed {args.seed})"


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run `specwatch sweep` from parsed flags: OK when every tier ran; INCOMPLETE when it stopped
    early or a bench folder held no usable results (what was measured is written); UNREADABLE for a
    prompt, token or CA file it cannot use, or a server that stopped the sweep before any tier was
    measured (nothing is written); USAGE for bad flags. `out`/`err` default to stdout/stderr."""
    from specwatch import sweep as sw
    from specwatch.sweep import loadgen

    out = out or sys.stdout
    err = err or sys.stderr

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=err, flush=True)

    try:
        mode = _target_mode(args)
        spec_config = sw.validate_speculative_config(args.speculative_config) if mode == "serve" else None
        method = spec_config.get("method") if spec_config else None
        prediction = _prediction_inputs(args, method)
        out_dir = _output_dir(args)
    except (UsageError, ValueError) as exc:
        print_error("sweep", str(exc), err)
        return ExitCode.USAGE

    def finish(record: sw.SweepRecord, server_method: str | None = None) -> int:
        report = record.report(prediction, method=server_method)
        plot = sw.render_plot(report, width=args.width)
        try:
            files = sw.write_report(report, out_dir, plot)
        except OSError as exc:
            print_error("sweep", f"cannot write the results to {out_dir}: {exc.strerror or exc}", err)
            files = []
        if args.json:
            print(json.dumps(report, indent=2, allow_nan=False), file=out)
        else:
            print(plot, file=out)
        if files:
            say("wrote " + ", ".join(str(f) for f in files))
        if report["stopped"]:
            print_error("sweep", f"stopped early: {report['stopped']}"
                        + (f" (partial results in {out_dir})" if files else ""), err)
        for error in report["errors"]:
            print_error("sweep", str(error), err)
        return ExitCode.OK if report["complete"] else ExitCode.INCOMPLETE

    if mode == "bench":
        try:
            check_bench_inputs(*args.from_bench)
        except CommandError as exc:  # nothing is written for inputs that cannot give an answer
            print_error("sweep", exc.message, err)
            return exc.status
        record = sw.record_from_bench(*args.from_bench)
        return finish(record)

    try:
        prompts, prompt_source = _prompts(args)
        request = loadgen.RequestSettings(model="-", api=args.api, max_tokens=args.max_tokens,
                                          temperature=args.temperature, ignore_eos=args.ignore_eos,
                                          timeout_s=args.request_timeout)
        plan = sw.SweepPlan(tiers=tuple(args.tiers), requests=args.requests, duration_s=args.duration,
                            warmup=args.warmup, scrape_interval_s=args.scrape_interval,
                            repeat=args.repeat, budget_s=args.budget)
        connection = connection_settings(args)
        if mode == "urls":
            from specwatch.collectors.vllm import normalise_url

            baseline_url = normalise_url(args.baseline)[0]
            speculative_url = normalise_url(args.speculative)[0]
    except loadgen.PromptFileError as exc:
        print_error("sweep", str(exc), err)
        return ExitCode.UNREADABLE
    except CommandError as exc:  # the token or CA file
        print_error("sweep", exc.message, err)
        return exc.status
    except ValueError as exc:
        print_error("sweep", str(exc), err)
        return ExitCode.USAGE

    record = sw.SweepRecord(source="live" if mode == "urls" else "serve")
    record.settings = {
        "tiers": list(plan.tiers), "requests_per_tier": args.requests, "duration_s": args.duration,
        "warmup": args.warmup, "max_tokens": args.max_tokens, "temperature": args.temperature,
        "api": args.api, "ignore_eos": args.ignore_eos, "prompts": prompt_source, "num_prompts": len(prompts),
        "request_timeout_s": args.request_timeout, "scrape_interval_s": args.scrape_interval,
        "repeat": args.repeat, "budget_s": args.budget,
        "round_order": "A B, B A, … (interleaved)" if mode == "urls" else
        "sequential: every baseline round, then every speculative round (one server at a time)",
    }

    def save_partial(rec: sw.SweepRecord) -> None:
        # after every tier, so a sweep that is killed or stops keeps what it measured
        try:
            sw.write_report(rec.report(prediction, method=_server_method(rec)), out_dir)
        except OSError as exc:
            say(f"cannot write partial results to {out_dir}: {exc.strerror or exc}")

    gpu_poller = _gpu_poller()
    live = sw.LiveSweep(record, plan, prompts, request, token=connection.token, verify=connection.verify,
                        progress=say, on_tier=save_partial,
                        gpu_poll=gpu_poller.poll_nvml if gpu_poller is not None else None)
    say(f"sweep: tiers {','.join(map(str, plan.tiers))}, prompts {prompt_source}, max tokens {args.max_tokens}; "
        f"results in {out_dir}")
    try:
        if mode == "urls":
            asyncio.run(sw.sweep_two_servers(
                live, sw.Endpoint("baseline", baseline_url, args.served_model),
                sw.Endpoint("speculative", speculative_url, args.served_model)))
        else:
            servers = {
                side: sw.LaunchedServer(args.vllm_python, args.serve,
                                        speculative_config=spec_config if side == "speculative" else None,
                                        extra_args=args.serve_arg, log_path=out_dir / f"vllm-{side}.log",
                                        start_timeout_s=args.start_timeout)
                for side in sw.SIDES
            }
            record.servers["speculative"]["speculative_config"] = spec_config
            try:
                asyncio.run(sw.sweep_serve(live, servers, args.served_model))
            finally:
                # an interrupt can cancel the sweep's own clean-up: stopping again is harmless
                for server in servers.values():
                    server.stop()
    except ValueError as exc:
        print_error("sweep", str(exc), err)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        record.stopped = "interrupted"
        finish(record, _server_method(record))  # the tiers measured so far are written
        return ExitCode.INTERRUPTED
    finally:
        if gpu_poller is not None:
            gpu_poller.close()
    if record.stopped is not None and not record.rounds:
        # no tier measured at all (a server that could not be read, or did not start): nothing
        # to report, so no report folder either — only what the target said
        print_error("sweep", f"{record.stopped}; nothing was measured and nothing written", err)
        return ExitCode.UNREADABLE
    return finish(record, _server_method(record))


def _gpu_poller() -> Any:
    """NVML for the rounds' GPU conditions; None where the bindings cannot even be imported (a host
    without GPUs still gets a poller: it reports "absent" and the rounds record no GPU)."""
    try:
        from specwatch.collectors.gpus import GpuPoller

        return GpuPoller(dcgm=False)
    except ImportError:
        return None


def check_bench_inputs(baseline_dir: str, speculative_dir: str) -> None:
    """CommandError unless the two folders can answer the question: both readable (UNREADABLE), two
    different folders, the baseline's results without speculation and the speculative one's with
    it, and one model on both sides (USAGE). Swapped or identical folders would flip or void the
    answer rather than fail."""
    from specwatch.sweep import SweepFileError
    from specwatch.sweep.bench import load_bench_dir

    if Path(baseline_dir).resolve() == Path(speculative_dir).resolve():
        raise UsageError(f"--from-bench got the same folder twice ({baseline_dir}): give the baseline "
                         "results and the speculative ones")
    sides = {}
    for side, folder in (("baseline", baseline_dir), ("speculative", speculative_dir)):
        try:
            sides[side], _ = load_bench_dir(folder)
        except SweepFileError as exc:
            raise CommandError(f"the {side} folder {exc}", ExitCode.UNREADABLE) from None

    def speculating(tiers: dict[int, dict]) -> list[str]:
        return [Path(t["bench_file"]).name for t in tiers.values()
                if any(t.get(k) is not None for k in ("k", "acceptance_length", "drafts"))]

    base_spec, spec_spec = speculating(sides["baseline"]), speculating(sides["speculative"])
    if base_spec and sides["speculative"] and not spec_spec:
        raise UsageError(f"the folders look swapped: the baseline {baseline_dir} has spec-decode results and "
                         f"the speculative {speculative_dir} has none (give BASELINE_DIR first)")
    if base_spec:
        raise UsageError(f"the baseline folder {baseline_dir} has spec-decode results "
                         f"({', '.join(base_spec[:3])}): the baseline must run without speculation")
    if sides["speculative"] and not spec_spec:
        raise UsageError(f"the speculative folder {speculative_dir} has no spec-decode results: "
                         "was the server started with --speculative-config?")
    models = {side: sorted({t["model_id"] for t in tiers.values() if t.get("model_id")})
              for side, tiers in sides.items()}
    if models["baseline"] and models["speculative"] and models["baseline"] != models["speculative"]:
        raise UsageError(f"the two folders benchmark different models (baseline {', '.join(models['baseline'])}; "
                         f"speculative {', '.join(models['speculative'])})")


def _server_method(record: Any) -> str | None:
    config = record.servers.get("speculative", {}).get("speculative_config")
    if isinstance(config, dict) and isinstance(config.get("method"), str):
        return config["method"]
    return None
