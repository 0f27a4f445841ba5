"""The import graph of the package, read with `ast`: no cycles, and no module reaches into another's
private names. Imports inside functions count too: a lazy import still ties two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# where each package's files live in the repository (pyproject's package-dir)
PACKAGE_DIRS = {"specwatch": ROOT / "specwatch", "specwatch.collectors": ROOT / "collectors",
                "specwatch.widgets": ROOT / "widgets"}


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            # collectors/ and widgets/ sit outside specwatch/, so rglob over specwatch/ never sees them
            modules[name] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level, in functions, in classes; not under
    `if TYPE_CHECKING:`, which never runs."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Edges module → modules of ours it imports, and every `from X import _private` found."""
    modules = module_files()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            # a module named in a string is imported by name (importlib.import_module): cli.py's
            # command table is one
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
                edges[module].add(node.value)
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        edges[module].add(alias.name)
                continue
            source = _absolute(module, is_package, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    edges[module].add(submodule)  # `from package import submodule`
                elif source in modules:
                    edges[module].add(source)
                if alias.name.startswith("_") and not alias.name.startswith("__") and source != module:
                    private.append(f"{module} (line {node.lineno}) imports {alias.name} from {source}")
    for targets in edges.values():
        targets.intersection_update(modules)
    return {m: t - {m} for m, t in edges.items()}, private


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path a → b → … → a, or None (a depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(edges, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(edges[node]):
            if colour[nxt] == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if colour[nxt] == WHITE and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        colour[node] = BLACK
        return None

    for node in sorted(edges):
        if colour[node] == WHITE and (cycle := visit(node)):
            return cycle
    return None


def test_the_analysis_sees_the_whole_package():
    modules = module_files()
    for expected in ("specwatch.cli", "specwatch.commands.options", "specwatch.perf", "specwatch.sweep.loadgen",
                     "specwatch.collectors.vllm", "specwatch.widgets.verdict"):
        assert expected in modules
    edges, _ = import_graph()
    # cli imports each command module by name, lazily
    assert "specwatch.commands.check" in edges["specwatch.cli"]
    # a function-level import counts
    assert "specwatch.commands.options" in edges["specwatch.cli"]
    assert "specwatch.collectors.vllm" in edges["specwatch.commands.options"]


def test_no_import_cycle():
    edges, _ = import_graph()
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_no_module_imports_another_modules_private_names():
    _, private = import_graph()
    assert private == [], "\n".join(private)


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("source, expected", [
    ("from specwatch.window import _helper\n", ["imports _helper from specwatch.window"]),
    ("def f():\n    from .window import _helper\n", ["imports _helper from specwatch.window"]),
    ("from specwatch.window import __version__, helper\n", []),
])
def test_private_imports_are_caught_at_any_depth(tmp_path, monkeypatch, source, expected):
    folder = tmp_path / "specwatch"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "window.py").write_text("def _helper(): pass\n")
    (folder / "user.py").write_text(source)
    monkeypatch.setitem(PACKAGE_DIRS, "specwatch", folder)
    for other in ("specwatch.collectors", "specwatch.widgets"):
        monkeypatch.delitem(PACKAGE_DIRS, other)
    _, private = import_graph()
    assert [p.split(") ", 1)[1] for p in private] == expected
