"""End to end: what `jouleprof infer --protocol steady` measured on the GPU (predict_collect.py's
e2e.csv, models the predictor never saw) against what `jouleprof predict infer` predicts for the
same model, batch and precision (run here as the command a user types, on a CPU).

    PYTHONPATH=src python3 benchmarks/predict_e2e.py RAW_DIR --out DIR

Writes DIR/e2e_compare.csv and DIR/e2e_compare.md: measured and predicted J/sample and s/batch,
the signed error, whether the measurement lies inside the predicted interval, and the
predictor's validated flag and notes.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def predict_cli(spec: str, batch: int, precision: str) -> dict:
    """`jouleprof predict infer --json` in a subprocess; {"error": ...} where it fails."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from predict_collect import jouleprof_cli

    r = jouleprof_cli(["predict", "infer", "--model", spec, "--batch", str(batch), "--precision",
                       precision, "--json"], 600)  # fmt: skip
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-300:]}
    return json.loads(r.stdout)


def compare(measured: list[dict]) -> list[dict]:
    out = []
    for m in measured:
        row = {k: m[k] for k in ("spec", "precision", "batch")}
        jm = float(m["j_per_sample"]) if m.get("j_per_sample") not in (None, "") else None
        sm = float(m["s_per_batch"]) if m.get("s_per_batch") not in (None, "") else None
        row.update(j_meas=jm, s_meas=sm, energy_note=m.get("energy_note"))
        p = predict_cli(m["spec"], int(m["batch"]), m["precision"])
        if "error" in p:
            row["error"] = p["error"]
            out.append(row)
            continue
        row.update(j_pred=p["j_per_sample"], j_lo=p["j_per_sample_lo"], j_hi=p["j_per_sample_hi"],
                   s_pred=p["s_per_batch"], validated=p["validated"],
                   notes=" | ".join(p["notes"]))  # fmt: skip
        if jm:
            row["j_err_pct"] = 100 * (p["j_per_sample"] - jm) / jm
            row["in_interval"] = p["j_per_sample_lo"] <= jm <= p["j_per_sample_hi"]
        if sm:
            row["s_err_pct"] = 100 * (p["s_per_batch"] - sm) / sm
        out.append(row)
    return out


COLUMNS = ["spec", "precision", "batch", "j_meas", "j_pred", "j_lo", "j_hi", "j_err_pct",
           "in_interval", "s_meas", "s_pred", "s_err_pct", "validated", "notes", "energy_note",
           "error"]  # fmt: skip


def markdown(rows: list[dict]) -> str:
    head = ["model", "precision", "batch", "measured J/sample", "predicted [interval]", "error",
            "in interval", "measured ms/batch", "predicted ms/batch"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("j_pred") is None or r.get("j_meas") is None:
            why = str(r.get("error") or r.get("energy_note") or "no figure")
            why = why if why.startswith("unavailable") else f"unavailable: {why}"
            lines.append(f"| {r['spec']} | {r['precision']} | {r['batch']} | "
                         f"{r.get('j_meas')} | {why} | | | | |")  # fmt: skip
            continue
        lines.append(
            f"| {r['spec']} | {r['precision']} | {r['batch']} | {r['j_meas']:.4g} | "
            f"{r['j_pred']:.4g} [{r['j_lo']:.4g}, {r['j_hi']:.4g}] | {r['j_err_pct']:+.1f} % | "
            f"{'yes' if r['in_interval'] else 'no'} | {r['s_meas'] * 1e3:.3g} | "
            f"{r['s_pred'] * 1e3:.3g} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("raw", type=Path, help="a predict_collect.py output holding e2e.csv")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    src = args.raw / "e2e.csv"
    if not src.exists():
        print(f"{src} does not exist: run predict_collect.py with --e2e first", file=sys.stderr)
        return 2
    with src.open() as f:
        measured = [r for r in csv.DictReader(f) if r.get("status") == "ok"]
    rows = compare(measured)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "e2e_compare.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    md = markdown(rows)
    (args.out / "e2e_compare.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
