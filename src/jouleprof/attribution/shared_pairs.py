"""A replayed phase and the phase before it, weighed together where the replay check finds
energy they share.

A phase run through `prof.replay` runs twice in some steps: once after its neighbour, once
after itself. Where its first run draws more than its replays (the replay check,
`repeat_check`), the difference is energy it shares with the phase before it: on an H100, the
user loop's 1 GiB copy right after its GEMM drew 2.42 J a step more than after itself, and
neither phase's own figure is defined to within that (docs/attribution.md, "What a phase's
energy means when phases share energy"). Their sum is. So where the run repeated phases, the
fit also weighs each replayed phase together with the phase before it (`attribution.groups`),
and the row stays where the check found shared energy, with a note saying so; elsewhere it is
dropped (unless the user asked for it, `--joint`). On the stored user-loop runs, that pair's
row met ±5 % of the pair's reference in 5 of 6 runs with the copy replayed
(benchmarks/results/ref_loops/joint_rows).

Pure functions of the spans and the fits' results; `repeat_rule.fit_with_rule` calls them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from jouleprof.attribution.groups import SEP, parse_groups

MIN_SHARE = 0.5
"""A phase counts as the one before a replayed phase where it is so in at least this share of
the steps that ran the replayed phase."""


def phases_before(spans, replayed: Iterable[str]) -> dict[str, str]:
    """Each replayed phase (its full name, matched by leaf) → the phase whose span ends last
    before the replayed phase's first span of a step starts (not an enclosing phase, not
    itself), where that is the same phase in ≥ MIN_SHARE of the steps."""
    leaves = set(replayed)
    if not leaves or spans is None or len(spans) == 0:
        return {}
    s = spans.sort_values(["step", "t0_s"])
    out: dict[str, str] = {}
    leaf = s["phase"].astype(str).str.rsplit("/", n=1).str[-1]
    for name in sorted(set(s.loc[leaf.isin(leaves), "phase"].astype(str))):
        seen: Counter[str] = Counter()
        n = 0
        for _, step in s.groupby("step", sort=False):
            mine = step[step["phase"].astype(str) == name]
            if mine.empty:
                continue
            n += 1
            t0 = float(mine["t0_s"].iloc[0])
            names = step["phase"].astype(str)
            before = step[
                (step["t1_s"] <= t0 + 1e-9)
                & (names != name)
                & ~names.map(lambda p, name=name: name.startswith(p + "/"))
            ]
            if len(before):
                seen[str(before.sort_values("t1_s")["phase"].iloc[-1])] += 1
        if seen:
            prev, k = seen.most_common(1)[0]
            if k >= MIN_SHARE * n:
                out[name] = prev
    return out


def with_pairs(cfg: Any, pairs: Mapping[str, str]) -> Any:
    """`cfg` (a RegressionConfig, or None for the defaults) also asking for each pair
    ("before+replayed") to be weighed together."""
    from jouleprof.attribution.regression_config import RegressionConfig

    cfg = cfg if cfg is not None else RegressionConfig()
    asked = {frozenset(g) for g in parse_groups(cfg.joint)}
    more = tuple(
        f"{before}{SEP}{name}"
        for name, before in pairs.items()
        if frozenset((before, name)) not in asked
    )
    return replace(cfg, joint=cfg.joint + more) if more else cfg


def keep_shared(res: Any, pairs: Mapping[str, str], asked: Iterable[str]) -> list[str]:
    """Keep, in `res` (changed in place), the pair row of each replayed phase whose first runs
    the replay check found apart from its replays (``diagnostics["replay_check"]``: moved,
    drawing more than its replays), with a note; drop the other pairs' rows unless `asked`
    (the user's own groups). Returns the pairs kept."""
    found = res.diagnostics.get("replay_check") or {}
    user = {frozenset(g) for g in parse_groups(tuple(asked))}
    keep: dict[frozenset, str] = {}
    drop: set[frozenset] = set()
    for name, before in pairs.items():
        key = frozenset((before, name))
        row = found.get(name) or {}
        extra = row.get("first_run_extra_j_per_step")
        if row.get("moved_j", 0.0) > 0 and extra is not None and extra > 0:
            keep[key] = (
                f"weighed together: {name}'s first run of a step draws {extra:.3g} J more than "
                f"its replays, energy it shares with {before} (replay check), so only their "
                "sum is defined to within it"
            )
        elif key not in user:
            drop.add(key)
    phases, kept = [], []
    for p in res.phases:
        key = frozenset(p.phase.split(SEP))
        if key in drop:
            continue
        if key in keep:
            p = replace(p, note=f"{keep[key]}; {p.note}" if p.note else keep[key])
            kept.append(p.phase)
        phases.append(p)
    res.phases[:] = phases
    res.diagnostics["shared_pairs"] = {"pairs": dict(pairs), "kept": kept}
    return kept


__all__ = ["MIN_SHARE", "keep_shared", "phases_before", "with_pairs"]
