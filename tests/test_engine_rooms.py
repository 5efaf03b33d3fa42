"""The engine's rooms stay apart: each operations module takes the bank pool and none reaches
back to the MemoryEngine facade, and no two modules of engine/ import each other in a circle
(the split of the old one-class engine must not grow back into one)."""
from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _engine_imports() -> dict[str, set[str]]:
    """engine module -> the engine modules it imports (at any level of the file)."""
    out: dict[str, set[str]] = {}
    for path in ENGINE.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level == 1:
                    module = f"memoryplus.engine.{module}" if module else "memoryplus.engine"
                if module == "memoryplus.engine":
                    deps |= {a.name for a in node.names}
                elif module.startswith("memoryplus.engine."):
                    deps.add(module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names if a.name.startswith("memoryplus.engine.")}
        out[path.stem] = deps - {path.stem}
    return out


def test_no_engine_module_imports_the_facade():
    users = sorted(m for m, deps in _engine_imports().items() if "memory_engine" in deps)
    assert not users, f"these engine modules import the MemoryEngine facade: {users}"


def test_no_import_cycle_inside_the_engine():
    graph = _engine_imports()
    cycles: list[str] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:     # depth first; a back edge is a cycle
        for dep in sorted(graph.get(module, ())):
            if dep in path:
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep in graph and dep not in done:
                visit(dep, path + [dep])
        done.add(module)
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert not cycles, "import cycles inside engine/:\n" + "\n".join(cycles)
