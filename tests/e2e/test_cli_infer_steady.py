"""`jouleprof infer --protocol steady` (the quantity the inference predictor predicts; a real
subprocess) and `jouleprof predict infer` on the same model, end to end on the CPU (a tiny file
model)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

JP = [sys.executable, "-m", "jouleprof.cli.main"]
NET = (
    "import torch\n"
    "def net():\n"
    "    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(),"
    " torch.nn.Linear(64, 10))\n"
    "net.input_shape = (1, 1, 64)\n"
)


def run(*args):
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=300)


def invoke(*args):
    """The same command in this process (cheaper than a second interpreter)."""
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_steady_measurement_and_prediction_of_one_model(tmp_path):
    (tmp_path / "net.py").write_text(NET)
    spec = f"{tmp_path / 'net.py'}:net"
    out = tmp_path / "run"
    r = run("infer", "--model", spec, "--batch", "4", "--precision", "bf16", "--protocol",
            "steady", "--sustained-s", "0.2", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "run.json").read_text())["extra"]["inference"]
    assert res["protocol"] == "steady" and res["batch"] == 4
    # every window pass is synchronized and timed: the latency passes are the window's passes
    assert res["window_passes"] >= 2 and res["latency_passes"] == res["window_passes"]
    assert res["window_s"] >= 0.2
    if res["j_per_clip"] is None:  # no GPU here: said so, never a zero
        assert res["energy_note"].startswith("unavailable")
    else:
        assert res["j_per_clip"] > 0
    r = invoke("predict", "infer", "--model", spec, "--batch", "4", "--precision", "bf16", "--json")
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    assert p["batch"] == 4 and p["precision"] == "bf16"
    assert 0 < p["j_per_sample_lo"] <= p["j_per_sample"] <= p["j_per_sample_hi"]
    assert [lay["module"] for lay in p["layers"]] == ["0", "1", "2"]


def test_unknown_models_get_one_line_errors(tmp_path):
    r = invoke("infer", "--model", "timm:zzz_nope", "--protocol", "steady", "--out",
               str(tmp_path / "x"))  # fmt: skip
    assert r.exit_code == 2 and "unknown timm model" in r.output and r.exception is not None
    assert isinstance(r.exception, SystemExit)  # a clean exit, not an uncaught error
    r = invoke("predict", "infer", "--model", "torchvision:zzz_nope")
    assert r.exit_code == 2 and "unknown torchvision" in r.output
