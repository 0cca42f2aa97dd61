"""The probe's shared builds: cells that differ only in batch size train one built model."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from jouleprof.bench.probe import ProbeSpec, plan  # noqa: E402
from jouleprof.bench.probe_cell import RESULT_JSON, ProbeCell, run_cell  # noqa: E402

OPTS = {
    "timed_s": 0.05,
    "warmup_steps": 1,
    "num_classes": 5,
    "lr": 1e-4,
    "frames": None,
    "size": None,
    "tiny": True,
    "min_steps": 2,
}


def test_plan_keeps_the_cells_of_one_build_together_largest_batch_first():
    spec = ProbeSpec(
        models=("videomae-b", "swin3d-b"),
        methods=("full", "lora"),
        precisions=("bf16", "fp32"),
        batch_sizes=(1, 4),
        cells_per_process=8,
    )
    cells = plan(spec)
    assert len(cells) == 16
    for first, second in zip(cells[::2], cells[1::2], strict=True):
        assert first.build_key == second.build_key
        assert (first.batch, second.batch) == (4, 1)
    # groups come in the order of their largest batch's rank: bf16 before fp32
    assert [c.precision for c in cells[:8]] == ["bf16"] * 8
    # one cell per process, or sharing off: every batch-4 cell before any batch-1 cell
    for s in (
        ProbeSpec(**{**_kw(spec), "cells_per_process": 1}),
        ProbeSpec(**{**_kw(spec), "share_builds": False}),
    ):
        batches = [c.batch for c in plan(s)]
        assert batches == sorted(batches, reverse=True)


def _kw(spec):
    from dataclasses import asdict

    return {k: tuple(v) if isinstance(v, list) else v for k, v in asdict(spec).items()}


def test_a_worker_shares_a_build_across_batch_sizes_and_never_hands_on_a_failed_one(tmp_path):
    kept: dict = {}
    b2 = ProbeCell("swin3d-b", "lora", "fp32", False, 2)
    b1 = ProbeCell("swin3d-b", "lora", "fp32", False, 1)
    other = ProbeCell("swin3d-b", "bitfit", "fp32", False, 2)

    r2 = run_cell(b2, tmp_path / "b2", OPTS, kept)
    assert r2["status"] == "ok", r2
    assert r2["build"] == "built for this cell"
    assert kept["key"] == b2.build_key
    trainer = kept["trainer"]

    r1 = run_cell(b1, tmp_path / "b1", OPTS, kept)
    assert r1["status"] == "ok", r1
    assert r1["build"].startswith("shared with the previous cell")
    assert r1["trainable_params"] == r2["trainable_params"]
    assert kept["trainer"] is trainer  # handed on again
    # the shared cell has its own run directory and record saying so
    rec = json.loads((tmp_path / "b1" / "run.json").read_text())
    assert rec["status"] == "complete"
    assert rec["extra"]["probe_build"]["build"] == r1["build"]
    assert json.loads((tmp_path / "b1" / RESULT_JSON).read_text())["batch"] == 1
    # schedules restart as in a fresh build: the step counter counts this cell's steps only
    assert trainer.global_step == OPTS["warmup_steps"] + r1["timed_steps"]

    # another build key: the kept trainer is dropped and a fresh one built
    ro = run_cell(other, tmp_path / "other", OPTS, kept)
    assert ro["status"] == "ok" and ro["build"] == "built for this cell"
    assert ro["trainable_params"] < r1["trainable_params"]
    assert kept["trainer"] is not trainer

    # a failed cell hands nothing on, so the next cell of its key builds afresh
    bad = ProbeCell("swin3d-b", "bitfit", "fp32", False, 0)  # batch 0: refused by the config
    rb = run_cell(bad, tmp_path / "bad", OPTS, kept)
    assert rb["status"] == "error" and "batch_size" in rb["error"]
    assert kept == {}
    again = run_cell(other, tmp_path / "again", OPTS, kept)
    assert again["status"] == "ok" and again["build"] == "built for this cell"


def test_without_a_worker_store_every_cell_builds(tmp_path):
    cell = ProbeCell("swin3d-b", "bitfit", "fp32", False, 1)
    r = run_cell(cell, tmp_path / "c", OPTS)
    assert r["status"] == "ok" and r["build"] == "built for this cell"
