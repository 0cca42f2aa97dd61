"""Reference loops for phase attribution (issue 20): loops the attribution was not tuned on,
each measured as a user would (`measure` + `PhaseRecorder`), with every phase's reference energy
made two independent ways. One GPU script, one call.

Per loop (benchmarks/ref_loops_defs.py; `--loops` picks some):
1. fine/: a run directory of the loop measured in fine mode (the energy counter every refresh,
   20 ms power reads, NVML's power buffer) for `--fine-s` seconds (less where the budget says),
   its phases recorded with CUDA events by a `PhaseRecorder` (the framework loops through
   jouleprof's Trainer / Lightning callbacks);
2. ref/: a second run directory, the references, as windows of time on its clock
   (ref_windows.csv: kind, phase, k, n, occ, t0_s, t1_s):
   - idle: the device idle (its board power);
   - plain: the loop's step replayed as is (at the start and at the end);
   - alone:X: phase X replayed back to back (after the phases it needs ran once);
   - added:X: the step with each occurrence of X run k+1 times (k sized so the extra work is
     ~40 % of the step; 1 for a long phase);
   - removed:X, for the loop's `removable` phases only: the step without X; and removed:a+b
     for its `removable_groups`, the step without both (the pair's own third reference).
   The energies are measured offline from samples.csv (benchmarks/ref_loops_eval.py): alone:X
   gives E/n per call, added:X gives (E_added/n − E_plain/n)/(k·occ) per occurrence, and
   removed:X (E_plain/n − E_removed/n)/occ: X at the step's own pace, with what it does to
   its neighbours (a third way, reported beside the two).
Each loop runs in isolation: an error is a row (loops.csv, error.txt), never the end.

`<loop>_excite` (any loop above, e.g. pl_resnet50_excite) is the loop measured with the opt-in
excitation (`excite_config`: sync gaps of 0.5-5 ms before the top-level phases of 30 % of the
steps in the first 75 % of the fine run; the framework loops get them through jouleprof's
callbacks, which open their phases on the same `PhaseRecorder`). `<loop>_edges` is the loop with
long gaps instead (`edges_config`: `ExciteConfig.edges`, sync gaps of 40-150 ms in 10 % of the
steps in the first 75 %: load→idle→load edges longer than the power buffer's window, a test of
whether they identify the window's length; benchmarks/edge_excite_sim.py). `<loop>_repeat`
runs each of the base loop's replayable phases (user4's copy, infer_mixed's three no_grad
phases, vit_accum's copy-in and forward) twice back to back with chance
30 % in the steps of the first 75 % (`loop_repeat`; benchmarks/results/ref_loops/
simulated_repeat_rule). Each is an
excited loop: its references are its base loop's: it makes none when the base loop runs in the
same call (the evaluation reads loops/<base>/ref), and its own (ref/, replayed without
excitation) when it does not. `--excite-s` is each excited loop's fine measurement, reserved
before the other loops share the budget.

    PYTHONPATH=src JP_COMMIT=$(git rev-parse HEAD) python3 benchmarks/ref_loops.py --out DIR \
        [--budget-s 510] [--fine-s 60] [--excite-s 30] [--ref-s 2.0] [--loops user4,...] [--pack]
    PYTHONPATH=src python3 benchmarks/ref_loops.py --out DIR --smoke   # CPU, simulated GPU

--pack puts each loop's directories into DIR/<loop>.tar.gz as soon as it is done (what comes
back from the GPU machine is then meta.json, loops.csv and one archive per loop). --smoke runs
tiny sizes on the CPU for a few seconds and drives the package's simulated GPU with the
recorded spans (every figure from it is simulated).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import shutil
import sys
import tarfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ref_loops_defs import HELD_OUT, LOOPS, Loop, time_once_ms  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WINDOW_COLUMNS = ("kind", "phase", "k", "n", "occ", "t0_s", "t1_s")
LOOP_COLUMNS = ("loop", "status", "framework", "held_out", "fine_s", "n_steps", "step_ms",
                "n_windows", "wall_s", "error", "info")  # fmt: skip
DEFAULT_ORDER = ("user4", "hf_bert", "pl_resnet50", "vit_accum", "infer_mixed", "user4_excite")
EXCITE_SUFFIX = "_excite"
EDGES_SUFFIX = "_edges"
REPEAT_SUFFIX = "_repeat"
EXCITED_SUFFIXES = (EXCITE_SUFFIX, EDGES_SUFFIX, REPEAT_SUFFIX)
REPEAT_FRACTION = 0.30
"""Chance that a replayable phase of a `<loop>_repeat` run's window step runs twice (drawn for
each phase and step; benchmarks/results/ref_loops/simulated_repeat_rule: 10 % and 30 % were
simulated)."""
EDGES_FRACTION = 0.10
"""Share of an `<loop>_edges` run's window steps that get long gaps (benchmarks/results/
ref_loops/simulated_edges: 5 % and 10 % were simulated; 10 % gives the edges their best chance
to identify the buffer's window, at +19-22 % of the time on the simulated user4)."""


