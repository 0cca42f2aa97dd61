"""Every `jouleprof` command shown in the README's and docs' ```bash blocks names a command that
exists and only options that command takes, so an example a user copies does not fail on a
renamed flag. Parsed against the CLI's own command tree, in this process (nothing runs). Their
python blocks name only what exists, and their relative links reach a file and heading."""

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


def _python_blocks() -> list[tuple[str, str]]:
    return [
        (page.name, block)
        for page in PAGES
        for block in re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.M | re.S)
    ]


def _resolve(node, names: dict):
    """The jouleprof object an expression names (a bound name or attributes of one), or None."""
    import ast

    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, names)
        if base is not None:
            assert hasattr(base, node.attr), f"{ast.unparse(node)}: no attribute {node.attr}"
            return getattr(base, node.attr)
    return None


@pytest.mark.parametrize(("page", "code"), _python_blocks())
def test_documented_python_names_and_keywords_exist(page, code):
    """Each block parses; what it imports from jouleprof exists; each call of a jouleprof
    function or class passes only keywords that it takes."""
    import ast
    import importlib
    import inspect

    tree = ast.parse(code)
    names: dict = {"jouleprof": importlib.import_module("jouleprof")}  # pages import it once
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "jouleprof":
                    names[(a.asname or a.name).split(".")[0]] = importlib.import_module("jouleprof")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jouleprof"):
            mod = importlib.import_module(node.module)
            for a in node.names:
                assert hasattr(mod, a.name), f"{page}: {node.module} has no {a.name}"
                names[a.asname or a.name] = getattr(mod, a.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = _resolve(node.func, names)
        if fn is None or not callable(fn):
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            continue
        params = sig.parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            continue
        taken = {p.name for p in params}
        for kw in node.keywords:
            if kw.arg is not None:
                assert kw.arg in taken, f"{page}: {ast.unparse(node.func)} takes no {kw.arg}="


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


LINKED_PAGES = [*PAGES, *sorted((ROOT / "benchmarks").glob("**/README.md"))]


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_their_file_and_heading(page):
    for link in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = page.parent / path if path else page
        assert target.exists(), f"{page.name}: link {link} reaches no file"
        if anchor and target.suffix == ".md":
            heads = re.findall(r"^#+ (.*)$", target.read_text(), flags=re.M)
            assert anchor in {_slug(h) for h in heads}, f"{page.name}: no heading #{anchor}"
