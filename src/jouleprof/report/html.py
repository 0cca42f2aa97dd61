"""report.html of a run or a study directory, and the report/ folder of figures and tables.

`write_run_report(run_dir)` and `write_study_report(study_dir)` regenerate everything from the
files on disk alone (no GPU, no torch): every figure as a PNG and every table as CSV and
markdown under DIR/report/, then DIR/report.html. The HTML is self-contained: figures are
embedded as base64 PNG data URIs, so the one file can be mailed or attached; the PNGs, CSVs and
markdown beside it are the same content for reuse elsewhere. Regenerating replaces the
report's own files (PNG, CSV, markdown at the top of report/) and leaves anything else alone.

This module holds what every page shares (`Report`, the CSS, `render`, `guarded`) and picks
the page (`build_report`); each page is built in its own module: `run_report`, `batch_study`
(V-JEPA2's batch size × mode study), `video_study`, `matrix_study` (any other study) and
`probe_report`.
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
        from jouleprof.report.run_report import build_run_report

        return build_run_report(Path(path))
    if kind == "probe":
        from jouleprof.report import probe_report

        return probe_report.build(Path(path))
    from jouleprof.report import video_study

    if video_study.is_video_study(Path(path)):
        return video_study.build(Path(path))
    if _is_batch_mode_study(Path(path)):
        from jouleprof.report.batch_study import build_study_report

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
    from jouleprof.report.run_report import build_run_report

    return build_run_report(Path(run_dir)).html  # type: ignore[return-value]


def write_study_report(study_dir: str | os.PathLike[str]) -> Path:
    """Regenerate a study directory's report; returns the path of its report.html."""
    return build_report(Path(study_dir)).html  # type: ignore[return-value]


def write_tables(tables: list[Table | None], out_dir: Path) -> list[Table]:
    return [write_table(t, out_dir) for t in tables if t is not None]
