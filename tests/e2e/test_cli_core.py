"""`jouleprof measure`, `sensors` and `netscore` end to end, through a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import jouleprof_many

JP = [sys.executable, "-m", "jouleprof.cli.main"]


def _wait_for_samples(samples_csv, deadline: float, rows: int = 50) -> None:
    """Until the run has recorded `rows` sensor reads (about a second of the simulated GPU's),
    so that a signal lands inside a measured stretch even on a loaded machine (a fixed 1 s
    sleep once left the counter without a read inside the work interval)."""
    while time.time() < deadline:
        if samples_csv.exists() and samples_csv.read_text().count("\n") > rows:
            return
        time.sleep(0.1)


def run(*args, **kw):
    # A safety net only: a 2-core machine under heavy load takes minutes for what takes seconds.
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=600, **kw)


def test_help_imports_neither_torch_nor_pynvml():
    code = (
        "import sys; from jouleprof.cli.main import app; "
        "print('torch' in sys.modules, 'pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_measure_passes_exit_code_through_and_writes_a_run(tmp_path):
    out = tmp_path / "run"
    t0 = time.monotonic()
    r = run(
        "measure",
        "--out",
        str(out),
        "--idle-s",
        "0.2",
        "--simulate-gpu-w",
        "250",
        "--json",
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(1.2); raise SystemExit(7)",
    )
    elapsed_s = time.monotonic() - t0
    assert r.returncode == 7, r.stderr
    summary = json.loads(r.stdout)
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "failed" and rec["extra"]["exit_code"] == 7
    # The command sleeps 1.2 s; its wall time also holds its interpreter's start, which a loaded
    # CPU stretches without bound: only our own wait around the whole CLI bounds it above.
    assert 1.2 <= summary["wall_time_s"]["value"] < elapsed_s
    e = summary["sim0.energy_j"]
    # read from the package's simulated GPU: labelled so, never "measured"
    assert e["signal"] == "counter" and e["source"] == "simulated"
    assert {f["source"] for k, f in summary.items() if k.startswith("sim0.")} == {"simulated"}
    assert rec["summary"]["sim0.energy_j"]["source"] == "simulated"
    assert summary["wall_time_s"]["source"] == "measured"
    assert e["value"] == pytest.approx(250 * summary["wall_time_s"]["value"], rel=0.02)
    assert summary["sim0.crosscheck_instant_pct"]["value"] == pytest.approx(0, abs=2)
    assert (out / "samples.csv").stat().st_size > 100
    # No GPU here: GPU energy is unavailable, with the reason, never a zero.
    if "gpu0.energy_j" not in summary:
        assert summary["gpu_energy_j"]["value"] is None
        assert summary["gpu_energy_j"]["reason"]


def test_measure_without_any_sensor_still_times_and_says_why(tmp_path):
    r = run(
        "measure",
        "--out",
        str(tmp_path / "r"),
        "--gpus",
        "none",
        "--no-rapl",
        "--json",
        "--",
        "true",
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["wall_time_s"]["value"] >= 0
    assert s["gpu_energy_j"]["value"] is None and s["gpu_energy_j"]["reason"]


def test_ctrl_c_stops_the_command_and_keeps_a_readable_run(tmp_path):
    out = tmp_path / "run"
    started = tmp_path / "started"  # the command's first act: Ctrl-C then hits it running
    p = subprocess.Popen(
        [
            *JP,
            "measure",
            "--out",
            str(out),
            "--idle-s",
            "0",
            "--simulate-gpu-w",
            "100",
            "--",
            sys.executable,
            "-c",
            f"import time; open({str(started)!r}, 'w').close(); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # as at a terminal: a job started in the background of a script (`cmd &`) inherits
        # SIGINT ignored, and Python then installs no KeyboardInterrupt for it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    while not started.exists() and time.time() < deadline:
        time.sleep(0.1)
    _wait_for_samples(out / "samples.csv", deadline)
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    p.communicate(timeout=300)
    assert p.returncode == 130
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "incomplete"
    assert rec["summary"]["sim0.energy_j"]["value"] > 0
    assert any("interrupted" in n for n in rec["notes"])


def test_sigterm_to_jouleprof_alone_stops_the_command_and_keeps_a_readable_run(tmp_path):
    """`timeout`, `kill PID` and Slurm signal jouleprof, not its command: it passes SIGTERM on
    and closes the run as Ctrl-C does."""
    out = tmp_path / "run"
    started = tmp_path / "started"
    p = subprocess.Popen(
        [*JP, "measure", "--out", str(out), "--idle-s", "0", "--simulate-gpu-w", "100", "--",
         sys.executable, "-c",
         f"import os, time; open({str(started)!r}, 'w').write(str(os.getpid())); time.sleep(60)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while not (started.exists() and started.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    _wait_for_samples(out / "samples.csv", deadline)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=300)
    assert p.returncode == 143
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "incomplete"
    assert rec["summary"]["sim0.energy_j"]["value"] > 0
    assert any(n.startswith("terminated (SIGTERM)") for n in rec["notes"])
    with pytest.raises(ProcessLookupError):  # the command did not outlive the measurement
        os.kill(int(started.read_text()), 0)


BAD = [
    (["--gpus", "7", "--", "true"], "GPU"),
    (["--interval-ms", "0", "--", "true"], "--interval-ms"),
    (["--", "no-such-command-xyz"], "command not found"),
    (["--gpus", "x", "--", "true"], "GPU indices"),
]


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory):
    """Every BAD measure command's result, and --out naming a file, in one process."""
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "f").write_text("keep me")
    commands = [["measure", "--out", tmp / f"r{i}", *args] for i, (args, _) in enumerate(BAD)]
    commands.append(["measure", "--out", tmp / "f", "--", "true"])
    return tmp, jouleprof_many(commands)


@pytest.mark.parametrize(("i", "message"), [(i, m) for i, (_, m) in enumerate(BAD)],
                         ids=[" ".join(a) for a, _ in BAD])  # fmt: skip
def test_measure_bad_input(bad_results, i, message):
    r = bad_results[1][i]
    assert r.returncode != 0
    assert message in (r.stderr + r.stdout)


def test_measure_out_is_a_file(bad_results):
    tmp, results = bad_results
    r = results[len(BAD)]
    assert r.returncode == 2 and "is a file" in r.stderr
    assert (tmp / "f").read_text() == "keep me"


def test_sensors_lists_what_is_missing_and_why():
    r = run("sensors", "--probe-s", "0.3", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["signals"]
    for row in rep["signals"]:
        if not row["available"]:
            assert row["note"]


def test_netscore_json_and_bad_input():
    r = run(
        "netscore",
        "--accuracy",
        "95.09",
        "--params-m",
        "86",
        "--macs-g",
        "180",
        "--time-s",
        "10",
        "--power-w",
        "100",
        "--memory-mib",
        "617",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d) == {"netscore", "ns_e", "ns_m", "ns_hash"}
    r = run("netscore", "--accuracy", "90", "--memory-mib", "-3")
    assert r.returncode == 2 and "memory_mib must be a positive" in r.stderr
