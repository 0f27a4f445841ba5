"""Record the bundled REAL scenario: a real vLLM server (the CPU wheel, a tiny random Llama) under a
concurrency ramp 1 → 2 → 4 → 8 → 4 → 1, with n-gram speculation (k = 4), and no GPU.

    python demo/record_real.py [--stage-seconds 25] [-o specwatch/data/real-cpu-tiny-llama-ngram.swrec]

It starts the server through tests/vllm_server.py (the vLLM venv under ~/.cache/specwatch/vllm-venv,
or SPECWATCH_VLLM_PYTHON), drives it from threads while `specwatch record` polls it once
a second, then stops everything. The recording is labelled real in its header; NVML is polled as a
real recorder would, so the file says why there are no GPU readings.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from vllm_server import Traffic, VllmServer, build_tiny_models, vllm_python  # noqa: E402

from specwatch.cli import main as specwatch_main  # noqa: E402

NGRAM_K4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
RAMP = (1, 2, 4, 8, 4, 1)
DEFAULT_OUTPUT = ROOT / "specwatch" / "data" / "real-cpu-tiny-llama-ngram.swrec"


def drive(server: VllmServer, stage_seconds: float, done: threading.Event) -> None:
    """Hold each concurrency level of the ramp for `stage_seconds`, then stop."""
    try:
        for level in RAMP:
            with Traffic(server, concurrency=level, max_tokens=48):
                time.sleep(stage_seconds)
    finally:
        done.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--stage-seconds", type=float, default=25.0)
    opts = parser.parse_args()
    python = vllm_python()
    if python is None:
        print("no vLLM venv: set SPECWATCH_VLLM_PYTHON or run .ci/run once", file=sys.stderr)
        return 3
    work = Path(tempfile.mkdtemp(prefix="specwatch-record-real-"))
    target, _ = build_tiny_models(work / "models", python)
    # dev mode serves /server_info: the device (cpu), the token budget and the speculation config
    # ride in every reading, as a recorder on a dev-mode server keeps them
    server = VllmServer(target, NGRAM_K4, extra_args=["--enable-mfu-metrics"], python=python, log_dir=work,
                        env={"VLLM_SERVER_DEV_MODE": "1"})
    server.start()
    try:
        server.complete("warm up the engine before the recording starts", max_tokens=8)
        version = httpx.get(server.url + "/version", timeout=10).json().get("version", "?")
        duration = opts.stage_seconds * len(RAMP) + 5.0
        args = [
            "record", "-o", str(opts.output), "--force", "--url", server.url, "--duration", str(duration),
            "--interval", "1", "--no-dcgm", "--method", "ngram",
            "--notes", f"REAL vLLM {version} (CPU wheel), tiny random 2-layer Llama, n-gram k=4, "
                       f"concurrency ramp {'→'.join(map(str, RAMP))}, {opts.stage_seconds:g} s per level; no GPU",
        ]
        done = threading.Event()
        threading.Thread(target=drive, args=(server, opts.stage_seconds, done), daemon=True).start()
        status = specwatch_main(args)
        done.wait(timeout=180)
        # recordings are private by default; a bundled one ships in the package, readable by every user
        opts.output.chmod(0o644)
        return status
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
