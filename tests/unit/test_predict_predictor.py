"""The layer-wise predictor: fit on synthetic measurements with a known answer, ship/load, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
import pandas as pd  # noqa: E402
from torch import nn  # noqa: E402

from jouleprof.predict.dataset import Dataset  # noqa: E402
from jouleprof.predict.features import ops_table, trace_model  # noqa: E402
from jouleprof.predict.layerwise import RooflinePredictor, energy_terms, layer_matrix  # noqa: E402
from jouleprof.predict.roofline import load_gpu  # noqa: E402
from jouleprof.workloads.zoo import ZooModel  # noqa: E402

P_BASE_W, K_HALF, K_BYTE = 150.0, 0.6e-12, 20e-12
PRECS = ("bf16",)  # one precision keeps the fixture fast; fp32 goes through the same code


def mlp(width, depth):
    return lambda: nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width),
                                                                      nn.GELU())])  # fmt: skip


def cnn(ch):
    return lambda: nn.Sequential(nn.Conv2d(3, ch, 3), nn.BatchNorm2d(ch), nn.ReLU(),
                                 nn.Conv2d(ch, ch, 3), nn.ReLU())  # fmt: skip


MODELS = {  # family -> (spec, factory, input shape)
    "mlp": [("t:mlp64", mlp(64, 3), (1, 1, 64)), ("t:mlp256", mlp(256, 2), (1, 1, 256))],
    "cnn": [("t:cnn8", cnn(8), (3, 16, 16)), ("t:cnn32", cnn(32), (3, 24, 24))],
    "wide": [("t:mlp512", mlp(512, 4), (1, 1, 512)), ("t:cnn16", cnn(16), (3, 32, 32))],
}


def layer_time(layer_bound_s, launches):
    return 3.0 * layer_bound_s + 4e-6 * launches


@pytest.fixture(scope="module")
def synthetic():
    gpu = load_gpu("h200")
    ops, mrows, lrows = [], [], []
    for items in MODELS.values():
        for spec, fac, shape in items:
            z = ZooModel(spec, "file", spec, fac, shape)
            for prec in PRECS:
                for b in (1, 2):
                    ops.append(ops_table(trace_model(z, b, prec)))
    ds = Dataset(pd.DataFrame(), pd.DataFrame(columns=["spec", "module", "module_type",
                                                       "precision", "batch", "self_s"]),
                 pd.concat(ops, ignore_index=True))  # fmt: skip
    for fam, items in MODELS.items():
        for spec, _, _ in items:
            for prec in PRECS:
                for b in (1, 4, 16, 64, 256):
                    f = ds.features(spec, prec, b)
                    _, keep = layer_matrix(f, gpu)
                    total = 0.0
                    for layer, bound in keep:
                        t = layer_time(bound.roofline_s, layer.launches)
                        total += t
                        lrows.append({"spec": spec, "precision": prec, "batch": b,
                                      "module": layer.module, "module_type": "",
                                      "self_s": t})  # fmt: skip
                    half, tf32, fp32, other, nbytes = energy_terms(f)
                    e = P_BASE_W * total + K_HALF * (half + tf32 + fp32) + K_BYTE * nbytes
                    mrows.append({"family": fam, "spec": spec, "precision": prec, "batch": b,
                                  "passes": 10, "s_per_pass": total, "energy_j": 10 * e,
                                  "protocol": "short", "status": "ok"})  # fmt: skip
    ds.models = pd.DataFrame(mrows)
    ds.layers = pd.DataFrame(lrows)
    return ds, gpu


def test_fit_recovers_the_generating_model(synthetic):
    from jouleprof.predict.fit import fit_layerwise

    ds, gpu = synthetic
    train = ds.models[ds.models["family"] != "wide"]
    pred = fit_layerwise(ds, train, gpu)
    assert pred.energy_coef[0] == pytest.approx(P_BASE_W, rel=0.25)
    test = ds.models[(ds.models["family"] == "wide") & (ds.models["batch"] >= 16)]
    errs = []
    for r in test.itertuples():
        p = pred.predict(ds.features(r.spec, r.precision, r.batch), gpu)
        errs.append(abs(p.j_per_sample / (r.energy_j / r.passes / r.batch) - 1))
        assert sum(lp.energy_j for lp in p.layers) == pytest.approx(p.j_per_sample * r.batch,
                                                                    rel=0.05)  # fmt: skip
    # a family it never saw, from a model it can learn: well inside a factor of 2
    assert np.median(errs) < 0.5


def test_evaluate_table_has_every_method(synthetic):
    from jouleprof.predict.evaluate import METHODS, leave_family_out, metrics_table

    ds, gpu = synthetic
    preds = leave_family_out(ds, gpu)
    table = metrics_table(preds)
    assert set(table["method"]) == set(METHODS)
    row = table[(table["method"] == "layerwise") & (table["precision"] == "all")].iloc[0]
    assert row["n"] == len(ds.models) and row["spearman"] > 0.8


def test_save_load_roundtrip(synthetic, tmp_path):
    from jouleprof.predict.fit import fit_layerwise
    from jouleprof.predict.shipped import load_predictor, save_predictor

    ds, gpu = synthetic
    pred = fit_layerwise(ds, ds.models, gpu)
    p = save_predictor(pred, tmp_path / "m.pkl")
    back = load_predictor(p)
    f = ds.features("t:cnn16", "bf16", 64)
    assert back.predict(f, gpu).j_per_sample == pytest.approx(pred.predict(f, gpu).j_per_sample)
    with pytest.raises(ValueError, match="does not exist"):
        load_predictor(tmp_path / "none.pkl")


def test_unmeasured_configurations_are_flagged_unvalidated(synthetic):
    from jouleprof.predict.fit import fit_layerwise

    ds, gpu = synthetic
    rows = ds.models[ds.models["batch"].isin([1, 16, 64])]
    q = {"b1": (-0.1, 0.1), "b<=16": (-0.1, 0.1), "b>16": (-0.05, 0.05), "bf16:b>16": (-0.02, 0.04)}
    pred = fit_layerwise(ds, rows, gpu, log_err_q=q)
    assert set(map(tuple, pred.info["configs"])) == {("bf16", 1), ("bf16", 16), ("bf16", 64)}
    spec = "t:cnn16"
    at = {b: pred.predict(ds.features(spec, "bf16", b), gpu) for b in (64, 4, 256)}
    assert at[64].validated and not at[64].notes  # measured: the precision's own interval
    assert at[64].j_per_sample_hi / at[64].j_per_sample == pytest.approx(np.exp(0.04))
    assert not at[4].validated and "interpolated" in at[4].notes[0]
    assert not at[256].validated and "extrapolated" in at[256].notes[0]
    assert at[256].j_per_sample_hi / at[256].j_per_sample > np.exp(0.04)  # widened
    z = ZooModel(spec, "file", spec, cnn(16), (3, 32, 32))
    fp32 = pred.predict(trace_model(z, 64, "fp32"), gpu)
    assert not fp32.validated and "no fp32 measurements" in fp32.notes[0]
    assert fp32.j_per_sample_hi / fp32.j_per_sample > np.exp(0.1)


def test_fp32_conv_flops_are_tf32_apart_from_fp32_matmuls():
    """float32 convolutions run on TF32 tensor cores and matmuls on the float32 units: their
    FLOPs are separate energy terms, and a layer's terms add up to the pass's."""
    from jouleprof.predict.layerwise import module_energy_terms

    def cnnmlp():
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 14 * 14, 10))

    z = ZooModel("t:cnnmlp", "file", "cnnmlp", cnnmlp, (3, 16, 16))
    f = trace_model(z, 4, "fp32")
    half, tf32, fp32, other, nbytes = energy_terms(f)
    assert half == 0 and tf32 > 0 and fp32 > 0
    conv = sum(o.flops for o in f.ops if o.category == "conv")
    mm = sum(o.flops for o in f.ops if o.category == "matmul")
    assert tf32 == pytest.approx(conv) and fp32 == pytest.approx(mm)
    per_layer = sum(module_energy_terms(f).values())
    assert per_layer == pytest.approx(energy_terms(f))
    bf = energy_terms(trace_model(z, 4, "bf16"))
    assert bf[0] > 0 and bf[1] == 0 and bf[2] == 0


def test_predictor_pickled_with_one_fp32_term_still_predicts(synthetic):
    """A predictor saved before the TF32 term (4 coefficients after p) sums TF32 and fp32 FLOPs."""
    from dataclasses import replace

    from jouleprof.predict.fit import fit_layerwise

    ds, gpu = synthetic
    pred = fit_layerwise(ds, ds.models, gpu)
    p, k_half, k_tf32, k_fp32, k_other, k_byte = pred.energy_coef
    old = replace(pred, energy_coef=(p, k_half, k_fp32, k_other, k_byte))
    f = ds.features("t:cnn16", "bf16", 64)  # no float32 tensor-core FLOPs: the same energy
    assert old.predict(f, gpu).j_per_sample == pytest.approx(pred.predict(f, gpu).j_per_sample)
    z = ZooModel("t:cnn16", "file", "t:cnn16", cnn(16), (3, 32, 32))
    out = old.predict(trace_model(z, 8, "fp32"), gpu)
    assert out.j_per_sample > 0
    assert sum(lp.energy_j for lp in out.layers) == pytest.approx(out.j_per_sample * 8, rel=0.05)


def test_shipped_predictor_predicts_an_unseen_model():
    from jouleprof.predict.shipped import load_predictor, model_path, predict_inference

    pred = load_predictor()
    shipped = model_path().is_file()
    assert pred.calibrated == shipped  # never a roofline dressed up as trained
    z = ZooModel("t:never", "file", "never", mlp(96, 2), (1, 1, 96))
    out = pred.predict(trace_model(z, 8, "bf16"), load_gpu("h200"))
    assert out.j_per_sample > 0 and out.j_per_sample_lo <= out.j_per_sample <= out.j_per_sample_hi
    if not shipped:
        assert any("uncalibrated" in n for n in out.notes)
    with pytest.raises(ValueError, match="unknown timm model"):
        predict_inference("timm:not_a_model_at_all", 1, "bf16")


def test_roofline_bound_of_a_matmul():
    gpu = load_gpu("h200")
    z = ZooModel("t:lin", "file", "lin", lambda: nn.Linear(4096, 4096, bias=False),
                 (1, 1, 4096))  # fmt: skip
    f = trace_model(z, 4096, "fp32")
    _, keep = layer_matrix(f, gpu)
    ((layer, b),) = keep
    assert b.compute_s == pytest.approx(2 * 4096**3 / gpu.matmul_flops_s["fp32"])
    assert b.bound == "compute"
    p = RooflinePredictor().predict(f, gpu)
    assert p.s_per_batch == pytest.approx(b.roofline_s) and not p.calibrated


def test_gpu_files(tmp_path):
    with pytest.raises(ValueError, match="unknown GPU 'a100'"):
        load_gpu("a100")
    d = json.loads((load_gpu.__globals__["resources"].files("jouleprof.predict") / "gpus" /
                    "h200.json").read_text())  # fmt: skip
    d["name"] = "other"
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    g = load_gpu(str(p))
    assert g.name == "other" and not g.validated
    del d["mem_bytes_s"]
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="mem_bytes_s"):
        load_gpu(str(p))


def test_cli_infer_json_and_errors(tmp_path):
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    p = tmp_path / "net.py"
    p.write_text("import torch\ndef net():\n    return torch.nn.Sequential(torch.nn.Linear(32, 32),"
                 " torch.nn.ReLU())\nnet.input_shape = (1, 1, 32)\n")  # fmt: skip
    r = CliRunner().invoke(app, ["predict", "infer", "--model", f"{p}:net", "--batch", "4",
                                 "--precision", "fp32", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in ("j_per_sample", "s_per_batch", "j_per_sample_lo", "j_per_sample_hi", "layers"):
        assert k in d
    assert [lay["module"] for lay in d["layers"]] == ["0", "1"]
    r = CliRunner().invoke(app, ["predict", "infer", "--model", "timm:zzz_nope"])
    assert r.exit_code == 2 and "unknown timm model" in r.output
    r = CliRunner().invoke(app, ["predict", "evaluate", "--data", str(tmp_path)])
    assert r.exit_code == 2 and "lacks models_energy.csv" in r.output


def test_efficiency_fit_prices_module_calls_with_and_without_kernels():
    from jouleprof.predict.efficiency import GROUPS, fit_efficiency

    rng = np.random.default_rng(0)
    hl, hm, he = 5e-6, 4e-6, 1e-6  # per launch, per kernel module call, per empty one
    rows = []
    for _ in range(60):
        n = int(rng.integers(50, 900))
        kern = int(n * rng.uniform(0.3, 0.9))
        empty = int(rng.integers(0, 400))
        r = np.zeros(len(GROUPS))
        r[0] = 1e-7  # a GPU side far below the host's: the host sets the pace
        t = (hl * n + hm * kern + he * empty) * float(np.exp(rng.normal(0, 0.01)))
        rows.append((r, n, kern + empty, kern, t))
    m = fit_efficiency(rows)
    assert m.host_empty_module_s == pytest.approx(he, rel=0.3)
    assert m.host_module_s == pytest.approx(hm, rel=0.3)
    assert m.host_launch_s == pytest.approx(hl, rel=0.3)
    # a split not known for some row: one price for every call, as before the split
    legacy = fit_efficiency([(*x[:3], -1, x[4]) for x in rows])
    assert legacy.host_empty_module_s is None
    assert legacy.host_time(100, 50, 20) == pytest.approx(legacy.host_time(100, 50))
