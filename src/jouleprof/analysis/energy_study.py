"""The energy-aware study's analysis: from a study directory's cells to ANOVAs, the internal-E
versus measured-joules table, a plain verdict and effect plots (pure over recorded files).

Reads every ``cells/<id>/cell.json`` (factors) and ``run.json`` (status, summary figures) under
the study directory; a cell without a complete run is listed and left out of the statistics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.analysis.effects import level_means, ratio_of_means, spearman

FACTORS = ("arch", "dataset", "lam")
RESPONSES = {
    "accuracy": "test accuracy (fraction)",
    "log10_internal_energy": "log10 internal E (per sample)",
    "train_gpu_energy_j": "measured GPU energy of training (J)",
    "infer_gpu_energy_j": "measured GPU energy of inference (J)",
}
FIGURE_KEYS = (
    "accuracy",
    "internal_energy",
    "internal_energy_train",
    "activation_sparsity",
    "parameters",
    "train_time_s",
    "train_gpu_energy_j",
    "train_energy_per_sample_j",
    "train_gpu_power_w",
    "train_gpu_energy_above_idle_j",
    "train_gpu_util_pct",
    "infer_time_s",
    "infer_gpu_energy_j",
    "infer_energy_per_sample_j",
    "infer_gpu_power_w",
    "infer_gpu_util_pct",
)
ACCURACY_KEPT = 0.005
"""Accuracy within this of λ = 0's counts as kept (the half point of the claim under test)."""
SAVING_THRESHOLD = 0.02
"""A change of measured energy smaller than this fraction is called no saving even when its
interval excludes zero."""


def load_cells(study_dir: Path):
    """One row per cell: cell_id, status, factors, each figure's value (and _lo/_hi, _source)."""
    import pandas as pd

    cells_dir = Path(study_dir) / "cells"
    if not cells_dir.is_dir():
        raise FileNotFoundError(f"{study_dir} has no cells/ folder: is it a study directory?")
    rows = []
    for cdir in sorted(p for p in cells_dir.iterdir() if p.is_dir()):
        row: dict[str, Any] = {"cell_id": cdir.name}
        cj = cdir / "cell.json"
        if cj.is_file():
            try:
                row.update(json.loads(cj.read_text()).get("factors", {}))
            except json.JSONDecodeError:
                row["status"] = "unreadable cell.json"
        rj = cdir / "run.json"
        if not rj.is_file():
            row["status"] = "failed" if (cdir / "error.txt").is_file() else "not run"
            rows.append(row)
            continue
        try:
            rec = json.loads(rj.read_text())
        except json.JSONDecodeError:
            row["status"] = "unreadable run.json"
            rows.append(row)
            continue
        row["status"] = "oom" if rec.get("extra", {}).get("oom") else rec.get("status")
        if (cdir / "error.txt").is_file() and row["status"] == "complete":
            row["status"] = "failed"
        for k in FIGURE_KEYS:
            f = rec.get("summary", {}).get(k)
            if f is None:
                continue
            row[k] = f.get("value")
            row[f"{k}_source"] = f.get("source")
            if "lo" in f:
                row[f"{k}_lo"] = f["lo"]
                row[f"{k}_hi"] = f["hi"]
            if f.get("value") is None:
                row[f"{k}_reason"] = f.get("reason")
        rows.append(row)
    df = pd.DataFrame(rows)
    if "internal_energy" in df:
        e = pd.to_numeric(df["internal_energy"], errors="coerce")
        df["log10_internal_energy"] = [math.log10(v) if v and v > 0 else math.nan for v in e]
    return df


@dataclass
class StudyAnalysis:
    """Everything `jouleprof analyze` reports for an energy-aware study."""

    n_cells: int
    n_complete: int
    not_complete: list[dict[str, Any]]
    anovas: dict[str, Any] = field(default_factory=dict)
    """response → AnovaResult.to_json() or {"error": why}."""
    table: list[dict[str, Any]] = field(default_factory=list)
    """Per (arch, dataset, λ): means of accuracy, internal E, sparsity, measured J."""
    correlation: dict[str, Any] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)
    """Per (arch, dataset): the λ_max / λ=0 ratios and the within-group rank correlation."""
    verdict: str = ""
    energy_source: str | None = None
    sparse_probe: list[dict[str, Any]] | None = None
    sparse_statement: str | None = None
    plots: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _num(df, col):
    import pandas as pd

    return pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(dtype=float)


