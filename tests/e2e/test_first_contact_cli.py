"""`jouleprof --version`, and help that reads whole at 80 columns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import jouleprof

ROOT = Path(__file__).resolve().parents[2]
JP = [sys.executable, "-m", "jouleprof.cli.main"]


def jp(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=300, env=env)


def test_version_is_the_packages():
    r = jp("--version")
    assert r.returncode == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert r.stdout.strip() == f"jouleprof {version}" == f"jouleprof {jouleprof.__version__}"


@pytest.mark.parametrize("command", [(), ("profile",), ("attribute",), ("measure",)])
def test_help_fits_80_columns_and_cuts_nothing(command):
    r = jp(*command, "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in r.stdout  # an option name or help cut short
    if command:
        # every option the command has is named whole in its help
        opts = set(re.findall(r"--[a-z][a-z0-9-]+", r.stdout))
        assert "--help" in opts and len(opts) > 1
