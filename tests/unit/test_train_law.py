"""The training-energy law: fitting recovers known constants, predictions carry an interval that
widens on several GPUs, the per-GPU shares follow the strategy, and the CLI (predict train,
predict evaluate --train rebuilding the committed accuracy table)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jouleprof.predict.scaling import TrainLaw, fit, predict_rows
from jouleprof.predict.train_features import (
    analytic_counts,
    comm_bytes,
    efficiency_speedup,
    parameter_count,
    train_features,
)
from jouleprof.predict.train_multi import predict_config, share
from jouleprof.workloads.bert import BertTrainConfig

SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "bert_sweep"
CEIL = {"mem_bytes_s": 4e12, "rate_flop_s": 5e14}  # the GPU ceilings the fit takes as given
TRUE = TrainLaw(
    a0_s=0.004,
    a1_s=0.003,
    rate_flop_s=CEIL["rate_flop_s"],
    h0=900.0,
    p=3.0,
    mem_bytes_s=CEIL["mem_bytes_s"],
    p0_w=120.0,
    ef_j_per_flop=0.8e-12,
    ew_j_per_flop=9e-10,
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
        (8, 1536, 512, 16),
        (4, 2048, 256, 32),
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
    law = fit([r for r in rows if r not in held], loo=True, **CEIL)
    t, e = predict_rows(law, held)
    t0, e0 = predict_rows(TRUE, held)
    assert np.max(np.abs(e / e0 - 1)) < 0.02 and np.max(np.abs(t / t0 - 1)) < 0.03
    assert law.p0_w == pytest.approx(120.0, rel=0.1)
    # the per-FLOP energy at BERT widths is recovered (e_F and e_W trade off a little)
    for h in (768, 1536):
        got = law.ef_j_per_flop + law.ew_j_per_flop / h
        assert got == pytest.approx(TRUE.ef_j_per_flop + TRUE.ew_j_per_flop / h, rel=0.05)
    # 0.2 % noise: the leave-one-out interval is small but not zero
    assert 0 < law.rel_err_q90 < 0.02 and 0 < law.t_rel_err_q90 < 0.03


def test_fit_refuses_too_few_rows():
    with pytest.raises(ValueError, match="≥ 9"):
        fit(_rows(TRUE)[:3], **CEIL)


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
    assert one["validated"] and not four["validated"] and one["eta"] is None
    assert one["j_per_step_lo"] < one["j_per_step"] < one["j_per_step_hi"]
    w1 = (one["j_per_step_hi"] - one["j_per_step_lo"]) / one["j_per_step"]
    w4 = (four["j_per_step_hi"] - four["j_per_step_lo"]) / four["j_per_step"]
    assert w4 > w1 and any("unfitted efficiency factor" in n for n in four["notes"])
    assert four["s_per_step_hi"] > four["s_per_step"] * (1 + TRUE.t_rel_err_q90) * 0.999
    assert four["j_per_sample"] == pytest.approx(four["j_per_step"] / (4 * 32))
    assert 0 < four["eta"] <= 1.0
    with pytest.raises(ValueError, match="divisible by 5"):
        predict_config(TRUE, BertTrainConfig(heads=12, hidden=768), 5, "tp")
    with pytest.raises(ValueError, match="needs a strategy"):
        predict_config(TRUE, cfg, 2, "none")


def test_shares_follow_the_strategy():
    cfg = BertTrainConfig(layers=24, hidden=1024, heads=16, seq=512, batch=32)
    one = share(cfg, 1, "none")
    for s in ("ddp", "fsdp", "tp"):  # one GPU: every strategy is the whole step, no traffic
        assert share(cfg, 1, s) == one
    ddp, fsdp = share(cfg, 4, "ddp"), share(cfg, 4, "fsdp")
    assert ddp["train_flops"] == fsdp["train_flops"] == one["train_flops"]
    assert fsdp["bytes_moved"] < ddp["bytes_moved"] == one["bytes_moved"]  # sharded optimizer
    tp2, tp8 = share(cfg, 2, "tp"), share(cfg, 8, "tp")
    head = 3 * 32 * 512 * (2 * 1024**2 + 2 * 1024 * 30522)  # replicated embeddings/MLM head
    assert tp2["train_flops"] == pytest.approx((one["train_flops"] - head) / 2 + head)
    assert one["bytes_moved"] > tp2["bytes_moved"] > tp8["bytes_moved"] > 0
    assert tp8["comm_bytes"] > tp2["comm_bytes"] > 0 == one["comm_bytes"]
    # a launch-bound step does not get faster split over GPUs: η falls toward 1/N
    small = predict_config(TRUE, BertTrainConfig(layers=12, hidden=256, heads=4, seq=64), 4, "tp")
    big = predict_config(TRUE, cfg, 4, "tp")
    assert small["eta"] < 0.3 and small["eta"] < big["eta"]


@pytest.mark.skipif(not (SWEEP / "results.csv").is_file(), reason="no committed sweep")
def test_predict_evaluate_train_rebuilds_the_committed_table():
    r = subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", "predict", "evaluate", "--train", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    committed = json.loads((SWEEP / "accuracy.json").read_text())
    assert res["n_configs"] == committed["n_configs"]
    for mine, theirs in zip(res["splits"], committed["splits"], strict=True):
        assert mine["split"] == theirs["split"]
        assert mine["mape_pct"] == pytest.approx(theirs["mape_pct"], rel=1e-6)
        assert mine["baseline_mape_pct"] == pytest.approx(theirs["baseline_mape_pct"], rel=1e-6)
    large = [s for s in res["splits"] if s["split"] == "holdout-largest"][0]
    assert large["n_test"] >= 2 and all("L24-H1024" in c["id"] for c in large["per_config"])
    assert {"holdout-largest", "leave-layers-out", "leave-hidden-out"} <= {
        s["split"] for s in res["splits"]
    }
    # the constants the CLI ships are the law fitted on every committed row
    from jouleprof.predict.train_laws import LAWS

    shipped = LAWS[("bert", "h200", "bf16")]
    for k in ("p0_w", "ef_j_per_flop", "rate_flop_s", "rel_err_q90"):
        assert shipped[k] == pytest.approx(res["law_all_rows"][k], rel=1e-6), k


@pytest.mark.skipif(not (SWEEP / "results.csv").is_file(), reason="no committed sweep")
def test_predict_evaluate_train_reads_the_sweep_given_by_data(tmp_path):
    """--data points --train at another sweep (a copy with one configuration left out), and a
    folder without results.csv is refused in one line."""
    lines = (SWEEP / "results.csv").read_text().splitlines(keepends=True)
    kept = [lines[0]] + [ln for ln in lines[1:] if not ln.startswith("00-")]
    assert len(kept) == len(lines) - 1
    (tmp_path / "results.csv").write_text("".join(kept))
    cmd = [sys.executable, "-m", "jouleprof.cli.main", "predict", "evaluate", "--train"]
    r = subprocess.run([*cmd, "--json", "--data", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    committed = json.loads((SWEEP / "accuracy.json").read_text())
    assert json.loads(r.stdout)["n_configs"] == committed["n_configs"] - 1
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([*cmd, "--data", str(empty)], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "has no results.csv or runs.csv" in r.stderr


def test_axis_roles_name_the_axis_each_configuration_varies():
    from jouleprof.predict.train_evaluate import axis_roles

    base = dict(layers=12, hidden=768, heads=12, seq=128, batch=32)
    pts = [base, {**base, "layers": 2}, {**base, "seq": 64}, {**base, "layers": 6, "seq": 64}]
    pts += [{**base, "layers": 24}]
    assert axis_roles(pts) == ["base", "axis-layers", "axis-seq", "mixed", "axis-layers"]


@pytest.mark.skipif(not (SWEEP / "results.csv").is_file(), reason="no committed sweep")
def test_a_study_bert_index_is_read_as_a_sweep(tmp_path):
    """A `jouleprof study bert` folder (runs.csv: cell ids, factors, no family column) loads the
    same configurations as the sweep it came from; families come from the axes varied, and
    multi-GPU or energy-less cells are left out."""
    import csv

    from jouleprof.predict.train_evaluate import AXES, load_rows

    cols = ["cell_id", *AXES, "strategy", "gpus", "status", "s_per_step", "j_per_step"]
    with (SWEEP / "results.csv").open() as f:
        src = list(csv.DictReader(f))
    with (tmp_path / "runs.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for r in src:
            w.writerow({"cell_id": r["id"], "gpus": 1, **{k: r[k] for k in cols[1:] if k in r}})
        extra = {k: src[0][k] for k in cols[1:] if k in src[0]}
        w.writerow({**extra, "cell_id": "x-ddp2", "strategy": "ddp", "gpus": 2})
        w.writerow({**extra, "cell_id": "x-cpu", "gpus": 1, "j_per_step": ""})
    mine, theirs = load_rows(tmp_path), load_rows(SWEEP)
    assert [r["id"] for r in mine] == [r["id"] for r in theirs]
    assert [r["j_per_step"] for r in mine] == [r["j_per_step"] for r in theirs]
    roles = {r["id"]: r["role"] for r in mine}
    assert sum(v == "axis-layers" for v in roles.values()) >= 3 and "base" in roles.values()
    assert len(load_rows(tmp_path, strategies=True)) == len(load_rows(SWEEP, strategies=True))


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


@pytest.mark.skipif(not (SWEEP / "results.csv").is_file(), reason="no committed sweep")
def test_bootstrap_ranges_bracket_the_fit():
    from jouleprof.predict.train_evaluate import load_rows
    from jouleprof.predict.train_laws import bootstrap, ceilings

    q = bootstrap(SWEEP, n=30, seed=1)
    law = fit(load_rows(SWEEP), loo=False, **ceilings("h200"))
    for k in ("a1_s", "p0_w", "ew_j_per_flop"):
        lo, mid, hi = q[k]
        assert lo <= mid <= hi and lo <= getattr(law, k) <= hi, (k, q[k])
    assert q["p0_w"][2] > q["p0_w"][0]  # resampling moves the fit: the range is not a point
