"""report.html of a V-JEPA2 study: the batch size × mode matrix of `jouleprof study vjepa2`
(`html.build_report` picks this page where runs.csv has batch_size and mode columns), from
the study's files alone."""

from __future__ import annotations

from pathlib import Path

from jouleprof.report.figures import Plot
from jouleprof.report.html import (
    REPORT_HTML,
    Report,
    fresh_report_dir,
    guarded,
    render,
    write_tables,
)


def build_study_report(study_dir: Path) -> Report:
    """Figures, tables and report.html of a study directory (see the module docstring)."""
    from jouleprof.report import study as S
    from jouleprof.report import studyfigures as SF
    from jouleprof.report import studytables as ST

    study = S.load_study(study_dir)
    out = fresh_report_dir(study_dir)
    agg = S.aggregate(study)
    bss, modes = study.batch_sizes, study.modes
    mode = S.headline_mode(agg) if len(agg) else None
    effects = S.batch_size_effects(study, agg, mode) if len(agg) else None
    left_out = S.left_out_batch_sizes(study, agg, mode) if len(agg) else None
    basis = S.effect_basis(study, agg, mode) if len(agg) else ""
    times, energies = S.phase_frames(study)
    t_time = ST.phase_time_by_batch(times) if len(times) else None
    t_energy = ST.phase_energy_by_batch(energies) if len(energies) else None
    t_over = ST.overhead_table(study, agg) if len(agg) else None
    t_agree = ST.agreement_table(study, agg) if len(agg) else None
    picks = S.representative_cells(study)
    no_cells = "no complete cell in the study"
    plots = []
    if len(agg):
        plots.append(
            guarded(
                "batch_size_effect", "Batch-size effect", SF.batch_effect_plot, agg, modes, bss, out
            )
        )
        plots.append(guarded("efficiency", "Efficiency", SF.efficiency_plot, agg, modes, bss, out))
    else:
        plots.append(Plot("batch_size_effect", "Batch-size effect", reason=no_cells))
    plots.append(
        guarded(
            "phase_time_by_batch",
            "Phase time per batch size",
            SF.phase_time_by_batch_plot,
            times,
            out,
        )
        if t_time
        else Plot(
            "phase_time_by_batch",
            "Phase time per batch size",
            reason="no complete cell recorded phase spans (fine mode does)",
        )
    )
    plots.append(
        guarded(
            "phase_energy_by_batch",
            "Phase energy per batch size",
            SF.phase_energy_by_batch_plot,
            t_energy.data,
            out,
        )
        if t_energy
        else Plot(
            "phase_energy_by_batch",
            "Phase energy per batch size",
            reason="no complete fine cell has an attribution (phases_<method>.csv): "
            "phase energy needs GPU energy readings",
        )
    )
    series = S.timeline_series(study, picks)
    plots.append(
        guarded(
            "timelines_by_batch",
            "Telemetry per batch size",
            SF.timelines_by_batch_plot,
            series,
            out,
        )
        if series
        else Plot(
            "timelines_by_batch",
            "Telemetry per batch size",
            reason="no complete cell holds sensor readings (samples.csv)",
        )
    )
    if t_over is not None and len(t_over.data):
        plots.append(guarded("overhead", "Overhead", SF.overhead_plot, t_over.data, bss, out))
    if t_agree is not None and len(t_agree.data) and (t_agree.data["n"] > 0).any():
        plots.append(guarded("energy_agreement", "Agreement", SF.agreement_plot, t_agree.data, out))

    tables = write_tables(
        [
            *(
                [ST.effects_table(effects, mode, c, left_out, basis) for c in (True, False)]
                if effects is not None
                else []
            ),
            ST.aggregate_table(study, agg) if len(agg) else None,
            t_time,
            t_energy,
            t_over,
            t_agree,
            ST.spread_table(study, agg) if len(agg) else None,
            ST.efficiency_table(study, agg) if len(agg) else None,
            ST.failed_table(study),
            ST.cells_table(study),
        ],
        out,
    )
    notes = S.study_notes(study)
    warmup = S.warmup_statement(study)
    pairs = list(effects["sentence"]) if effects is not None and len(effects) else []
    consecutive = (
        list(effects.loc[effects["consecutive"].astype(bool), "sentence"])
        if effects is not None and len(effects)
        else []
    )
    left = list(left_out["sentence"]) if left_out is not None else []
    # What `jouleprof report` prints: which figures, every pair with data, what was left out.
    sentences = ([basis] if basis else []) + pairs + left
    report = Report(
        "study", study_dir, plots=plots, tables=tables, notes=notes + warmup, sentences=sentences
    )
    counts = study.runs["status"].value_counts()
    status_counts = f"{len(study.runs)} cells: " + ", ".join(
        f"{n} {S.STATUS_WORDS.get(s, s)}" for s, n in counts.items()
    )
    sim = [cid for cid, r in study.records.items() if (r.extra or {}).get("simulated_gpu")]
    simulated = (
        f"SIMULATED: {len(sim)} of the study's cells ran without a GPU; their energies come "
        "from the package's simulated GPU, not from a measurement."
        if sim
        else None
    )
    report.html = render(
        "study.html",
        study_dir / REPORT_HTML,
        status_counts=status_counts,
        simulated=simulated,
        meta=study.meta,
        name=study_dir.name,
        n_cells=len(study.runs),
        batch_sizes=bss,
        modes=modes,
        headline_mode=mode,
        notes=notes,
        warmup=warmup,
        effect_basis=basis,
        sentences=consecutive,
        all_sentences=pairs,
        left_out=left,
        representatives=picks,
        tables={t.name: t for t in tables},
        plots={p.name: p for p in plots},
    )
    return report
