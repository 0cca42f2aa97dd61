"""Crashed and damaged run directories through the CLI, and every error path of the commands
first contact meets: a clear one-line message, never a Python traceback."""

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

CHILD = r"""
import sys, time
from jouleprof.measurement import measure
from jouleprof.timeline.recorder import PhaseRecorder

def busy(s):
    t = time.perf_counter() + s
    while time.perf_counter() < t:
        pass

cfg = dict(simulate_gpu_w=300.0, idle_s=0.2, counter_interval_s=0.1, rapl=False)
with measure(sys.argv[1], **cfg) as m:
    rec = PhaseRecorder(m.clock, m.span_writer(), device="cpu", record=m.record)
    i = 0
    while True:
        with rec.step():
            with rec.phase("forward"):
                busy(0.04)
            with rec.phase("backward"):
                busy(0.06)
        i += 1
        if i == 25:
            print("ready", flush=True)
"""


def jp(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    out = tmp_path_factory.mktemp("crash") / "killed"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return out


def test_a_sigkilled_run_is_reported_crashed_and_its_recorded_part_attributed(killed):
    assert json.loads((killed / "run.json").read_text())["status"] == "running"
    r = jp("attribute", str(killed), "--device", "sim0", "--method", "proportional")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "crashed" in r.stderr and "is gone" in r.stderr
    assert (killed / "phases_proportional.csv").is_file()


def test_a_samples_file_cut_mid_line_is_attributed_with_a_note(killed, tmp_path):
    import shutil

    d = tmp_path / "cut"
    shutil.copytree(killed, d)
    text = (d / "samples.csv").read_text()
    (d / "samples.csv").write_text(text[: len(text) - 7])  # a crash during a write
    with (d / "spans.csv").open("a") as f:
        f.write("999,forward,not-a-time,")  # and a damaged span row
    r = jp("attribute", str(d), "--device", "sim0", "--method", "proportional")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "partial last row" in r.stderr


def test_spans_past_the_last_sample_attribute_the_covered_steps(killed, tmp_path):
    import shutil

    d = tmp_path / "short"
    shutil.copytree(killed, d)
    lines = (d / "samples.csv").read_text().splitlines(keepends=True)
    (d / "samples.csv").write_text("".join(lines[: len(lines) * 2 // 3]))  # the sampler died
    r = jp("attribute", str(d), "--device", "sim0", "--method", "proportional", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert any("outside the samples' time range" in n for n in doc["devices"][0]["notes"])


BAD = [
    (("attribute", "/nonexistent/run"), "not a directory"),
    (("attribute", "{tmp}", "--method", "nope"), "unknown --method"),
    (("attribute", "{run}", "--instant-kernel", "wobble:3"), "kernel"),
    (("attribute", "{empty}"), "no phase spans"),
    (("attribute", "{run}", "--device", "gpu7"), "gpu7"),
    (("attribute", "{run}", "--confidence", "1.5"), "--confidence"),
    (("attribute", "{run}", "--n-boot", "10"), "--n-boot"),
    (("profile", "nosuchworkload", "--steps", "1"), "nosuchworkload"),
    (("profile", "vjepa2", "--preset", "enormous", "--steps", "1"), "enormous"),
    (("profile", "vjepa2", "--mode", "sideways", "--steps", "1"), "sideways"),
    (("profile", "vjepa2", "--steps", "0"), "steps"),
    (("profile", "vjepa2", "--steps", "1", "--out", "{file}"), "is a file"),
    (("profile", "vjepa2", "--steps", "1", "--gpus", "x,y"), "gpus"),
    (("measure",), "no command given"),
    (("measure", "--interval-ms", "0", "--", "true"), "interval"),
    (("measure", "--out", "{file}", "--", "true"), "is a file"),
    (("measure", "--gpus", "-1", "--", "true"), "gpus"),
    (("measure", "--", "/no/such/program"), "/no/such/program"),
]


@pytest.fixture(scope="module")
def bad_results(killed, tmp_path_factory):
    """Every BAD command's result, all run in one process (jouleprof_many)."""
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "afile").write_text("x")
    (tmp / "emptyrun").mkdir()
    subs = {
        "{tmp}": str(tmp),
        "{run}": str(killed),
        "{file}": str(tmp / "afile"),
        "{empty}": str(tmp / "emptyrun"),
    }
    commands = [[subs.get(a, a) for a in args] for args, _ in BAD]
    return jouleprof_many(commands, env={"COLUMNS": "80"})


@pytest.mark.parametrize(
    ("i", "says"), [(i, says) for i, (_, says) in enumerate(BAD)],
    ids=[" ".join(a[:3]) for a, _ in BAD],
)  # fmt: skip
def test_bad_input_gives_a_message_not_a_traceback(bad_results, i, says):
    r = bad_results[i]
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    assert says.lower() in (r.stderr + r.stdout).lower(), r.stderr + r.stdout
