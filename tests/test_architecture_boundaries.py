"""The layout check (issue 14): which folder may import what, read from the source with ast.

Every import counts, at module level or inside a function: a lazy import is still a
dependency. Each failure names the file and line of the import that breaks the rule.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]       # the repository root is the package `memoryplus`
NOT_SHIPPED = {"tests", "scripts", "docs"}       # the checkout's own tools, not in the package
# The only product modules that may use the test doubles (memoryplus demo / bench / chaos).
DOUBLES_USERS = re.compile(r"cli/(demo|bench|chaos)(_\w+)?\.py")


@cache
def sources() -> dict[str, ast.Module]:
    """Package-relative path -> parsed module, for every .py file shipped in the package."""
    return {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(ROOT.rglob("*.py")) if shipped(p)}


def shipped(path: Path) -> bool:
    """A file of the package: not the checkout's tools, nor a hidden folder (.venv, .git)."""
    top = path.relative_to(ROOT).parts[0]
    return top not in NOT_SHIPPED and not top.startswith(".") and top not in ("dist", "build")


def imports(path: str) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in the file; relative ones resolved."""
    package = ["memoryplus", *Path(path).parent.parts]
    out = []
    for node in ast.walk(sources()[path]):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out += [(f"{module}.{a.name}", node.lineno) for a in node.names]
    return out


def folder(path: str) -> str | None:
    parts = Path(path).parts
    return parts[0] if len(parts) > 1 else None      # None: the root's entry files


def offending(where: str, forbidden: tuple[str, ...]) -> list[str]:
    """Imports of `forbidden` modules (or their submodules) in folder `where`."""
    return [f"{path}:{line} imports {name}" for path in sources() if folder(path) == where
            for name, line in imports(path)
            if any(name == f or name.startswith(f + ".") for f in forbidden)]


def test_engine_knows_nothing_of_pygpt_qt_or_its_callers():
    assert offending("engine", ("pygpt_net", "PySide6", "shiboken6", "memoryplus.plugin", "memoryplus.ui",
                                "memoryplus.client", "memoryplus.cli")) == []


def test_plugin_runs_no_graph_code():
    assert offending("plugin", ("graphiti_core", "kuzu", "neo4j", "memoryplus.engine")) == []


def test_ui_talks_only_to_the_service():
    """No client, engine or worker, and no op sent by name over the wire (submit("op", {...})):
    the typed records of wire/ are what the service takes and returns."""
    found = offending("ui", ("memoryplus.client", "memoryplus.engine", "memoryplus.worker"))
    for path, tree in sources().items():
        if folder(path) == "ui":
            found += [f"{path}:{n.lineno} sends an op over the wire ({ast.unparse(n)[:60]})"
                      for n in ast.walk(tree)
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                      and n.func.attr in ("submit", "call") and n.args
                      and (isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)
                           or len(n.args) > 1 and isinstance(n.args[1], ast.Dict))]
    assert found == []


def test_the_mcp_server_talks_only_to_the_service():
    """An interface like the CLI: no client, engine, worker or plugin of its own."""
    assert offending("mcp_server", ("memoryplus.client", "memoryplus.engine", "memoryplus.worker",
                                    "memoryplus.plugin", "memoryplus.ui", "memoryplus.cli",
                                    "memoryplus.testing")) == []


def test_only_demo_bench_and_chaos_use_the_test_doubles():
    assert [f"{path}:{line} imports {name}" for path in sources() if folder(path) != "testing"
            and not DOUBLES_USERS.fullmatch(path)
            for name, line in imports(path) if name.startswith("memoryplus.testing")] == []


def folder_graph() -> dict[str, dict[str, str]]:
    """folder -> {folder it imports: the first such import, as file:line}."""
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sources():
        src = folder(path)
        for name, line in imports(path):
            parts = name.split(".")
            if src and parts[0] == "memoryplus" and len(parts) > 1 and (ROOT / parts[1]).is_dir() \
                    and parts[1] != src:
                graph[src].setdefault(parts[1], f"{path}:{line}")
    return graph


def test_the_lower_floors_import_only_what_is_below_them():
    """config/ < common/ < wire/: the contract and the helpers both sides share know nothing
    of either side (a client, the worker, the engine, the plugin)."""
    below = {"config": set(), "common": {"config"}, "wire": {"config", "common"}}
    graph = folder_graph()
    assert {f"{src} -> {dst} ({at})" for src, allowed in below.items()
            for dst, at in graph.get(src, {}).items() if dst not in allowed} == set()


def test_no_import_cycles_between_folders():
    graph = folder_graph()
    cycles, done = [], set()

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            loop = trail[trail.index(node):] + [node]
            cycles.append(" -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(loop, loop[1:])) + f" -> {node}")
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, {})):
            visit(nxt, trail + [node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])
    assert cycles == []


def test_every_folder_with_code_is_a_listed_package():
    """setuptools ships only the packages pyproject lists: a folder left out is missing from
    every install and add-on, though the checkout's tests pass."""
    block = re.search(r"^packages\s*=\s*\[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    listed = set(re.findall(r'"([\w.]+)"', re.sub(r"#.*", "", block.group(1))))
    folders = {Path(path).parent for path in sources()}
    assert {".".join(["memoryplus", *f.parts]) for f in folders} - listed == set()
