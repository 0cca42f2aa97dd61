"""report.html of a run or a study directory, and the report/ folder of figures and tables.

`write_run_report(run_dir)` and `write_study_report(study_dir)` regenerate everything from the
files on disk alone (no GPU, no torch): every figure as a PNG and every table as CSV and
markdown under DIR/report/, then DIR/report.html. The HTML is self-contained: figures are
embedded as base64 PNG data URIs, so the one file can be mailed or attached; the PNGs, CSVs and
markdown beside it are the same content for reuse elsewhere. Regenerating replaces the
report's own files (PNG, CSV, markdown at the top of report/) and leaves anything else alone.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouleprof.errors import RunDirError
from jouleprof.report.figures import Plot
from jouleprof.report.tables import Table, write_table

log = logging.getLogger(__name__)

REPORT_DIR = "report"
REPORT_HTML = "report.html"
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;border-bottom:1px solid #ddd;
padding-bottom:.2em;margin-top:1.8em}h3{font-size:1.05em}
.meta{color:#666;font-size:.9em}code{background:#f4f4f4;padding:0 .25em}
table{border-collapse:collapse;margin:.6em 0;font-size:.86em}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f6f6f6}td.na{color:#a03030;font-style:italic}
table.facts th{width:14em}.note{color:#555;font-size:.85em;max-width:60em}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.85em;max-width:60em}
.missing{color:#a03030;border:1px dashed #d99;padding:.6em;margin:1em 0}
ul.sentences li{margin:.2em 0}.files{font-size:.85em;color:#555}
.simulated{background:#fff3cd;border:3px solid #e0a800;color:#5c4400;padding:.8em 1em;
font-weight:600;margin:1em 0;font-size:1.05em}
table.answer td.value{font-size:1.15em;font-weight:600;white-space:nowrap}
.src{display:inline-block;border-radius:3px;padding:0 .4em;font-size:.8em;font-weight:600;
text-transform:uppercase;letter-spacing:.03em}
.src-measured{background:#d8f0dc;color:#1d5e2b}.src-estimated{background:#e3e9f7;color:#23407a}
.src-predicted{background:#efe3f7;color:#5a237a}.src-simulated{background:#e0a800;color:#000}
.src-unavailable{background:#f4dada;color:#7a2323}
details{margin:1em 0}summary{cursor:pointer;font-weight:600}
"""


@dataclass
class Report:
    """What a report consists of (also the CLI's --json answer)."""

    kind: str
    """"run" or "study"."""
    path: Path
    html: Path | None = None
    plots: list[Plot] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "dir": str(self.path),
            "html": str(self.html) if self.html else None,
            "figures": [
                {
                    "name": p.name,
                    "title": p.title,
                    "path": str(p.path) if p.path else None,
                    "reason": p.reason,
                }
                for p in self.plots
            ],
            "tables": [
                {"name": t.name, "title": t.title, **{k: str(v) for k, v in t.paths.items()}}
                for t in self.tables
            ],
            "notes": self.notes,
            "sentences": self.sentences,
        }


# -- rendering -------------------------------------------------------------------------------


def _img_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def table_html(t: Table | None) -> Any:
    """A Table's display as an HTML table (unavailable values styled), its note, its files."""
    from markupsafe import Markup, escape

    if t is None:
        return Markup("")
    if t.empty or not len(t.display):
        return Markup(f'<p class="missing">{escape(t.title)}: no rows.</p>')
    title = f"<h3>{escape(t.title)}</h3>"
    head = "".join(f"<th>{escape(c)}</th>" for c in t.display.columns)
    rows = []
    for row in t.display.itertuples(index=False):
        cells = []
        for v in row:
            s = "" if v is None or (isinstance(v, float) and v != v) else str(v)
            cls = ' class="na"' if s.startswith("unavailable") else ""
            cells.append(f"<td{cls}>{escape(s)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    out = f"{title}<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    if t.note:
        out += f'<p class="note">{escape(t.note)}</p>'
    if t.paths:
        links = ", ".join(
            f'<a href="{REPORT_DIR}/{escape(p.name)}">{escape(p.name)}</a>'
            for p in t.paths.values()
        )
        out += f'<p class="files">files: {links}</p>'
    return Markup(out)


def plot_html(p: Plot | None) -> Any:
    """A Plot embedded as a base64 PNG with its caption, or why it is missing."""
    from markupsafe import Markup, escape

    if p is None:
        return Markup("")
    if p.path is None:
        return Markup(
            f'<p class="missing">Figure "{escape(p.title)}" unavailable: '
            f"{escape(p.reason or 'no reason recorded')}</p>"
        )
    cap = escape(p.caption) + Markup(
        f' <span class="files">({REPORT_DIR}/{escape(p.path.name)})</span>'
    )
    return Markup(
        f'<figure><img alt="{escape(p.title)}" src="{_img_data_uri(p.path)}">'
        f"<figcaption>{cap}</figcaption></figure>"
    )


def render(template: str, out: Path, **context: Any) -> Path:
    """Render a template of this package into `out` (written atomically)."""
    import jinja2

    from jouleprof import __version__

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jouleprof.report", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(table=table_html, figure=plot_html)
    html = env.get_template(template).render(
        css=CSS, version=__version__, generated=time.strftime("%Y-%m-%d %H:%M:%S"), **context
    )
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out)
    return out


