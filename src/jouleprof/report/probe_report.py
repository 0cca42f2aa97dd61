"""The report of a video probe (`jouleprof probe video`). It leads with what fits: every cell's
status and peak memory as one grid. Then it shows what each PEFT method saves or costs in
training against full fine-tuning (report.probe_savings, as `jouleprof summarize` writes it), and
every cell.

It is built from probe.csv alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from jouleprof.report.figures import Plot, new_figure, save
from jouleprof.report.tables import Table

STATUS_COLORS = {"ok": "#4caf50", "oom": "#e53935", "refused": "#bdbdbd", "error": "#212121"}
METHODS = ("full", "lora", "qlora", "adalora", "bitfit")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def _order(values: set[str], known: tuple[str, ...]) -> list[str]:
    return sorted(values, key=lambda v: (known.index(v) if v in known else len(known), v))


def sentences(rows: list[dict[str, str]]) -> list[str]:
    """What fits, in a few sentences."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    out = [
        f"{len(rows)} cells: {counts.get('ok', 0)} trained, {counts.get('oom', 0)} ran out of "
        f"memory, {counts.get('refused', 0)} refused by design (a method and a precision that "
        f"do not go together), {counts.get('error', 0)} failed otherwise."
    ]
    ok = [r for r in rows if r["status"] == "ok" and r.get("peak_mem_mib")]
    if ok:
        big = max(ok, key=lambda r: float(r["peak_mem_mib"]))
        out.append(
            f"The largest peak allocated memory: {float(big['peak_mem_mib']):,.0f} MiB "
            f"({big['model']} {big['method']} {big['precision']}, batch {big['batch']}, "
            f"checkpointing {big['checkpointing']})."
        )
    for reason in sorted({r["error"] for r in rows if r["status"] == "refused" and r["error"]}):
        out.append(f"Refused: {reason}.")
    return out


def grid_plot(rows: list[dict[str, str]], out_dir: Path) -> Plot:
    """Every cell as a square: color its status, text its peak MiB."""
    title = "What fits"
    if not rows:
        return Plot("fits", title, reason="probe.csv holds no cell")
    ys = [
        (m, meth)
        for m in sorted({r["model"] for r in rows})
        for meth in _order({r["method"] for r in rows}, METHODS)
    ]
    cols = sorted(
        {(r["precision"], r["checkpointing"], int(r["batch"])) for r in rows},
        key=lambda c: (PRECISIONS.index(c[0]) if c[0] in PRECISIONS else 9, c[1], c[2]),
    )
    cell = {(r["model"], r["method"], r["precision"], r["checkpointing"], int(r["batch"])): r
            for r in rows}  # fmt: skip
    fig, axes = new_figure(width_in=max(6.0, 0.75 * len(cols) + 2.5),
                           height_in=max(3.0, 0.3 * len(ys) + 1.5))  # fmt: skip
    ax = axes[0][0]
    from matplotlib.patches import Rectangle

    for yi, (m, meth) in enumerate(ys):
        for xi, (prec, ck, b) in enumerate(cols):
            r = cell.get((m, meth, prec, ck, b))
            if r is None:
                continue
            ax.add_patch(Rectangle((xi, yi), 0.95, 0.9,
                                   color=STATUS_COLORS.get(r["status"], "#9e9e9e")))  # fmt: skip
            if r["status"] == "ok" and r.get("peak_mem_mib"):
                ax.text(xi + 0.47, yi + 0.45, f"{float(r['peak_mem_mib']) / 1024:.1f}",
                        ha="center", va="center", fontsize=6, color="white")  # fmt: skip
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(ys), 0)
    ax.set_xticks([i + 0.47 for i in range(len(cols))],
                  [f"{p}\nb{b}" + ("\nckpt" if ck == "on" else "") for p, ck, b in cols],
                  fontsize=7)  # fmt: skip
    ax.set_yticks([i + 0.45 for i in range(len(ys))], [f"{m} {meth}" for m, meth in ys],
                  fontsize=7)  # fmt: skip
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    path = save(fig, out_dir, "fits")
    present = [s for s in STATUS_COLORS if any(r["status"] == s for r in rows)]
    return Plot(
        "fits",
        title,
        path,
        caption="Each cell's status ("
        + ", ".join(
            f"{s}: {c}"
            for s, c in zip(present, ("green", "red", "grey", "black"), strict=False)
            if s
        )
        + "), with the peak allocated memory in GiB on the cells that trained.",
    )


def no_ratio_reason(table: list[dict[str, Any]]) -> str:
    """Why no method has an energy ratio to full fine-tuning: none trained beside it, or the
    cells that did measured no energy (a machine without a GPU: the cells' own reason)."""
    # savings() gives s_vs_full (maybe None) exactly to the ok cells with an ok full baseline
    paired = [r for r in table if r["method"] != "full" and "s_vs_full" in r]
    if not paired:
        return "no method trained beside full fine-tuning"
    keys = {(r["model"], r["precision"], r["batch"], r["checkpointing"]) for r in paired}
    cells = paired + [
        r
        for r in table
        if r["method"] == "full"
        and r["status"] == "ok"
        and (r["model"], r["precision"], r["batch"], r["checkpointing"]) in keys
    ]
    missing = [
        r
        for r in cells
        if None in (r.get("j_per_step"), r.get("j_per_step_lo"), r.get("j_per_step_hi"))
    ]
    notes = list(
        dict.fromkeys(
            str(r.get("energy_note") or "").removeprefix("unavailable: ").split("; peak memory")[0]
            for r in missing
        )
    )
    why = "; ".join(n for n in notes if n)
    if len(missing) == len(cells):
        methods = ", ".join(_order({r["method"] for r in paired}, METHODS))
        head = (
            f"no GPU energy was measured: {methods} trained beside full fine-tuning, but none "
            "of these cells has a J/step"
        )
    else:
        head = (
            "every method that trained beside full fine-tuning lacks a J/step with bounds, in "
            "its own cell or in full fine-tuning's (no GPU energy measured there)"
        )
    return f"{head} ({why})" if why else head


