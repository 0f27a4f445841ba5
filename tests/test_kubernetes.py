"""deploy/kubernetes/: what `kubectl apply -k deploy/kubernetes` sends, checked without a cluster.

- every core object validates, strictly (unknown fields rejected), against the Kubernetes OpenAPI
  schemas that kubernetes-validate ships offline;
- the PodMonitor and the PrometheusRule validate against the openAPIV3Schema of the Prometheus
  Operator's CRDs (tests/data/prometheus-operator/, vendored from a release), with unknown fields
  rejected as the API server's strict field validation would;
- the PrometheusRule and the dashboard ConfigMap are what deploy/kubernetes/generate.py makes from
  deploy/prometheus/ and deploy/grafana/ now, and the rules pass the same promtool unit tests;
- the sidecar is non-root, read-only, capability-free, seccomp-confined and sized.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
KUBE = REPO / "deploy" / "kubernetes"
RAW_ALERTS = REPO / "deploy" / "prometheus" / "specwatch-alerts.yml"
ALERT_TESTS = REPO / "deploy" / "prometheus" / "specwatch-alerts.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "specwatch-dashboard.json"
CRDS = Path(__file__).parent / "data" / "prometheus-operator"
# the newest Kubernetes release whose schemas the installed kubernetes-validate carries
KUBERNETES_VERSION = kubernetes_validate.latest_version()
OPERATOR_KINDS = {"PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
                  "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml"}


def _generate_module() -> Any:
    spec = importlib.util.spec_from_file_location("specwatch_kubernetes_generate", KUBE / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((KUBE / "kustomization.yaml").read_text())


def _manifests() -> list[dict[str, Any]]:
    """The objects of every file the kustomization lists, as written."""
    objects = []
    for name in _kustomization()["resources"]:
        objects.extend(d for d in yaml.safe_load_all((KUBE / name).read_text()) if d)
    return objects


def _by_kind(kind: str) -> dict[str, Any]:
    [found] = [o for o in _manifests() if o["kind"] == kind]
    return found


def _sidecar() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = _by_kind("Deployment")["spec"]["template"]
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "specwatch"]
    return pod, container


def _binary(name: str, required_in_ci: bool = True) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed"
        if required_in_ci and os.environ.get("CI") == "true":
            pytest.fail(message + "; CI must install it")
        pytest.skip(message)
    return found


def _kubectl() -> str:
    # optional: the objects are validated as written without it; with it, as `apply -k` renders them
    return _binary("kubectl", required_in_ci=False)


# ---- the kustomization ---------------------------------------------------------------------------


def test_kustomization_lists_every_manifest_and_nothing_missing() -> None:
    # (production-stack/ is its own kustomization, for the chart's post-renderer)
    listed = set(_kustomization()["resources"])
    on_disk = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_kustomize_renders_what_the_files_hold() -> None:
    """`kubectl kustomize` (what `apply -k` runs) renders the same objects, with the image set."""
    result = subprocess.run([_kubectl(), "kustomize", str(KUBE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == \
        sorted((o["kind"], o["metadata"]["name"]) for o in _manifests())
    for obj in rendered:
        _validate(obj)


# ---- schemas ----------------------------------------------------------------------------------


def _crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / OPERATOR_KINDS[kind]).read_text())
    [version] = [v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage")]
    return _closed(version["schema"]["openAPIV3Schema"])


def _closed(schema: Any) -> Any:
    """The schema with unknown fields rejected wherever the API server would reject them: an object
    with declared properties that neither allows additional ones nor preserves unknown fields."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        closed["additionalProperties"] = False
    return closed


