"""A tiny staged video study end to end on the synthetic data (CPU, simulated GPU): search,
confirm (the winner of the search), resume, then the summary tables."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

JP = [sys.executable, "-m", "jouleprof.cli.main"]
STUDY = [
    "study",
    "video",
    "--stage",
    "search,confirm",
    "--models",
    "videomae-b",
    "--methods",
    "lora",
    "--tiny",
    "--base-precision",
    "fp32",
    "--precisions",
    "fp32",
    "--no-checkpointing-ablation",
    "--lr",
    "lora=1e-3",
    "--epochs",
    "1",
    "--confirm-epochs",
    "1",
    "--confirm-seeds",
    "5",
    "--synthetic-clips",
    "8,4,4",
    "--max-steps-per-epoch",
    "1",
    "--num-workers",
    "0",
    "--deploy-sustained-s",
    # ≥ 15 of the counter's 100 ms refreshes, so the sustained window's energy interval stays
    # above 0 J (at 0.2 s, 1–2 refreshes, its lower end could reach 0 and refuse the score; at
    # 0.6 s it still did once, on a loaded 2-core machine: "power_w must be positive")
    "1.5",
    "--idle-s",
    "0",
    "--simulate-gpu-w",
    "120",
]


def jp(*args, timeout=600):
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=timeout)


def jp_here(*args):
    """The CLI in this process (no interpreter start): for commands that run no cell."""
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_tiny_staged_study_runs_resumes_and_summarizes(tmp_path):
    out = tmp_path / "study"
    r = jp(*STUDY, "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    with (out / "runs.csv").open() as f:
        rows = {row["cell_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"lr-videomae-b-lora-1e-03", "confirm-videomae-b-lora-fp32-ck0-s5"}
    assert all(row["status"] == "complete" for row in rows.values()), rows
    run = json.loads(
        (out / "cells" / "confirm-videomae-b-lora-fp32-ck0-s5" / "run.json").read_text()
    )
    video = run["extra"]["video"]
    assert video["test"]["clips"] == 4 and len(video["epochs"]) == 1
    train_e = video["adaptation"]["energy"]
    assert train_e["source"] == "estimated" and "simulated" in train_e["reason"]
    assert train_e["lo"] <= train_e["value"] <= train_e["hi"]
    assert video["deployment"]["timed_passes"] == 30
    # The confirmation cell trains the search cell's model, method and precision: it takes
    # that cell's deployment cost instead of measuring it again.
    lr_run = json.loads((out / "cells" / "lr-videomae-b-lora-1e-03" / "run.json").read_text())
    measured = lr_run["extra"]["video"]["deployment"]
    assert "reused_from" not in measured
    reused = video["deployment"]["reused_from"]
    assert reused["run_dir"] == str(out.absolute() / "cells" / "lr-videomae-b-lora-1e-03")
    assert video["deployment"]["energy_per_clip"] == measured["energy_per_clip"]
    assert any("deployment cost not measured in this run" in n for n in run["notes"])
    # Training and validation are separate windows; validation never counts as training.
    ep = video["epochs"][0]
    assert ep["train"]["t1_s"] <= ep["val"]["t0_s"]
    # CPU: no allocated-memory peak, so NS# is unavailable with the reason (never a zero).
    ns = video["scores"]["deploy"]["ns_hash"]
    assert ns["value"] is None and "CUDA" in ns["reason"]
    assert video["deployment"]["power"]["source"] == "estimated"
    assert "simulated" in video["deployment"]["power"]["reason"]
    ns_e = video["scores"]["deploy"]["ns_e"]  # 4 val clips: a 0 % top-1 refuses the score
    if ep["val"]["correct"]:
        assert ns_e["source"] == "simulated" and ns_e["lo"] <= ns_e["value"] <= ns_e["hi"]
    else:
        assert ns_e["value"] is None and "accuracy" in ns_e["reason"]

    # Resume: the same command runs nothing again (in this process: a cell would need one).
    t0 = time.monotonic()
    again = jp_here(*STUDY, "--out", str(out))
    assert again.exit_code == 0, again.output[-2000:]
    assert "done before" in again.output
    assert time.monotonic() - t0 < 60
    # Other settings into the same folder are refused.
    other = jp_here(*[a if a != "lora=1e-3" else "lora=3e-3" for a in STUDY], "--out", str(out))
    assert other.exit_code != 0 and "different study" in other.output
    # More confirmation seeds are accepted: only the new seed's cell is added (a zero budget
    # starts none of it here), and study.json records the extension.
    more = [a if a != "5" else "5,6" for a in STUDY]
    grown = jp_here(*more, "--time-budget-s", "0", "--out", str(out))
    assert grown.exit_code == 0, grown.output[-2000:]
    assert json.loads((out / "study.json").read_text())["extended"][0]["to"] == [5, 6]
    with (out / "runs.csv").open() as f:
        st = {row["cell_id"]: row["status"] for row in csv.DictReader(f)}
    assert st["confirm-videomae-b-lora-fp32-ck0-s5"] == "complete"
    assert st["confirm-videomae-b-lora-fp32-ck0-s6"] not in ("complete", "failed")

    s = jp_here("summarize", str(out))
    assert s.exit_code == 0, s.output
    md = (out / "video_summary.md").read_text()
    assert "Best configuration per model by NS#" in md and "simulated" in md
    assert "| confirm-videomae-b-lora-fp32-ck0-s5 | complete |" in md
    assert "Confirmation" in md
    with (out / "video_runs.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 2 and {t["stage"] for t in table} == {"search-lr", "confirm"}
    assert {t["deploy_measured_in"] for t in table} == {"lr-videomae-b-lora-1e-03"}


def test_bad_names_are_refused_with_the_choices(tmp_path):
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    runner = CliRunner()
    r = runner.invoke(app, ["run", "video", "--model", "resnet", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "videomae-b" in r.output
    r = runner.invoke(
        app,
        [
            "run",
            "video",
            "--model",
            "hiera-b",
            "--method",
            "full",
            "--precision",
            "int8",
            "--out",
            str(tmp_path / "y"),
        ],
    )
    assert r.exit_code == 2 and "int8" in r.output
    assert not (tmp_path / "y").exists()


def test_summary_states_ties_inside_the_uncertainty():
    from jouleprof.report.video_summary import _statement, best_per_model

    def row(cell, method, ns, lo, hi, lo_acc, hi_acc):
        return {
            "cell_id": cell,
            "stage": "search-lr",
            "model": "m",
            "method": method,
            "precision": "bf16",
            "checkpointing": False,
            "lr": 1e-4,
            "status": "complete",
            "ns_hash": ns,
            "ns_hash_lo": lo,
            "ns_hash_hi": hi,
            "ns_hash_lo_acc": lo_acc,
            "ns_hash_hi_acc": hi_acc,
            "val_clips": 120,
        }

    rows = [
        row("a", "lora", 63.30, 63.20, 63.40, 61.0, 65.0),
        row("b", "bitfit", 63.25, 63.15, 63.35, 61.0, 65.0),  # overlaps a: tied
        row("c", "full", 62.00, 61.90, 62.10, 60.0, 63.5),  # apart, inside accuracy's
        row("d", "qlora", 50.00, 49.90, 50.10, 48.0, 52.0),  # apart on both
    ]
    (b,) = best_per_model(rows)
    assert b["best"]["cell_id"] == "a" and [r["cell_id"] for r in b["tied"]] == ["b"]
    assert [r["cell_id"] for r in b["within_accuracy"]] == ["c"]
    assert "tied, within the measurement's uncertainty" in _statement(b)
    (b2,) = best_per_model([rows[0], rows[2], rows[3]])
    text = _statement(b2)
    assert "outside the measurement's uncertainty" in text and "sampling interval" in text


def test_a_run_measures_its_own_deployment_where_deploy_from_is_unusable(tmp_path):
    r = jp(
        "run",
        "video",
        "--model",
        "videomae-b",
        "--method",
        "bitfit",
        "--precision",
        "fp32",
        "--tiny",
        "--epochs",
        "1",
        "--synthetic-clips",
        "8,4,0",
        "--max-steps-per-epoch",
        "1",
        "--num-workers",
        "0",
        "--deploy-sustained-s",
        "0.3",
        "--idle-s",
        "0",
        "--simulate-gpu-w",
        "120",
        "--deploy-from",
        str(tmp_path / "no-such-run"),
        "--out",
        str(tmp_path / "run"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    dep = run["extra"]["video"]["deployment"]
    assert "reused_from" not in dep and dep["sustained"]["passes"] > 0
    (why,) = [n for n in run["notes"] if n.startswith("deployment cost measured in this run")]
    assert "no-such-run" in why and "no readable run.json" in why
    assert "deployment cost measured in this run" in r.stderr  # said on the terminal too
    # each epoch's loss and validation accuracy are said as the run goes (a line kept)
    assert re.search(r"epoch 1/1: loss \d+\.\d{3}, val top-1 \d+\.\d %", r.stderr), r.stderr
    assert run["extra"]["video"]["num_workers"] == 0
