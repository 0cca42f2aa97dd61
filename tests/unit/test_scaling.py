"""The training-energy law: fitting recovers known constants, predictions carry an interval that
widens on several GPUs, the accuracy table rebuilds from the committed sweep, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jouleprof.predict.scaling import TrainLaw, fit, predict_config, predict_rows
from jouleprof.predict.train_features import (
    analytic_counts,
    comm_bytes,
    efficiency_speedup,
    parameter_count,
    train_features,
)
from jouleprof.workloads.bert import BertTrainConfig

SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "bert_sweep"
TRUE = TrainLaw(
    a0_s=0.004,
    a1_s=0.003,
    fmax_flop_s=6e14,
    h0=900.0,
    p=3.0,
    p0_w=120.0,
    ef_j_per_flop=2e-12,
    eb_j_per_byte=3e-11,
)


def _rows(law, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for L, H, S, B in [
        (2, 768, 128, 32),
        (6, 768, 128, 32),
        (12, 768, 128, 32),
        (24, 768, 128, 32),
        (12, 256, 128, 32),
        (12, 512, 128, 32),
        (12, 1024, 128, 32),
        (12, 768, 64, 32),
        (12, 768, 512, 32),
        (12, 768, 128, 8),
        (12, 768, 128, 128),
        (6, 512, 256, 16),
        (18, 1024, 512, 32),
        (4, 1024, 64, 64),
    ]:
        cfg = BertTrainConfig(layers=L, hidden=H, heads=H // 64, seq=S, batch=B)
        f = train_features(cfg)
        r = {
            "id": cfg.shape_key,
            "layers": L,
            "hidden": H,
            "train_flops": f["train_flops"],
            "bytes_moved": f["bytes_moved"],
        }
        t, e = predict_rows(law, [r])
        r["s_per_step"] = float(t[0]) * (1 + rng.normal(0, 0.002))
        r["j_per_step"] = float(e[0]) * (1 + rng.normal(0, 0.002))
        rows.append(r)
    return rows


def test_fit_recovers_a_known_law_within_noise():
    rows = _rows(TRUE)
    held = [rows[2], rows[11]]  # two configurations inside the swept range the fit never saw
    law = fit([r for r in rows if r not in held], loo=False)
    t, e = predict_rows(law, held)
    t0, e0 = predict_rows(TRUE, held)
    assert np.max(np.abs(e / e0 - 1)) < 0.02 and np.max(np.abs(t / t0 - 1)) < 0.03
    assert law.p0_w == pytest.approx(120.0, rel=0.1)
    assert law.ef_j_per_flop == pytest.approx(2e-12, rel=0.1)


def test_fit_refuses_too_few_rows():
    with pytest.raises(ValueError, match="≥ 6"):
        fit(_rows(TRUE)[:3])


def test_counts_are_the_models_own():
    cfg = BertTrainConfig(layers=24, hidden=1024, heads=16, seq=512, batch=32)
    a = analytic_counts(cfg)
    assert a["params"] == parameter_count(24, 1024, 512) == 335_174_458  # BERT-large, MLM head
    # 6·N·tokens is the usual estimate; attention and the vocab head add to it
    assert 1.0 < a["train_flops"] / (6 * a["params"] * 32 * 512) < 1.4
    assert comm_bytes(1000, 1, "ddp")["allreduce_bytes"] == 0
    assert comm_bytes(1000, 4, "ddp")["allreduce_bytes"] == pytest.approx(2 * 0.75 * 4000)
    assert comm_bytes(1000, 2, "fsdp")["reducescatter_bytes"] == pytest.approx(2000)
    assert efficiency_speedup(1.0, 0.5, 4) == pytest.approx(0.5)


def test_traced_flops_equal_the_analytic_count():
    from jouleprof.predict.train_features import traced_counts

    cfg = BertTrainConfig(layers=1, hidden=64, heads=4, seq=16, batch=2, precision="bf16")
    tr = traced_counts(cfg)
    assert tr["traced_train_flops"] == pytest.approx(analytic_counts(cfg)["train_flops"], rel=1e-9)
    assert tr["traced_bytes_bfloat16"] > 0 and tr["traced_bytes_float32"] > 0


def test_several_gpus_widen_the_interval_and_say_why():
    cfg = BertTrainConfig(layers=12, hidden=768, heads=12, seq=128, batch=32)
    one = predict_config(TRUE, cfg, 1, "none")
    four = predict_config(TRUE, cfg, 4, "ddp")
    assert one["j_per_step_lo"] < one["j_per_step"] < one["j_per_step_hi"]
    w1 = (one["j_per_step_hi"] - one["j_per_step_lo"]) / one["j_per_step"]
    w4 = (four["j_per_step_hi"] - four["j_per_step_lo"]) / four["j_per_step"]
    assert w4 > w1 and "unfitted efficiency factor" in four["notes"][0]
    assert four["j_per_sample"] == pytest.approx(four["j_per_step"] / (4 * 32))
    with pytest.raises(ValueError, match="divisible by 5"):
        predict_config(TRUE, BertTrainConfig(heads=12, hidden=768), 5, "tp")
    with pytest.raises(ValueError, match="needs a strategy"):
        predict_config(TRUE, cfg, 2, "none")


@pytest.mark.skipif(not (SWEEP / "results.csv").is_file(), reason="no committed sweep")
def test_accuracy_table_rebuilds_from_the_committed_sweep():
    from jouleprof.predict.train_evaluate import evaluate_rows, load_rows

    res = evaluate_rows(load_rows(SWEEP))
    committed = json.loads((SWEEP / "accuracy.json").read_text())
    for mine, theirs in zip(res["splits"], committed["splits"], strict=True):
        assert mine["split"] == theirs["split"]
        assert mine["mape_pct"] == pytest.approx(theirs["mape_pct"], rel=1e-6)
        assert mine["baseline_mape_pct"] == pytest.approx(theirs["baseline_mape_pct"], rel=1e-6)
    large = [s for s in res["splits"] if s["split"] == "holdout-largest"][0]
    assert all("L24-H1024" in c["id"] for c in large["per_config"])


def test_predict_train_cli_json():
    cmd = [
        sys.executable,
        "-m",
        "jouleprof.cli.main",
        "predict",
        "train",
        "--workload",
        "bert",
        "--layers",
        "24",
        "--hidden",
        "1024",
        "--heads",
        "16",
        "--seq",
        "512",
        "--batch",
        "32",
        "--gpus",
        "2",
        "--strategy",
        "fsdp",
        "--precision",
        "bf16",
        "--gpu",
        "h200",
        "--json",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for k in ("j_per_step", "j_per_sample", "s_per_step", "j_per_step_lo", "j_per_step_hi"):
        assert d[k] > 0
    assert d["j_per_step_lo"] < d["j_per_step"] < d["j_per_step_hi"] and d["notes"]
    bad = subprocess.run(cmd[:-1] + ["--gpu", "a100"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no fitted law" in bad.stderr and "Traceback" not in bad.stderr