def ratio_plot(table: list[dict[str, Any]], out_dir: Path) -> Plot:
    """J/step of each method over full fine-tuning's, with the bounds, at one precision, batch
    and checkpointing: where the most methods ran (bf16, the largest batch, checkpointing off
    first among equals)."""
    title = "Training energy against full fine-tuning"
    d = [r for r in table if r.get("j_vs_full") is not None and r["method"] != "full"]
    if not d:
        return Plot("energy_ratio", title, reason=no_ratio_reason(table))

    def rank(k):  # the most methods, then bf16, the largest batch, checkpointing off
        n = sum((r["precision"], r["batch"], r["checkpointing"]) == k for r in d)
        return (n, k[0] == "bf16", int(k[1]), k[2] == "off")

    key = max({(r["precision"], r["batch"], r["checkpointing"]) for r in d}, key=rank)
    d = [r for r in d if (r["precision"], r["batch"], r["checkpointing"]) == key]
    d.sort(key=lambda r: (r["model"], METHODS.index(r["method"]) if r["method"] in METHODS else 9))
    fig, axes = new_figure(width_in=8, height_in=max(2.5, 0.28 * len(d) + 1))
    ax = axes[0][0]
    y = list(range(len(d)))
    v = [r["j_vs_full"] for r in d]
    lo = [max(r["j_vs_full"] - (r.get("j_vs_full_lo") or r["j_vs_full"]), 0) for r in d]
    hi = [max((r.get("j_vs_full_hi") or r["j_vs_full"]) - r["j_vs_full"], 0) for r in d]
    ax.barh(y, [x - 1 for x in v], left=1, xerr=[lo, hi], capsize=3,
            color=["#4caf50" if x < 1 else "#e53935" for x in v])  # fmt: skip
    ax.axvline(1.0, color="#333", lw=0.8)
    ax.set_yticks(y, [f"{r['model']} {r['method']}" for r in d], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("J/step ÷ full fine-tuning's (below 1 saves)")
    path = save(fig, out_dir, "energy_ratio")
    prec, batch, ck = key
    return Plot(
        "energy_ratio",
        title,
        path,
        caption=f"{prec}, batch {batch}, checkpointing {ck}: each method's energy per training "
        "step over full fine-tuning's, with the bounds both cells' counter brackets give.",
    )


def build(probe_dir: Path):
    """report.html and report/ of a probe directory (returns report.html.Report)."""
    from jouleprof.bench.probe import PROBE_CSV, read_rows
    from jouleprof.report.html import REPORT_HTML, Report, fresh_report_dir, guarded, render
    from jouleprof.report.probe_savings import savings
    from jouleprof.report.tables import write_table

    rows = read_rows(probe_dir / PROBE_CSV)
    out = fresh_report_dir(probe_dir)
    measured = [r for r in rows if r["status"] != "refused"]
    table = savings(
        sorted(
            measured,
            key=lambda r: (
                r["precision"],
                r["batch"],
                r["checkpointing"],
                r["model"],
                METHODS.index(r["method"]) if r["method"] in METHODS else 9,
            ),
        )
    )
    said = sentences(rows)
    plots = [
        guarded("fits", "What fits", grid_plot, rows, out),
        guarded("energy_ratio", "Training energy against full", ratio_plot, table, out),
    ]
    saving = pd.DataFrame(table)
    keep = [c for c in ("model", "precision", "batch", "checkpointing", "method", "peak_mem_mib",
                        "mem_vs_full", "s_per_step", "s_vs_full", "j_per_step", "j_vs_full",
                        "j_vs_full_lo", "j_vs_full_hi") if c in saving.columns]  # fmt: skip
    cells = pd.DataFrame(rows)
    tables = [
        write_table(t, out)
        for t in (
            Table(
                "probe_savings",
                "Each method against full fine-tuning (same model, precision, batch, "
                "checkpointing)",
                saving,
                saving[keep] if len(saving) else saving,
                note="Ratios of J/step carry the bounds of both cells' counter brackets; "
                "`jouleprof summarize DIR --repeat OTHER/probe.csv` adds the spread between "
                "processes.",
            ),
            Table("probe", "Every cell (probe.csv)", cells, cells),
        )
    ]
    report = Report("study", probe_dir, plots=plots, tables=tables, sentences=said)
    report.html = render(
        "probe.html",
        probe_dir / REPORT_HTML,
        name=probe_dir.name,
        sentences=said,
        tables={t.name: t for t in tables},
        plots={p.name: p for p in plots},
    )
    return report
