"""The three import names resolve from a wheel install and from an editable install, nothing
generic (`collectors`, `widgets`) lands at the top level of site-packages, and the wheel carries
the stylesheet, the bundled recordings (`demo` plays them from it) and the licence. The sdist and
the wheel are fit for an index (`twine check --strict`), the sdist carries the tests and their data,
and the version is kept in one place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = "import specwatch, specwatch.collectors, specwatch.widgets, specwatch.collectors.vllm; " \
          "print(specwatch.__file__); print(specwatch.collectors.__file__); print(specwatch.widgets.__file__)"


def _outer_env() -> dict[str, str]:
    # no PYTHONPATH: a checkout named there (PYTHONPATH=. from a checkout's root) would be imported
    # instead of what the fresh venv installed
    env = dict(os.environ, PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    return env


def _pip(*args: str, cwd: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env=_outer_env())
    assert r.returncode == 0, r.stdout + r.stderr


def _fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(path)
    # The fresh venv borrows this environment's site-packages (setuptools to build, the runtime
    # dependencies to import) through a .pth line, which puts it after the venv's own packages and
    # does not run its .pth files, so this environment's own specwatch install stays out of sight.
    # specwatch's own entries are left out, whichever way it is installed here.
    borrowed = path.parent / "borrowed-site-packages"
    borrowed.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("specwatch", "__editable___specwatch")):
            (borrowed / entry.name).symlink_to(entry)
    purelib = next(path.glob("lib/python*/site-packages"))
    (purelib / "borrowed.pth").write_text(str(borrowed) + "\n")
    return path / "bin" / "python"


def _run_in(python: Path, cwd: Path) -> list[str]:
    r = subprocess.run([str(python), "-c", IMPORTS], cwd=cwd, capture_output=True, text=True, env=_outer_env(),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.parametrize("mode", ["wheel", "editable"])
def test_install_imports_all_three(tmp_path, mode):
    python = _fresh_venv(tmp_path / "venv")
    if mode == "wheel":
        _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT), cwd=tmp_path)
        (wheel,) = (tmp_path / "dist").glob("specwatch-*.whl")
        _pip("--python", str(python), "install", "--no-deps", str(wheel), cwd=tmp_path)
    else:
        _pip("--python", str(python), "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT), cwd=tmp_path)
    files = _run_in(python, cwd=tmp_path)
    site = tmp_path / "venv"
    if mode == "wheel":
        assert all(Path(f).is_relative_to(site) for f in files), files
        purelib = next(site.glob("lib/python*/site-packages"))
        assert not (purelib / "collectors").exists() and not (purelib / "widgets").exists()
        assert (purelib / "specwatch" / "collectors" / "vllm.py").exists()
        # the data the wheel must carry: the stylesheet, and the bundled recordings `demo` plays
        assert (purelib / "specwatch" / "dashboard" / "app.tcss").exists()
        bundled = sorted(p.name for p in (purelib / "specwatch" / "data").glob("*.swrec"))
        assert bundled == sorted(p.name for p in (ROOT / "specwatch" / "data").glob("*.swrec")), bundled
        r = subprocess.run([str(python), "-m", "specwatch", "demo", "--headless"], cwd=tmp_path, capture_output=True,
                           text=True, env=_outer_env(), timeout=120)
        assert r.returncode == 0, r.stderr
        assert [line.split()[2] for line in r.stdout.splitlines() if line.startswith("# scenario")] == \
            [f"{i}/{len(bundled)}" for i in range(1, len(bundled) + 1)], r.stdout
        # the licence as an SPDX expression, with the file it names (the table form and the licence
        # classifier are deprecated; setuptools stops building them in 2027)
        (info,) = purelib.glob("specwatch-*.dist-info")
        assert "License-Expression: Apache-2.0" in (info / "METADATA").read_text().splitlines()
        assert (info / "licenses" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
        # from a checkout's root the checkout's specwatch/ comes first on sys.path, shadowing the
        # wheel: it must still find collectors/ and widgets/, which sit beside it there
        r = subprocess.run([str(python), "-m", "specwatch", "--help"], cwd=ROOT, capture_output=True, text=True,
                           env=_outer_env(), timeout=120)
        assert r.returncode == 0 and "usage: specwatch" in r.stdout, r.stderr
        r = subprocess.run([str(python), "-c", IMPORTS], cwd=ROOT, capture_output=True, text=True,
                           env=_outer_env(), timeout=120)
        assert r.returncode == 0 and r.stdout.split()[1] == str(ROOT / "collectors" / "__init__.py"), r.stderr
    else:
        assert Path(files[0]) == ROOT / "specwatch" / "__init__.py"
        assert Path(files[1]) == ROOT / "collectors" / "__init__.py"
        assert Path(files[2]) == ROOT / "widgets" / "__init__.py"


# ---- ready for an index ---------------------------------------------------------------------------

# what the sdist must carry besides the package: the tests and the data they read, the deployment
# files they check, the benchmarks and demo generators they import, and the release's own files
SDIST_FOLDERS = ("tests", "deploy", "benchmarks", "demo")
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "Containerfile", "MANIFEST.in")
SKIP_IN_TREE = ("__pycache__", "*.pyc", "*.egg-info", ".hypothesis", ".pytest_cache", "results")


def _tracked(folder: str) -> set[str]:
    """The files of FOLDER the repository tracks (git), or, outside a git checkout, those on disk."""
    r = subprocess.run(["git", "ls-files", "-z", "--", folder], cwd=ROOT, capture_output=True, text=True, timeout=60) \
        if (ROOT / ".git").exists() and shutil.which("git") else None
    if r is not None and r.returncode == 0:
        return {p for p in r.stdout.split("\0") if p and (ROOT / p).is_file()}
    return {str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path):
    """`python -m build` (the sdist, then the wheel built from the unpacked sdist) into a temporary
    folder, from a copy of the tree so the checkout is left as it was; `twine check --strict` accepts
    both; the sdist carries the tests and their data; the wheel carries the package alone."""
    import tarfile
    import zipfile

    from specwatch import __version__

    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".ci-venv", ".venv", "build", "dist",
                                                                *SKIP_IN_TREE))
    out = tmp_path / "dist"
    # no isolation: the test extra has the build backend (setuptools, wheel), so nothing is downloaded
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                       capture_output=True, text=True, timeout=300, env=_outer_env())
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    sdist, wheel = out / f"specwatch-{__version__}.tar.gz", out / f"specwatch-{__version__}-py3-none-any.whl"
    assert sorted(p.name for p in out.iterdir()) == sorted([sdist.name, wheel.name])
    r = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
                       capture_output=True, text=True, timeout=120, env=_outer_env())
    assert r.returncode == 0, r.stdout + r.stderr

    with tarfile.open(sdist) as archive:
        prefix = f"specwatch-{__version__}/"
        carried = {name.removeprefix(prefix) for name in archive.getnames()}
    missing = sorted(({f for folder in SDIST_FOLDERS for f in _tracked(folder)} | set(SDIST_FILES)) - carried)
    assert not missing, f"the sdist lacks {missing[:20]}"
    assert "tests/data/recording-format-2.swrec" in carried and "deploy/kubernetes/kustomization.yaml" in carried
    assert not [name for name in carried if "__pycache__" in name or name.endswith(".pyc")]

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"specwatch-{__version__}.dist-info/METADATA").decode()
    assert {name.split("/")[0] for name in names} == {"specwatch", f"specwatch-{__version__}.dist-info"}
    # the index shows the README as the project's description
    assert "Description-Content-Type: text/markdown" in metadata and "# specwatch" in metadata
    assert f"Version: {__version__}" in metadata.splitlines()


def test_the_version_comes_from_one_place():
    """`specwatch --version`, the installed package's metadata and the image's label all read
    specwatch.__version__ (the label through the Containerfile's VERSION build argument, which the
    image build checks against the wheel's version)."""
    import importlib.metadata

    from specwatch import __version__

    r = subprocess.run([sys.executable, "-m", "specwatch", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["specwatch", importlib.metadata.version("specwatch")] == ["specwatch", __version__]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "specwatch.__version__" }' in pyproject
    containerfile = (ROOT / "Containerfile").read_text()
    assert 'org.opencontainers.image.version="${VERSION}"' in containerfile
    assert '"/wheels/specwatch-${VERSION}-py3-none-any.whl"' in containerfile
