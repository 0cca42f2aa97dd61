"""What PEFT saves, from a probe.csv: per model, each method's training memory, seconds and joules
per step against full fine-tuning at the same precision, batch and checkpointing.

    python benchmarks/video_probe_savings.py benchmarks/results/video_probe/probe/probe.csv \
        --out benchmarks/results/video_probe/savings

Ratios of joules carry bounds from the cells' own energy bounds (lo_method / hi_full,
hi_method / lo_full: both cells' counter brackets at once). Seconds and memory are single
measurements (one cell each: the spread between repeated cells was not measured).
Writes OUT.csv and OUT.md.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def _f(v: str | None) -> float | None:
    return float(v) if v not in (None, "") else None


def savings(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """One row per (model, precision, batch, checkpointing, method) with its full-FT baseline."""
    ok = [r for r in rows if r["status"] == "ok"]
    base = {
        (r["model"], r["precision"], r["batch"], r["checkpointing"]): r
        for r in ok
        if r["method"] == "full"
    }
    out = []
    for r in rows:
        key = (r["model"], r["precision"], r["batch"], r["checkpointing"])
        b = base.get(key)
        row: dict[str, object] = {
            "model": r["model"],
            "precision": r["precision"],
            "batch": r["batch"],
            "checkpointing": r["checkpointing"],
            "method": r["method"],
            "status": r["status"],
            "trainable_params": r["trainable_params"],
            "peak_mem_mib": _f(r["peak_mem_mib"]),
            "s_per_step": _f(r["s_per_step"]),
            "j_per_step": _f(r["j_per_step"]),
            "j_per_step_lo": _f(r["j_per_step_lo"]),
            "j_per_step_hi": _f(r["j_per_step_hi"]),
            "error": r.get("error", ""),
        }
        if r["status"] == "ok" and b is not None:
            mem, s = row["peak_mem_mib"], row["s_per_step"]
            bm, bs = _f(b["peak_mem_mib"]), _f(b["s_per_step"])
            row["mem_vs_full"] = mem / bm if mem and bm else None
            row["s_vs_full"] = s / bs if s and bs else None
            j, lo, hi = row["j_per_step"], row["j_per_step_lo"], row["j_per_step_hi"]
            bj, blo, bhi = _f(b["j_per_step"]), _f(b["j_per_step_lo"]), _f(b["j_per_step_hi"])
            if None not in (j, lo, hi, bj, blo, bhi):
                row["j_vs_full"] = j / bj
                row["j_vs_full_lo"] = lo / bhi
                row["j_vs_full_hi"] = hi / blo
        out.append(row)
    return out


COLS = (
    "model",
    "precision",
    "batch",
    "checkpointing",
    "method",
    "status",
    "trainable_params",
    "peak_mem_mib",
    "mem_vs_full",
    "s_per_step",
    "s_vs_full",
    "j_per_step",
    "j_per_step_lo",
    "j_per_step_hi",
    "j_vs_full",
    "j_vs_full_lo",
    "j_vs_full_hi",
    "error",
)


def _pct(x: object) -> str:
    return "" if x is None else f"{(float(x) - 1) * 100:+.0f} %"


def markdown(table: list[dict[str, object]]) -> str:
    lines = [
        "| model | method | trainable | peak MiB | vs full | s/step | vs full | J/step [bounds] "
        "| vs full [bounds] |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        if r["status"] != "ok":
            lines.append(
                f"| {r['model']} | {r['method']} | | | | | | {r['status']}: "
                f"{str(r['error'])[:80]} | |"
            )
            continue
        j = (
            f"{r['j_per_step']:.1f} [{r['j_per_step_lo']:.1f}, {r['j_per_step_hi']:.1f}]"
            if r["j_per_step"] is not None
            else "n/a"
        )
        jv = (
            f"{_pct(r.get('j_vs_full'))} [{_pct(r.get('j_vs_full_lo'))}, "
            f"{_pct(r.get('j_vs_full_hi'))}]"
            if r.get("j_vs_full") is not None
            else ""
        )
        if r["method"] == "full":
            jv = "—"
        full = r["method"] == "full"
        mem_v = "—" if full else _pct(r.get("mem_vs_full"))
        s_v = "—" if full else _pct(r.get("s_vs_full"))
        lines.append(
            f"| {r['model']} | {r['method']} | {int(r['trainable_params']):,} | "
            f"{r['peak_mem_mib']:,.0f} | {mem_v} | "
            f"{r['s_per_step']:.3f} | {s_v} | "
            f"{j} | {jv} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe_csv", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="OUT.csv and OUT.md are written")
    a = ap.parse_args(argv)
    with a.probe_csv.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] != "refused"]
    methods = ("full", "lora", "qlora", "adalora", "bitfit")
    rows.sort(
        key=lambda r: (
            r["precision"],
            r["batch"],
            r["checkpointing"],
            r["model"],
            methods.index(r["method"]),
        )
    )
    table = savings(rows)
    with a.out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLS, extrasaction="ignore")
        w.writeheader()
        w.writerows(table)
    parts = []
    groups = sorted({(r["precision"], r["batch"], r["checkpointing"]) for r in table})
    for prec, batch, ck in groups:
        sub = [
            r
            for r in table
            if (r["precision"], r["batch"], r["checkpointing"]) == (prec, batch, ck)
        ]
        parts.append(f"### {prec}, batch {batch}, checkpointing {ck}\n\n" + markdown(sub))
    a.out.with_suffix(".md").write_text("\n".join(parts))
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
