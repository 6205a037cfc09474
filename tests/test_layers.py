"""The package order the README's layout states: no module imports one above it in the pipeline."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pettingllms_cli"
# Lowest first; a module may import its own layer and those before it. The plain helpers
# (errors, memory, distributed, jsonio) are layer 0, every layer may use them.
ORDER = ["tools", "envs", "spec", "models", "policy", "rollout", "algorithms", "analysis", "training", "cli"]


def layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "pettingllms_cli" or len(parts) == 1:
        return -1
    top = parts[1]
    if top in ("cli", "__main__", "__init__"):  # the package's own API (`import pettingllms_cli`) sits on top, as the CLI
        return len(ORDER)
    return ORDER.index(top) + 1 if top in ORDER else 0


def imports(path: Path) -> set[str]:
    """Every pettingllms_cli module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pettingllms_cli"):
            found |= {node.module} if node.module != "pettingllms_cli" else {f"pettingllms_cli.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pettingllms_cli")}
    return found


def test_no_module_imports_a_layer_above_it() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("pettingllms_cli", *path.relative_to(PACKAGE).with_suffix("").parts))
        upward += [f"{module} -> {m}" for m in sorted(imports(path)) if layer(m) > layer(module)]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_the_spec_imports_no_torch() -> None:
    code = "import sys, pettingllms_cli.spec; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
