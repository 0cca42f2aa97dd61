"""hardware_record, environment_record and git_record: complete, honest and anonymous."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from jouleprof.hardware import environment_record, git_record, hardware_record


def assert_anonymous(record: dict) -> None:
    text = json.dumps(record)
    assert socket.gethostname() not in text
    assert "GPU-" not in text.replace("GPU-<uuid>", "")


def test_hardware_record_keys_and_no_hostname() -> None:
    record = hardware_record()
    for key in ("gpus", "driver_version", "cpu", "ram_bytes", "os"):
        assert key in record
    assert set(record["cpu"]) >= {"model", "logical_cores", "physical_cores"}
    assert record["ram_bytes"] > 0
    assert record["os"]["kernel"]
    gpus = record["gpus"]
    if isinstance(gpus, dict):  # no GPU here: a reason, never a made-up GPU
        assert gpus["value"] is None and gpus["reason"]
    assert_anonymous(record)


def test_environment_record() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1,GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"}
    record = environment_record(env)
    assert record["python"].count(".") == 2
    assert record["jouleprof"]
    assert record["cuda_visible_devices"] == "1,GPU-<uuid>"
    assert set(record["packages"]) >= {"numpy", "pandas", "nvidia-ml-py", "torch"}
    assert isinstance(record["packages"]["numpy"], str)
    torch = record["torch"]
    assert "version" in torch or torch["reason"]
    assert environment_record({})["cuda_visible_devices"]["value"] is None
    assert_anonymous(record)


def git(path: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=path,
        check=True,
        capture_output=True,
    )


def test_git_record(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    assert git_record(tmp_path)["revision"] is None
    assert git_record(tmp_path)["reason"]
    git(tmp_path, "init", "-q", "-b", "trunk")
    assert "no commits" in git_record(tmp_path)["reason"]
    (tmp_path / "a.txt").write_text("1")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    record = git_record(tmp_path)
    assert len(record["revision"]) == 40
    assert record["dirty"] is False and record["branch"] == "trunk"
    (tmp_path / "a.txt").write_text("2")
    assert git_record(tmp_path)["dirty"] is True
    assert_anonymous(git_record(tmp_path))


def test_git_record_does_not_reread_a_copied_checkout(tmp_path: Path, monkeypatch) -> None:
    """A checkout copied with its file times (new inodes and change times) reads clean without
    git re-reading every tracked file at every run (trace2's refresh/sum_scan counts them)."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "trunk")
    for i in range(30):
        f = src / f"f{i}.txt"
        f.write_text(str(i))
        os.utime(f, (1.7e9, 1.7e9))  # older than the index: not "racily clean"
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "one")
    copy = tmp_path / "copy"
    shutil.copytree(src, copy, symlinks=True)  # copy2: file times kept, inodes new
    trace = tmp_path / "trace.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    record = git_record(copy)
    assert record["dirty"] is False
    text = trace.read_text() if trace.exists() else ""
    if "refresh/sum_scan" not in text:
        pytest.skip("this git writes no trace2 refresh statistics")
    scans = [json.loads(line) for line in text.splitlines() if "refresh/sum_scan" in line]
    assert all(int(e["value"]) == 0 for e in scans), scans
    (copy / "f3.txt").write_text("33")  # an edit is still seen
    assert git_record(copy)["dirty"] is True


def test_a_launcher_hands_its_git_record_to_what_it_starts(tmp_path: Path, monkeypatch) -> None:
    """A study's cells and a probe's workers record the git state their launcher read once,
    for the same checkout only; a bad or foreign entry falls back to asking git."""
    from jouleprof.hardware import GIT_RECORD_ENV, git_record_env, inherited_git_record

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    git(tmp_path, "init", "-q", "-b", "trunk")
    (tmp_path / "a.txt").write_text("1")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "one")
    env = git_record_env(tmp_path)
    got = inherited_git_record(tmp_path, env)
    assert got["revision"] == git_record(tmp_path)["revision"] and got["dirty"] is False
    assert got["source"].startswith("recorded by the launching process")
    assert inherited_git_record(tmp_path / "elsewhere", env) is None  # another checkout
    assert inherited_git_record(tmp_path, {GIT_RECORD_ENV: "{not json"}) is None
    assert inherited_git_record(tmp_path, {}) is None
    # measure() in a process started with the entry records it, without running git
    from jouleprof.measurement import _machine_records

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(GIT_RECORD_ENV, env[GIT_RECORD_ENV])
    monkeypatch.setenv("PATH", "")  # no git to ask
    assert _machine_records(())[2] == got


def test_study_cells_get_the_launchers_git_record(tmp_path: Path, monkeypatch) -> None:
    from jouleprof.bench.executors import cell_env
    from jouleprof.bench.matrix import Plan
    from jouleprof.hardware import GIT_RECORD_ENV

    monkeypatch.chdir(tmp_path)
    plan = Plan(tmp_path, [], False, None, None, lambda c, s: None)
    env = cell_env([], plan.launch_env)
    assert GIT_RECORD_ENV in env and env["CUDA_VISIBLE_DEVICES"] == ""
    assert plan.launch_env is plan.launch_env  # taken once per call
