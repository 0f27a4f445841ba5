import sys
from pathlib import Path

# Test helpers (payloads, tiny_model, vllm_server) import by bare name; the package itself is imported
# from its installed location (pytest runs in importlib mode).
sys.path.insert(0, str(Path(__file__).parent))

import os
import time

import pytest
from hypothesis import settings

from vllm_server import VllmServer, build_tiny_models, vllm_python

# Hypothesis: no deadline per example anywhere (a timed assertion, which a loaded machine fails by
# chance), and on CI the same examples on every run (derandomize: seeded from each test), so no
# landing is refused by a case nobody drew before. A local run keeps drawing new cases: that is how
# the overflow in decide's step check was found, and such a case is then pinned with @example.
settings.register_profile("specwatch", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("specwatch"), derandomize=True, database=None)
settings.load_profile("ci" if os.environ.get("CI") else "specwatch")

NGRAM_K4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
DRAFT_K3 = {"method": "draft_model", "num_speculative_tokens": 3}


@pytest.fixture(scope="session")
def vllm_py() -> str:
    py = vllm_python()
    if py is None:
        message = "no vLLM venv (set SPECWATCH_VLLM_PYTHON, or run .ci/run which creates one)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs it: a missing venv there is a broken pipeline
        pytest.skip(message)
    return py


@pytest.fixture(scope="session")
def tiny_models(vllm_py, tmp_path_factory):
    return build_tiny_models(tmp_path_factory.mktemp("models"), vllm_py)


def _server(tiny_models, vllm_py, tmp_path_factory, spec):
    target, draft = tiny_models
    if spec is not None and spec.get("method") == "draft_model":
        spec = dict(spec, model=str(draft))
    server = VllmServer(target, spec, extra_args=["--enable-mfu-metrics"], python=vllm_py,
                        log_dir=tmp_path_factory.mktemp("vllm-logs"))
    return server.start()


@pytest.fixture(scope="session")
def baseline_server(tiny_models, vllm_py, tmp_path_factory):
    """The same flags as the n-gram server's, less the speculation: the sweeps' baseline."""
    server = _server(tiny_models, vllm_py, tmp_path_factory, None)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ngram_server(tiny_models, vllm_py, tmp_path_factory):
    server = _server(tiny_models, vllm_py, tmp_path_factory, NGRAM_K4)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def draft_server(tiny_models, vllm_py, tmp_path_factory):
    server = _server(tiny_models, vllm_py, tmp_path_factory, DRAFT_K3)
    yield server
    server.stop()


@pytest.fixture
def utc(monkeypatch):
    """Clock texts are data times in local time: pin the zone so they read the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ", raising=False)
    time.tzset()
