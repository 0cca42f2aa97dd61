"""The BERT workload: the registry finds it, bad configurations fail before any GPU work with a
message naming the field, the protocol writes a run directory (simulated GPU on CPU), and the
study's cells are built from the design."""

from __future__ import annotations

import json

import pytest

from jouleprof.distributed.context import RankContext
from jouleprof.errors import ConfigError
from jouleprof.workloads.bert import BertTrainConfig, get_preset
from jouleprof.workloads.bert_strategies import check_before_gpu_work

TINY = dict(
    layers=1,
    hidden=32,
    heads=2,
    seq=8,
    batch=2,
    precision="fp32",
    warmup_steps=1,
    min_measure_s=0.3,
    min_steps=2,
)


def _ctx(world, local_world=None):
    return RankContext(0, 0, world, local_world or world, "h", "job")


def test_registry_builds_the_bert_workload():
    from jouleprof.workloads import registry

    wl = registry.get("bert")
    cfg = wl.config("tiny", 3, None, {"seq": 16})
    assert (cfg.batch, cfg.seq, cfg.layers) == (3, 16, 2)
    assert wl.describe(cfg)["hidden"] == 64


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"hidden": 100, "heads": 12}, "divisible by heads"),
        ({"strategy": "zero3"}, "strategy must be one of"),
        ({"precision": "fp8"}, "precision must be one of"),
        ({"layers": 0}, "layers must be an integer"),
        ({"mask_prob": 0.0}, "mask_prob"),
    ],
)
def test_bad_configurations_name_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        BertTrainConfig(**kw)
    with pytest.raises(ValueError, match="unknown BERT preset"):
        get_preset("huge")


def test_strategies_are_checked_before_any_gpu_work(monkeypatch):
    monkeypatch.delenv("JOULEPROF_SIM_GPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ConfigError, match="needs 2 GPUs, but 1 are visible"):
        check_before_gpu_work(BertTrainConfig(strategy="ddp"), _ctx(2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with pytest.raises(ConfigError, match="splits heads \\(6\\) 4 ways"):
        check_before_gpu_work(BertTrainConfig(strategy="tp", hidden=384, heads=6), _ctx(4))
    with pytest.raises(ConfigError, match="splits hidden"):
        check_before_gpu_work(BertTrainConfig(strategy="tp", hidden=390, heads=6), _ctx(4))
    with pytest.raises(ConfigError, match="strategy 'none' trains one process"):
        check_before_gpu_work(BertTrainConfig(), _ctx(2))
    check_before_gpu_work(BertTrainConfig(strategy="tp", hidden=768, heads=12), _ctx(4))


def test_protocol_writes_the_figures_of_a_run(tmp_path):
    from jouleprof.workloads.bert_protocol import run_protocol

    out = tmp_path / "run"
    res = run_protocol(BertTrainConfig(**TINY), out, simulate_gpu_w=250.0)
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "complete" and rec["config"]["bert"]["hidden"] == 32
    s = {k: v["value"] for k, v in rec["summary"].items()}
    assert s["steps"] >= 2 and s["wall_time_s"] >= 0.3
    assert s["energy_j"] == pytest.approx(250.0 * s["wall_time_s"], rel=0.05)
    assert s["j_per_step"] == pytest.approx(s["energy_j"] / s["steps"])
    assert s["j_per_sample"] == pytest.approx(s["j_per_step"] / 2)
    assert s["peak_mem_allocated_bytes"] is None  # CPU: said, not zero
    assert "not on a CUDA device" in rec["summary"]["peak_mem_allocated_bytes"]["reason"]
    assert res["j_per_step"] == pytest.approx(s["j_per_step"])
    assert len(rec["extra"]["bert"]["step_times_s"]) == s["steps"]


def test_protocol_cli_rejects_bad_input_with_one_line(capsys):
    from jouleprof.workloads.bert_protocol import main

    assert main(["--hidden", "100", "--heads", "12", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: hidden (100) must be divisible by heads (12)")


def test_study_design_and_cells():
    from jouleprof.cli.study_bert import build_cells, design_points

    values = {
        "layers": (12, 2),
        "hidden": (768, 256),
        "heads": (12,),
        "seq": (128,),
        "batch": (32, 8),
    }
    pts = design_points(values, "axes")
    assert (
        len(pts) == 4 and {"layers": 12, "hidden": 256, "heads": 4, "seq": 128, "batch": 32} in pts
    )
    assert len(design_points(values, "grid")) == 8
    cells = build_cells(
        pts, strategy="ddp", gpus=2, precision="bf16", measure_s=6.0, timeout_s=60.0
    )
    assert cells[0].gpus == 2 and cells[0].cell_id.endswith("-ddp2")
    assert "{cell_dir}" in cells[0].argv and "jouleprof.workloads.bert_protocol" in cells[0].argv
    with pytest.raises(ValueError, match="divisible by 8"):
        build_cells(
            [{"layers": 2, "hidden": 768, "heads": 12, "seq": 8, "batch": 2}],
            strategy="tp",
            gpus=8,
            precision="bf16",
            measure_s=1.0,
            timeout_s=60.0,
        )
