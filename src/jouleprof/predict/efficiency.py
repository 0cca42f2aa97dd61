"""A pass's time from its operators' roofline bounds with learned efficiencies, and the host's pace.

GPU side: every operator takes its roofline time over an efficiency learned per (category, side of
the roofline it is on), plus a fixed gap per kernel; the layer's time is the sum over its
operators. Host side: each kernel launch costs a learned time, and so does each module call,
at one price for a module that launches kernels of its own and another for one that launches
none (containers, identities, dropout in eval: only Python's call machinery). A pass takes
the smooth maximum of the two sums, (T_gpu^K + T_host^K)^(1/K): at small batches the host sets
the pace, at large ones the GPU. The parameters are fitted on whole-model windows (least squares
in log time, robust loss, a weak pull of every efficiency toward the median one so a category
seen in few models stays plausible).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from jouleprof.predict.features import ModelFeatures
from jouleprof.predict.opcount import CATEGORIES
from jouleprof.predict.roofline import GpuSpec, op_roofline

K = 3.0
SIDES = ("compute", "memory")
GROUPS = tuple(f"{c}:{s}" for c in CATEGORIES for s in SIDES)


def roof_groups(ops, gpu: GpuSpec) -> tuple[np.ndarray, int]:
    """Summed roofline time per group (GROUPS order) and the kernel count of `ops`."""
    r = np.zeros(len(GROUPS))
    launches = 0
    index = {g: i for i, g in enumerate(GROUPS)}
    for o in ops:
        if not o.launches:
            continue
        c, m = op_roofline(o, gpu)
        r[index[f"{o.category}:{'compute' if c >= m else 'memory'}"]] += max(c, m)
        launches += o.launches
    return r, launches


@dataclass
class EfficiencyTimeModel:
    log_eff: np.ndarray
    """log efficiency per GROUPS entry (roofline time / efficiency = GPU time)."""
    gap_s: float
    """GPU time per kernel beyond its roofline (s)."""
    host_launch_s: float
    """Host time per kernel launch (s)."""
    host_module_s: float
    """Host time per call of a module that launches kernels of its own (s); of every module
    where `host_empty_module_s` is None."""
    info: dict = field(default_factory=dict)
    host_empty_module_s: float | None = None
    """Host time per call of a module that launches no kernel of its own (s); None in a model
    pickled before the split (every call then costs host_module_s)."""

    def gpu_time(self, r: np.ndarray, launches: int) -> float:
        return float(np.dot(r, np.exp(-self.log_eff))) + self.gap_s * launches

    def host_time(self, launches: int, module_calls: int, kernel_module_calls: int = -1) -> float:
        """`kernel_module_calls` < 0: not known (every call at host_module_s)."""
        t = self.host_launch_s * launches
        if self.host_empty_module_s is None or kernel_module_calls < 0:
            return t + self.host_module_s * module_calls
        empty = max(module_calls - kernel_module_calls, 0)
        return t + self.host_module_s * kernel_module_calls + self.host_empty_module_s * empty

    def pass_time(self, feats: ModelFeatures, gpu: GpuSpec) -> float:
        r, n = roof_groups(feats.ops, gpu)
        return self.grouped_pass_time(r, n, feats.module_calls, feats.kernel_module_calls)

    def grouped_pass_time(
        self, r: np.ndarray, launches: int, module_calls: int, kernel_module_calls: int = -1
    ) -> float:
        """`pass_time` from a pass's roof groups (`roof_groups`) and module calls."""
        tg = self.gpu_time(r, launches)
        th = self.host_time(launches, module_calls, kernel_module_calls)
        return (tg**K + th**K) ** (1 / K)

    def layer_times(self, feats: ModelFeatures, gpu: GpuSpec, modules: list[str]) -> np.ndarray:
        """Each layer's share: its GPU and host times combined as the pass's are."""
        by: dict[str, list] = {}
        for o in feats.ops:
            by.setdefault(o.module, []).append(o)
        out = []
        for m in modules:
            r, n = roof_groups(by.get(m, []), gpu)
            tg, th = self.gpu_time(r, n), self.host_launch_s * n
            out.append((tg**K + th**K) ** (1 / K))
        return np.asarray(out)


def fit_efficiency(rows: list[tuple[np.ndarray, int, int, int, float]], ridge: float = 0.05):
    """Fit on (roof groups, launches, module calls, calls of modules with kernels of their own,
    measured pass seconds) rows. Where any row's split is unknown (< 0), every module call
    costs one price."""
    from scipy.optimize import least_squares

    r = np.array([x[0] for x in rows])
    n = np.array([x[1] for x in rows], dtype=float)
    mcalls = np.array([x[2] for x in rows], dtype=float)
    kcalls = np.array([x[3] for x in rows], dtype=float)
    t = np.array([x[4] for x in rows])
    split = bool(np.all(kcalls >= 0))
    kern = kcalls if split else mcalls
    empty = np.maximum(mcalls - kcalls, 0.0) if split else np.zeros_like(mcalls)
    used = r.sum(axis=0) > 0
    g = len(GROUPS)
    n_host = 4 if split else 3

    def unpack(th):
        le = np.zeros(g)
        le[used] = th[: used.sum()]
        gap, hl, hm, *he = np.exp(th[used.sum():])  # fmt: skip
        return le, gap, hl, hm, (he[0] if he else 0.0)

    def resid(th):
        le, gap, hl, hm, he = unpack(th)
        tg = r @ np.exp(-le) + gap * n
        th_ = hl * n + hm * kern + he * empty
        pred = (tg**K + th_**K) ** (1 / K)
        pull = ridge * (th[: used.sum()] - np.median(th[: used.sum()]))
        return np.concatenate([np.log(pred) - np.log(t), pull])

    host0 = [2e-6, 8e-6, 10e-6, 10e-6][:n_host]
    x0 = np.concatenate([np.full(used.sum(), math.log(0.5)), np.log(host0)])
    lo = np.concatenate([np.full(used.sum(), math.log(0.005)), np.log([1e-8] * n_host)])
    hi = np.concatenate([np.full(used.sum(), math.log(1.0)), np.log([1e-3] * n_host)])
    sol = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    le, gap, hl, hm, he = unpack(sol.x)
    # groups never seen in training: the median efficiency of those that were
    le[~used] = float(np.median(le[used])) if used.any() else math.log(0.5)
    return EfficiencyTimeModel(le, float(gap), float(hl), float(hm),
                               {"cost": float(sol.cost), "n_rows": len(rows)},
                               float(he) if split else None)  # fmt: skip
