"""Assemble the inference dataset, validate the predictor family by family, ship it.

    PYTHONPATH=src python3 benchmarks/predict_fit.py --raw RAW [RAW ...] \
        --features /tmp/feat --out benchmarks/results/predict_dataset [--ship]

1. models_energy.csv (every window's counter energy, rebuilt from the raw run), layers.csv,
   power.json and ops.parquet (the traces at batch 1 and 2 of every measured configuration,
   from benchmarks/predict_features.py) go to --out;
2. leave-family-out predictions of the layer-wise predictor and the baselines ->
   predictions.csv, metrics.csv, metrics.md;
3. --ship: the predictor fitted on every family, carrying the held-out error quantiles, is
   written to src/jouleprof/predict/models/layerwise_h200.pkl.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def assemble(raws: list[Path], features: Path, out: Path) -> None:
    """Every window of every collection in `raws` (a `collection` column names its folder; a
    configuration measured in several windows is pooled by dataset.configurations), the first
    collection's per-layer times and ceiling powers, and the traces of every configuration."""
    import pandas as pd

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from predict_energy import window_table
    from predict_features import safe

    tables = []
    for raw in raws:
        t = window_table(raw)  # writes raw/power.json
        tables.append(t.assign(collection=raw.name))
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "models_energy.csv", index=False)
    shutil.copy(raws[0] / "layers.csv", out / "layers.csv")
    shutil.copy(raws[0] / "power.json", out / "power.json")
    parts = []
    for spec, prec in table[["spec", "precision"]].drop_duplicates().itertuples(index=False):
        for b in (1, 2):
            p = features / "ops" / f"{safe(spec)}__{prec}__b{b}.parquet"
            if p.exists():
                parts.append(pd.read_parquet(p))
            else:
                print(f"missing features: {p.name}", file=sys.stderr)
    pd.concat(parts, ignore_index=True).to_parquet(out / "ops.parquet", index=False)


def collection_commit(raw: Path) -> str | None:
    """The code commit the collection ran at (its meta_run_*.json, else stage_meta.json)."""
    for m in sorted(raw.glob("meta_run_*.json")):
        c = json.loads(m.read_text()).get("git_commit")
        if c:
            return c
    stage = raw / "stage_meta.json"
    return json.loads(stage.read_text()).get("commit") if stage.exists() else None


def loop_compare(old_raw: Path, new_table, out: Path):
    """Configurations measured on both loops: s/pass and J/sample of the new (shared) loop over
    the old (per-pass autocast) one -> out/loop_compare.csv."""
    import pandas as pd

    old = pd.read_csv(old_raw / "models_energy.csv")
    key = ["spec", "precision", "batch", "protocol"]
    cols = key + ["s_per_pass", "j_per_sample", "mean_power_w"]
    j = old[old["status"] == "ok"][cols].merge(
        new_table[new_table["status"] == "ok"][cols], on=key, suffixes=("_old", "_new")
    )
    for c in ("s_per_pass", "j_per_sample", "mean_power_w"):
        j[f"{c}_ratio"] = j[f"{c}_new"] / j[f"{c}_old"]
    j.to_csv(out / "loop_compare.csv", index=False)
    print(j.groupby(["precision", "batch", "protocol"])[
        ["s_per_pass_ratio", "j_per_sample_ratio", "mean_power_w_ratio"]].median())  # fmt: skip
    return j


def markdown(table) -> str:
    cols = ["method", "precision", "batch", "n", "mape_median_pct", "ape_p90_pct",
            "within_10_pct", "spearman"]  # fmt: skip
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in table[cols].itertuples(index=False):
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in r]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--raw",
        type=Path,
        nargs="+",
        required=True,
        help="collection folders; the first gives the per-layer times and the commit",
    )
    ap.add_argument("--features", type=Path, default=None, help="predict_features.py output")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ship", action="store_true")
    ap.add_argument(
        "--compare-raw",
        type=Path,
        default=None,
        help="an earlier collection (per-pass autocast loop) to compare per config",
    )
    ap.add_argument(
        "--reuse-predictions",
        action="store_true",
        help="ship from the predictions.csv already in --out (no new evaluation)",
    )
    args = ap.parse_args(argv)

    from jouleprof.predict.dataset import load_dataset
    from jouleprof.predict.evaluate import leave_family_out, metrics_table, train_shipped
    from jouleprof.predict.roofline import load_gpu
    from jouleprof.predict.shipped import save_predictor

    if args.features is not None:
        assemble(args.raw, args.features, args.out)
    ds = load_dataset(args.out)
    if args.compare_raw is not None:
        import pandas as pd

        new = pd.read_csv(args.out / "models_energy.csv")
        if "collection" in new:  # the first collection against the earlier loop's
            new = new[new["collection"] == args.raw[0].name]
        loop_compare(args.compare_raw, new, args.out)
    gpu = load_gpu("h200")
    if args.reuse_predictions:
        import pandas as pd

        preds = pd.read_csv(args.out / "predictions.csv")
    else:
        preds = leave_family_out(ds, gpu, progress=lambda f: print(f"holding out {f}", flush=True))
        preds.to_csv(args.out / "predictions.csv", index=False)
    table = metrics_table(preds)
    table.to_csv(args.out / "metrics.csv", index=False)
    (args.out / "metrics.md").write_text(markdown(table))
    print(markdown(table))
    if args.ship:
        pred = train_shipped(ds, gpu, preds)
        pred.info.update({"dataset": "benchmarks/results/predict_dataset", "gpu": gpu.name,
                          "commit": collection_commit(args.raw[0]),
                          "collections": {r.name: collection_commit(r) for r in args.raw},
                          "loop": "jouleprof.bench.infer_loop.steady_window"})  # fmt: skip
        p = save_predictor(pred, ROOT / "src/jouleprof/predict/models/layerwise_h200.pkl")
        print(f"shipped {p} ({p.stat().st_size / 1e3:.0f} kB): {pred.info}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
