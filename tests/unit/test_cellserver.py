"""Cells forked from a preloading server: each its own process, log, exit code and timeout."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from jouleprof.bench.cellserver import CellServer
from jouleprof.bench.executors import EXIT_TIMEOUT, LocalExecutor, run_process
from jouleprof.bench.matrix import Cell, run_matrix

PROBE = textwrap.dedent(
    """
    import json, os, sys, time
    mode = sys.argv[1]
    if mode == "ok":
        print(json.dumps({
            "pid": os.getpid(), "sid": os.getsid(0), "argv": sys.argv[1:],
            "preloaded": "jouleprof.units" in sys.modules, "env": os.environ.get("JP_PROBE"),
        }))
    elif mode == "exit3":
        sys.exit(3)
    elif mode == "crash":
        raise ValueError("the cell's own bug")
    elif mode == "sleep":
        time.sleep(60)
    """
)


@pytest.fixture
def probe_dir(tmp_path, monkeypatch):
    """A folder holding the module `cellprobe`, made the working directory."""
    (tmp_path / "cellprobe.py").write_text(PROBE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _argv(mode: str) -> list[str]:
    return [sys.executable, "-m", "cellprobe", mode]


def _cell_dir(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir()
    return d


def test_a_served_cell_is_its_own_process_with_the_preloaded_modules(probe_dir):
    server = CellServer(["jouleprof.units", "no_such_module_xyz"], probe_dir / "server.log")
    try:
        assert server.loaded == ["jouleprof.units"]
        assert "no_such_module_xyz" in server.failed
        d = _cell_dir(probe_dir, "c1")
        code = run_process(_argv("ok"), d, 30, env={"JP_PROBE": "seen", "PATH": "/usr/bin"},
                           server=server)  # fmt: skip
        assert code == 0
        got = json.loads((d / "cell.log").read_text().strip().splitlines()[-1])
        assert got["argv"] == ["ok"]
        assert got["preloaded"] is True
        assert got["env"] == "seen"
        assert got["pid"] == got["sid"]  # its own session: a timeout kills its whole group
        assert got["pid"] not in (server._p.pid, __import__("os").getpid())
        # A second cell from the same server is another process.
        d2 = _cell_dir(probe_dir, "c2")
        assert run_process(_argv("ok"), d2, 30, server=server) == 0
        got2 = json.loads((d2 / "cell.log").read_text().strip().splitlines()[-1])
        assert got2["pid"] != got["pid"]
    finally:
        server.close()


def test_served_cells_report_exit_codes_crashes_and_timeouts(probe_dir):
    server = CellServer(["jouleprof.units"], probe_dir / "server.log")
    try:
        assert run_process(_argv("exit3"), _cell_dir(probe_dir, "e"), 30, server=server) == 3
        d = _cell_dir(probe_dir, "crash")
        assert run_process(_argv("crash"), d, 30, server=server) == 1
        assert "ValueError: the cell's own bug" in (d / "cell.log").read_text()
        d = _cell_dir(probe_dir, "slow")
        assert run_process(_argv("sleep"), d, 1.0, server=server) == EXIT_TIMEOUT
        assert "killed" in (d / "error.txt").read_text()
        # The server goes on serving after a killed cell.
        assert run_process(_argv("ok"), _cell_dir(probe_dir, "after"), 30, server=server) == 0
    finally:
        server.close()


def test_only_python_dash_m_commands_are_served():
    assert CellServer.accepts([sys.executable, "-m", "jouleprof.cli.main", "run"])
    assert not CellServer.accepts([sys.executable, "script.py"])
    assert not CellServer.accepts(["/usr/bin/env", "-m", "x"])
    assert not CellServer.accepts([sys.executable, "-c", "print(1)"])


def test_a_matrix_runs_through_one_preloading_executor_and_falls_back_for_other_commands(
    probe_dir,
):
    ex = LocalExecutor(preload=["jouleprof.units"])
    cells = [
        Cell("a", (*_argv("ok"),), {"k": 1}, timeout_s=30),
        Cell("b", (*_argv("exit3"),), {"k": 2}, timeout_s=30),
        Cell("c", (sys.executable, str(probe_dir / "cellprobe.py"), "ok"), {"k": 3}, timeout_s=30),
    ]
    try:
        res = run_matrix(probe_dir / "study", {}, cells, executor=ex, progress=False)
        # Resumed with the same executor (a study runs its stages so): nothing runs again.
        again = run_matrix(probe_dir / "study", {}, cells, executor=ex, progress=False)
    finally:
        ex.close()
    codes = {
        c.cell_id: json.loads((probe_dir / "study/cells" / c.cell_id / "cell.json").read_text())
        for c in cells
    }
    assert [codes[k]["attempts"][-1]["exit_code"] for k in "abc"] == [0, 3, 0]
    assert len(res.ran) == 3 and "b" in res.failed
    assert [c for c in again.ran if c != "b"] == []  # nothing but the failed cell again
    a = json.loads((probe_dir / "study/cells/a/cell.log").read_text().strip().splitlines()[-1])
    c = json.loads((probe_dir / "study/cells/c/cell.log").read_text().strip().splitlines()[-1])
    assert a["preloaded"] is True  # forked from the server
    assert c["preloaded"] is False  # a script: a plain process
    assert (probe_dir / "study" / "cellserver.log").exists()


def test_probe_workers_run_served_or_plain_with_their_exit_codes_and_timeouts(probe_dir):
    from jouleprof.bench.probe import _run_argv

    server = CellServer(["jouleprof.units"], probe_dir / "server.log")
    try:
        for srv in (server, None):
            log = probe_dir / f"w_{srv is None}.log"
            assert _run_argv(_argv("ok"), log, {"PATH": "/usr/bin"}, 30, srv)[0] == 0
            assert json.loads(log.read_text().strip().splitlines()[-1])["preloaded"] is (
                srv is not None
            )
            assert _run_argv(_argv("exit3"), log, None, 30, srv) == (
                3,
                "worker exited with status 3",
            )
            rc, why = _run_argv(_argv("sleep"), log, None, 1.0, srv)
            assert rc == -9 and why.startswith("timed out")
    finally:
        server.close()


def _cudaish(root: Path) -> None:
    """A stand-in for a package that initializes CUDA on import: it records which process
    imported it in imported_by.txt."""
    pkg = root / "cudaish"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import os\nwith open('imported_by.txt', 'a') as f:\n    f.write(f'{os.getpid()}\\n')\n"
    )


def test_deferred_packages_are_refused_while_preloading_and_imported_by_the_cell(probe_dir):
    """A package that initializes CUDA on import (bitsandbytes, imported by `import peft`) must
    not be imported by the server, or it could not fork; the cell imports it afterwards, and
    an availability check made while preloading still finds it."""
    _cudaish(probe_dir)
    (probe_dir / "optional_user.py").write_text(
        textwrap.dedent(
            """
            import importlib.util
            try:
                import cudaish
                HAVE = True
            except ImportError:
                HAVE = False
            FOUND = importlib.util.find_spec("cudaish") is not None
            """
        )
    )
    (probe_dir / "defercheck.py").write_text(
        textwrap.dedent(
            """
            import json, os, sys
            preloaded = "optional_user" in sys.modules
            import optional_user
            before = "cudaish" in sys.modules
            import cudaish
            print(json.dumps({"pid": os.getpid(), "preloaded": preloaded,
                              "have": optional_user.HAVE, "found": optional_user.FOUND,
                              "before": before}))
            """
        )
    )
    server = CellServer(["optional_user"], probe_dir / "server.log", deferred=("cudaish",))
    try:
        assert server.loaded == ["optional_user"]
        assert not (probe_dir / "imported_by.txt").exists()  # the server never ran it
        d = _cell_dir(probe_dir, "c")
        assert run_process([sys.executable, "-m", "defercheck"], d, 30, server=server) == 0
        got = json.loads((d / "cell.log").read_text().strip().splitlines()[-1])
    finally:
        server.close()
    # Preloaded, its optional import saw "not installed", its availability check saw the
    # package, and the cell imported the package itself: only the cell's pid is recorded.
    assert got["preloaded"] is True and got["have"] is False and got["found"] is True
    assert got["before"] is False
    assert (probe_dir / "imported_by.txt").read_text().split() == [str(got["pid"])]


def test_without_deferral_the_preload_imports_the_package(probe_dir):
    """The control for the test above: the same preload with nothing deferred imports it."""
    _cudaish(probe_dir)
    (probe_dir / "optional_user.py").write_text(
        "try:\n    import cudaish\nexcept ImportError:\n    pass\n"
    )
    server = CellServer(["optional_user"], probe_dir / "server.log", deferred=())
    try:
        assert (probe_dir / "imported_by.txt").read_text().split() == [str(server._p.pid)]
    finally:
        server.close()


def test_the_server_defers_bitsandbytes_unless_told_otherwise(monkeypatch):
    from jouleprof.bench import cellserver

    seen = []
    monkeypatch.setattr(
        cellserver, "serve", lambda preload, deferred: seen.append((preload, deferred))
    )
    cellserver.main(["torch", "peft"])
    cellserver.main(["torch", "--defer=a,b"])
    cellserver.main(["torch", "--defer="])
    assert seen == [
        (["torch", "peft"], cellserver.DEFERRED),
        (["torch"], ["a", "b"]),
        (["torch"], []),
    ]
    assert "bitsandbytes" in cellserver.DEFERRED


def test_a_server_whose_preload_initialized_cuda_refuses_and_names_the_module(probe_dir):
    """A stand-in torch whose CUDA a preloaded module initializes (the working directory comes
    first on the server's path, so it shadows the real one there)."""
    fake = probe_dir / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import types\n_on = False\ncuda = types.SimpleNamespace(is_initialized=lambda: _on)\n"
    )
    (probe_dir / "quiet.py").write_text("import torch\n")
    (probe_dir / "initcuda.py").write_text("import torch\ntorch._on = True\n")
    with pytest.raises(RuntimeError, match=r"initialized CUDA \(importing initcuda\)"):
        CellServer(["quiet", "initcuda", "jouleprof.units"], probe_dir / "server.log")
