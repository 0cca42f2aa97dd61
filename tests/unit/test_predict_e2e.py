"""The end-to-end check's plumbing: a `jouleprof infer` run directory read into e2e.csv
(predict_collect.run_e2e) and compared with `jouleprof predict infer` (predict_e2e.compare)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import predict_collect  # noqa: E402
import predict_e2e  # noqa: E402


def fake_infer(result: dict | None, rc: int = 0):
    """A stand-in for the `jouleprof infer` subprocess that writes run.json's extra.inference."""

    def run(args, timeout_s):
        out = Path(args[args.index("--out") + 1])
        assert args[:2] == ["infer", "--model"] and "steady" in args
        if result is not None:
            out.mkdir(parents=True)
            (out / "run.json").write_text(json.dumps({"extra": {"inference": result}}))
        return subprocess.CompletedProcess(args, rc, "", "" if rc == 0 else "boom: bad model")

    return run


MEASURED = {"j_per_clip": 0.05, "j_per_clip_lo": 0.049, "j_per_clip_hi": 0.051,
            "latency_s_mean": 0.010, "window_s": 6.01, "window_passes": 600, "power_w": 320.0,
            "energy_note": "measured: counter over 6.01 s"}  # fmt: skip


def test_run_e2e_reads_the_measurement_and_keeps_failures_as_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(predict_collect, "jouleprof_cli", fake_infer(MEASURED))
    r = predict_collect.run_e2e("timm:resnet34", "bf16", 64, tmp_path, None)
    assert r["status"] == "ok" and r["j_per_sample"] == 0.05 and r["window_passes"] == 600
    assert r["run_dir"] == "timm_resnet34__bf16__b64"
    monkeypatch.setattr(predict_collect, "jouleprof_cli", fake_infer(None, rc=2))
    r = predict_collect.run_e2e("timm:nope", "bf16", 1, tmp_path, None)
    assert r["status"] == "error" and "boom" in r["error"] and r["rc"] == 2


def test_compare_states_the_error_and_the_interval(monkeypatch):
    pred = {"j_per_sample": 0.055, "j_per_sample_lo": 0.045, "j_per_sample_hi": 0.06,
            "s_per_batch": 0.011, "validated": False, "notes": ["interpolated"]}  # fmt: skip
    monkeypatch.setattr(predict_e2e, "predict_cli", lambda spec, b, p: pred)
    rows = [{"spec": "timm:resnet34", "precision": "bf16", "batch": "64", "j_per_sample": "0.05",
             "s_per_batch": "0.010", "energy_note": "measured"},
            {"spec": "timm:x", "precision": "bf16", "batch": "1", "j_per_sample": "",
             "s_per_batch": "0.01", "energy_note": "unavailable: no GPU"}]  # fmt: skip
    out = predict_e2e.compare(rows)
    assert out[0]["j_err_pct"] == pytest.approx(10.0) and out[0]["in_interval"]
    assert out[0]["s_err_pct"] == pytest.approx(10.0) and out[0]["validated"] is False
    assert "j_err_pct" not in out[1]  # no measured energy: no error figure, never a zero
    md = predict_e2e.markdown(out)
    assert "+10.0 %" in md and "| unavailable: no GPU |" in md
