"""The tree passes ruff (lint and format), so CI keeps it that way."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]])
def test_ruff(args):
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    r = subprocess.run(
        [ruff, *args, "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
