"""`specwatch completion SHELL`: a script for bash, zsh and fish that the shell accepts and that
completes every command and its flags; bash's is driven here the way bash drives it on Tab."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specwatch.cli import COMMANDS, main
from specwatch.commands.options import ExitCode

ROOT = Path(__file__).resolve().parent.parent
SHELL_CHECK = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> dict[str, Path]:
    """Each shell's script, as `python -m specwatch completion SHELL` prints it."""
    folder = tmp_path_factory.mktemp("completion")
    found = {}
    for shell in SHELL_CHECK:
        r = subprocess.run([sys.executable, "-m", "specwatch", "completion", shell], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() and r.stderr == ""
        found[shell] = folder / f"specwatch.{shell}"
        found[shell].write_text(r.stdout)
    return found


@pytest.mark.parametrize("shell", list(SHELL_CHECK))
def test_the_script_names_every_command_and_their_flags(scripts, shell):
    text = scripts[shell].read_text()
    for command in COMMANDS:
        assert command.name in text, f"{shell}: {command.name}"
    for flag in ("--listen", "--allow-remote", "--url", "--headless", "--prometheus", "--version"):
        spelt = f"-l {flag[2:]}" if shell == "fish" else flag  # fish: `complete ... -l listen`
        assert spelt in text, f"{shell}: {flag}"


@pytest.mark.parametrize("shell", list(SHELL_CHECK))
def test_the_shell_accepts_the_script(scripts, shell):
    argv = SHELL_CHECK[shell]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed: the script was checked for the commands only")
    r = subprocess.run([*argv, str(scripts[shell])], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _bash_complete(script: Path, words: list[str], cwd: Path = ROOT) -> list[str]:
    """What bash offers on Tab after WORDS (the last one being completed), through the script's function."""
    line = " ".join(words)
    words_array = " ".join(f"'{w}'" for w in words)
    program = (f"source {script}\n"
               f"COMP_WORDS=({words_array}); COMP_CWORD={len(words) - 1}\n"
               f"COMP_LINE='{line}'; COMP_POINT={len(line)}\n"
               "_shtab_specwatch specwatch\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completes_commands_flags_choices_and_files(scripts):
    script = scripts["bash"]
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    assert _bash_complete(script, ["specwatch", "ex"]) == ["export"]
    assert set(_bash_complete(script, ["specwatch", ""])) >= {c.name for c in COMMANDS}
    assert _bash_complete(script, ["specwatch", "export", "--lis"]) == ["--listen"]
    assert _bash_complete(script, ["specwatch", "check", "--engine", ""]) == ["auto", "vllm", "sglang", "trtllm", "triton",
                                                                              "dynamo"]
    assert _bash_complete(script, ["specwatch", "completion", ""]) == ["bash", "zsh", "fish"]
    # a recording is a file: replay completes paths
    assert "recording-format-2.swrec" in _bash_complete(script, ["specwatch", "replay", "rec"],
                                                        cwd=ROOT / "tests" / "data")


def test_fish_completes_commands_and_flags(scripts):
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed: its script was checked for the commands only")

    def offered(line: str) -> list[str]:
        r = subprocess.run(["fish", "--no-config", "-c", f"source {scripts['fish']}; complete -C '{line}'"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return [entry.split("\t")[0] for entry in r.stdout.splitlines()]

    assert offered("specwatch ex") == ["export"]
    assert offered("specwatch export --lis") == ["--listen"]
    assert offered("specwatch completion ") == ["bash", "zsh", "fish"]


def test_an_unknown_shell_is_a_usage_error(capsys):
    try:
        status = main(["completion", "tcsh"])
    except SystemExit as exc:
        status = exc.code
    assert status == ExitCode.USAGE
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def test_the_completion_command_keeps_the_cli_import_light():
    """shtab is loaded to print a script, not when the command line is imported or parsed."""
    probe = ("import sys, specwatch.cli; specwatch.cli.build_parser(); "
             "print(sorted(m for m in ('shtab', 'textual') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


def test_bash_offers_the_gpus_models_scenarios_and_formats_specwatch_knows(scripts):
    """Issue 45: completion offered no values for --gpu, --model or demo --scenario, though specwatch
    knows each list. Offered from the same lists the flags are checked against."""
    from specwatch.commands.replay import list_scenarios
    from specwatch.perf.hardware import lookup
    from specwatch.perf.models import lookup_model

    script = scripts["bash"]
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    gpus = _bash_complete(script, ["specwatch", "check", "--gpu", "H1"])
    assert {"H100", "H100-SXM", "H100-PCIE", "H100-NVL"} <= set(gpus) and all(g.startswith("H1") for g in gpus)
    assert all(lookup(g) is not None for g in _bash_complete(script, ["specwatch", "predict", "--gpu", ""]))
    models = _bash_complete(script, ["specwatch", "predict", "--model", "Llama-3.1-"])
    assert models == ["Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B"]
    assert all(lookup_model(m) is not None for m in _bash_complete(script, ["specwatch", "watch", "--model", ""]))
    scenarios = _bash_complete(script, ["specwatch", "demo", "--scenario", ""])
    assert scenarios == [s.name for s in list_scenarios()] and "dynamo-h100-70b-disagg" in scenarios
    assert "fp8" in _bash_complete(script, ["specwatch", "predict", "--dtype", "f"])
    # a flag with choices of its own keeps them
    assert "auto" in _bash_complete(script, ["specwatch", "check", "--engine", ""])
