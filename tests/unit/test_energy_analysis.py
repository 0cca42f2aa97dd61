"""The energy-aware analysis on hand-built study directories with a known answer: a study whose
joules do not follow E is called no saving, one whose joules fall 20 % with E is called a
saving; ratios, intervals and rank correlations are checked against direct computation."""

import json
import math

import numpy as np
import pytest

pytest.importorskip("statsmodels")

from jouleprof.analysis.effects import ratio_of_means, spearman  # noqa: E402
from jouleprof.analysis.energy_study import analyze_study, load_cells  # noqa: E402
from jouleprof.analysis.report_text import markdown_report  # noqa: E402


def _fig(v, unit="J", lo=None, hi=None, source="measured"):
    d = {"value": v, "unit": unit, "source": source}
    if lo is not None:
        d.update(lo=lo, hi=hi)
    return d


def make_study(tmp_path, saving: float, seed: int = 0):
    """2 archs × 2 datasets × λ {0, 1e-2} × 3 seeds; E falls 100× at λ = 1e-2; training joules
    fall by `saving` (a fraction) at λ = 1e-2, with 1 % noise."""
    rng = np.random.default_rng(seed)
    out = tmp_path / f"study{saving}"
    (out / "cells").mkdir(parents=True)
    (out / "study.json").write_text(json.dumps({"study": "energy-aware", "archs": ["a", "b"]}))
    for arch, base_j in (("a", 100.0), ("b", 300.0)):
        for ds, acc in (("d1", 0.9), ("d2", 0.7)):
            for lam in (0.0, 1e-2):
                for s in range(3):
                    cid = f"{arch}.{ds}.lam{lam:g}.s{s}"
                    c = out / "cells" / cid
                    c.mkdir()
                    factors = {"arch": arch, "dataset": ds, "lam": lam, "seed": s}
                    (c / "cell.json").write_text(json.dumps({"cell_id": cid, "factors": factors}))
                    j = base_j * (1 - saving * (lam > 0)) * (1 + 0.01 * rng.standard_normal())
                    e = 1000.0 * (0.01 if lam else 1.0) * (1 + 0.05 * rng.standard_normal())
                    summary = {
                        "accuracy": _fig(acc + 0.005 * rng.standard_normal(), "fraction"),
                        "internal_energy": _fig(e, "activation"),
                        "activation_sparsity": _fig(0.9 if lam else 0.5, "fraction"),
                        "train_gpu_energy_j": _fig(j, lo=0.9 * j, hi=1.1 * j),
                        "infer_gpu_energy_j": _fig(j / 10, lo=0.08 * j, hi=0.12 * j),
                        "train_time_s": _fig(1.0, "s"),
                    }
                    rec = {"status": "complete", "summary": summary, "extra": {}}
                    (c / "run.json").write_text(json.dumps(rec))
    return out


def test_no_saving_when_joules_do_not_follow_e(tmp_path):
    res = analyze_study(make_study(tmp_path, 0.0), plots=False)
    assert res.n_complete == 24
    assert "does not save measurable GPU energy" in res.verdict
    assert "Largest λ keeping accuracy within 0.5 points of λ = 0: a/d1 0.01" in res.verdict
    assert "median factor of 100" in res.verdict or "median factor of 9" in res.verdict
    for g in res.groups:
        r = g["train_gpu_energy_j_ratio"]
        assert abs(r["ratio"] - 1) < 0.03 and r["lo"] < 1.0 + 0.02 and r["hi"] > 1.0 - 0.02
        assert 1 / g["internal_energy_ratio"]["ratio"] == pytest.approx(100, rel=0.15)
    # accuracy: the dataset dominates, λ explains nothing
    terms = {t["term"]: t for t in res.anovas["accuracy"]["terms"]}
    assert terms["dataset"]["partial_eta2"] > 0.9 and terms["dataset"]["p"] < 1e-6
    assert terms["lam"]["p"] > 0.001
    # energy: the architecture dominates
    terms = {t["term"]: t for t in res.anovas["train_gpu_energy_j"]["terms"]}
    assert terms["arch"]["partial_eta2"] > 0.99


