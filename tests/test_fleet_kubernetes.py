"""`specwatch fleet` on Kubernetes labels: nodes named namespace/pod, read through a fake Prometheus.

Under the Prometheus Operator every scraped series carries the pod's `namespace` and `pod` target
labels. The vLLM production-stack chart gives every replica of a model the same hostname, so the
agents' own `node` label (the hostname by default) cannot tell the replicas apart: the fleet must.

The fake Prometheus answers /api/v1/query by filtering a fixed set of series with the query's label
matchers (`=` and `=~`, the only ones the fleet sends), as the real one would, so a detail screen
that selected by the shared hostname would get both replicas' series and fail the test.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import pytest

from http_fixtures import LocalServer

from specwatch.collectors.prometheus import PrometheusClient, PromSample
from specwatch.outputs.fleet import PrometheusNodeSource, fleet_rows, node_identity, read_fleet

pytestmark = pytest.mark.anyio

HOSTNAME = "llmstack-llama-vllm-stack"  # what the chart sets as every replica's hostname
NAMESPACE = "inference"
COSTING_POD = "llmstack-llama-deployment-vllm-6b7c9-k2x4p"
FINE_POD = "llmstack-llama-deployment-vllm-6b7c9-q8z7m"
DOWN_POD = "llmstack-llama-deployment-vllm-6b7c9-w5v9t"
TARGET = "http://localhost:8000"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _kube(pod: str, **labels: str) -> dict[str, str]:
    return {"node": HOSTNAME, "namespace": NAMESPACE, "pod": pod, "container": "specwatch",
            "endpoint": "specwatch", "instance": f"10.4.0.{len(pod)}:9464", "job": "specwatch", **labels}


def _replica(pod: str, verdict: str, length: float) -> list[PromSample]:
    series = [PromSample({"__name__": "specwatch_verdict", **_kube(pod, target=TARGET, state=state)},
                         1.0 if state == verdict else 0.0) for state in ("on", "off", "hold", "unknown")]
    series += [PromSample({"__name__": "specwatch_speculation_configured", **_kube(pod, target=TARGET)}, 1.0),
               PromSample({"__name__": "specwatch_acceptance_length_tokens", **_kube(pod, target=TARGET)}, length),
               PromSample({"__name__": "specwatch_gpu_lost", **_kube(pod, gpu="0", name="H100")}, 0.0)]
    return series


SERIES = _replica(COSTING_POD, "off", 1.4) + _replica(FINE_POD, "on", 3.1)
UP = [PromSample({"__name__": "up", **_kube(COSTING_POD)}, 1.0),
      PromSample({"__name__": "up", **_kube(FINE_POD)}, 1.0),
      PromSample({"__name__": "up", "namespace": NAMESPACE, "pod": DOWN_POD, "instance": "10.4.0.9:9464",
                  "job": "specwatch", "container": "specwatch", "endpoint": "specwatch"}, 0.0)]

MATCHER = re.compile(r'(\w+)\s*(=~|=)\s*"((?:[^"\\]|\\.)*)"')


def _select(query: str) -> list[PromSample]:
    name, _, rest = query.partition("{")
    matchers = [("__name__", "=", name)] if name else []
    matchers += [(label, op, value.replace('\\"', '"').replace("\\\\", "\\"))
                 for label, op, value in MATCHER.findall(rest)]

    def matches(labels: dict[str, str]) -> bool:
        for label, op, value in matchers:
            have = labels.get(label, "")
            if (op == "=" and have != value) or (op == "=~" and not re.fullmatch(value, have)):
                return False
        return True

    return [s for s in SERIES + UP if matches(s.labels)]


def _fake_prometheus(h: BaseHTTPRequestHandler) -> None:
    query = parse_qs(urlsplit(h.path).query)["query"][0]
    result = [{"metric": s.labels, "value": [1764590000.0, repr(s.value)]} for s in _select(query)]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_node_identity_prefers_namespace_and_pod() -> None:
    assert node_identity(_kube(FINE_POD)) == (f"{NAMESPACE}/{FINE_POD}", (("namespace", NAMESPACE), ("pod", FINE_POD)))
    assert node_identity({"node": "gpu-node-1", "instance": "gpu-node-1:9464"}) == ("gpu-node-1", (("node", "gpu-node-1"),))
    # one of the two is not enough to name a pod
    assert node_identity({"node": "gpu-node-1", "namespace": NAMESPACE})[0] == "gpu-node-1"


async def test_replicas_sharing_a_hostname_are_rows_of_their_own() -> None:
    with LocalServer(_fake_prometheus) as prometheus:
        client = PrometheusClient(prometheus.url)
        try:
            reading = await read_fleet(client, "specwatch")
        finally:
            await client.aclose()
    assert reading.ok, reading.message
    rows = {r.node: r for r in reading.rows}
    # costing speculation first, then the agent Prometheus cannot scrape, then the fine one
    assert list(rows) == [f"{NAMESPACE}/{COSTING_POD}", f"{NAMESPACE}/{DOWN_POD}", f"{NAMESPACE}/{FINE_POD}"]
    costing, down, fine = rows.values()
    # the agent Prometheus cannot scrape is named by its pod, not its pod IP
    assert not down.exporter_up and down.selector == (("namespace", NAMESPACE), ("pod", DOWN_POD))
    assert costing.costing and costing.acceptance_length == 1.4 and costing.target == TARGET
    assert fine.verdict == "on" and fine.acceptance_length == 3.1 and fine.attention[1] == ""


async def test_a_pod_detail_reads_that_pod_only() -> None:
    with LocalServer(_fake_prometheus) as prometheus:
        client = PrometheusClient(prometheus.url)
        try:
            reading = await read_fleet(client, "specwatch")
            fine = next(r for r in reading.rows if r.node.endswith(FINE_POD))
            detail = await PrometheusNodeSource(client, fine.node, fine.selector).read()
        finally:
            await client.aclose()
    assert detail.ok, detail.message
    [target] = detail.targets
    assert target.verdict.speculation == "on" and target.verdict.acceptance_length == 3.1
    assert [g.index for g in detail.gpus] == ["0"]


def test_without_kubernetes_labels_nodes_keep_their_node_label() -> None:
    series = [PromSample({"__name__": "specwatch_verdict", "node": "gpu-node-1", "target": TARGET, "state": "on",
                          "instance": "gpu-node-1:9464", "job": "specwatch"}, 1.0)]
    up = [PromSample({"__name__": "up", "instance": "gpu-node-2:9464", "job": "specwatch"}, 0.0)]
    rows = fleet_rows(series, up)
    assert [(r.node, r.selector) for r in rows] == [("gpu-node-2:9464", ()),
                                                     ("gpu-node-1", (("node", "gpu-node-1"),))]
