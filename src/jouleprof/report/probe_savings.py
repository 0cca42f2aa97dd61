"""What PEFT saves, from a probe table (`jouleprof probe`'s probe.csv): per model, each method's
training memory, seconds and joules per step against full fine-tuning at the same precision,
batch and checkpointing. `jouleprof summarize PROBE_DIR` writes it (probe_savings.md, .csv).

Ratios of joules carry bounds from the cells' own energy bounds (lo_method / hi_full,
hi_method / lo_full: both cells' counter brackets at once). Seconds and memory are single
measurements (one cell each).

With a repeat table (a second probe.csv that measured some of the same cells again, in other
processes), the spread between repeated cells is estimated from the pairs and each energy ratio
also gets a 95 % interval that holds it: the counter brackets widened by the repeat spread of
both cells (`j_vs_full_rep_lo`, `j_vs_full_rep_hi`). A saving is established only where that
interval excludes 1. With at least MIN_RATIO_PAIRS ratios measured in both tables (a whole
second table), the ratios' own spread between the tables is used instead of the cells' (what
moves both cells of a ratio alike, such as one session's host pace, cancels in the ratio), and
each s/step ratio gets a 95 % interval too.
"""

from __future__ import annotations

import csv
import json
import math
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

    def sigma(items: list[dict[str, object]], col: str) -> float | None:
        d = [math.log(float(p[col])) for p in items]  # type: ignore[arg-type]
        return math.sqrt(sum(x * x for x in d) / len(d) / 2) if d else None

    # The ratios themselves, measured twice: a method's ratio to full fine-tuning of the same
    # coordinates, from each table. What moves both cells of a ratio alike (the host's pace in
    # one session, the card's temperature) cancels in it; what moves one cell alone does not.
    full = {tuple(p[k] for k in KEY if k != "method"): p for p in pairs if p["method"] == "full"}
    ratio_pairs = []
    for p in pairs:
        b = full.get(tuple(p[k] for k in KEY if k != "method"))
        if p["method"] == "full" or b is None:
            continue
        ratio_pairs.append(
            {
                **{k: p[k] for k in KEY},
                "j_ratio": float(p["j_ratio"]) / float(b["j_ratio"]),  # type: ignore[arg-type]
                "s_ratio": float(p["s_ratio"]) / float(b["s_ratio"]),  # type: ignore[arg-type]
            }
        )
    return {
        "n_pairs": len(pairs),
        "sigma_j": sigma(pairs, "j_ratio"),
        "sigma_s": sigma(pairs, "s_ratio"),
        "n_ratio_pairs": len(ratio_pairs),
        "sigma_ratio_j": sigma(ratio_pairs, "j_ratio"),
        "sigma_ratio_s": sigma(ratio_pairs, "s_ratio"),
        "pairs": pairs,
        "ratio_pairs": ratio_pairs,
    }


def pair_sigma(sigma_cell: float) -> float:
    """One ratio's log-spread from one cell's, both cells of the ratio drawn independently."""
    return math.sqrt(2.0) * sigma_cell


MIN_RATIO_PAIRS = 20
"""Fewer repeated ratios than this and the ratios' spread is built from the cells' instead."""


def ratio_sigmas(spread: dict[str, object]) -> tuple[float, float | None, str]:
    """(J-ratio log-sd, s-ratio log-sd or None, how they were estimated) of one measured
    ratio: from the repeated ratios when there are enough of them, else both cells' spread
    added as if independent (sqrt(2) x one cell's; no s-ratio interval then)."""
    if int(spread.get("n_ratio_pairs") or 0) >= MIN_RATIO_PAIRS:  # type: ignore[arg-type]
        return (
            float(spread["sigma_ratio_j"]),  # type: ignore[arg-type]
            float(spread["sigma_ratio_s"]),  # type: ignore[arg-type]
            f"{spread['n_ratio_pairs']} ratios measured twice",
        )
    return (
        pair_sigma(float(spread["sigma_j"])),  # type: ignore[arg-type]
        None,
        f"{spread['n_pairs']} cells measured twice, both cells' spread combined",
    )


def widen_ratio(lo: float, hi: float, sigma_ratio: float, z: float = 1.96) -> tuple[float, float]:
    """A ratio's bracket [lo, hi], widened by one measured ratio's repeat log-spread."""
    f = math.exp(z * sigma_ratio)
    return lo / f, hi * f


def widen(lo: float, hi: float, sigma: float, z: float = 1.96) -> tuple[float, float]:
    """A ratio's bracket [lo, hi] of two cells, widened by both cells' repeat log-spread."""
    return widen_ratio(lo, hi, pair_sigma(sigma), z)