def base_of(name: str) -> str:
    """The loop an excited loop `<base>_excite` or `<base>_edges` runs (the name itself for a
    plain loop)."""
    for suffix in EXCITED_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def is_excited(name: str) -> bool:
    return base_of(name) != name and base_of(name) in LOOPS


def excite_config(fine_s: float):
    """The excitation of an excited loop's fine run (30 % of the steps in its first 75 %)."""
    from jouleprof.timeline.excite import ExciteConfig

    return ExciteConfig(fraction=0.3, window_s=0.75 * fine_s, max_gap_s=5e-3, gap="sync")


def edges_config(fine_s: float, smoke: bool = False):
    """The long gaps of an `<loop>_edges` fine run (`ExciteConfig.edges`: 40-150 ms sync gaps
    in EDGES_FRACTION of the steps in its first 75 %; in every step of a smoke run, whose
    ~20 steps would otherwise often get none)."""
    from jouleprof.timeline.excite import ExciteConfig

    return ExciteConfig.edges(window_s=0.75 * fine_s, fraction=1.0 if smoke else EDGES_FRACTION)


def loop_repeat(name: str, fine_s: float, smoke: bool = False):
    """The phase repetition of a `<loop>_repeat` fine run, a `jouleprof.RepeatConfig`: its
    base loop's replayable phases twice in REPEAT_FRACTION of the steps of its first 75 %
    (every step of a smoke run); None for any other loop.

    Raises:
        ValueError: the base loop has no replayable phase.
    """
    from jouleprof.timeline.repeat import RepeatConfig

    if not (is_excited(name) and name.endswith(REPEAT_SUFFIX)):
        return None
    if not LOOPS[base_of(name)].replayable:
        raise ValueError(f"{name}: {base_of(name)} has no replayable phase to repeat")
    return RepeatConfig(fraction=1.0 if smoke else REPEAT_FRACTION, window_s=0.75 * fine_s)


def loop_excitation(name: str, fine_s: float, smoke: bool = False):
    """The excitation gaps of loop `name`'s fine run: None for a plain or repeated loop."""
    if not is_excited(name) or name.endswith(REPEAT_SUFFIX):
        return None
    if name.endswith(EDGES_SUFFIX):
        return edges_config(fine_s, smoke)
    return excite_config(fine_s)


def write_meta(out: Path, argv: list[str], device: str) -> dict:
    from jouleprof.bench.provenance import benchmark_meta
    from jouleprof.bench.provenance import write_meta as write

    command = ["python3", "benchmarks/ref_loops.py", *argv]
    meta = benchmark_meta(command, ("transformers", "timm", "lightning", "nvidia-ml-py"), ROOT)
    return write(out, {**meta, "device": device})


def _measure_config(smoke: bool):
    from jouleprof.bench.modes import Mode

    cfg = Mode.FINE.measure_config(None if smoke else (0,))
    return replace(cfg, kind="ref_loop", rapl=False, power_buffer=not smoke)


