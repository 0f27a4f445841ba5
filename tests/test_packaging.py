"""The three import names resolve from a wheel install and from an editable install, nothing
generic (`collectors`, `widgets`) lands at the top level of site-packages, and the wheel carries
the stylesheet, the bundled recordings (`demo` plays them from it) and the licence."""

from __future__ import annotations

import os
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
    return dict(os.environ, PYTHONNOUSERSITE="1")


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