def savings(
    rows: list[dict[str, str]],
    sigma_j: float | None = None,
    *,
    sigma_ratio_j: float | None = None,
    sigma_ratio_s: float | None = None,
) -> list[dict[str, object]]:
    """One row per (model, precision, batch, checkpointing, method) with its full-FT baseline.

    sigma_j (one cell's J/step log-spread) or sigma_ratio_j (one ratio's) widens each energy
    ratio's bracket into `j_vs_full_rep_lo/hi`; sigma_ratio_s gives the s/step ratio an interval
    (`s_vs_full_rep_lo/hi`)."""
    if sigma_ratio_j is None and sigma_j is not None:
        sigma_ratio_j = pair_sigma(sigma_j)
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
            "energy_note": r.get("energy_note", ""),  # why J/step is missing, where it is
        }
        if r["status"] == "ok" and b is not None:
            mem, s = row["peak_mem_mib"], row["s_per_step"]
            bm, bs = _f(b["peak_mem_mib"]), _f(b["s_per_step"])
            row["mem_vs_full"] = mem / bm if mem and bm else None
            row["s_vs_full"] = s / bs if s and bs else None
            if sigma_ratio_s is not None and row["s_vs_full"] is not None:
                sr = float(row["s_vs_full"])  # type: ignore[arg-type]
                row["s_vs_full_rep_lo"], row["s_vs_full_rep_hi"] = widen_ratio(
                    sr, sr, sigma_ratio_s
                )
            j, lo, hi = row["j_per_step"], row["j_per_step_lo"], row["j_per_step_hi"]
            bj, blo, bhi = _f(b["j_per_step"]), _f(b["j_per_step_lo"]), _f(b["j_per_step_hi"])
            if None not in (j, lo, hi, bj, blo, bhi):
                row["j_vs_full"] = j / bj
                row["j_vs_full_lo"] = lo / bhi
                row["j_vs_full_hi"] = hi / blo
                if sigma_ratio_j is not None:
                    rlo, rhi = widen_ratio(lo / bhi, hi / blo, sigma_ratio_j)
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
COLS_REPEAT_S = COLS_REPEAT[:-1] + ("s_vs_full_rep_lo", "s_vs_full_rep_hi", "error")


def _pct(x: object) -> str:
    return "" if x is None else f"{(float(x) - 1) * 100:+.0f} %"


def _num(x: object, spec: str) -> str:
    """`x` formatted by `spec`; "n/a" where the probe recorded none (no GPU: no memory, energy)."""
    return "n/a" if x in (None, "") else format(float(x), spec)  # type: ignore[arg-type]


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
        if not full and r.get("s_vs_full_rep_lo") is not None:
            s_v += f" [{_pct(r['s_vs_full_rep_lo'])}, {_pct(r['s_vs_full_rep_hi'])}]"
        line = (
            f"| {r['model']} | {r['method']} | {_num(r['trainable_params'], ',.0f')} | "
            f"{_num(r['peak_mem_mib'], ',.0f')} | {mem_v} | "
            f"{_num(r['s_per_step'], '.3f')} | {s_v} | "
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


def write(probe_csv: Path, out: Path, repeat: Path | None = None) -> str:
    """Write OUT.csv and OUT.md (and with `repeat`, OUT_repeat.json: the pairs and the spread)
    from `probe_csv`; returns the markdown.

    Raises:
        ValueError: a file missing, or a repeat table that repeats no ok cell.
    """
    for p in (probe_csv, repeat):
        if p is not None and not Path(p).is_file():
            raise ValueError(f"no such file {p}")
    with Path(probe_csv).open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] != "refused"]
    ratio_j = ratio_s = None  # one measured ratio's log-spread (J/step, s/step)
    how = ""
    spread: dict[str, object] = {}
    if repeat is not None:
        with Path(repeat).open(newline="") as f:
            spread = repeat_spread(rows, list(csv.DictReader(f)))
        if not spread["n_pairs"]:
            raise ValueError(f"{repeat} repeats no ok cell of {probe_csv}")
        ratio_j, ratio_s, how = ratio_sigmas(spread)
        out.with_name(out.name + "_repeat.json").write_text(json.dumps(spread, indent=1))
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
    table = savings(rows, sigma_ratio_j=ratio_j, sigma_ratio_s=ratio_s)
    with out.with_suffix(".csv").open("w", newline="") as f:
        cols = COLS if ratio_j is None else COLS_REPEAT if ratio_s is None else COLS_REPEAT_S
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
            + markdown(sub, repeat=ratio_j is not None)
        )
    if ratio_j is not None:
        text = (
            f"Repeat spread: {spread['n_pairs']} cells measured again ({repeat}); one cell's "
            f"J/step varies by {spread['sigma_j'] * 100:.1f} % and its s/step by "
            f"{spread['sigma_s'] * 100:.1f} % (log-sd) between processes. "
        )
        if ratio_s is None:
            text += (
                "The last column is the counter brackets widened by both cells' repeat spread "
                "(95 %).\n"
            )
        else:
            text += (
                f"A method's ratio to full fine-tuning, measured in both tables "
                f"({how}), varies by {ratio_j * 100:.1f} % in J/step and "
                f"{ratio_s * 100:.1f} % in s/step (log-sd): the s/step ratios' intervals and "
                "the last column (the counter brackets widened by it) are 95 %.\n"
            )
        parts.insert(0, text)
    md = "\n".join(parts)
    out.with_suffix(".md").write_text(md)
    return md