def phase_times_ms(loop: Loop) -> dict[str, dict[str, float]]:
    """Each phase's mean device and host time per occurrence in the replayed cycle (after two
    warm cycles): {"gpu": {phase: ms}, "host": {phase: ms}}. The host time is what launching
    it costs the host (all of it, for a phase that waits for the device)."""
    steps = loop.cycle()
    gpu: dict[str, list[float]] = {}
    host: dict[str, list[float]] = {}
    for _ in range(2):
        for phases in steps:
            for _, call in phases:
                call(False)
    for phases in steps:
        for name, call in phases:
            ms, host_ms = time_once_ms(loop, lambda c=call: c(False))
            host.setdefault(name, []).append(host_ms)
            gpu.setdefault(name, []).append(ms)
    loop.reset()
    mean = lambda d: {k: sum(v) / len(v) for k, v in d.items()}  # noqa: E731
    return {"gpu": mean(gpu), "host": mean(host)}


def added_k(name: str, times: dict, flat: list[str]) -> int:
    """How many extra copies of `name` per occurrence: its extra device work ~40 % of the
    cycle (1 for a long phase, at most 16), and for a phase whose launches cost the host a
    good part of its device time, few enough that the host still runs ahead of the device
    (else the added copies would price the device waiting for the host)."""
    occ = flat.count(name)
    gpu, host = times["gpu"], times["host"]
    cycle_gpu = sum(gpu[n] for n in flat)
    cycle_host = sum(host[n] for n in flat)
    k = max(1, min(16, round(0.4 * cycle_gpu / max(gpu[name] * occ, 1e-3))))
    if host[name] > 0.3 * gpu[name]:
        room = (0.7 * cycle_gpu - cycle_host) / max(host[name] * occ, 1e-3)
        k = max(1, min(k, int(room)))
    return k


def _run_cycle(
    loop: Loop, rec, steps, extra: dict[str, int] | None = None, skip: str | set | None = None
) -> None:
    """One cycle of the replica, each step recorded; phases in `extra` run k more times, the
    phase `skip` (or each phase of a set) not at all."""
    extra = extra or {}
    skip = {skip} if isinstance(skip, str) else set(skip or ())
    for phases in steps:
        with rec.step():
            for name, call in phases:
                if name in skip:
                    continue
                k = extra.get(name, 0)
                with rec.phase(name):
                    for i in range(k + 1):
                        call(i < k)


def _window(loop, clock, body, seconds: float, warm_s: float, min_n: int = 3) -> tuple:
    t_w = time.perf_counter()
    body()
    loop.sync()
    while time.perf_counter() - t_w < warm_s:
        body()
    loop.sync()
    n, t0 = 0, clock.now_s()
    while n < min_n or clock.now_s() - t0 < seconds:
        body()
        n += 1
    loop.sync()
    return n, t0, clock.now_s()


