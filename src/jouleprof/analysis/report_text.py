"""The energy-aware study's analysis as a Markdown report (pure: analysis in, text out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jouleprof.analysis.effects import fmt
from jouleprof.analysis.energy_study import RESPONSES, StudyAnalysis


def _p(v: Any) -> str:
    if v is None:
        return "–"
    return "< 0.001" if v < 1e-3 else f"{v:.3f}"


def _ratio(r: dict | None, pct: bool = True) -> str:
    if not r or r.get("ratio") is None:
        return "–"
    if pct:
        s = f"{(r['ratio'] - 1) * 100:+.1f} %"
        if r.get("lo") is not None:
            s += f" [{(r['lo'] - 1) * 100:+.1f}, {(r['hi'] - 1) * 100:+.1f}]"
        return s
    s = f"÷{1 / r['ratio']:.3g}"
    return s


def anova_table(a: dict[str, Any]) -> list[str]:
    if "error" in a:
        return [f"Not computed: {a['error']}.", ""]
    lines = [
        f"{a['n']} cells"
        + (f" ({a['dropped']} without this figure left out)" if a["dropped"] else "")
        + f"; type {a['typ']} sums of squares.",
        "",
        "| term | df | F | p | partial η² |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in a["terms"]:
        if t["term"] == "Residual":
            lines.append(f"| residual | {t['df']:.0f} | | | |")
        else:
            lines.append(
                f"| {t['term']} | {t['df']:.0f} | {fmt(t['F'])} | {_p(t['p'])} | "
                f"{fmt(t['partial_eta2'])} |"
            )
    return lines + [""]


def markdown_report(res: StudyAnalysis, study: dict[str, Any]) -> str:
    L: list[str] = ["# Energy-aware study: analysis", ""]
    if study:
        L.append(
            f"Study: archs {', '.join(study.get('archs', []))}; datasets "
            f"{', '.join(study.get('datasets', []))}; λ "
            f"{', '.join(f'{v:g}' for v in study.get('lambdas', []))}; {study.get('seeds')} seeds; "
            f"E = {study.get('kind')} (reduction {study.get('reduction', 'sum')}); "
            f"{study.get('epochs')} epochs, "
            f"batch {study.get('batch_size')}."
        )
    L.append(
        f"Cells: {res.n_complete} complete of {res.n_cells}"
        + (
            f" ({len(res.not_complete)} not: "
            + ", ".join(f"{c['cell_id']} {c['status']}" for c in res.not_complete[:8])
            + (" …" if len(res.not_complete) > 8 else "")
            + ")"
            if res.not_complete
            else ""
        )
        + "."
    )
    if res.energy_source:
        L.append(f"Source of the energy figures: {res.energy_source}.")
    L += ["", "## Verdict", "", res.verdict, ""]
    if res.sparse_statement:
        L += [res.sparse_statement, ""]
    L += ["## Factorial ANOVA", ""]
    for resp, label in RESPONSES.items():
        if resp in res.anovas:
            L += [f"### {label}", ""] + anova_table(res.anovas[resp])
    if res.groups:
        L += [
            "## λ_max versus λ = 0, per architecture × dataset",
            "",
            "Ratios of means over seeds, 95 % intervals (delta method, Welch).",
            "",
            "| arch | dataset | internal E | accuracy Δ (points) | training J | inference J | "
            "training time | ρ(E, training J) | largest λ keeping accuracy | E there |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for g in res.groups:
            rho = g.get("spearman_internal~train_gpu_energy_j", {})
            acc = g.get("accuracy_change")
            L.append(
                f"| {g['arch']} | {g['dataset']} | {_ratio(g.get('internal_energy_ratio'), False)}"
                f" | {fmt(acc * 100 if acc is not None else None)} | "
                f"{_ratio(g.get('train_gpu_energy_j_ratio'))} | "
                f"{_ratio(g.get('infer_gpu_energy_j_ratio'))} | "
                f"{_ratio(g.get('train_time_s_ratio'))} | {fmt(rho.get('rho'))} | "
                f"{fmt(g.get('lam_accuracy_kept'))} | "
                f"{_ratio(g.get('internal_energy_ratio_kept'), False)} |"
            )
        L.append("")
    if res.table:
        L += [
            "## Internal E against measured joules, per cell of the design",
            "",
            "Means over seeds.",
            "",
            "| arch | dataset | λ | n | accuracy | internal E | sparsity | training J | "
            "inference J | GPU util % |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in res.table:
            L.append(
                f"| {r.get('arch')} | {r.get('dataset')} | {fmt(r.get('lam'))} | {r['n']} | "
                f"{fmt(r.get('accuracy'))} | {fmt(r.get('internal_energy'))} | "
                f"{fmt(r.get('activation_sparsity'))} | {fmt(r.get('train_gpu_energy_j'))} | "
                f"{fmt(r.get('infer_gpu_energy_j'))} | {fmt(r.get('train_gpu_util_pct'))} |"
            )
        L.append("")
    if res.correlation:
        L += [
            "Spearman rank correlation over all cells (confounded by architecture: bigger "
            "models have both more E and more joules; the per-group ρ above is the test):",
            "",
        ]
        for k, c in res.correlation.items():
            L.append(f"- {k}: ρ = {fmt(c.get('rho'))}, p = {_p(c.get('p'))}, n = {c.get('n')}")
        L.append("")
    if res.sparse_probe:
        L += [
            "## Sparse-kernel probe",
            "",
            "| zeros | dense ms | sparse (CSR) ms | dense J/call | sparse J/call |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in res.sparse_probe:
            L.append(
                f"| {r['sparsity']:.0%} | {fmt((r.get('dense_s') or 0) * 1e3)} | "
                f"{fmt((r.get('sparse_s') or 0) * 1e3)} | {fmt(r.get('dense_j'))} | "
                f"{fmt(r.get('sparse_j'))} |"
            )
        L.append("")
    if res.plots:
        L += ["## Plots", ""] + [f"- {Path(p).name}" for p in res.plots] + [""]
    return "\n".join(L)