def analyze_study(study_dir: Path, plots: bool = True) -> StudyAnalysis:
    """Analyze an energy-aware study directory (writes plots into <dir>/analysis/ if asked)."""
    from jouleprof.analysis.anova import factorial_anova

    df = load_cells(study_dir)
    done = df[df["status"] == "complete"].copy() if "status" in df else df.iloc[0:0]
    for c in FIGURE_KEYS + ("log10_internal_energy", "lam", "seed"):
        if c in done:
            done[c] = _num(done, c)
    res = StudyAnalysis(
        n_cells=len(df),
        n_complete=len(done),
        not_complete=[
            {"cell_id": r["cell_id"], "status": r.get("status")}
            for _, r in df[df.get("status") != "complete"].iterrows()
        ]
        if "status" in df
        else [],
    )
    if done.empty:
        res.verdict = "No cell is complete: nothing to analyze yet."
        return res
    srcs = done.get("train_gpu_energy_j_source")
    res.energy_source = (
        ",".join(sorted({str(s) for s in srcs.dropna()})) if srcs is not None else None
    )
    factors = [f for f in FACTORS if f in done and done[f].nunique() > 1]
    replicated = done.groupby(factors).size().min() > 1 if factors else False
    for resp in RESPONSES:
        if resp not in done or done[resp].notna().sum() == 0:
            why = "no cell has this figure"
            if f"{resp}_reason" in df:
                why = (
                    str(df[f"{resp}_reason"].dropna().iloc[0])
                    if df[f"{resp}_reason"].notna().any()
                    else why
                )
            res.anovas[resp] = {"error": why}
            continue
        if not factors:
            res.anovas[resp] = {"error": "every factor has a single level"}
            continue
        order = len(factors) if replicated else max(1, len(factors) - 1)
        try:
            res.anovas[resp] = factorial_anova(done, resp, factors, max_order=order).to_json()
        except ValueError as e:
            res.anovas[resp] = {"error": str(e)}
    _table(done, res)
    _groups(done, res)
    _verdict(done, res)
    _sparse(Path(study_dir), done, res)
    if plots:
        res.plots = _plots(done, Path(study_dir) / "analysis")
    return res


def _table(done, res: StudyAnalysis) -> None:
    cols = (
        "accuracy",
        "internal_energy",
        "activation_sparsity",
        "train_gpu_energy_j",
        "infer_gpu_energy_j",
        "train_time_s",
        "train_gpu_util_pct",
    )
    keys = [f for f in FACTORS if f in done]
    for key, g in done.groupby(keys, sort=True):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        row["n"] = len(g)
        for c in cols:
            if c in g and g[c].notna().any():
                row[c] = float(g[c].mean())
        for c in ("train_gpu_energy_j", "infer_gpu_energy_j"):
            if c in g and g[c].notna().sum() > 1:
                m = level_means(g, c, [keys[0]])
                row[f"{c}_lo"], row[f"{c}_hi"] = float(m["lo"].iloc[0]), float(m["hi"].iloc[0])
        res.table.append(row)
    for target in ("train_gpu_energy_j", "infer_gpu_energy_j"):
        if target in done and "internal_energy" in done:
            res.correlation[f"internal_energy~{target} (all cells)"] = spearman(
                done["internal_energy"], done[target]
            )