def _validate(obj: dict[str, Any]) -> None:
    if obj["kind"] in OPERATOR_KINDS:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        jsonschema.Draft7Validator(_crd_schema(obj["kind"])).validate(obj)
        # the CRD schema leaves metadata open: check it as the API server does, as an ObjectMeta
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]},
                                     KUBERNETES_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("obj", _manifests(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_manifest_validates(obj: dict[str, Any]) -> None:
    _validate(obj)


def test_the_validators_reject_what_a_cluster_would() -> None:
    deployment = _by_kind("Deployment")
    unknown_field = copy.deepcopy(deployment)
    unknown_field["spec"]["template"]["spec"]["containers"][1]["readOnlyRootFilesystem"] = True  # wrong level
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown_field, KUBERNETES_VERSION, strict=True)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, KUBERNETES_VERSION, strict=True)

    monitor = _by_kind("PodMonitor")
    misspelt = copy.deepcopy(monitor)
    misspelt["spec"]["podMetricEndpoints"] = misspelt["spec"].pop("podMetricsEndpoints")
    with pytest.raises(jsonschema.ValidationError):
        _validate(misspelt)
    bad_action = copy.deepcopy(monitor)
    bad_action["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "rename"
    with pytest.raises(jsonschema.ValidationError):
        _validate(bad_action)

    rule = _by_kind("PrometheusRule")
    no_expr = copy.deepcopy(rule)
    del no_expr["spec"]["groups"][0]["rules"][0]["expr"]
    with pytest.raises(jsonschema.ValidationError):
        _validate(no_expr)


# ---- one source of truth ---------------------------------------------------------------------


def test_generated_files_are_in_step_with_the_originals() -> None:
    assert _generate_module().stale() == [], "run deploy/kubernetes/generate.py"


def test_the_drift_check_notices_an_edited_original(tmp_path: Path) -> None:
    generate = _generate_module()
    edited = tmp_path / "specwatch-alerts.yml"
    edited.write_text(RAW_ALERTS.read_text().replace("for: 10m", "for: 11m", 1))
    generate.ALERTS = edited
    assert generate.stale() == [generate.PROMETHEUS_RULE]
    dashboard = tmp_path / DASHBOARD.name
    dashboard.write_text(DASHBOARD.read_text().replace("specwatch", "spec-watch", 1))
    generate.DASHBOARD = dashboard
    assert generate.stale() == [generate.PROMETHEUS_RULE, generate.DASHBOARD_CONFIGMAP]
    assert generate.main(["--check"]) == 1


def test_prometheus_rule_carries_the_raw_groups_unchanged() -> None:
    assert _by_kind("PrometheusRule")["spec"]["groups"] == yaml.safe_load(RAW_ALERTS.read_text())["groups"]


def test_dashboard_configmap_carries_the_dashboard_for_the_grafana_sidecar() -> None:
    configmap = _by_kind("ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


def test_prometheus_rule_passes_the_promtool_unit_tests(tmp_path: Path) -> None:
    promtool = _binary("promtool")
    # the unit tests name their rule file; give them the PrometheusRule's rules under that name
    (tmp_path / RAW_ALERTS.name).write_text(yaml.safe_dump({"groups": _by_kind("PrometheusRule")["spec"]["groups"]}))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    assert yaml.safe_load(ALERT_TESTS.read_text())["rule_files"] == [RAW_ALERTS.name]
    result = subprocess.run([promtool, "test", "rules", ALERT_TESTS.name], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the sidecar ------------------------------------------------------------------------------


def test_sidecar_is_confined() -> None:
    _, container = _sidecar()
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


def test_sidecar_reads_vllm_on_loopback_and_dcgm_on_the_node() -> None:
    pod, container = _sidecar()
    args = container["args"]
    assert "--url=http://localhost:8000" in args
    env = {e["name"]: e for e in container["env"]}
    assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert "--dcgm=http://$(HOST_IP):9400/metrics" in args
    assert "--node=$(POD_NAMESPACE)/$(POD_NAME)" in args
    # Prometheus scrapes the pod IP: the agent must listen beyond loopback, which it refuses without this
    assert "--listen=0.0.0.0:9464" in args and "--allow-remote" in args
    # the PodMonitor finds this pod and this port
    monitor = _by_kind("PodMonitor")
    labels = pod["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert ports[endpoint["port"]] == 9464
    # the rules and `specwatch fleet --job` expect job="specwatch"
    assert {"action": "replace", "targetLabel": "job", "replacement": "specwatch"} in endpoint["relabelings"]
    assert 'up{job="specwatch"}' in RAW_ALERTS.read_text()


def test_sidecar_arguments_parse_as_the_export_command() -> None:
    from specwatch.cli import build_parser

    _, container = _sidecar()
    assert container["command"] == ["specwatch", "export"]
    # the kubelet expands $(VAR) from the container's environment (the downward API) before the agent
    # starts: the agent parses what it is given then
    env = {"HOST_IP": "10.0.3.7", "POD_NAME": "vllm-0", "POD_NAMESPACE": "serving"}
    assert {e["name"] for e in container["env"]} >= set(env)
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
    args = build_parser().parse_args([*container["command"][1:], *expanded])
    assert args.urls == ["http://localhost:8000"] and args.no_nvml and args.allow_remote
    assert args.listen == "0.0.0.0:9464" and args.dcgm == "http://10.0.3.7:9400/metrics"
    assert "$(HOST_IP)" in " ".join(container["args"])  # as the manifest writes it


# ---- the vLLM production-stack chart, through the Helm post-renderer ------------------------------


def test_production_stack_engines_get_the_sidecar_and_the_router_does_not(tmp_path: Path) -> None:
    kubectl = _kubectl()
    overlay = tmp_path / "production-stack"
    shutil.copytree(KUBE / "production-stack", overlay)
    chart_output = (Path(__file__).parent / "data" / "production-stack-render.yaml").read_text()
    # what Helm does: the chart's manifests on stdin, the post-renderer's stdout applied
    result = subprocess.run(["sh", str(overlay / "post-renderer.sh")], input=chart_output, capture_output=True,
                            text=True, timeout=60, env=dict(os.environ, PATH=f"{Path(kubectl).parent}:{os.environ['PATH']}"))
    assert result.returncode == 0, result.stderr
    rendered = {d["metadata"]["name"]: d for d in yaml.safe_load_all(result.stdout) if d}
    engine, router = rendered["vllm-llama3-deployment-vllm"], rendered["vllm-deployment-router"]
    engine_pod = engine["spec"]["template"]
    assert sorted(c["name"] for c in engine_pod["spec"]["containers"]) == ["specwatch", "vllm"]
    _, sidecar = _sidecar()
    [patched] = [c for c in engine_pod["spec"]["containers"] if c["name"] == "specwatch"]
    # the sidecar as written, with the image the overlay's `images:` sets
    [image] = yaml.safe_load((overlay / "kustomization.yaml").read_text())["images"]
    assert patched == dict(sidecar, image=f"{image['newName']}:{image['newTag']}")
    assert engine_pod["metadata"]["labels"]["specwatch/agent"] == "sidecar"
    # the chart's own labels and selector are kept: a changed selector would be refused on upgrade
    assert engine["spec"]["selector"] == yaml.safe_load(chart_output.split("---")[0])["spec"]["selector"]
    assert [c["name"] for c in router["spec"]["template"]["spec"]["containers"]] == ["router-container"]
    for obj in rendered.values():
        _validate(obj)


# ---- every workload names what it runs ----------------------------------------------------------

SPECWATCH_IMAGE = "specwatch"


def _specwatch_containers() -> list[tuple[str, dict[str, Any]]]:
    """Every container that uses the specwatch image, in deploy/kubernetes/*.yaml and the
    production-stack patch, with where it was found."""
    found = []
    for path in sorted([*KUBE.glob("*.yaml"), *(KUBE / "production-stack").glob("*.yaml")]):
        for document in yaml.safe_load_all(path.read_text()):
            pod = (document or {}).get("spec", {}).get("template", {}).get("spec", {})
            for container in [*pod.get("initContainers", ()), *pod.get("containers", ())]:
                name = container.get("image", "").rsplit("/", 1)[-1].split("@")[0].split(":")[0]
                if name == SPECWATCH_IMAGE:
                    found.append((f"{path.relative_to(REPO)}: {container['name']}", container))
    return found


def test_every_specwatch_container_runs_the_agent() -> None:
    """The image's entrypoint is `specwatch`, whose bare form (the dashboard) exits 64 on `--listen`:
    a container with `args:` alone would crash-loop. Each names `export`, as its command or first arg."""
    containers = _specwatch_containers()
    assert {where.split(":")[0] for where, _ in containers} == {
        "deploy/kubernetes/vllm-with-specwatch.yaml", "deploy/kubernetes/production-stack/specwatch-sidecar-patch.yaml"}
    for where, container in containers:
        command, args = container.get("command", []), container.get("args", [])
        if command:
            assert command[0] == "specwatch" and command[1:2] == ["export"], where
        else:
            assert args[:1] == ["export"], where


def test_no_specwatch_container_has_a_readiness_probe() -> None:
    """A pod is Ready only when every container is: a readiness probe on the agent would let a hung
    or throttled monitor take the vLLM pod out of its Service. Liveness restarts the agent alone."""
    containers = _specwatch_containers()
    assert containers
    for where, container in containers:
        assert "readinessProbe" not in container, where
        assert container["livenessProbe"]["httpGet"]["path"] == "/metrics", where


def test_the_kustomizations_set_the_image_to_the_package_version() -> None:
    from specwatch import __version__

    for path in (KUBE / "kustomization.yaml", KUBE / "production-stack" / "kustomization.yaml"):
        [image] = yaml.safe_load(path.read_text())["images"]
        assert image["name"] == SPECWATCH_IMAGE and image["newName"], path
        assert image["newTag"] == __version__, f"{path}: newTag {image['newTag']!r}, the package is {__version__}"


def test_the_systemd_unit_runs_the_agent() -> None:
    unit = (REPO / "deploy" / "systemd" / "specwatch-export.service").read_text()
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.split("=", 1)[1].split()[:2] == ["/usr/local/bin/specwatch", "export"]


# ---- the locked overlay: TLS, client certificates and basic auth (deploy/kubernetes/locked) ---------

LOCKED = KUBE / "locked"
SCRAPE_PASSWORD = "a-scrape-password"


def _locked_material(directory: Path) -> Path:
    """The overlay copied with the files its Secrets are built from, as deploy/README.md says to make them."""
    import bcrypt

    from tls_fixtures import make_pki

    overlay = directory / "locked"
    shutil.copytree(LOCKED, overlay)
    pki = make_pki(directory / "pki")
    web = (overlay / "web.yml.example").read_text().replace(
        "REPLACE-WITH-THE-BCRYPT-HASH-OF-THE-PASSWORD", bcrypt.hashpw(SCRAPE_PASSWORD.encode(), bcrypt.gensalt(4)).decode())
    (overlay / "web.yml").write_text(web)
    for name, source in (("tls.crt", pki.server_cert), ("tls.key", pki.server_key), ("client-ca.crt", pki.ca),
                         ("scrape-ca.crt", pki.ca), ("scrape-client.crt", pki.client_cert),
                         ("scrape-client.key", pki.client_key)):
        shutil.copy(source, overlay / name)
    (overlay / "username").write_text("prometheus")
    (overlay / "password").write_text(SCRAPE_PASSWORD)
    return overlay


def _render_locked(overlay: Path) -> list[dict[str, Any]]:
    """What `kubectl kustomize` renders from the overlay, rendered here by the same rules (the base's
    objects, the overlay's resources, the secretGenerator without hash suffixes, the JSON 6902 patches
    on their targets), so the result is checked where no kubectl is installed."""
    import base64

    import jsonpatch

    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kustomization["resources"][0] == ".."
    objects = copy.deepcopy(_manifests())
    for name in kustomization["resources"][1:]:
        objects.extend(d for d in yaml.safe_load_all((overlay / name).read_text()) if d)
    assert kustomization["generatorOptions"] == {"disableNameSuffixHash": True}
    for generator in kustomization["secretGenerator"]:
        data = {}
        for entry in generator["files"]:
            key, _, source = entry.partition("=")
            data[key] = base64.b64encode((overlay / (source or key)).read_bytes()).decode()
        objects.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": generator["name"]}, "data": data})
    for patch in kustomization["patches"]:
        target = patch["target"]
        [obj] = [o for o in objects if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
        operations = yaml.safe_load((overlay / patch["path"]).read_text())
        objects[objects.index(obj)] = jsonpatch.apply_patch(obj, operations)  # raises if a `test` op fails
    return objects


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    overlay = _locked_material(tmp_path_factory.mktemp("locked"))
    return overlay, _render_locked(overlay)


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def test_the_locked_overlay_renders_objects_that_validate(locked) -> None:
    _, objects = locked
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert ("NetworkPolicy", "specwatch-agent") in kinds
    assert ("Secret", "specwatch-web") in kinds and ("Secret", "specwatch-scrape") in kinds
    for obj in objects:
        _validate(obj)
    # the material never reaches the repository
    ignored = (LOCKED / ".gitignore").read_text().split()
    for name in ("web.yml", "*.crt", "*.key", "username", "password"):
        assert name in ignored


def test_the_locked_sidecar_reads_the_mounted_web_config_as_the_agent_would(locked, tmp_path: Path) -> None:
    import base64

    from specwatch.cli import build_parser
    from specwatch.outputs.web_config import load_web_config

    _, objects = locked
    pod = _one(objects, "Deployment")["spec"]["template"]
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "specwatch"]
    [flag] = [a for a in container["args"] if a.startswith("--web-config-file=")]
    path = Path(flag.split("=", 1)[1])
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "specwatch-web"]
    assert path.parent == Path(mount["mountPath"]) and mount["readOnly"] is True
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "specwatch-web"]
    secret = _one(objects, "Secret", volume["secret"]["secretName"])
    # the Secret mounted as the kubelet mounts it: one file per key, under the mount path
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for key, value in secret["data"].items():
        (mounted / key).write_bytes(base64.b64decode(value))
    config = load_web_config(mounted / path.name)
    assert config.tls is not None and config.client_auth_type == "RequireAndVerifyClientCert"
    assert list(config.users) == ["prometheus"]
    args = build_parser().parse_args(["export", *[a for a in container["args"] if "$(" not in a]])
    assert args.web_config_file == str(path)
    # the probe goes where no password is needed, over the TLS the port now speaks
    probe = container["livenessProbe"]["httpGet"]
    assert (probe["path"], probe["scheme"], probe["port"]) == ("/healthz", "HTTPS", "specwatch")


def test_the_locked_podmonitor_presents_what_the_agent_asks_for(locked) -> None:
    _, objects = locked
    [endpoint] = _one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    scrape = _one(objects, "Secret", "specwatch-scrape")["data"]
    tls = endpoint["tlsConfig"]
    for ref in (tls["ca"]["secret"], tls["cert"]["secret"], tls["keySecret"], endpoint["basicAuth"]["username"],
                endpoint["basicAuth"]["password"]):
        assert ref["name"] == "specwatch-scrape" and ref["key"] in scrape


def test_the_network_policy_lets_only_prometheus_reach_the_agent_and_leaves_vllm_open(locked) -> None:
    _, objects = locked
    policy = _one(objects, "NetworkPolicy")
    pod = _one(objects, "Deployment")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    rules = policy["spec"]["ingress"]
    agent_rules = [r for r in rules if any(p["port"] == "specwatch" for p in r.get("ports", []))]
    [agent_rule] = agent_rules
    [peer] = agent_rule["from"]
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    # a selected pod is denied what no rule allows: vLLM's port keeps a rule with no `from`
    names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert [r for r in rules if "from" not in r] == [{"ports": [{"port": "http"}]}] and "http" in names


def test_the_overlay_patch_refuses_a_pod_whose_second_container_is_not_the_agent(locked) -> None:
    import jsonpatch

    overlay, _ = locked
    deployment = copy.deepcopy(_by_kind("Deployment"))
    deployment["spec"]["template"]["spec"]["containers"].reverse()
    operations = yaml.safe_load((overlay / "sidecar-patch.yaml").read_text())
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(deployment, operations)


def test_kustomize_renders_the_locked_overlay(locked) -> None:
    import base64

    overlay, objects = locked
    # the copy sits beside no base: point `..` back at the repository's
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    kustomization["resources"][0] = os.path.relpath(KUBE, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    result = subprocess.run([_kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rendered) == \
        sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    # and the same patched parts: the checks above hold for what kubectl applies
    def parts(objs: list[dict[str, Any]]) -> dict[str, Any]:
        pod = _one(objs, "Deployment")["spec"]["template"]["spec"]
        [agent] = [c for c in pod["containers"] if c["name"] == "specwatch"]
        return {"args": agent["args"], "mounts": agent["volumeMounts"], "probe": agent["livenessProbe"],
                "volumes": pod["volumes"], "endpoint": _one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"],
                # kustomize wraps its base64 at 76 columns: compared decoded
                "secrets": {n: {k: base64.b64decode(v) for k, v in _one(objs, "Secret", n)["data"].items()}
                            for n in ("specwatch-web", "specwatch-scrape")},
                "policy": _one(objs, "NetworkPolicy")["spec"]}

    assert parts(rendered) == parts(objects)