def fresh_report_dir(path: Path) -> Path:
    """DIR/report/, emptied of the files a previous report wrote there."""
    out = path / REPORT_DIR
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} is a file: remove it so the report can use that name")
    out.mkdir(exist_ok=True)
    for p in out.iterdir():
        if p.is_file() and p.suffix in (".png", ".svg", ".csv", ".md"):
            p.unlink()
    return out


def guarded(name: str, title: str, fn: Any, *args: Any, **kw: Any) -> Plot:
    """Draw one figure; a failure becomes a missing figure with its reason (the report goes on)."""
    try:
        return fn(*args, **kw)
    except Exception as e:
        log.warning("figure %s failed: %s", name, e, exc_info=log.isEnabledFor(logging.DEBUG))
        return Plot(name, title, reason=f"could not be drawn ({type(e).__name__}: {e})")


# -- entry points ----------------------------------------------------------------------------


def detect(path: str | os.PathLike[str]) -> str:
    """'run' (run.json), 'study' (study.json or runs.csv) or 'probe' (probe.csv); RunDirError
    for anything else."""
    p = Path(path)
    if not p.exists():
        raise RunDirError(f"{p} does not exist: give a run directory or a study directory")
    if not p.is_dir():
        raise RunDirError(f"{p} is not a directory: give a run directory or a study directory")
    if (p / "study.json").is_file() or (p / "runs.csv").is_file():
        return "study"
    if (p / "run.json").is_file():
        return "run"
    if (p / "probe.csv").is_file():
        return "probe"
    raise RunDirError(
        f"{p} is neither a run directory (no run.json) nor a study directory (no study.json or "
        "runs.csv) nor a probe (no probe.csv): point `jouleprof report` at what `jouleprof "
        "profile/measure`, `jouleprof study` or `jouleprof probe` wrote"
    )


def build_report(path: str | os.PathLike[str]) -> Report:
    """Detect what `path` holds and write its report; returns what was written."""
    kind = detect(path)
    if kind == "run":
        return build_run_report(Path(path))
    if kind == "probe":
        from jouleprof.report import probe_report

        return probe_report.build(Path(path))
    from jouleprof.report import video_study

    if video_study.is_video_study(Path(path)):
        return video_study.build(Path(path))
    if _is_batch_mode_study(Path(path)):
        return build_study_report(Path(path))
    from jouleprof.report import matrix_study

    return matrix_study.build(Path(path))


def _is_batch_mode_study(path: Path) -> bool:
    """Whether runs.csv is the V-JEPA2 batch size × mode matrix (its own study page)."""
    p = path / "runs.csv"
    if not p.is_file():
        return True  # the study page says what is missing
    with p.open() as f:
        header = f.readline().strip().split(",")
    return {"batch_size", "mode"} <= set(header)


def write_run_report(run_dir: str | os.PathLike[str]) -> Path:
    """Regenerate a run directory's report; returns the path of its report.html."""
    return build_run_report(Path(run_dir)).html  # type: ignore[return-value]


def write_study_report(study_dir: str | os.PathLike[str]) -> Path:
    """Regenerate a study directory's report; returns the path of its report.html."""
    return build_report(Path(study_dir)).html  # type: ignore[return-value]


def write_tables(tables: list[Table | None], out_dir: Path) -> list[Table]:
    return [write_table(t, out_dir) for t in tables if t is not None]


# -- a run -----------------------------------------------------------------------------------


def build_run_report(run_dir: Path) -> Report:
    """Figures, tables and report.html of one run directory (see the module docstring)."""
    from jouleprof.report import figures as F
    from jouleprof.report import tables as T
    from jouleprof.store.rundir import RunDir

    rd = RunDir(run_dir)
    rec = rd.read_record()
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
    zoom_title = f"Telemetry over {F.ZOOM_STEPS} steps, phases shaded"
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
                reason=no_samples
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
    notes = [n for n in T.run_notes(rec) if not reasons.covers(n) and not (banner and n == banner)]
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
        facts=T.run_facts(rec),
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
    )
    return report


def _sim_samples(samples: Any) -> bool:
    """Whether the sensor readings are the simulated GPU's (device sim*)."""
    if samples is None or not len(samples) or "device" not in samples.columns:
        return False
    return bool(samples["device"].astype(str).str.startswith("sim").any())


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


# -- a study ---------------------------------------------------------------------------------


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
