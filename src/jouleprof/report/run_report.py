"""report.html of one run directory: the answer first (energy, J/sample, energy per phase with
intervals), then timelines with the phases shaded, every figure and the hardware record, from
the run's files alone (`html.build_report` picks this page for a directory with run.json)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jouleprof.errors import RunDirError
from jouleprof.report.html import (
    REPORT_HTML,
    Report,
    fresh_report_dir,
    guarded,
    render,
    write_tables,
)
from jouleprof.store.liveness import status_text

log = logging.getLogger(__name__)

NO_STEPS = (
    "the run recorded no steps (it holds no steps.csv or spans.csv, as a plain "
    "`jouleprof measure -- CMD` run), only telemetry of the run as a whole"
)
"""Why a run has no zoomed timeline where it recorded no steps."""


def build_run_report(run_dir: Path) -> Report:
    """Figures, tables and report.html of one run directory (see the module docstring)."""
    from jouleprof.report import figures as F
    from jouleprof.report import tables as T
    from jouleprof.store.rundir import RunDir

    rd = RunDir(run_dir)
    rec = rd.read_record()
    status = status_text(run_dir, rec)
    out = fresh_report_dir(run_dir)
    samples = None
    try:
        samples = rd.read_samples() if rd.has("samples.csv") else None
    except RunDirError as e:
        log.warning("%s", e)
    spans = T.read_optional_csv(run_dir / "spans.csv")
    steps = T.read_optional_csv(run_dir / "steps.csv")
    phases = T.read_phase_files(run_dir)
    stats = T.phase_time_stats(spans) if spans is not None else None

    no_samples = "samples.csv holds no sensor readings"
    gpu = rec.summary.get("gpu_energy_j")
    if gpu is not None and gpu.reason and gpu.value is None:
        no_samples += f" (GPU: {gpu.reason})"
    elif rec.extra.get("mode") in ("baseline", "codecarbon", "zeus"):
        no_samples += f" (jouleprof's sensors are off in {rec.extra['mode']} mode)"
    has_samples = samples is not None and len(samples) > 0
    plots = [
        guarded(
            "timeline",
            "Telemetry over the whole run",
            F.timeline_plot,
            samples,
            out,
            "timeline",
            "Telemetry over the whole run",
            bands=F.run_bands(rec, steps, run_dir),
        )
        if has_samples
        else F.Plot("timeline", "Telemetry over the whole run", reason=no_samples),
    ]
    window = F.zoom_window(spans) if spans is not None else None
    zoom_title = F.zoom_title(spans, steps)
    has_steps = window is not None or (steps is not None and len(steps) > 0)
    if has_samples and window is not None:
        sel = spans[(spans["t1_s"] >= window[0]) & (spans["t0_s"] <= window[1])]
        plots.append(
            guarded(
                "timeline_zoom",
                zoom_title,
                F.timeline_plot,
                samples,
                out,
                "timeline_zoom",
                zoom_title,
                spans=sel,
                window_s=window,
            )
        )
    else:
        plots.append(
            F.Plot(
                "timeline_zoom",
                zoom_title,
                reason=NO_STEPS
                if not has_steps
                else no_samples
                if not has_samples
                else "no phase spans (only fine mode records them)",
            )
        )
    attribution_reason = _attribution_reason(rec)
    if phases is not None:
        plots.append(guarded("phase_energy", "Energy per phase", F.phase_energy_plot, phases, out))
    else:
        plots.append(F.Plot("phase_energy", "Energy per phase", reason=attribution_reason))
    if stats is not None and len(stats):
        plots.append(guarded("phase_time", "Time per phase", F.phase_time_plot, stats, out))
    if steps is not None and {"segment", "host_step_s"} <= set(steps.columns):
        plots.append(guarded("step_times", "Step times", F.step_time_plot, steps, out))

    from jouleprof.report import answer as A

    reasons = A.Reasons()
    heads = A.headlines(rec, reasons)
    src = A.phases_source(phases, rec)
    tables = write_tables(
        [
            A.phase_breakdown(phases, src),
            T.summary_table(rec, reasons),
            T.phase_energy_table(phases) if phases is not None else None,
            T.method_comparison_table(phases) if phases is not None else None,
            T.phase_time_table(stats) if stats is not None and len(stats) else None,
        ],
        out,
    )
    banner = A.simulated_banner(rec)
    notes = [
        n
        for n in T.run_notes(rec, status)
        if not reasons.covers(n) and not (banner and n == banner)
    ]
    telemetry = "simulated" if banner or _sim_samples(samples) else "measured"
    plot_sources = {
        "timeline": telemetry,
        "timeline_zoom": telemetry,
        "phase_energy": src,
        "phase_time": "measured (phase recorder)",
        "step_times": "measured (host timer)",
    }
    for p in plots:
        if p.path is not None and p.name in plot_sources:
            p.caption = f"Source: {plot_sources[p.name]}. {p.caption}".strip()
    report = Report("run", run_dir, plots=plots, tables=tables, notes=notes)
    by_name = {t.name: t for t in tables}
    report.html = render(
        "run.html",
        run_dir / REPORT_HTML,
        record=rec,
        facts=T.run_facts(rec, status),
        status=status,
        notes=notes,
        reasons=reasons.items,
        headlines=heads,
        simulated=banner,
        trained_on=A.trained_on(rec),
        phases_source=src,
        breakdown=by_name.get("phase_breakdown"),
        hardware=A.flat_facts(rec.hardware),
        environment=A.flat_facts(rec.environment),
        overhead=T.overhead_text(rec),
        attribution_reason=attribution_reason,
        attribution=rec.extra.get("attribution") or {},
        summary=by_name.get("summary"),
        phase_energy=by_name.get("phase_energy"),
        phase_methods=by_name.get("phase_methods"),
        phase_time=by_name.get("phase_time"),
        plots={p.name: p for p in plots},
        has_steps=has_steps,
        no_steps=NO_STEPS,
    )
    return report


def _sim_samples(samples: Any) -> bool:
    """Whether the sensor readings are the simulated GPU's (device sim*)."""
    if samples is None or not len(samples) or "device" not in samples.columns:
        return False
    from jouleprof.sensors.simulated import is_simulated_device

    return any(is_simulated_device(d) for d in samples["device"].astype(str).unique())


def _attribution_reason(rec: Any) -> str:
    st = rec.extra.get("attribution")
    if not st:
        return "the run holds no attribution (phases_<method>.csv or phases.csv)"
    if isinstance(st, dict) and st.get("reason"):
        return str(st["reason"])
    fails = [
        f"{m}: {s.get('reason')}"
        for m, s in st.items()
        if isinstance(s, dict) and not s.get("ok", True)
    ]
    return "; ".join(fails) or "the run holds no phases file"
