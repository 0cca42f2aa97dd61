"""The README's two set-up commands are the ones CI runs, verbatim, and they can work.

The commands are taken from the README itself: the first ```bash block that runs pytest. CI
(.ci/run) must contain both lines exactly, in the same order, as its last two commands, so that
CI fails whenever the README's set-up does. A fast part of them runs here too: the extras the
install names must bring pytest and hypothesis, and the first command's jouleprof options must
parse.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"


def _bash_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(offset, lines) of every ```bash fenced block."""
    out = []
    for m in re.finditer(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        lines = [ln for ln in m.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
        out.append((m.start(), lines))
    return out


def setup_commands() -> tuple[int, list[str]]:
    for offset, lines in _bash_blocks(README.read_text()):
        if any("pytest" in ln for ln in lines):
            return offset, lines
    raise AssertionError("README.md has no ```bash block that runs pytest (the set-up commands)")


def _ci_commands() -> list[str]:
    return [
        ln for ln in CI.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def test_readme_has_two_setup_commands_install_then_tests():
    _, lines = setup_commands()
    assert len(lines) == 2, f"the set-up block must hold two commands, it holds {lines}"
    assert lines[0].startswith("pip install -e "), lines[0]
    assert "jouleprof profile" in lines[0], "the first command installs and runs the main job"
    assert "pytest" in lines[1]


def test_ci_runs_the_readme_commands_verbatim_and_last():
    _, lines = setup_commands()
    ci = _ci_commands()
    assert ci[-2:] == lines, (
        ".ci/run must end with the README's two set-up commands, verbatim:\n"
        + "\n".join(lines)
        + "\n.ci/run ends with:\n"
        + "\n".join(ci[-2:])
    )


def test_cpu_only_advice_stands_before_the_commands():
    text = README.read_text()
    offset, _ = setup_commands()
    advice = text.find("download.pytorch.org/whl/cpu")
    assert advice != -1, "the README must say how to install a CPU build of torch"
    assert advice < offset, "the CPU-only advice must come before the two set-up commands"


def _extras_closure(extras: set[str], table: dict[str, list[str]]) -> list[str]:
    """Every requirement the extras pull in, following jouleprof[...] self-references."""
    reqs, seen, todo = [], set(), list(extras)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        assert name in table, f"README installs extra {name!r}, which pyproject.toml lacks"
        for r in table[name]:
            m = re.fullmatch(r"jouleprof\[(.+)\]", r.replace(" ", ""))
            if m:
                todo.extend(m.group(1).split(","))
            else:
                reqs.append(r)
    return reqs


def test_the_install_brings_what_the_test_command_needs():
    _, lines = setup_commands()
    install = lines[0].split("&&")[0]
    m = re.search(r"\.\[([^\]]+)\]", install)
    assert m, f"the install command names no extras: {install}"
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    reqs = _extras_closure(set(m.group(1).split(",")), table)
    names = {re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() for r in reqs}
    for needed in ("pytest", "hypothesis"):
        assert needed in names, f"{install!r} does not install {needed} (the tests need it)"


def test_the_first_commands_jouleprof_options_parse():
    _, lines = setup_commands()
    run = lines[0].split("&&", 1)[1].strip()
    argv = shlex.split(run)
    assert argv[0] == "jouleprof"
    # --help after the README's arguments: click rejects an unknown option or a bad value for
    # a typed one before it prints the help, so this parses the command without running it.
    p = subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *argv[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout + p.stderr
