"""`predict infer --per-layer`: the layers' energies and times are shares of the pass and add up
to its totals, and the table stays whole at 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from jouleprof.predict.features import trace_model  # noqa: E402
from jouleprof.predict.layerwise import (  # noqa: E402
    LayerwisePredictor,
    energy_terms,
    module_energy_terms,
)
from jouleprof.predict.roofline import load_gpu  # noqa: E402
from jouleprof.workloads.zoo import ZooModel  # noqa: E402


class _ConstTime:
    """A stand-in time model: every layer takes 10 µs."""

    def predict(self, x):
        return np.full(len(x), -5.0)


def _mlp():
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256), nn.LayerNorm(256))


def _predictor():
    # k_half and k_fp32 far apart: a half-precision matmul priced as a float32 one shows
    return LayerwisePredictor(_ConstTime(), (0.0, 1.0, 0.0), (100.0, 1e-12, 3e-12, 5e-11,
                              2e-11, 1e-10), {"b>16": (-0.1, 0.1)})  # fmt: skip


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_layer_energies_add_up_to_the_pass(precision):
    """Under autocast a Linear's weight casts read float32, so the layer's majority dtype is
    float32: its bf16 matmul FLOPs must still be priced as half precision, as the total does
    (the per-layer sum was 2.35x the total on convnext_tiny bf16 batch 64)."""
    z = ZooModel("t:mlp", "file", "mlp", _mlp, (1, 1, 256))
    f = trace_model(z, 64, precision)
    p = _predictor().predict(f, load_gpu("h200"))
    assert sum(lp.energy_j for lp in p.layers) == pytest.approx(p.j_per_sample * 64, rel=1e-9)
    assert sum(lp.time_s for lp in p.layers) == pytest.approx(p.s_per_batch, rel=1e-9)
    assert sum(module_energy_terms(f).values()) == pytest.approx(energy_terms(f))
    d = p.to_dict()
    assert sum(lay["j_per_sample"] for lay in d["layers"]) == pytest.approx(d["j_per_sample"])


def _write_net(tmp_path):
    p = tmp_path / "longnet.py"
    p.write_text(
        "from torch import nn\n"
        "class Attn(nn.Module):\n"
        "    def __init__(s):\n"
        "        super().__init__()\n"
        "        s.query = nn.Linear(64, 64)\n"
        "        s.output = nn.ModuleDict({'dense': nn.Linear(64, 64)})\n"
        "        s.norm_with_a_rather_long_attribute_name = nn.LayerNorm(64)\n"
        "    def forward(s, x):\n"
        "        return s.norm_with_a_rather_long_attribute_name(s.output['dense'](s.query(x)))\n"
        "class Net(nn.Module):\n"
        "    def __init__(s):\n"
        "        super().__init__()\n"
        "        s.encoder = nn.ModuleDict({'layer': nn.ModuleList([nn.ModuleDict("
        "{'attention': Attn()}) for _ in range(12)])})\n"
        "        s.head = nn.Linear(64, 10)\n"
        "    def forward(s, x):\n"
        "        for lay in s.encoder['layer']:\n"
        "            x = lay['attention'](x)\n"
        "        return s.head(x)\n"
        "def net():\n"
        "    return Net()\n"
        "net.input_shape = (1, 1, 64)\n"
    )
    return f"{p}:net"


def _cli(args, columns=80):
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    r = subprocess.run([sys.executable, "-m", "jouleprof.cli.main", "predict", "infer", *args],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def _specs(tmp_path):
    specs = [(_write_net(tmp_path), "8", "bf16")]
    try:
        import timm  # noqa: F401

        specs.append(("timm:convnext_tiny", "64", "bf16"))  # the README's example
    except ImportError:
        pass
    return specs


def test_per_layer_table_is_whole_at_80_columns(tmp_path):
    for spec, batch, prec in _specs(tmp_path):
        args = ["--model", spec, "--batch", batch, "--precision", prec]
        d = json.loads(_cli([*args, "--json"]))
        text = _cli([*args, "--per-layer"])
        lines = text.splitlines()
        assert all(len(line) <= 80 for line in lines), max(lines, key=len)
        assert "…" not in text
        head = next(i for i, line in enumerate(lines) if line.startswith("module "))
        width = lines[head].index("type")
        units = lines[head].split()  # module type bound ms/batch mJ/sample % E
        t_mul = {"ms/batch": 1e3, "µs/batch": 1e6}[units[3]]
        e_mul = {"mJ/sample": 1e3, "µJ/sample": 1e6, "nJ/sample": 1e9}[units[4]]
        foot = next(i for i, line in enumerate(lines) if line.startswith("total "))
        body = lines[head + 2 : foot]
        # module names wrap, never cut: the first column, read down, spells every name in order
        col = "".join(line[:width].strip() for line in body)
        assert col == "".join(lay["module"] for lay in d["layers"])
        # every layer's figures, whole, in its row
        figs = [line.split()[-3:] for line in body if line.split()[-1:] and _num(line.split()[-1])]
        assert len(figs) == len(d["layers"])
        for lay, (ms, e, _) in zip(d["layers"], figs, strict=True):
            assert ms == f"{lay['time_s'] * t_mul:.4f}"
            assert e == f"{lay['j_per_sample'] * e_mul:.4f}"
        # the total row is the prediction
        _, ms, e, share = lines[foot].split()
        assert float(ms) == pytest.approx(d["s_per_batch"] * t_mul, abs=1e-4)
        assert float(e) == pytest.approx(d["j_per_sample"] * e_mul, abs=1e-4)
        assert share == "100.0"


def _num(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True
