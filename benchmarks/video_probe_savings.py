"""What PEFT saves, from a probe.csv: per model, each method's training memory, seconds and joules
per step against full fine-tuning at the same precision, batch and checkpointing.

    python benchmarks/video_probe_savings.py benchmarks/results/video_probe/probe/probe.csv \
        --out benchmarks/results/video_probe/savings

Ratios of joules carry bounds from the cells' own energy bounds (lo_method / hi_full,
hi_method / lo_full: both cells' counter brackets at once). Seconds and memory are single
measurements (one cell each).

With `--repeat REPEAT.csv` (a second probe.csv that measured some of the same cells again, in
other processes), the spread between repeated cells is estimated from the pairs and each
energy ratio also gets a 95 % interval that holds it: the counter brackets widened by the
repeat spread of both cells (`j_vs_full_rep_lo`, `j_vs_full_rep_hi`). A saving is established
only where that interval excludes 1.

    python benchmarks/video_probe_savings.py benchmarks/results/video_probe/probe/probe.csv \
        --repeat benchmarks/results/video_probe/repeat/probe.csv \
        --out benchmarks/results/video_probe/savings

Writes OUT.csv and OUT.md (and with --repeat, OUT_repeat.json: the pairs and the spread).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

KEY = ("model", "method", "precision", "checkpointing", "batch")


def _f(v: str | None) -> float | None:
    return float(v) if v not in (None, "") else None


def repeat_spread(first: list[dict[str, str]], again: list[dict[str, str]]) -> dict[str, object]:
    """The relative spread of one cell's s/step and J/step between processes, from repeated cells.

    For each cell measured ok in both, d = ln(again / first); one measurement's log-spread is
    sigma = sqrt(mean(d^2) / 2) (each d is the difference of two draws). Returns the pairs and
    sigma_j, sigma_s (None without pairs)."""
    by_key = {tuple(r[k] for k in KEY): r for r in first if r["status"] == "ok"}
    pairs = []
    for r in again:
        a = by_key.get(tuple(r[k] for k in KEY))
        if r["status"] != "ok" or a is None:
            continue
        ja, jb, sa, sb = (
            _f(a["j_per_step"]),
            _f(r["j_per_step"]),
            _f(a["s_per_step"]),
            _f(r["s_per_step"]),
        )
        if None in (ja, jb, sa, sb) or min(ja, jb, sa, sb) <= 0:
            continue
        pairs.append(
            {
                **{k: r[k] for k in KEY},
                "j_first": ja,
                "j_again": jb,
                "s_first": sa,
                "s_again": sb,
                "j_ratio": jb / ja,
                "s_ratio": sb / sa,
            }
        )

    def sigma(col: str) -> float | None:
        d = [math.log(p[col]) for p in pairs]
        return math.sqrt(sum(x * x for x in d) / len(d) / 2) if d else None

    return {
        "n_pairs": len(pairs),
        "sigma_j": sigma("j_ratio"),
        "sigma_s": sigma("s_ratio"),
        "pairs": pairs,
    }


def widen(lo: float, hi: float, sigma: float, z: float = 1.96) -> tuple[float, float]:
    """A ratio's bracket [lo, hi] of two cells, widened by both cells' repeat log-spread."""
    f = math.exp(z * math.sqrt(2.0) * sigma)
    return lo / f, hi * f


def savings(rows: list[dict[str, str]], sigma_j: float | None = None) -> list[dict[str, object]]:
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
                if sigma_j is not None:
                    rlo, rhi = widen(lo / bhi, hi / blo, sigma_j)
                    row["j_vs_full_rep_lo"], row["j_vs_full_rep_hi"] = rlo, rhi
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
COLS_REPEAT = COLS[:-1] + ("j_vs_full_rep_lo", "j_vs_full_rep_hi", "error")


def _pct(x: object) -> str:
    return "" if x is None else f"{(float(x) - 1) * 100:+.0f} %"


def markdown(table: list[dict[str, object]], repeat: bool = False) -> str:
    head = (
        "| model | method | trainable | peak MiB | vs full | s/step | vs full | J/step [bounds] "
        "| vs full [bounds] |"
    )
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    if repeat:
        head += " vs full, with repeat spread |"
        rule += "---:|"
    lines = [head, rule]
    for r in table:
        if r["status"] != "ok":
            lines.append(
                f"| {r['model']} | {r['method']} | | | | | | {r['status']}: "
                f"{str(r['error'])[:80]} | |" + (" |" if repeat else "")
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
        line = (
            f"| {r['model']} | {r['method']} | {int(r['trainable_params']):,} | "
            f"{r['peak_mem_mib']:,.0f} | {mem_v} | "
            f"{r['s_per_step']:.3f} | {s_v} | "
            f"{j} | {jv} |"
        )
        if repeat:
            rep = ""
            if not full and r.get("j_vs_full_rep_lo") is not None:
                lo, hi = r["j_vs_full_rep_lo"], r["j_vs_full_rep_hi"]
                verdict = "saves" if hi < 1 else "costs" if lo > 1 else "not established"
                rep = f"[{_pct(lo)}, {_pct(hi)}] {verdict}"
            elif full:
                rep = "—"
            line += f" {rep} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe_csv", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="OUT.csv and OUT.md are written")
    ap.add_argument("--repeat", type=Path, help="a probe.csv that measured some cells again")
    a = ap.parse_args(argv)
    for p in (a.probe_csv, a.repeat):
        if p is not None and not p.is_file():
            print(f"video_probe_savings: no such file {p}", file=sys.stderr)
            return 2
    with a.probe_csv.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] != "refused"]
    sigma_j = None
    if a.repeat is not None:
        with a.repeat.open(newline="") as f:
            spread = repeat_spread(rows, list(csv.DictReader(f)))
        if not spread["n_pairs"]:
            print(
                f"video_probe_savings: {a.repeat} repeats no ok cell of {a.probe_csv}",
                file=sys.stderr,
            )
            return 2
        sigma_j = spread["sigma_j"]
        a.out.with_name(a.out.name + "_repeat.json").write_text(json.dumps(spread, indent=1))
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
    table = savings(rows, sigma_j)
    with a.out.with_suffix(".csv").open("w", newline="") as f:
        cols = COLS if sigma_j is None else COLS_REPEAT
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
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
        parts.append(
            f"### {prec}, batch {batch}, checkpointing {ck}\n\n"
            + markdown(sub, repeat=sigma_j is not None)
        )
    if sigma_j is not None:
        parts.insert(
            0,
            (
                f"Repeat spread: {spread['n_pairs']} cells measured again ({a.repeat}); one cell's "
                f"J/step varies by {sigma_j * 100:.1f} % and its s/step by "
                f"{spread['sigma_s'] * 100:.1f} % (log-sd) between processes. The last column is "
                "the counter brackets widened by both cells' repeat spread (95 %).\n"
            ),
        )
    a.out.with_suffix(".md").write_text("\n".join(parts))
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
