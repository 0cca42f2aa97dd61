"""One energy-aware cell in process: its run directory, figures and spans; on the CPU the GPU
energy is unavailable with the reason; a failing cell becomes its own error row."""

import json

import pytest

pytest.importorskip("torch")

from jouleprof.workloads.energy_aware.cell import CellSpec, run_cell  # noqa: E402

TINY = dict(
    dataset="synthetic", epochs=1, batch_size=32, infer_passes=1, warmup_steps=1, data_n=60,
    data_side=8, arch_overrides={"width": 8, "depth": 1}, idle_s=0.0, device="cpu",
)  # fmt: skip


def test_cpu_cell_writes_its_figures_and_says_why_energy_is_missing(tmp_path):
    summary = run_cell(CellSpec(arch="cnn", lam=1e-2, kind="nonzero-macs", **TINY), tmp_path / "c")
    rec = json.loads((tmp_path / "c" / "run.json").read_text())
    assert rec["status"] == "complete" and rec["kind"] == "energy-aware-cell"
    assert summary["internal_energy"]["unit"] == "MAC" and summary["internal_energy"]["value"] > 0
    assert 0 <= summary["activation_sparsity"]["value"] <= 1
    for key in ("train_gpu_energy_j", "infer_gpu_energy_j", "train_energy_per_sample_j"):
        assert summary[key]["value"] is None
        assert "ran on the CPU" in summary[key]["reason"]
    assert summary["train_time_s"]["value"] > 0
    t = rec["extra"]["spans_s"]
    assert t["train"][1] <= t["eval"][0] <= t["eval"][1] <= t["infer"][0]
    spans = (tmp_path / "c" / "spans.csv").read_text().splitlines()
    assert [r.split(",")[1] for r in spans[1:]] == ["train", "eval", "infer"]
    assert rec["extra"]["train"]["steps"] == 2  # 48 training images, batch 32


def test_every_lambda_runs_the_same_steps_and_a_larger_lambda_lowers_e(tmp_path):
    e = {}
    for lam in (0.0, 1.0):
        spec = CellSpec(arch="mlp", lam=lam, **{**TINY, "epochs": 4, "lr": 1e-2})
        s = run_cell(spec, tmp_path / f"l{lam}")
        rec = json.loads((tmp_path / f"l{lam}" / "run.json").read_text())
        e[lam] = (s["internal_energy"]["value"], rec["extra"]["train"]["steps"])
    assert e[0.0][1] == e[1.0][1] == 8
    assert e[1.0][0] < 0.5 * e[0.0][0]


def test_a_failing_cell_is_its_own_row(tmp_path):
    from jouleprof.bench.matrix import Cell
    from jouleprof.workloads.energy_aware.study import InProcessSlot

    spec = CellSpec(arch="mlp", **{**TINY, "dataset": "mnist", "data_dir": str(tmp_path)})
    cell = Cell("bad", ("python", "-m", "x", json.dumps(spec.to_json()), "{cell_dir}"))
    (tmp_path / "bad").mkdir()
    assert InProcessSlot()(cell, tmp_path / "bad") == 1
    assert "lacks train-images-idx3-ubyte" in (tmp_path / "bad" / "error.txt").read_text()
