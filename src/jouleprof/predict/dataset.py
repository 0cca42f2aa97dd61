"""The committed inference dataset, read back: measured whole-model windows, measured per-layer
times, and the FakeTensor features of every configuration (from traces at batch 1 and 2).

Layout of a dataset directory (benchmarks/results/predict_dataset/):
    models_energy.csv  one row per measured window (predict_collect.py + predict_energy.py);
                       a configuration measured in several windows (repeats, other calls) has
                       several rows, pooled by `configurations`
    layers.csv         one row per module per configuration: its own time (CUDA events)
    ops.parquet        the traces' operator records (spec, precision, batch in {1, 2}, ...)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from jouleprof.predict.features import (
    ModelFeatures,
    OpRecord,
    aggregate_layers,
    features_at,
    kernel_module_calls,
)

OP_FIELDS = ("module", "op", "category", "dtype", "flops", "bytes_read", "bytes_written",
             "launches", "supported")  # fmt: skip


@dataclass
class Dataset:
    models: object
    """DataFrame of the measured windows with status ok and an energy (models_energy.csv)."""
    layers: object
    """DataFrame of per-layer times (layers.csv)."""
    ops: object
    """DataFrame of operator records (ops.parquet)."""
    path: Path | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def features(self, spec: str, precision: str, batch: int) -> ModelFeatures | None:
        """Features of one configuration (None: not traced)."""
        key = (spec, precision, int(batch))
        if key not in self._cache:
            self._cache[key] = self._features(*key)
        return self._cache[key]

    def _traced(self, spec: str, precision: str, batch: int) -> ModelFeatures | None:
        k = ("trace", spec, precision, batch)
        if k not in self._cache:
            g = self._by.get((spec, precision, batch))
            if g is None:
                self._cache[k] = None
            else:
                ops = tuple(OpRecord(*r) for r in g[list(OP_FIELDS)].itertuples(index=False))
                layers = tuple(aggregate_layers(ops, self._types(spec)))
                self._cache[k] = ModelFeatures(spec, batch, precision, (), 0, 0, ops, layers)
        return self._cache[k]

    def _types(self, spec: str) -> dict[str, str]:
        if "types" not in self._cache:
            t = self.layers[["spec", "module", "module_type"]].drop_duplicates()
            self._cache["types"] = {
                s: dict(zip(g["module"], g["module_type"], strict=False))
                for s, g in t.groupby("spec")
            }
        return self._cache["types"].get(spec, {})

    def _features(self, spec: str, precision: str, batch: int) -> ModelFeatures | None:
        f1 = self._traced(spec, precision, 1)
        if f1 is None:
            return None
        if batch != 1:
            f2 = self._traced(spec, precision, 2)
            f1 = None if f2 is None else features_at(f1, f2, batch, self._types(spec))
        if f1 is None:
            return None
        calls, kernel_calls = self._module_calls(spec)
        return replace(f1, module_calls=calls, kernel_module_calls=kernel_calls)

    def _module_calls(self, spec: str) -> tuple[int, int]:
        """Module calls of one pass, and those of modules launching kernels of their own in the
        trace (the GPU side counted the calls; the same at every batch; -1: not known)."""
        if "calls" not in self._cache:
            lay = self.layers
            self._cache["calls"] = {}
            if "calls" in lay.columns and "config_id" in lay.columns:
                import numpy as np

                ops = self.ops[self.ops["launches"] > 0]
                by_spec = {sp: list(g.itertuples()) for sp, g in ops.groupby("spec")}
                per: dict[str, list[tuple[int, int]]] = {}
                for (sp, _), g in lay.groupby(["spec", "config_id"]):
                    by_module = dict(zip(g["module"], g["calls"], strict=True))
                    own = kernel_module_calls(by_spec.get(sp, []), by_module)
                    per.setdefault(sp, []).append((int(g["calls"].sum()), own))
                self._cache["calls"] = {
                    sp: tuple(int(round(v)) for v in np.median(np.array(c), axis=0))
                    for sp, c in per.items()
                }
        return self._cache["calls"].get(spec, (0, -1))

    @property
    def _by(self) -> dict:
        if "by" not in self._cache:
            self._cache["by"] = {
                (s, p, int(b)): g
                for (s, p, b), g in self.ops.groupby(["spec", "precision", "batch"])
            }
        return self._cache["by"]


def configurations(models):
    """One row per measured configuration (spec, precision, batch) from its windows: J per pass
    and seconds per pass are the geometric means over the windows (each window weighs the same,
    whatever its length: on a launch-bound configuration the spread between processes exceeds
    the spread within a window), `windows` counts them and `j_window_sd_pct` is the windows'
    log-sd of J per pass in % (NaN for one window). `energy_j` is rescaled to the first
    window's pass count, so energy_j / passes is the pooled J per pass."""
    import numpy as np

    key = ["spec", "precision", "batch"]
    m = models.assign(
        _lj=np.log(models["energy_j"] / models["passes"]), _ls=np.log(models["s_per_pass"])
    )
    g = m.groupby(key, sort=False)
    first = g.head(1).set_index(key)
    lj, ls = g["_lj"].mean(), g["_ls"].mean()
    out = first.assign(
        energy_j=first["passes"] * np.exp(lj),
        s_per_pass=np.exp(ls),
        windows=g.size(),
        j_window_sd_pct=100.0 * g["_lj"].std(),
    )
    if "mean_power_w" in out:
        out["mean_power_w"] = np.exp(lj - ls)
    if "protocol" in out:
        out["protocol"] = np.where(out["windows"] > 1, "pooled", out["protocol"])
    return out.drop(columns=["_lj", "_ls"]).reset_index()


def load_dataset(path: str | Path) -> Dataset:
    """Read a dataset directory (ValueError naming the missing file)."""
    import pandas as pd

    p = Path(path)
    need = {"models_energy.csv": None, "layers.csv": None, "ops.parquet": None}
    for name in need:
        f = p / name
        if not f.exists() and not (p / (name + ".gz")).exists():
            raise ValueError(
                f"dataset {p} lacks {name} (collect it with benchmarks/predict_collect.py)"
            )
    models = pd.read_csv(p / "models_energy.csv")
    models = models[(models["status"] == "ok") & models["energy_j"].notna()].reset_index(drop=True)
    lay = p / "layers.csv"
    layers = pd.read_csv(lay if lay.exists() else p / "layers.csv.gz")
    layers["module"] = layers["module"].fillna("").astype(str)
    ops = pd.read_parquet(p / "ops.parquet")
    ops["module"] = ops["module"].fillna("").astype(str)
    ops["dtype"] = ops["dtype"].fillna("").astype(str)
    return Dataset(models, layers, ops, p)
