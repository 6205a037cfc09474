"""The Python API: docs/python.md's examples run, `import pettingllms_cli` stays cheap, and calls print no library noise."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys

from tests.conftest import ROOT


def test_docs_python_md_examples_run(monkeypatch, one_thread):
    monkeypatch.chdir(ROOT)  # the examples name experiments/smoke.yaml
    result = doctest.testfile(
        str(ROOT / "docs/python.md"), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 10 and result.failed == 0


def test_import_is_cheap_and_the_api_is_there():
    code = (
        "import sys, pettingllms_cli as pl; cheap = 'torch' not in sys.modules; "
        "names = [callable(getattr(pl, n)) for n in pl.__all__]; print(cheap, all(names), sorted(pl.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "True True ['compare', 'evaluate', 'export', 'load_spec', 'play', 'train']"


def test_api_calls_print_no_library_warnings(tmp_path):
    code = (
        "import pettingllms_cli as pl; "
        "sets = ['train.steps=1', 'algorithm.group_size=2', 'train.problems_per_step=1', 'env.eval_problems=1']; "
        f"run = pl.train('experiments/smoke.yaml', {str(tmp_path / 'run')!r}, sets, progress=False); "
        "pl.play(run, question='Tom has 3 pens and buys 2. How many?')"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.strip() == "" and out.stdout.strip() == "", (out.stdout + out.stderr)[-2000:]
