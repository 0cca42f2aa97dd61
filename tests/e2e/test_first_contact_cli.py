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


@pytest.mark.parametrize(
    "args",
    [
        ["measure", "--out", "{f}", "--", "true"],
        ["probe", "video", "--out", "{f}"],
        ["infer", "--model", "hiera-b", "--out", "{f}"],
        ["profile", "bert", "--out", "{f}"],
        ["study", "video", "--out", "{f}"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_out_that_is_a_file_is_refused_in_one_line_before_any_work(tmp_path, args):
    """The file is left as it was, and nothing (a study's stage line, a CPU note) comes first."""
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    f = tmp_path / "afile"
    f.write_text("keep me")
    r = CliRunner().invoke(app, [a.format(f=f) for a in args])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"error: --out {f} is a file, not a directory: choose another path"
    assert f.read_text() == "keep me"