def run_references(
    loop: Loop, m, rec, ref_s: float, times_ms: dict, deadline: float = float("inf")
) -> list[dict]:
    """The reference windows (module docstring), appended to ref_windows.csv as they end;
    phases whose two windows would end past `deadline` (perf_counter s) are left out."""
    steps = loop.cycle()
    flat = [name for phases in steps for name, _ in phases]
    path = m.run_dir.path / "ref_windows.csv"
    rows: list[dict] = []
    warm_s = min(0.3, ref_s / 3)

    def put(kind, phase, k, n, occ, t0, t1):
        rows.append(dict(zip(WINDOW_COLUMNS, (kind, phase, k, n, occ, t0, t1), strict=True)))
        new = not path.exists()
        with path.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=WINDOW_COLUMNS)
            if new:
                w.writeheader()
            w.writerow(rows[-1])
        m.clock.sleep_s(0.3)  # the next window's edge is not smeared by this one

    def removed(label: str, skip: set[str], occ: int) -> None:
        """The `removed` window of `label`: the step without the phases in `skip`."""
        n, t0, t1 = _window(
            loop, m.clock, lambda: _run_cycle(loop, rec, steps, skip=skip), ref_s, warm_s
        )
        loop.reset()
        put("removed", label, 0, n, occ, t0, t1)

    loop.sync()
    t0 = m.clock.now_s()
    m.clock.sleep_s(min(1.5, ref_s))
    put("idle", "", 0, 1, 0, t0, m.clock.now_s())
    n, t0, t1 = _window(loop, m.clock, lambda: _run_cycle(loop, rec, steps), ref_s, warm_s)
    put("plain", "", 0, n, 0, t0, t1)
    for name in dict.fromkeys(flat):
        if time.perf_counter() + (3 + (name in loop.removable)) * (ref_s + warm_s + 0.4) > deadline:
            loop.info["references_cut"] = f"budget: no references from {name!r} on"
            break
        occ = flat.count(name)
        # alone: the phases before X's first occurrence once, then X back to back.
        before = flat[: flat.index(name)]
        calls = {nm: c for phases in steps for nm, c in phases}
        for nm in before:
            calls[nm](False)

        def alone(nm=name, calls=calls):
            with rec.step(), rec.phase(nm):
                calls[nm](True)

        n, t0, t1 = _window(loop, m.clock, alone, ref_s, warm_s)
        for nm in flat[flat.index(name) + 1 :]:
            calls[nm](False)  # finish the cycle (a backward frees its graph)
        loop.reset()
        put("alone", name, 0, n, occ, t0, t1)
        k = added_k(name, times_ms, flat)
        n, t0, t1 = _window(
            loop, m.clock, lambda nm=name, k=k: _run_cycle(loop, rec, steps, {nm: k}), ref_s,
            warm_s,
        )  # fmt: skip
        loop.reset()
        put("added", name, k, n, occ, t0, t1)
        if name in loop.removable:
            removed(name, {name}, occ)
    for group in loop.removable_groups:
        if time.perf_counter() + 2 * (ref_s + warm_s + 0.4) > deadline:
            loop.info["references_cut"] = f"budget: no references from {group!r} on"
            break
        removed(group, set(group.split("+")), 1)
    n, t0, t1 = _window(loop, m.clock, lambda: _run_cycle(loop, rec, steps), ref_s, warm_s)
    put("plain", "", 0, n, 0, t0, t1)
    return rows


def _simulate(run_dir: Path) -> None:
    """Smoke mode: drive the simulated GPU with the run's spans (appends device sim0)."""
    from jouleprof.bench.simulate import simulate_samples
    from jouleprof.store.rundir import RunDir

    rd = RunDir(run_dir)
    sim = simulate_samples(rd.read_spans())
    w = rd.sample_writer()
    try:
        w.write(sim.samples)
    finally:
        w.close()
    rec = rd.read_record()
    rec.extra["simulated_gpu"] = {"source": "simulated", "device": "sim0",
                                  "phase_power_w": sim.phase_power_w}  # fmt: skip
    rd.write_record(rec)


