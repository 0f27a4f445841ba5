"""Generate the bundled SYNTHETIC demo scenarios from the roofline model (specwatch.collectors.synthetic).

    python demo/generate.py [--out specwatch/data] [--dwell 20] [--seed 7]

Each node serves 1000-token prompts whose first 900 tokens (a shared system prompt) come from the
prefix cache, 300-token outputs; the uncached prompt tokens are prefilled within the decode steps.

Every file is labelled synthetic in its header; its notes say what the node is and what to watch
for. The step-time model of each node is the datasheet prior that specwatch itself would use for
that GPU, model and tensor-parallel degree (specwatch.perf.prior_for_model), with scatter from the
generator's seed, so the advisor's prior and the "truth" agree and the verdicts show the model's
story rather than a fitting problem.

Scenarios:
- h100-70b-ngram: 4× H100 SXM serving Llama-3.1-70B at TP=4, n-gram speculation (k=4, L ≈ 2.4),
  concurrency climbing 1 → 128 in a few minutes, then holding 5 minutes at each of 181, 256, 181,
  128 and 91 running before coming back down. Speculation pays at low load, stops paying past the
  crossover (about 130 running with the prefill of the uncached prompt tokens in the steps) and pays
  again on the way down. The levels past the crossover last 5 minutes because the banner changes at
  most once per 5 minutes (monitor.DEFAULT_DWELL_S).
- h100-70b-longctx-eagle: the same node with EAGLE (k=3, r = 0.05) and 8k-token contexts, ramping
  1 → 64 → 1. KV reads dominate the step, so verification stays cheap and speculation keeps paying
  at the highest batch the KV cache holds.
- dynamo-h100-70b-disagg: an NVIDIA Dynamo deployment (collectors.synthetic.generate_deployment): a
  frontend, two decode workers (4× H100 each, Llama-3.1-70B at TP=4, n-gram k=4) and one prefill
  worker. The decode workers compute no prompt (it arrives as KV from the prefill worker), so their
  crossover (near 240 running) sits higher than the aggregated node's; each climbs 1 → 128 and holds
  5 minutes at 256, 362, 256, 181 and 128, crossing it. The frontend and the prefill worker are shown, never judged.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specwatch import perf
from specwatch.perf.hardware import lookup, lookup_model
from specwatch.recording import FILE_SUFFIX, RecordingHeader, write_recording
from specwatch.collectors.synthetic import SyntheticNode, generate, generate_deployment, ramp

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "specwatch" / "data"
START_TIME = 1_800_000_000.0  # 2027-01-15: clearly not a real capture date


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    notes: str
    node: Callable[[], SyntheticNode]
    load: Callable[[int], list[float]]  # dwell seconds per level → running sequences per second
    advisor: dict


def _h100_70b_tp4(**overrides: object) -> SyntheticNode:
    gpu = lookup("H100")
    model = lookup_model("Llama-3.1-70B")
    assert gpu is not None and model is not None
    step = perf.prior_for_model(gpu, model, tp=4).hinge()
    # chat traffic: 1000-token prompts of which a 900-token system prompt comes from the prefix cache
    settings: dict = dict(step=step, gpu_name="NVIDIA H100 80GB HBM3", gpus=4, prompt_cached_fraction=0.9,
                          model_name="meta-llama/Llama-3.1-70B-Instruct", url="http://h100-node-1:8000")
    settings.update(overrides)
    return SyntheticNode(**settings)  # type: ignore[arg-type]


def _climb_hold_descend(dwell: int) -> list[float]:
    """1 → 128 at `dwell` seconds a level, 5 minutes at each level around the crossover, then down."""
    climb = [level for level in ramp(1, 128, dwell, down=False)]
    plateaus = [float(level) for level in (181, 256, 181, 128, 91) for _ in range(300)]
    descend = [level for level in ramp(1, 64, dwell, down=False)][::-1]
    return climb + plateaus + descend


SCENARIOS = (
    ScenarioSpec(
        name="h100-70b-ngram",
        notes="SYNTHETIC: 4× H100 SXM, Llama-3.1-70B at TP=4, n-gram k=4 (L≈2.4), 1.5k-token contexts; "
              "concurrency climbs 1→128, holds 5 min at 181, 256, 181, 128 and 91, and comes back down: "
              "speculation pays at low load, stops past the crossover, pays again",
        node=lambda: _h100_70b_tp4(k=4, per_position=(0.6, 0.4, 0.25, 0.15), draft_ratio=0.0,
                                   context_per_sequence=1500.0, kv_capacity_tokens=560_000.0),
        load=_climb_hold_descend,
        advisor={"method": "ngram", "model": "Llama-3.1-70B", "tp": 4},
    ),
    ScenarioSpec(
        name="h100-70b-longctx-eagle",
        notes="SYNTHETIC: 4× H100 SXM, Llama-3.1-70B at TP=4, EAGLE k=3 (L≈2.6, r=0.05), 8k-token contexts; "
              "concurrency ramps 1→64→1: KV reads dominate, so speculation keeps paying at high batch",
        node=lambda: _h100_70b_tp4(k=3, per_position=(0.7, 0.55, 0.35), draft_ratio=0.05,
                                   context_per_sequence=8000.0, kv_capacity_tokens=560_000.0),
        load=lambda dwell: ramp(1, 64, dwell),
        advisor={"method": "eagle", "model": "Llama-3.1-70B", "tp": 4},
    ),
)


# The Dynamo deployment's decode workers: no prompt computed (it arrives as KV from the prefill
# worker: counted as prompt tokens, never computed, as a prefix-cache hit is)
def _decode_worker(n: int) -> SyntheticNode:
    return _h100_70b_tp4(k=4, per_position=(0.6, 0.4, 0.25, 0.15), draft_ratio=0.0, context_per_sequence=1500.0,
                         kv_capacity_tokens=560_000.0, prompt_cached_fraction=1.0,
                         url=f"http://dynamo-decode-{n}:9090")


def _decode_climb(dwell: int) -> list[float]:
    """1 → 128 at `dwell` seconds a level, 5 minutes at 256, 362, 256, 181 and 128, then down: a decode
    worker, computing no prompt, crosses over near 240 running, higher than the aggregated node."""
    climb = [level for level in ramp(1, 128, dwell, down=False)]
    plateaus = [float(level) for level in (256, 362, 256, 181, 128) for _ in range(300)]
    descend = [level for level in ramp(1, 64, dwell, down=False)][::-1]
    return climb + plateaus + descend


DEPLOYMENT = ScenarioSpec(
    name="dynamo-h100-70b-disagg",
    notes="SYNTHETIC: an NVIDIA Dynamo deployment: a frontend, two decode workers (4× H100 SXM each, Llama-3.1-70B "
          "at TP=4, n-gram k=4) and a prefill worker; each decode worker climbs 1→128 and holds 5 min at 256, 362, "
          "256, 181 and 128: speculation pays on the decode workers at low load and stops past their crossover; "
          "the frontend and the prefill worker are read, never judged (t cycles through them)",
    node=lambda: _decode_worker(1),
    load=_decode_climb,
    advisor={"method": "ngram", "model": "Llama-3.1-70B", "tp": 4},
)
FRONTEND_URL = "http://dynamo-frontend:8000"


def _deployment_snapshots(spec: ScenarioSpec, dwell: int, seed: int):
    prefill = _h100_70b_tp4(speculation=False, output_tokens_per_request=2.0, prompt_cached_fraction=0.9,
                            url="http://dynamo-prefill-1:9090")
    return generate_deployment([_decode_worker(1), _decode_worker(2)], prefill, spec.load(dwell), FRONTEND_URL,
                               start_time=START_TIME, seed=seed)


def write_scenario(spec: ScenarioSpec, out_dir: Path, dwell: int, seed: int) -> Path:
    node = spec.node()
    path = out_dir / f"{spec.name}{FILE_SUFFIX}"
    deployment = spec is DEPLOYMENT
    targets = (node.url, "http://dynamo-decode-2:9090", "http://dynamo-prefill-1:9090", FRONTEND_URL) \
        if deployment else (node.url,)
    header = RecordingHeader(data="synthetic", host="synthetic-h100-node", targets=targets,
                             gpus=(node.gpu_name,) * node.gpus, notes=spec.notes, interval_s=1.0,
                             created=START_TIME, advisor=spec.advisor)
    snapshots = _deployment_snapshots(spec, dwell, seed) if deployment \
        else generate(node, spec.load(dwell), start_time=START_TIME, seed=seed)
    write_recording(path, header, snapshots, overwrite=True)
    # recordings are private by default; bundled ones ship in the package, readable by every user
    path.chmod(0o644)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the bundled synthetic demo scenarios.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory (default %(default)s)")
    parser.add_argument("--dwell", type=int, default=20, help="seconds at each load level (default %(default)s)")
    parser.add_argument("--seed", type=int, default=7, help="the noise seed (default %(default)s)")
    parser.add_argument("--only", metavar="NAME", help="generate one scenario")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in (*SCENARIOS, DEPLOYMENT):
        if args.only and spec.name != args.only:
            continue
        path = write_scenario(spec, args.out, args.dwell, args.seed)
        print(f"{path}  {os.path.getsize(path)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
