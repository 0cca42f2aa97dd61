"""`jouleprof sensors --lag-out` refuses what it cannot do in one line (no GPU, too short a
loop, an existing run directory); the loop itself runs on a GPU (tests/gpu)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _jp(*args):
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", "sensors", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.parametrize(
    "args, why",
    [
        (["--lag-s", 3], "--lag-s 3 is too short"),
        (["--run-dir", "{tmp}"], "exists: give a new directory"),
    ],
)
def test_the_lag_loop_refuses_bad_options_in_one_line(tmp_path, args, why):
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    r = _jp("--lag-out", tmp_path / "s.json", *args)
    assert r.returncode != 0 and why in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "s.json").exists()


@pytest.mark.skipif(_has_cuda(), reason="a CUDA GPU is here: tests/gpu runs the loop")
def test_without_a_gpu_the_lag_loop_says_so(tmp_path):
    r = _jp("--lag-out", tmp_path / "s.json")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    said = " ".join(r.stderr.split())
    assert "no CUDA GPU" in said or "install torch" in said
    assert not (tmp_path / "s.json").exists()
