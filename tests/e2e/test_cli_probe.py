"""`jouleprof probe video` and `jouleprof infer` end to end on the CPU (tiny models)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

JP = [sys.executable, "-m", "jouleprof.cli.main"]
COLUMNS = [
    "model",
    "method",
    "precision",
    "checkpointing",
    "batch",
    "status",
    "trainable_params",
    "peak_mem_mib",
    "s_per_step",
    "j_per_step",
    "j_per_step_lo",
    "j_per_step_hi",
]


def run(*args, timeout=600):
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=timeout)


def run_here(*args):
    """The CLI in this process (no interpreter start): for calls that start no worker."""
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    return CliRunner().invoke(app, list(args))


def _rows(path):
    with path.open(newline="") as f:
        r = csv.reader(f)
        header = next(r)
        return header, [dict(zip(header, row, strict=True)) for row in r]


def test_probe_writes_rows_refuses_pairs_and_resumes(tmp_path):
    out = tmp_path / "probe"
    args = [
        "probe",
        "video",
        "--tiny",
        "--models",
        "swin3d-b",
        "--methods",
        "full,lora",
        "--precisions",
        "fp32,int8",
        "--batch-sizes",
        "2",
        "--timed-s",
        "0.2",
        "--warmup-steps",
        "1",
        "--cells-per-process",
        "3",
        "--out",
        str(out),
    ]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    header, rows = _rows(out / "probe.csv")
    assert header[: len(COLUMNS)] == COLUMNS and "error" in header
    by = {(row["method"], row["precision"]): row for row in rows}
    assert len(rows) == 4
    assert by[("full", "int8")]["status"] == "refused"
    assert "int8 base is frozen" in by[("full", "int8")]["error"]
    for key in (("full", "fp32"), ("lora", "fp32")):
        row = by[key]
        assert row["status"] == "ok", row
        assert float(row["s_per_step"]) > 0 and int(row["trainable_params"]) > 0
        assert row["j_per_step"] == "" and row["energy_note"].startswith("unavailable")
    assert int(by[("lora", "fp32")]["trainable_params"]) < int(
        by[("full", "fp32")]["trainable_params"]
    )
    lora8 = by[("lora", "int8")]
    try:
        import bitsandbytes  # noqa: F401

        assert lora8["status"] == "ok", lora8
    except ImportError:
        assert lora8["status"] == "error" and "bitsandbytes" in lora8["error"]
    # the workers were forked from the preloading server (the default), which left its log
    assert (out / "cellserver.log").exists()
    # each ok cell left a readable run directory
    cell = out / "cells" / "swin3d-b_lora_fp32_nockpt_b2"
    assert json.loads((cell / "run.json").read_text())["status"] == "complete"
    # and says where its wall time went, in order, from its start to its end
    marks = json.loads((cell / "result.json").read_text())["marks_s"]
    order = ["measure_open", "built", "warm", "window_end", "measure_closed", "energy", "end"]
    assert list(marks) == order and [marks[k] for k in order] == sorted(marks.values())
    # rerun: every row is already there, nothing runs again
    r2 = run_here(*args)
    assert r2.exit_code == 0, r2.output
    assert "already in" in r2.output
    assert len(_rows(out / "probe.csv")[1]) == 4


def test_probe_bad_names_list_the_choices(tmp_path):
    r = run_here("probe", "video", "--models", "resnet", "--out", str(tmp_path / "p"))
    assert r.exit_code == 2
    assert "videomae-b" in r.output and "hiera-b" in r.output
    assert "Traceback" not in r.output
    r = run_here("probe", "video", "--methods", "prefix", "--out", str(tmp_path / "p"))
    assert r.exit_code == 2 and "adalora" in r.output
    assert not (tmp_path / "p").exists()


def test_infer_measures_latency_and_says_why_energy_is_missing(tmp_path):
    out = tmp_path / "inf"
    r = run(
        "infer",
        "--model",
        "timesformer-b",
        "--tiny",
        "--precision",
        "fp32",
        "--sustained-s",
        "0.3",
        "--passes",
        "3",
        "--warmup",
        "1",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "run.json").read_text())["extra"]["inference"]
    assert res["latency_passes"] == 3
    assert 0 < res["latency_s_p50"] <= res["latency_s_p95"]
    assert res["window_passes"] >= 1 and res["window_s"] >= 0.3
    if res["j_per_clip"] is None:
        assert res["energy_note"].startswith("unavailable")
    r = run_here("infer", "--model", "hiera-b", "--protocol", "burst", "--out", str(tmp_path / "x"))
    assert r.exit_code == 2 and "clip" in r.output and "steady" in r.output