def test_saving_is_called_a_saving(tmp_path):
    out = make_study(tmp_path, 0.2)
    res = analyze_study(out, plots=True)
    assert "saved measurable GPU energy in training and inference" in res.verdict
    for g in res.groups:
        assert g["train_gpu_energy_j_ratio"]["ratio"] == pytest.approx(0.8, abs=0.02)
        assert g["train_gpu_energy_j_ratio"]["hi"] < 0.98
        assert g["spearman_internal~train_gpu_energy_j"]["rho"] > 0.5
    assert len(res.plots) == 6 and all((out / "analysis").glob("*.png"))
    text = markdown_report(res, json.loads((out / "study.json").read_text()))
    assert "## Verdict" in text and "| arch:dataset |" in text
    json.dumps(res.to_json(), default=str)  # the CLI's --json


def test_incomplete_cells_are_listed_and_left_out(tmp_path):
    out = make_study(tmp_path, 0.0)
    (out / "cells" / "a.d1.lam0.s0" / "run.json").unlink()
    (out / "cells" / "a.d1.lam0.s0" / "error.txt").write_text("boom")
    df = load_cells(out)
    assert df.set_index("cell_id").loc["a.d1.lam0.s0", "status"] == "failed"
    res = analyze_study(out, plots=False)
    assert res.n_complete == 23 and res.not_complete == [
        {"cell_id": "a.d1.lam0.s0", "status": "failed"}
    ]


def test_ratio_of_means_and_spearman_match_direct_computation():
    a, b = [2.0, 2.2, 1.8], [4.0, 4.4, 3.6]
    r = ratio_of_means(a, b)
    assert r["ratio"] == pytest.approx(0.5)
    assert r["lo"] < 0.5 < r["hi"]
    # the interval is symmetric on the log scale
    assert math.log(r["hi"] / 0.5) == pytest.approx(math.log(0.5 / r["lo"]))
    assert ratio_of_means([1.0], [2.0])["lo"] is None
    s = spearman([1, 2, 3, 4], [10, 30, 20, 40])
    assert s["rho"] == pytest.approx(0.8) and s["n"] == 4
    assert spearman([1, 1, 1], [1, 2, 3])["rho"] is None


def test_sparse_probe_statement_finds_where_the_sparse_kernel_wins(tmp_path):
    out = make_study(tmp_path, 0.0)
    rows = [
        {"sparsity": s, "dense_s": 1e-3, "sparse_s": t, "dense_j": 0.1 * f, "sparse_j": j}
        for s, t, f, j in ((0.0, 9e-3, 1.0, 0.9), (0.5, 4e-3, 1.02, 0.4), (0.95, 5e-4, 0.97, 0.05))
    ]
    (out / "sparse_probe.json").write_text(
        json.dumps({"shape": {"m": 8, "k": 4, "n": 2}, "rows": rows})
    )
    res = analyze_study(out, plots=False)
    s = res.sparse_statement
    assert "8×4 activations times a 4×2 weight" in s
    assert "the dense kernel took 1–1 ms" in s and "-3.0 to +2.0 %" in s
    assert "slower at 0%, 50% zeros and faster at 95%" in s
    # the sparsest accuracy-keeping cells (90 % zeros at λ = 1e-2) lie between the sparsities
    # where CSR lost (≤ 50 %) and won (95 %): nothing is claimed about them
    assert "a/d1 at λ = 0.01, 90% zeros." in s and "below the sparsity" not in s
    rows[1]["sparsity"] = 0.92  # now CSR loses at 92 %, above the cells' 90 %
    (out / "sparse_probe.json").write_text(json.dumps({"shape": {}, "rows": rows}))
    s = analyze_study(out, plots=False).sparse_statement
    assert "90% zeros, below the sparsity at which the CSR kernel stops losing" in s
