"""The command layer: one exit status per mistake across every command, the operator's advisor flags
winning over a recording's header, and a `specwatch.cli` that stays cheap to import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specwatch import perf
from specwatch.cli import COMMANDS, build_parser, main
from specwatch.commands.options import ExitCode
from specwatch.commands.replay import list_scenarios, replay_monitor
from specwatch.recording import RecordingHeader, write_recording
from specwatch.collectors.synthetic import SyntheticNode, generate, ramp

ROOT = Path(__file__).resolve().parent.parent
STEP = perf.HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0,
                            per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.6, 0.4, 0.25, 0.15),
                     context_per_sequence=0.0)


def run_main(argv: list[str]) -> int:
    """`specwatch ARGV` in this process: the status main returns, or the one argparse exits with."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.fixture
def no_dashboard(monkeypatch):
    """A command that got past its checks would open a dashboard: make that a visible failure."""
    import specwatch.dashboard.app
    import specwatch.outputs.fleet

    def refuse(*args, **kwargs):
        raise AssertionError("the command went on to open its dashboard")

    monkeypatch.setattr(specwatch.dashboard.app, "run_app", refuse)
    monkeypatch.setattr(specwatch.outputs.fleet.FleetApp, "run", refuse)


# ==================================================================================================
# the same bad flag, the same status, in every command that has the flag
# ==================================================================================================

BAD_FLAGS = {
    "unknown --gpu": (["--gpu", "NoSuchGPU"], "unknown GPU 'NoSuchGPU'"),
    "unknown --model": (["--model", "NoSuchModel"], "unknown model 'NoSuchModel'"),
    "non-number --timeout": (["--timeout", "soon"], "argument --timeout: expected a number, got 'soon'"),
    "unknown flag": (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
}


def _command_argv(command: str, tmp_path: Path) -> list[str]:
    """The least each command needs to get as far as checking its flags."""
    scenario = str(list_scenarios()[0].path)
    return {
        "record": ["record", "-o", str(tmp_path / "r.swrec")],
        "replay": ["replay", scenario, "--headless"],
        "demo": ["demo", "--headless"],
        "sweep": ["sweep", "--from-bench", str(tmp_path), str(tmp_path), "-o", str(tmp_path / "o")],
        "fleet": ["fleet", "--prometheus", "http://127.0.0.1:9"],
    }.get(command, [command])


def _cases():
    live = ("check", "watch", "record", "export", "tune")
    has = {
        "unknown --gpu": (*live, "replay", "demo", "sweep", "predict"),
        "unknown --model": (*live, "replay", "demo", "sweep", "predict"),
        "non-number --timeout": (*live, "fleet"),
        "unknown flag": (*live, "replay", "demo", "sweep", "predict", "fleet"),
    }
    for mistake, commands in has.items():
        for command in commands:
            yield pytest.param(command, mistake, id=f"{command}-{mistake}")


@pytest.mark.parametrize("command, mistake", list(_cases()))
def test_the_same_bad_flag_exits_the_same_way_from_every_command(command, mistake, tmp_path, capsys,
                                                                   no_dashboard):
    flags, message = BAD_FLAGS[mistake]
    if command == "sweep" and mistake == "unknown --gpu":
        flags = [*flags, "--model", "Llama-3.1-8B"]  # sweep's datasheet curve takes the two together
    if command in ("sweep", "predict") and mistake == "unknown --model":
        flags = [*flags, "--gpu", "H100"]  # predict needs a GPU before it reads the model
    status = run_main([*_command_argv(command, tmp_path), *flags])
    err = capsys.readouterr().err
    assert status == ExitCode.USAGE, err
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "r.swrec").exists() and not (tmp_path / "o").exists()  # nothing written


