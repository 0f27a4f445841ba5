"""The layers keep to their places: the core imports no collector and no UI, widgets take the
advisor's figures from the view, and `fleet` reads only names that `export` really serves."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.outputs import export_schema
from specwatch.advice.advisor import AdvisorConfig
from specwatch.collectors.prometheus import PromSample, QueryResult
from specwatch.outputs.export import ExportAgent, build_registry
from specwatch.outputs.fleet import fleet_rows, node_detail
from specwatch.advice.monitor import Monitor
from specwatch.perf import BoundEstimate, HingeParameters
from specwatch.telemetry.snapshot import SourceStatus
from specwatch.collectors.synthetic import SyntheticNode, generate

ROOT = Path(__file__).resolve().parent.parent
# The pipeline of the README's diagram: Snapshot → Window → Advisor → Verdict, and what they stand on.
CORE = sorted(str(p.relative_to(ROOT)) for package in ("telemetry", "readings", "perf", "advice")
              for p in (ROOT / "specwatch" / package).glob("*.py")) + ["specwatch/outputs/export_schema.py"]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside functions (absolute names)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_collector_and_no_ui(module: str) -> None:
    leaks = {name for name in imported_modules(ROOT / module)
             if name.startswith(("specwatch.collectors", "specwatch.widgets", "specwatch.dashboard", "textual", "httpx",
                                 "pynvml"))}
    assert not leaks, f"{module} imports {sorted(leaks)}"


@pytest.mark.parametrize("module", sorted(p.name for p in (ROOT / "widgets").glob("*.py")))
def test_widgets_take_the_advisors_figures_from_the_view(module: str) -> None:
    leaks = {name for name in imported_modules(ROOT / "widgets" / module)
             # the datasheet types ride in the view (Verdict.gpu_spec); looking a GPU up is the advisor's
             if (name.startswith(("specwatch.advice.advisor", "specwatch.perf", "specwatch.collectors"))
                 and not name.startswith("specwatch.perf.hardware"))
             or name == "specwatch.perf.hardware.lookup"}
    assert not leaks, f"widgets/{module} imports {sorted(leaks)}"


# The packages in the order the data flows (the README's "How it works"): a package imports only
# packages before it. perf (the pure model and the datasheets) stands under everything, on nothing.
PIPELINE = [("perf",), ("telemetry",), ("readings", "recording"), ("collectors",), ("advice",), ("sweep",),
            ("widgets",), ("outputs",), ("dashboard",), ("commands",)]
PACKAGE_FOLDERS = {"collectors": ROOT / "collectors", "widgets": ROOT / "widgets"}


def _package_imports(package: str) -> set[str]:
    folder = PACKAGE_FOLDERS.get(package, ROOT / "specwatch" / package)
    return {name.split(".")[1] for path in folder.rglob("*.py") for name in imported_modules(path)
            if name.startswith("specwatch.") and name.count(".") >= 1}


@pytest.mark.parametrize("rank, group", list(enumerate(PIPELINE)), ids=["+".join(g) for g in PIPELINE])
def test_each_package_imports_only_what_comes_before_it(rank: int, group: tuple[str, ...]) -> None:
    later = {p for g in PIPELINE[rank:] for p in g}
    for package in group:
        wrong = (_package_imports(package) & later) - {package}
        assert not wrong, f"{package} imports {sorted(wrong)}, which come later in the pipeline"


def test_every_package_has_a_place_in_the_pipeline() -> None:
    placed = {p for g in PIPELINE for p in g}
    packages = {p.parent.name for p in (ROOT / "specwatch").glob("*/__init__.py")} | set(PACKAGE_FOLDERS)
    assert packages == placed, f"not placed: {sorted(packages - placed)}; gone: {sorted(placed - packages)}"


# -- the exporter's names, as fleet reads them ---------------------------------------------------------

STEP = HingeParameters(base_s=0.02, knee=134.0, slope_s_per_token=0.02 / 134, kv_s_per_token=0.0, per_token_s=0.0)
NODE = SyntheticNode(step=STEP, gpu_name="NVIDIA A100-SXM4-80GB", per_position=(0.5, 0.25, 0.15, 0.1),
                     context_per_sequence=0.0, gpus=2)


def served_samples() -> tuple[list[PromSample], ExportAgent]:
    """What an export agent serves on /metrics after a run with a lost GPU and a source down,
    parsed as Prometheus parses it, each sample labelled as Prometheus stores it (with `__name__`)."""
    config = AdvisorConfig(method="ngram", slo_ttft_s=1.0, slo_tpot_s=0.01)
    agent = ExportAgent(source=None, monitor=Monitor(10.0, config), node="node-a", mode="replay",
                        clock=lambda: 1000.0)
    for snapshot in generate(NODE, [8.0] * 30):
        agent.ingest(snapshot, poll_seconds=0.01)
    last = agent.frame.snapshot
    lost = dataclasses.replace(last.gpus[1], lost=True)
    agent.ingest(dataclasses.replace(last, time=last.time + 1.0, gpus=(last.gpus[0], lost),
                                     sources=(*last.sources, SourceStatus("dcgm http://x:9400/metrics",
                                                                          "connection_refused"))), 0.01)
    text = generate_latest(build_registry(agent, process_metrics=False)).decode()
    samples = [PromSample({"__name__": s.name, **s.labels}, float(s.value))
               for family in text_string_to_metric_families(text) for s in family.samples]
    return samples, agent


def schema_names_used_by(path: Path) -> set[str]:
    """The export_schema metrics a module names (`schema.VERDICT`, ...)."""
    tree = ast.parse(path.read_text(), str(path))
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "schema":
            if isinstance(getattr(export_schema, node.attr, None), export_schema.MetricName):
                used.add(node.attr)
    return used


def test_every_name_fleet_reads_is_one_export_serves() -> None:
    samples, _ = served_samples()
    served = {s.name for s in samples}
    used = schema_names_used_by(ROOT / "specwatch" / "outputs" / "fleet.py")
    assert len(used) >= 15  # the fleet reads its names from the schema, not from strings of its own
    missing = {name: getattr(export_schema, name).series for name in used
               if getattr(export_schema, name).series not in served}
    assert not missing, f"fleet reads series export does not serve: {missing}"
    fleet_source = (ROOT / "specwatch" / "outputs" / "fleet.py").read_text()
    assert '"specwatch_' not in fleet_source and "'specwatch_" not in fleet_source
    # and the schema lists what export serves, no more and no less
    assert served == {m.series for m in export_schema.ALL_METRICS}


def test_fleet_reads_back_the_verdict_the_exporter_served() -> None:
    samples, agent = served_samples()
    (state,) = agent.frame.states.values()
    verdict = state.verdict
    (row,) = fleet_rows(samples)
    assert (row.node, row.verdict, row.configured, row.gpus_lost) == ("node-a", verdict.speculation, True, 1)
    assert row.bound == verdict.bound.state != "unknown"
    assert row.acceptance_length == pytest.approx(verdict.acceptance_length)
    assert row.sources_down == ("dcgm http://x:9400/metrics (connection_refused)",)
    detail = node_detail("node-a", QueryResult("ok", samples=tuple(samples)))
    (target,) = detail.targets
    assert isinstance(target.verdict.bound, BoundEstimate)
    assert target.verdict.bound.state == verdict.bound.state
    assert {(s.name, s.state) for s in target.verdict.bound.signals} == \
        {(s.name, s.state) for s in verdict.bound.signals if s.value is not None}
    assert [g.lost for g in detail.gpus] == [False, True]


def test_the_shipped_rules_and_dashboard_read_only_schema_names() -> None:
    """The alert rules and the Grafana dashboard under deploy/ name series the schema serves."""
    import re

    known = {m.series for m in export_schema.ALL_METRICS}
    for path in sorted((ROOT / "deploy").rglob("*")):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".json", ".md"):
            names = set(re.findall(r"\bspecwatch_[a-z_]+[a-z]\b", path.read_text()))
            assert names <= known, f"{path.relative_to(ROOT)} names {sorted(names - known)}"


# -- rooms a reader can take in at once ------------------------------------------------------------

MAX_MODULE_LINES = 750
MAX_CLASS_LINES = 350


@pytest.mark.parametrize("folder", ["specwatch", "collectors", "widgets"])
def test_no_module_and_no_class_outgrows_a_reading(folder: str) -> None:
    """A module over 750 lines or a class over 350 holds several jobs: split it by what they decide."""
    too_long = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                too_long.append(f"{path.relative_to(ROOT)}: class {node.name}, {node.end_lineno - node.lineno + 1} lines")
    assert not too_long, too_long