def _groups(done, res: StudyAnalysis) -> None:
    if "lam" not in done or done["lam"].nunique() < 2:
        return
    lam0, lam_max = float(done["lam"].min()), float(done["lam"].max())
    for (arch, ds), g in done.groupby(["arch", "dataset"], sort=True):
        lo_g, hi_g = g[g["lam"] == lam0], g[g["lam"] == lam_max]
        row: dict[str, Any] = {"arch": arch, "dataset": ds, "lam0": lam0, "lam_max": lam_max}
        for c in (
            "internal_energy",
            "train_gpu_energy_j",
            "infer_gpu_energy_j",
            "train_time_s",
            "accuracy",
        ):
            if c in g and g[c].notna().any():
                if c == "accuracy":
                    row["accuracy_change"] = float(hi_g[c].mean() - lo_g[c].mean())
                else:
                    row[f"{c}_ratio"] = ratio_of_means(hi_g[c], lo_g[c])
        for c in ("train_gpu_energy_j", "infer_gpu_energy_j"):
            if c in g:
                row[f"spearman_internal~{c}"] = spearman(g["internal_energy"], g[c])
        if "accuracy" in g and g["accuracy"].notna().any() and len(lo_g):
            # the largest λ whose mean accuracy stays within ACCURACY_KEPT of λ = 0's
            acc0 = float(lo_g["accuracy"].mean())
            kept = [
                (lam, sub)
                for lam, sub in g.groupby("lam")
                if float(sub["accuracy"].mean()) >= acc0 - ACCURACY_KEPT
            ]
            lam_k, sub_k = max(kept, key=lambda t: t[0])
            row["lam_accuracy_kept"] = float(lam_k)
            if "internal_energy" in sub_k and len(lo_g):
                row["internal_energy_ratio_kept"] = ratio_of_means(
                    sub_k["internal_energy"], lo_g["internal_energy"]
                )
            if "activation_sparsity" in sub_k:
                row["sparsity_accuracy_kept"] = float(sub_k["activation_sparsity"].mean())
        res.groups.append(row)


def _classify(r: dict | None) -> str:
    if not r or r.get("ratio") is None:
        return "unmeasured"
    if r.get("lo") is None:
        return "no interval"
    if r["hi"] < 1 - SAVING_THRESHOLD:
        return "saves"
    if r["lo"] > 1 + SAVING_THRESHOLD:
        return "costs"
    if r["hi"] < 1 or r["lo"] > 1:
        return f"changes < {SAVING_THRESHOLD:.0%}"
    return "no measurable change"


def _lam_term(anova: dict[str, Any]) -> dict[str, float]:
    """λ's main effect (partial η², p) from an ANOVA's JSON, or {} where there is none."""
    for t in anova.get("terms", []):
        if t["term"] == "lam" and t.get("p") is not None:
            return {"eta2": t["partial_eta2"], "p": t["p"]}
    return {}


def _significant(effect: dict[str, Any]) -> bool:
    return effect.get("p") is not None and effect["p"] < 0.05


