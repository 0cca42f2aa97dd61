"""Energy of every window predict_collect.py measured, from each run's energy counter.

    PYTHONPATH=src python3 benchmarks/predict_energy.py DIR   # writes DIR/models_energy.csv

Each models.csv row with status ok gets the counter's energy of its span [t0_s, t1_s] with the
bound timeline.windows gives, the mean power, and joules per sample = energy / (passes x batch).
The ceilings' windows (matmul_*, copy, launch) and the idle baseline give power figures for the
GPU file (DIR/power.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _device(samples) -> str:
    devs = sorted(set(samples["device"]))
    gpus = [d for d in devs if d.startswith("gpu")]
    return gpus[0] if gpus else devs[0]


def window_table(out: Path):
    import pandas as pd

    from jouleprof.store.rundir import RunDir
    from jouleprof.timeline.windows import signal_grids, window_energies

    rows = pd.read_csv(out / "models.csv")
    parts = []
    power: dict[str, dict] = {}
    for run, grp in rows.groupby("run"):
        rd = RunDir(out / run)
        samples = rd.read_samples()
        dev = _device(samples)
        grids = signal_grids(samples, dev)
        rec = []
        for r in grp.itertuples():
            e = {"energy_j": None, "energy_lo_j": None, "energy_hi_j": None, "mean_power_w": None}
            if r.status == "ok":
                w = window_energies(samples, dev, float(r.t0_s), float(r.t1_s), grids=grids)
                c = w["counter"]
                e = {"energy_j": c.energy_j, "energy_lo_j": c.lo_j, "energy_hi_j": c.hi_j,
                     "mean_power_w": c.mean_power_w,
                     "instant_energy_j": w["power_instant"].energy_j,
                     "energy_reason": c.reason}  # fmt: skip
            rec.append(e)
        g = grp.reset_index(drop=True).join(pd.DataFrame(rec))
        g["device"] = dev
        parts.append(g)
        spans = rd.read_spans()
        for s in spans.itertuples():
            if "|" in s.phase:
                continue
            w = window_energies(samples, dev, float(s.t0_s), float(s.t1_s), grids=grids)
            power.setdefault(run, {})[f"{s.phase}_w"] = w["counter"].mean_power_w
        record = json.loads((out / run / "run.json").read_text())
        power.setdefault(run, {})["record_summary"] = record.get("summary")
    table = pd.concat(parts, ignore_index=True)
    ok = table["energy_j"].notna()
    table.loc[ok, "j_per_sample"] = table.loc[ok, "energy_j"] / (
        table.loc[ok, "passes"] * table.loc[ok, "batch"]
    )
    (out / "power.json").write_text(json.dumps(power, indent=2, default=str))
    return table


if __name__ == "__main__":
    d = Path(sys.argv[1])
    t = window_table(d)
    t.to_csv(d / "models_energy.csv", index=False)
    print(t[["config_id", "s_per_pass", "mean_power_w", "j_per_sample"]].to_string())
