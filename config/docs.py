"""Generates docs/SETTINGS.md from the schema and from the tests that prove each option.

A test proves an option by carrying `@pytest.mark.option("<id>")`; an option no test names
shows which issue will implement it, so a dead option is visible at a glance.
Run `python -m memoryplus.config.docs` after changing the schema or those marks.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from memoryplus.config.schema import TABS, options

ROOT = Path(__file__).resolve().parents[1]


def proofs(tests_dir: Path = ROOT / "tests") -> dict[str, list[tuple[str, str | None]]]:
    """Option id -> (test id, what it needs to run or None) for each test marked as proving it;
    `@pytest.mark.option("x", needs="NEO4J_URI")` marks a test that runs only where it is set."""
    found: dict[str, list[tuple[str, str | None]]] = {}
    for path in sorted(tests_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)
                        and dec.func.attr == "option" and dec.args
                        and isinstance(dec.args[0], ast.Constant)):
                    needs = next((k.value.value for k in dec.keywords
                                  if k.arg == "needs" and isinstance(k.value, ast.Constant)), None)
                    found.setdefault(dec.args[0].value, []).append(
                        (f"tests/{path.name}::{node.name}", needs))
    return found


def _range(o) -> str:
    if o.choices:
        return ", ".join(f"`{c}`" for c in o.choices)
    if o.use == "models":
        return "PyGPT's models"
    if o.ge is not None:
        step = f", step {o.step}" if o.step else ""
        return f"{o.ge:g} – {o.le:g}{step}"
    return ""


def _default(o) -> str:
    if o.secret and o.default:
        return "(set)"
    if o.default == "":
        return "(empty)"
    return f"`{o.default}`"


def render() -> str:
    tests = proofs()
    lines = ["# MemoryPlus settings", "",
             "Generated from `config/schema.py` by `python -m memoryplus.config.docs`; do not edit by hand.",
             "Each option shows where it lives in PyGPT (Plugins → Settings… → MemoryPlus, on its tab), "
             "what it does, and the test that proves it does it — or the issue that will. "
             "`python scripts/check_option_proofs.py` checks each proof: it removes the option's "
             "effect in a scratch copy and expects a named test to fail.", ""]
    for tab, title in TABS.items():
        lines += [f"## {title}", "", "| Option | id | Default | Range | What it does | Proven by |",
                  "|---|---|---|---|---|---|"]
        for o in options():
            if o.tab != tab:
                continue
            proof = "<br>".join(f"`{t}`" + (f" (runs only when {needs} is set)" if needs else "")
                                for t, needs in tests.get(o.id, [])) or f"not yet (issue #{o.issue})"
            desc = o.description.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {o.label} | `{o.id}` | {_default(o)} | {_range(o)} | {desc} | {proof} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    target = ROOT / "docs" / "SETTINGS.md"
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