def _verdict(done, res: StudyAnalysis) -> None:
    import numpy as np

    if not res.groups:
        res.verdict = "Only one λ was run: no comparison of λ_max with λ = 0 is possible."
        return
    lines = []
    e_fac = [
        1 / g["internal_energy_ratio"]["ratio"]
        for g in res.groups
        if g.get("internal_energy_ratio", {}).get("ratio")
    ]
    if e_fac:
        lines.append(
            f"Internal E at λ = {res.groups[0]['lam_max']:g} versus λ = 0: lower by a median "
            f"factor of {np.median(e_fac):.3g} (range {min(e_fac):.3g}–{max(e_fac):.3g}) over "
            f"{len(e_fac)} architecture × dataset groups."
        )
    acc = [g["accuracy_change"] for g in res.groups if g.get("accuracy_change") is not None]
    if acc:
        kept = ", ".join(
            f"{g['arch']}/{g['dataset']} {g['lam_accuracy_kept']:g}"
            for g in res.groups
            if "lam_accuracy_kept" in g
        )
        lines.append(
            f"Accuracy at λ_max versus λ = 0: median change {np.median(acc) * 100:+.1f} points "
            f"(range {min(acc) * 100:+.1f} to {max(acc) * 100:+.1f}). Largest λ keeping accuracy "
            f"within {ACCURACY_KEPT * 100:g} points of λ = 0: {kept}."
        )
    simulated = "simulated" in (res.energy_source or "")
    word = "Simulated" if simulated else "Measured"
    effects: dict[str, dict[str, Any]] = {}
    n_excl = n_cmp = 0
    for c, what in (("train_gpu_energy_j", "training"), ("infer_gpu_energy_j", "inference")):
        ratios = [
            g[f"{c}_ratio"]["ratio"] for g in res.groups if g.get(f"{c}_ratio", {}).get("ratio")
        ]
        if not ratios:
            reason = ""
            col = f"{c}_reason"
            if col in done and done[col].notna().any():
                reason = f" ({done[col].dropna().iloc[0]})"
            lines.append(f"{word} GPU energy of {what}: not measured{reason}.")
            continue
        cls = [_classify(g.get(f"{c}_ratio")) for g in res.groups]
        n_cmp += sum(k not in ("unmeasured", "no interval") for k in cls)
        n_excl += sum(k in ("saves", "costs") or k.startswith("changes") for k in cls)
        med = float(np.median(ratios) - 1)
        term = _lam_term(res.anovas.get(c, {}))
        effects[what] = {"median": med, **term}
        txt = f"{word} GPU energy of {what} at λ_max versus λ = 0: median change {med:+.1%}"
        if term:
            txt += (
                f"; λ's main effect in the ANOVA: partial η² = {term['eta2']:.3g}, "
                f"p = {term['p']:.3g}"
            )
        lines.append(txt.replace("%", " %") + ".")
    small_e = bool(e_fac) and float(np.median(e_fac)) < 2
    saves = [w for w, e in effects.items() if _significant(e) and e["median"] < -SAVING_THRESHOLD]
    costs = [w for w, e in effects.items() if _significant(e) and e["median"] > SAVING_THRESHOLD]
    chance = (
        f" {n_excl} of the {n_cmp} per-group 95 % intervals exclude no change — about what "
        f"chance gives among {n_cmp} comparisons ({0.05 * n_cmp:.1f} expected)."
        if n_cmp
        else ""
    )
    if simulated:
        lines.append(
            "Verdict: undecided — the energy figures come from a simulated GPU (a testing aid), "
            "not from a measurement."
        )
    elif not effects:
        lines.append("Verdict: undecided — no cell measured GPU energy (run it on a GPU).")
    elif small_e:
        lines.append(
            f"Verdict: undecided — the regularizer lowered E by only ×{np.median(e_fac):.3g} "
            "here, too little to tell whether a lower E saves joules (raise λ or train longer)."
        )
    elif saves:
        lines.append(
            f"Verdict: the regularizer saved measurable GPU energy in {' and '.join(saves)} "
            "(λ's effect significant at p < 0.05, median change beyond "
            f"{SAVING_THRESHOLD:.0%})."
            + (f" It cost energy in {' and '.join(costs)}." if costs else "")
        )
    elif costs:
        lines.append(
            f"Verdict: the regularizer cost measurable GPU energy in {' and '.join(costs)}."
        )
    else:
        lines.append(
            "Verdict: on this hardware the regularizer does not save measurable GPU energy: λ "
            "has no significant effect on the measured joules while it lowers internal E."
            + chance
            + " The dense kernels these models run (cuBLAS/cuDNN matmuls and convolutions) "
            "execute every multiply-accumulate whether an activation is zero or not, so a lower "
            "internal E leaves the work, and the joules, where they were."
        )
    res.verdict = "\n".join(lines)


