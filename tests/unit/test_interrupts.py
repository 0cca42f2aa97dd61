"""SIGTERM (timeout, kill, scancel) takes Ctrl-C's path: no cell is left running on the GPU
with nobody to record it, and the run directories say what happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from jouleprof.interrupts import Terminated, exit_code_of, interrupt_note

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from jouleprof.bench.executors import LocalExecutor
    from jouleprof.bench.matrix import Cell, run_matrix
    from jouleprof.interrupts import terminate_as_interrupt

    assert terminate_as_interrupt()
    root = Path(sys.argv[1])
    cell = (sys.executable, "-c",
            f"import os, time; open({str(root / 'cell.pid')!r}, 'w').write(str(os.getpid())); "
            "time.sleep(120)")
    try:
        run_matrix(root / "study", {}, [Cell("slow", cell, {}, timeout_s=300)],
                   executor=LocalExecutor(), progress=False)
    except KeyboardInterrupt as e:
        print("caught", type(e).__name__, flush=True)
        sys.exit(143)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_terminated_study_stops_its_cells_and_records_them(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path)], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    pid_file = tmp_path / "cell.pid"
    deadline = time.time() + 120
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    cell_pid = int(pid_file.read_text())
    p.send_signal(signal.SIGTERM)  # to the study alone, as `timeout` sends it
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "caught Terminated" in out
    deadline = time.time() + 30
    while _alive(cell_pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(cell_pid)  # the cell, in its own session, did not outlive the study
    rec = json.loads((tmp_path / "study/cells/slow/cell.json").read_text())
    assert rec["attempts"][-1]["status"] == "incomplete"  # recorded, and resumable


def test_terminated_is_an_interrupt_with_its_own_note_and_exit_code():
    e = Terminated("terminated by signal 15 (SIGTERM)")
    assert isinstance(e, KeyboardInterrupt)
    assert exit_code_of(e) == 143 and exit_code_of(KeyboardInterrupt()) == 130
    assert interrupt_note(e).startswith("terminated (SIGTERM)")
    assert interrupt_note(KeyboardInterrupt()).startswith("interrupted (Ctrl-C)")


def _sigterm_is_default(_):
    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_the_attributions_pool_workers_die_on_sigterm_whatever_the_parent_installed():
    """Pool.terminate ends workers with SIGTERM: a handler inherited from the parent (ours in
    the CLI, or a framework's) must not keep them alive."""
    import multiprocessing as mp

    from jouleprof.attribution.parallel import _one_blas_thread

    before = signal.signal(signal.SIGTERM, lambda s, f: None)
    try:
        pool = mp.get_context("fork").Pool(1, initializer=_one_blas_thread)
        try:
            assert pool.map(_sigterm_is_default, [0]) == [True]
        finally:
            pool.terminate()
            pool.join()
    finally:
        signal.signal(signal.SIGTERM, before)
