"""Which replayed phases does attribution weigh together with the phase before them, on the
stored GPU runs with replays? (`attribution.shared_pairs`; offline)

Every `<loop>_repeat` run stored under benchmarks/results/ref_loops (or the folders given) is
attributed as `jouleprof attribute` does; per run this records the pairs considered (each
replayed phase and the phase before it), the replay check's figures for the replayed phases
(how far its first runs moved the phase, J over the run; the energy a step its first run draws
beyond its replays), the pairs kept, and every joint row with its energy per step and
half-width. Where joint_rows/ judged the same pair against its reference, that verdict is
joined in.

    PYTHONPATH=src python3 benchmarks/shared_pairs_check.py --out DIR [FOLDER ...]

Writes DIR/shared_pairs.csv and DIR/meta.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results" / "ref_loops"


def one(tar: Path) -> dict:
    """One stored run's pairs and joint rows."""
    import tarfile

    import ref_loops_eval as ev

    from jouleprof.attribution.api import attribute

    loop = tar.name.removesuffix(".tar.gz")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tar) as t:
            t.extractall(tmp, filter="data")
        fine = Path(tmp) / "loops" / loop / "fine"
        d = attribute(fine, "regression", device=ev._fine_device(fine)).devices[0]
    pairs = d.diagnostics.get("shared_pairs") or {}
    check = d.diagnostics.get("replay_check") or {}
    return {
        "folder": tar.parent.name,
        "loop": loop,
        "pairs": json.dumps(pairs.get("pairs", {})),
        "kept": ";".join(pairs.get("kept", [])),
        "replay_check": json.dumps(
            {
                k: {
                    "moved_j": round(v["moved_j"], 1),
                    "first_run_extra_j_per_step": None
                    if v["first_run_extra_j_per_step"] is None
                    else round(v["first_run_extra_j_per_step"], 3),
                }
                for k, v in check.items()
            }
        ),
        "joint_rows": json.dumps(
            {
                p.phase: {
                    "j_per_step": round(p.energy_j / d.n_steps, 3),
                    "half_width_pct": round(50 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j, 1),
                }
                for p in d.phases
                if "+" in p.phase and p.resolved
            }
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path, help="default: every ref_loops folder")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    t0 = time.time()
    folders = a.folders or sorted(p for p in RESULTS.iterdir() if p.is_dir())
    rows = [one(t) for f in folders for t in sorted(Path(f).glob("*_repeat.tar.gz"))]
    df = pd.DataFrame(rows)
    judged = RESULTS / "joint_rows" / "joint_rows.csv"
    if judged.is_file() and len(df):
        j = pd.read_csv(judged)[["folder", "loop", "error_vs_closure_pct", "meets_target"]]
        df = df.merge(j, on=["folder", "loop"], how="left")
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "shared_pairs.csv", index=False)
    from jouleprof.bench.provenance import benchmark_meta, write_meta

    cmd = ["python3", "benchmarks/shared_pairs_check.py", *(sys.argv[1:] if argv is None else argv)]
    write_meta(a.out, {**benchmark_meta(cmd, (), ROOT), "wall_s": round(time.time() - t0, 1),
                       "source": "stored ref_loops runs (GPU), attributed offline"})  # fmt: skip
    for r in rows:
        print(r["folder"], r["loop"], "kept:", r["kept"] or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