def _sparse(study_dir: Path, done, res: StudyAnalysis) -> None:
    p = study_dir / "sparse_probe.json"
    if not p.is_file():
        res.sparse_statement = (
            "Activation sparsity could save energy only where a kernel skips zeros (sparse "
            "formats, structured 2:4 sparsity, custom kernels); no sparse-kernel probe was run "
            "for this study."
        )
        return
    probe = json.loads(p.read_text())
    rows = probe.get("rows", [])
    res.sparse_probe = rows
    ok = sorted((r for r in rows if r.get("sparse_s") and r.get("dense_s")),
                key=lambda r: r["sparsity"])  # fmt: skip
    if not ok:
        res.sparse_statement = "The sparse-kernel probe recorded no usable timing."
        return
    shape = probe.get("shape", {})
    pct = lambda v: ", ".join(f"{x:.0%}" for x in v)  # noqa: E731
    dense_ms = [r["dense_s"] * 1e3 for r in ok]
    line = (
        f"Sparse-kernel probe ({shape.get('m')}×{shape.get('k')} activations times a "
        f"{shape.get('k')}×{shape.get('n')} weight): the dense kernel took "
        f"{min(dense_ms):.3g}–{max(dense_ms):.3g} ms whatever the zeros"
    )
    zero = ok[0] if ok[0]["sparsity"] == 0 else None
    if zero is not None and zero.get("dense_j") and all(r.get("dense_j") for r in ok):
        moves = [(r["dense_j"] / zero["dense_j"] - 1) * 100 for r in ok[1:]]
        sim = " (simulated energy)" if zero.get("dense_energy_source") == "simulated" else ""
        line += (
            f", and its energy per call moved by {min(moves):+.1f} to {max(moves):+.1f} % "
            f"from 0 % zeros up to {ok[-1]['sparsity']:.0%}{sim}"
        )
    faster = [r for r in ok if r["sparse_s"] < r["dense_s"]]
    slower = [r for r in ok if r["sparse_s"] >= r["dense_s"]]
    line += ". "
    if not faster:
        line += "The CSR sparse kernel was slower than the dense one at every sparsity probed."
    elif not slower:
        line += "The CSR sparse kernel was faster than the dense one at every sparsity probed."
    else:
        best = faster[-1]
        line += (
            f"The CSR sparse kernel was slower at {pct(r['sparsity'] for r in slower)} zeros "
            f"and faster at {pct(r['sparsity'] for r in faster)} (at {best['sparsity']:.0%}: "
            f"{best['sparse_s'] * 1e3:.3g} versus {best['dense_s'] * 1e3:.3g} ms"
            + (
                f", {best['sparse_j']:.3g} versus {best['dense_j']:.3g} J per call"
                if best.get("sparse_j") and best.get("dense_j")
                else ""
            )
            + ")."
        )
    kept = [
        (g["sparsity_accuracy_kept"], g)
        for g in res.groups
        if g.get("sparsity_accuracy_kept") is not None
    ]
    if kept:
        sp, g = max(kept, key=lambda t: t[0])
        line += (
            f" The sparsest activations that kept accuracy: {g['arch']}/{g['dataset']} at "
            f"λ = {g['lam_accuracy_kept']:g}, {sp:.0%} zeros"
        )
        if slower and sp <= slower[-1]["sparsity"]:
            line += ", below the sparsity at which the CSR kernel stops losing to the dense one"
        line += "."
    if "train_gpu_util_pct" in done and done["train_gpu_util_pct"].notna().any():
        util = float(done["train_gpu_util_pct"].median())
        line += (
            f" The study's cells kept the GPU busy a median {util:.0f}"
            " % of their training time (NVML utilization): their layers are far smaller than the "
            "probe's, so their time goes to kernel launches more than to MACs."
        )
    res.sparse_statement = line


def _plots(done, out: Path) -> list[str]:
    from jouleprof.analysis.effects import effect_plot, scatter_plot

    made = []
    specs = [
        ("accuracy", "effects_accuracy.png", "test accuracy", False),
        ("internal_energy", "effects_internal_energy.png", "internal E per sample", True),
        ("train_gpu_energy_j", "effects_train_energy.png", "training GPU energy (J)", False),
        ("infer_gpu_energy_j", "effects_infer_energy.png", "inference GPU energy (J)", False),
    ]
    for resp, name, label, logy in specs:
        if resp in done and done[resp].notna().any() and "lam" in done:
            made.append(
                str(
                    effect_plot(
                        done,
                        resp,
                        "lam",
                        "dataset",
                        out / name,
                        ylabel=label,
                        logy=logy,
                        panel="arch",
                    )
                )
            )
    if "accuracy" in done and done["accuracy"].notna().any():
        made.append(
            str(
                effect_plot(
                    done,
                    "accuracy",
                    "dataset",
                    "arch",
                    out / "interaction_arch_dataset.png",
                    ylabel="test accuracy",
                )
            )
        )
    if "train_gpu_energy_j" in done and done["train_gpu_energy_j"].notna().any():
        made.append(
            str(
                scatter_plot(
                    done,
                    "internal_energy",
                    "train_gpu_energy_j",
                    "arch",
                    out / "internal_vs_measured.png",
                    xlabel="internal E per sample (log)",
                    ylabel="training GPU energy (J)",
                )
            )
        )
    return made
