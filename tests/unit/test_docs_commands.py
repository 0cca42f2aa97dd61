"""Every `jouleprof` command shown in the README's and docs' ```bash blocks names a command that
exists and only options that command takes, so an example a user copies does not fail on a
renamed flag. Parsed against the CLI's own command tree, in this process (nothing runs)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _commands(text: str) -> list[str]:
    """The `jouleprof ...` command lines of the page's ```bash blocks, continuation lines
    joined, comments and pipes cut, `&&` chains split."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s#.*$", "", line).strip()
            for part in line.split("&&"):
                part = part.split("|")[0].split(">")[0].strip()
                if part.startswith("jouleprof "):
                    out.append(part)
    return out


CASES = [(page.name, cmd) for page in PAGES for cmd in _commands(page.read_text())]


def test_the_pages_show_commands():
    assert len(CASES) >= 40, "the extraction found too few commands: its patterns broke"


@pytest.mark.parametrize(("page", "command"), CASES)
def test_documented_command_and_options_exist(page, command):
    import typer.main

    from jouleprof.cli.main import app

    # Groups are told by their `commands` (typer may bring its own copy of click's classes).
    cmd = typer.main.get_command(app)
    argv = shlex.split(command)[1:]
    path = ["jouleprof"]
    while hasattr(cmd, "commands") and argv and argv[0] in cmd.commands:
        path.append(argv[0])
        cmd = cmd.commands[argv.pop(0)]
    assert not hasattr(cmd, "commands"), f"{page}: {command!r}: {' '.join(path)} needs a command"
    known = {name for p in cmd.params for name in (*p.opts, *p.secondary_opts)}
    for token in argv:
        if token == "--":  # what follows is the measured command's
            break
        token = token.strip("[]")  # an optional flag written [--json]
        if token.startswith("-") and token not in ("-", "..."):
            name = token.split("=", 1)[0]
            assert name in known, f"{page}: {command!r}: {' '.join(path)} has no option {name}"