def run_loop(
    name: str, out: Path, fine_s: float, ref_s: float, smoke: bool, device: str,
    deadline: float = float("inf"), references: bool | None = None,
) -> dict:  # fmt: skip
    """Build, calibrate, measure (fine) and reference one loop. Raises on failure, and for an
    excited loop whose fine run put no excitation gap. `references`: make the reference
    windows (default: for a plain loop, not for an excited one)."""
    from jouleprof.measurement import measure
    from jouleprof.timeline.recorder import PhaseRecorder

    base = base_of(name)
    excite = loop_excitation(name, fine_s, smoke)
    repeat = loop_repeat(name, fine_s, smoke)
    if references is None:
        references = not is_excited(name)
    loop = LOOPS[base](device, smoke)
    row: dict = {"loop": name, "framework": loop.framework}
    t_start = time.perf_counter()
    try:
        loop.build()
        loop.calibrate()
        times_ms = phase_times_ms(loop)
        loop.info["replica_phase_ms"] = times_ms
        cfg = _measure_config(smoke)
        rc = {"ref_loop": {"loop": name, "base": base, "info": loop.info,
                           "excite": excite is not None}}  # fmt: skip
        with measure(out / "fine", cfg, run_config=rc) as m:
            rec = PhaseRecorder(
                m.clock, m.span_writer(), device=device if loop.cuda else "cpu",
                record=m.record, excite=excite, repeat=repeat,
            )  # fmt: skip
            try:
                n = (
                    loop.run_fine(rec, fine_s, loop.replayable)
                    if repeat
                    else loop.run_fine(rec, fine_s)
                )
            finally:
                rec.close()
        row["n_steps"] = n
        row["fine_s"] = fine_s
        if excite is not None:
            ex = rec.exciter.to_json()
            loop.info["excite"] = {k: ex[k] for k in ("n_window_steps", "n_excited_steps",
                                                       "n_gaps", "gap_s_total")}  # fmt: skip
            if not ex["n_gaps"]:
                raise RuntimeError(
                    f"{name}: the fine run put no excitation gap ({ex['n_window_steps']} "
                    f"steps in the window): {base}'s phases bypass the PhaseRecorder's begin_phase"
                )
        if repeat is not None:
            rp = rec.repeater.to_json()
            keep = ("phases", "repeats_per_phase", "n_window_steps", "n_repeated_steps")
            loop.info["repeat"] = {k: rp[k] for k in keep}
            if not rp["n_repeated_steps"]:
                raise RuntimeError(
                    f"{name}: the fine run repeated no phase ({rp['n_window_steps']} steps in "
                    f"the window): {base}'s replayable phases did not run through rec.replay"
                )
        windows = []
        if references:
            with measure(out / "ref", cfg, run_config=rc) as m:
                rec = PhaseRecorder(
                    m.clock, m.span_writer(), device=device if loop.cuda else "cpu",
                    record=m.record,
                )  # fmt: skip
                try:
                    windows = run_references(loop, m, rec, ref_s, times_ms, deadline)
                finally:
                    rec.close()
        row["n_windows"] = len(windows)
        if smoke:
            for sub in ("fine", "ref"):
                if (out / sub / "spans.csv").is_file():
                    _simulate(out / sub)
        step_ms = sum(times_ms["gpu"].values())
        row["step_ms"] = round(step_ms, 3)
        row["info"] = json.dumps(loop.info, default=str)[:2000]
    finally:
        row["wall_s"] = round(time.perf_counter() - t_start, 1)
        loop.close()
        del loop
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001, S110
            pass
    return row


def _pack(out: Path, name: str) -> None:
    src = out / "loops" / name
    with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
        tar.add(src, arcname=f"loops/{name}")
    shutil.rmtree(src)


def _reserve_s(name: str, ref_s: float, smoke: bool, references: bool = True) -> float:
    """Seconds a loop needs besides its fine measurement (build, sensors, references)."""
    if smoke:
        return 3.0
    base = base_of(name)
    n_phases = {"user4": 4, "hf_bert": 3, "pl_resnet50": 3, "vit_accum": 4, "infer_mixed": 4}
    build = {"hf_bert": 12.0, "pl_resnet50": 12.0, "vit_accum": 8.0}.get(base, 5.0)
    if not references:
        return build + 5.0
    removed = len(LOOPS[base].removable) + len(LOOPS[base].removable_groups) if base in LOOPS else 0
    windows = 2 + 2 * n_phases.get(base, 4) + removed
    return build + 8.0 + 1.5 + windows * (ref_s + 0.3 + 0.3 + 0.2)


