"""The README stays true to the tree: its layout names every module, its commands name files that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _layout_block() -> str:
    section = README.split("## Layout", 1)[1]
    return section.split("```", 2)[1]


def test_readme_layout_names_every_module_package_and_bench_script():
    layout = _layout_block()
    package = ROOT / "pettingllms_cli"
    # Every module of every package; the registered envs are in the README's "Environments" table instead.
    envs = {"base.py", "messages.py", "intents.py", "loading.py", "checker.py"}
    modules = [
        p.name
        for p in package.rglob("*.py")
        if p.stem not in {"__init__", "__main__"} and (p.parent.name != "envs" or p.name in envs)
    ]
    packages = [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()]
    benches = [p.name for p in (ROOT / "bench").glob("*.py")]
    missing = [name for name in modules + packages + benches if not re.search(rf"(?<![\w/]){re.escape(name)}", layout)]
    assert not missing, f"README 'Layout' does not mention: {missing}"


def test_files_the_readme_points_to_exist():
    named = set(re.findall(r"\b((?:experiments|bench|docs)/[\w./-]+\.(?:yaml|py|md))", README))
    assert named, "the README names no experiment, bench or doc file"
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"README names files that do not exist: {missing}"
