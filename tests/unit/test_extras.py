"""A command whose optional package is missing says which package, which extra installs it,
and stops before any work: never "unexpected ModuleNotFoundError (a bug in jouleprof)"."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jouleprof.errors import JouleprofError
from jouleprof.extras import advice, require

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """
import os, sys
BLOCK = set(filter(None, os.environ.get("JP_BLOCK", "").split(",")))
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Block())
"""


def test_require_names_the_package_and_its_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda m: None if m == "peft" else real(m))
    require("x", "json")  # installed: nothing said
    with pytest.raises(JouleprofError, match=r"x needs peft.*pip install 'jouleprof\[video\]'"):
        require("x", "json", "peft")
    with pytest.raises(JouleprofError, match=r"pip install 'jouleprof\[train\]'"):
        require("x", "peft", extra="train")
    with pytest.raises(JouleprofError, match="pip install jp_no_such_module"):
        require("x", "jp_no_such_module")
    assert advice("sklearn.ensemble") == (
        "pip install 'jouleprof[predict]' (or pip install scikit-learn)"
    )
    assert advice("numpy") is None  # a core dependency: not jouleprof's to advise on


def _jouleprof_without(tmp_path, blocked, *args):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT / 'src'}", "JP_BLOCK": blocked}
    env.pop("JOULEPROF_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip


def test_a_command_checks_its_packages_before_it_starts(tmp_path):
    r = _jouleprof_without(tmp_path, "torch", "profile", "vjepa2", "--preset", "tiny",
                           "--steps", "1", "--out", str(tmp_path / "run"))  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "jouleprof profile needs torch, which is not installed" in r.stderr
    assert "pip install 'jouleprof[torch]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # nothing started
    r = _jouleprof_without(tmp_path, "peft", "probe", "video", "--out", str(tmp_path / "p"))
    assert r.returncode == 2 and "pip install 'jouleprof[video]'" in r.stderr, r.stderr


def test_an_import_deeper_down_is_told_the_same_way(tmp_path):
    pytest.importorskip("sklearn")
    r = _jouleprof_without(tmp_path, "sklearn", "predict", "evaluate")
    assert r.returncode == 2, r.stderr
    assert "this command needs sklearn, which is not installed" in r.stderr
    assert "jouleprof[predict]" in r.stderr and "a bug in jouleprof" not in r.stderr