def _budget_fine_s(names: list[str], i: int, left: float, args, refs: dict[str, bool]) -> float:
    """The fine seconds of loop `names[i]` with `left` seconds left: every loop from i on keeps
    its reserve (`_reserve_s`), each excited loop after i its `--excite-s`, and the plain loops
    share the rest (an excited loop takes what is left after the others' reserves and the
    plain loops after it keep `--min-fine-s` each)."""
    rest = names[i:]
    name = rest[0]
    reserve = sum(_reserve_s(n, args.ref_s, args.smoke, refs[n]) for n in rest)
    later = rest[1:]
    excite_want = args.excite_s * sum(1 for n in later if is_excited(n))
    if is_excited(name):
        plain_later = sum(1 for n in later if not is_excited(n))
        share = left - reserve - excite_want - plain_later * args.min_fine_s
        return min(args.excite_s, share)
    n_fine = sum(1 for n in rest if not is_excited(n))
    return min(args.fine_s, (left - reserve - excite_want) / max(n_fine, 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=510.0, help="wall budget for all loops")
    ap.add_argument("--fine-s", type=float, default=60.0, help="fine measurement per loop, s")
    ap.add_argument("--min-fine-s", type=float, default=20.0, help="skip a loop below this")
    ap.add_argument("--ref-s", type=float, default=2.0, help="each reference window, s")
    ap.add_argument("--excite-s", type=float, default=30.0, help="each excited loop's fine s")
    ap.add_argument("--loops", default=",".join(DEFAULT_ORDER))
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, simulated GPU")
    ap.add_argument("--pack", action="store_true", help="one .tar.gz per loop")
    args = ap.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    t_start = time.perf_counter()
    names = [n.strip() for n in args.loops.split(",") if n.strip()]
    bad = [n for n in names if n not in LOOPS and not is_excited(n)]
    if bad:
        ap.error(f"unknown loop(s) {bad}; choose from {', '.join(LOOPS)}, each also as "
                 f"<loop>{EXCITE_SUFFIX} or <loop>{EDGES_SUFFIX}")  # fmt: skip
    # An excited loop makes its own references only where its base loop is not in this call.
    refs = {n: not is_excited(n) or base_of(n) not in names for n in names}
    if args.smoke:
        args.fine_s, args.ref_s, args.min_fine_s, args.excite_s = 1.5, 0.3, 0.5, 1.5
    import torch

    if args.smoke:
        torch.set_num_threads(1)  # tiny sizes: threads only contend on a shared CPU
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    meta = write_meta(args.out, argv, device)
    print(f"ref_loops: {meta.get('gpu', device)}, budget {args.budget_s:.0f} s", flush=True)
    rows = []
    for i, name in enumerate(names):
        left = args.budget_s - (time.perf_counter() - t_start)
        fine_s = _budget_fine_s(names, i, left, args, refs)
        row = {"loop": name, "held_out": base_of(name) in HELD_OUT}
        if fine_s < args.min_fine_s:
            row.update(status="skipped", error=f"budget: {left:.0f} s left, {fine_s:.0f} s fine")
            rows.append(row)
            print(f"  {name}: skipped ({row['error']})", flush=True)
            continue
        d = args.out / "loops" / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        own = " + references" if refs[name] and is_excited(name) else ""
        print(f"  {name}: {fine_s:.0f} s fine{own} ...", flush=True)
        try:
            deadline = t_start + args.budget_s
            row.update(run_loop(name, d, fine_s, args.ref_s, args.smoke, device, deadline,
                                refs[name]))  # fmt: skip
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001 — a failed loop is a row
            row.update(status="error", error=f"{type(e).__name__}: {e}"[:500])
            (d / "error.txt").write_text(traceback.format_exc())
            print(f"  {name}: ERROR {row['error']}", flush=True)
        rows.append(row)
        _write_rows(args.out, rows)
        if args.pack:
            _pack(args.out, name)
    _write_rows(args.out, rows)
    print(f"\n{'loop':<20} {'status':<8} {'fine_s':>6} {'steps':>6} {'step_ms':>8} {'wall_s':>6}")
    for r in rows:
        print(
            f"{r['loop']:<20} {r.get('status', ''):<8} {r.get('fine_s') or 0:>6.0f} "
            f"{r.get('n_steps') or 0:>6} {r.get('step_ms') or 0:>8.1f} {r.get('wall_s') or 0:>6.0f}"
        )
    print(f"total wall {time.perf_counter() - t_start:.0f} s; references and attribution: "
          "benchmarks/ref_loops_eval.py", flush=True)  # fmt: skip
    return 0


def _write_rows(out: Path, rows: list[dict]) -> None:
    with (out / "loops.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LOOP_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


if __name__ == "__main__":
    sys.exit(main())