def test_a_usage_error_is_the_process_exit_status_with_one_line_naming_the_command():
    r = subprocess.run([sys.executable, "-m", "specwatch", "check", "--gpu", "NoSuchGPU"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 64
    assert r.stderr.strip().splitlines() == [
        "specwatch check: unknown GPU 'NoSuchGPU' (try H100, H200, A100, L40S, L4, ...)"]
    r = subprocess.run([sys.executable, "-m", "specwatch", "record", "-o", "x.swrec", "--no-such-flag"],
                       capture_output=True, text=True, timeout=60)
    # a flag the command does not take is that command's error, pointing to that command's help
    assert r.returncode == 64 and r.stderr.strip().splitlines() == [
        "specwatch record: unrecognized arguments: --no-such-flag (see specwatch record --help)"]


def test_bare_specwatch_with_flags_is_watch(capsys, no_dashboard):
    assert run_main(["--gpu", "NoSuchGPU"]) == ExitCode.USAGE
    assert "specwatch watch: unknown GPU" in capsys.readouterr().err


def test_usage_is_not_one_of_the_check_contract_statuses():
    contract = {ExitCode.OK, ExitCode.CHANGE, ExitCode.NOT_ENOUGH_DATA, ExitCode.UNREADABLE}
    assert [int(c) for c in sorted(contract)] == [0, 1, 2, 3]
    assert ExitCode.USAGE == 64 and ExitCode.USAGE not in contract
    assert len({int(c) for c in ExitCode}) == len(list(ExitCode))  # no two names share a number


def test_the_readme_exit_status_table_is_the_enum():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`(\w+)`\s*\|", section, re.MULTILINE)
    assert [(int(n), name) for n, name in rows] == [(int(c), c.name) for c in ExitCode]
    commands = {c.name for c in COMMANDS}
    for line in section.splitlines():
        if line.startswith("| ") and "`" in line:
            named = set(re.findall(r"\b([a-z]+)\b", line.split("|")[3]))
            assert named & (commands | {"all"}), line  # each row says which commands use it


# ==================================================================================================
# the operator's flags win over a recording's header
# ==================================================================================================

ADVISOR_FLAGS = ["--method", "eagle3", "--draft-params", "1B", "--model", "Llama-3.1-8B", "--tp", "2",
                 "--gpu", "H200", "--draft-ratio", "0.07"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "ngram.swrec"
    header = RecordingHeader(data="synthetic", interval_s=1.0,
                             advisor={"method": "ngram", "gpu": "H100", "model": "Llama-3.1-70B", "tp": 4,
                                      "draft_ratio": 0.02})
    write_recording(path, header, generate(NODE, ramp(1, 64, 10), seed=3))
    return path


def _replay_config(recording: Path, *flags: str):
    from specwatch.recording import read_recording

    args = build_parser().parse_args(["replay", str(recording), "--headless", *flags])
    return replay_monitor(read_recording(recording).header, args).advisor_config


def test_replay_judges_with_the_header_when_no_flag_is_given(recording):
    config = _replay_config(recording)
    assert (config.method, config.gpu.name, config.model.name, config.tp, config.draft_ratio) == \
        ("ngram", "H100 SXM", "Llama-3.1-70B", 4, 0.02)


def test_replay_flags_win_over_the_header(recording):
    config = _replay_config(recording, *ADVISOR_FLAGS)
    assert (config.method, config.gpu.name, config.model.name, config.tp, config.draft_ratio,
            config.draft_params) == ("eagle3", "H200 SXM", "Llama-3.1-8B", 2, 0.07, 1e9)
    assert _replay_config(recording, "--tp", "1").tp == 1  # an explicit default still wins


def test_the_slo_comes_from_the_header_and_the_flags_win(tmp_path):
    from specwatch.commands.options import UsageError, advisor_config, advisor_settings

    path = tmp_path / "slo.swrec"
    header = RecordingHeader(data="synthetic", interval_s=1.0,
                             advisor={"method": "ngram", "slo_ttft_s": 0.5, "slo_tpot_s": 0.05})
    write_recording(path, header, generate(NODE, [4.0] * 3))
    config = _replay_config(path)
    assert (config.slo_ttft_s, config.slo_tpot_s) == (0.5, 0.05)
    config = _replay_config(path, "--slo-tpot", "0.02")
    assert (config.slo_ttft_s, config.slo_tpot_s) == (0.5, 0.02)
    # what a live run stores in its recording's header
    args = build_parser().parse_args(["record", "-o", "out.swrec", "--slo-ttft", "0.3"])
    assert advisor_settings(args)["slo_ttft_s"] == 0.3
    with pytest.raises(UsageError):
        advisor_config(None, {"slo_tpot_s": -1})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--slo-ttft", "0"])


def test_the_weight_format_comes_from_the_flag_the_header_or_the_models_release(tmp_path):
    from specwatch.advice.advisor import Advisor
    from specwatch.commands.options import UsageError, advisor_config, advisor_settings

    # no --dtype: the advisor prices the model as released (DeepSeek-V3: FP8), and the header keeps none
    args = build_parser().parse_args(["record", "-o", "out.swrec", "--model", "DeepSeek-V3", "--tp", "8"])
    assert "dtype" not in advisor_settings(args)
    assert Advisor(advisor_config(args)).step_samples.dtype == "fp8"
    # a live run's --dtype is stored in its recording's header, and a replay's flag wins over it
    path = tmp_path / "awq.swrec"
    header = RecordingHeader(data="synthetic", interval_s=1.0,
                             advisor={"method": "ngram", "model": "Llama-3.1-70B", "dtype": "awq"})
    write_recording(path, header, generate(NODE, [4.0] * 3))
    assert _replay_config(path).dtype == "awq"
    assert _replay_config(path, "--dtype", "FP8").dtype == "fp8"
    with pytest.raises(UsageError, match="unknown weight format 'fp3'"):
        advisor_config(None, {"dtype": "fp3"})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--dtype", "fp3"])


def test_tune_from_a_recording_takes_the_header_and_the_flags_win(recording, capsys):
    assert run_main(["tune", "--from", str(recording), "--json"]) == ExitCode.OK
    stored = json.loads(capsys.readouterr().out)["inputs"]
    assert (stored["method"], stored["draft_ratio"]) == ("ngram", 0.02)
    assert run_main(["tune", "--from", str(recording), "--json", *ADVISOR_FLAGS]) == ExitCode.OK
    flagged = json.loads(capsys.readouterr().out)["inputs"]
    assert (flagged["method"], flagged["draft_ratio"]) == ("eagle3", 0.07)


# ==================================================================================================
# the entry points
# ==================================================================================================


def test_importing_the_cli_does_not_import_the_heavy_libraries():
    probe = ("import sys, specwatch.cli; "
             "print(sorted(m for m in ('textual', 'httpx', 'numpy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    # and building every command's parser does not start the dashboard's toolkit
    probe = "import sys, specwatch.cli; specwatch.cli.build_parser(); print('textual' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


def test_a_headless_replay_loads_only_what_it_uses(tmp_path):
    """A headless replay builds its own command's options alone (the others' import httpx and the
    collectors) and loads numpy with BLAS on one thread, leaving the environment as it found it."""
    recording = ROOT / "tests" / "data" / "recording-format-2.swrec"
    probe = (
        "import os, sys, io, contextlib, specwatch.cli\n"
        "os.environ.pop('OPENBLAS_NUM_THREADS', None)\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    status = specwatch.cli.main(['replay', {str(recording)!r}, '--headless', '--json'])\n"
        "import threading, time\n"
        "python_threads = [t.name for t in threading.enumerate()]\n"
        "def tasks():\n"
        "    return len(os.listdir('/proc/self/task')) if os.path.isdir('/proc/self/task') else 1\n"
        "# A joined thread has finished its Python work when join returns; its OS thread exits a moment\n"
        "# later, and on a loaded machine that moment was seen (2 tasks, 1 Python thread): wait it out.\n"
        "deadline = time.monotonic() + 10\n"
        "while tasks() > 1 and python_threads == ['MainThread'] and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(status, sorted(m for m in ('textual', 'httpx', 'asyncio', 'specwatch.collectors.vllm')\n"
        "                     if m in sys.modules), tasks(), 'OPENBLAS_NUM_THREADS' in os.environ, python_threads)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # no thread left running: not a Python one (the reader's inflating worker is joined), nor an OS one
    assert r.stdout.split(None, 1) == ["0", "[] 1 False ['MainThread']\n"], r.stdout
    # every command's options are still there when the parser is built for one of them
    args = build_parser("replay").parse_args(["replay", str(recording), "--headless"])
    assert args.command == "replay" and args.headless
    with pytest.raises(SystemExit):
        build_parser("replay").parse_args(["check", "--window", "5"])  # check's options were not built


def test_python_dash_m_specwatch_runs_the_cli():
    from specwatch import __version__

    r = subprocess.run([sys.executable, "-m", "specwatch", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"specwatch {__version__}"
    r = subprocess.run([sys.executable, "-m", "specwatch", "demo", "--headless", "--list"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "h100-70b-ngram" in r.stdout


def test_every_command_module_has_its_flags_and_its_run():
    import importlib

    for command in COMMANDS:
        module = importlib.import_module(command.module)
        assert callable(getattr(module, command.add_function)) and callable(getattr(module, command.run_function))


def test_record_says_why_and_exits_write_failed_when_a_write_fails(tmp_path, capsys, monkeypatch):
    import socket

    from specwatch.recording import RecordingError, RecordingWriter

    def full(self, snapshot):
        raise RecordingError(f"cannot write {self.path}: No space left on device")

    monkeypatch.setattr(RecordingWriter, "write", full)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: the reads fail fast, and each is still recorded
    out = tmp_path / "full.swrec"
    status = run_main(["record", "-o", str(out), "--url", f"http://127.0.0.1:{port}", "--no-nvml", "--no-dcgm",
                       "--duration", "5", "--interval", "0.2", "--timeout", "1"])
    err = capsys.readouterr().err
    assert status == ExitCode.WRITE_FAILED
    assert "specwatch record: cannot write" in err and "No space left on device" in err
