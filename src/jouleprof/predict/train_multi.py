"""The training-energy law on one GPU or several: each GPU's share, the strategies' own cost, and
communication at a link bandwidth (pure functions).

Every GPU runs the one-GPU law (predict.scaling) on its share of the step:

- DDP and FSDP: the per-GPU batch B, so the FLOPs of the one-GPU step; FSDP also shards the
  optimizer step (its traffic / N);
- TP: the encoder layers split N ways (FLOPs and weights / N; activations per token and layer
  (10 + 24/N)·H instead of 34·H bytes, Korthikanti et al. 2022), embeddings and the MLM head
  replicated.

The strategy's wrapper costs what it was measured to cost on one GPU (world size 1, same
configuration: a time ratio o_s ≥ 1 from the sweep), and communication adds its bytes C per GPU
(ring algorithms, predict.train_features.comm_bytes) at the link bandwidth B, of which a share κ
is exposed (not hidden behind compute):

    t_N = o_s · t_1(share) + κ · C / B,         η = t_1(share) / t_N
    E_N = N · (P0·t_N + (e_F + e_W/H)·F_share + e_B·(M_share + C))

Not modelled: TP narrows every GPU's matmuls (one of their dimensions becomes H/N), which raises
their operand traffic per FLOP; the share keeps the width term at the full H, so TP's time and
energy are underestimated by that much.

Fitted: where the law holds a several-GPU factor for the strategy (`TrainLaw.multi_gpu`, from
measured rows by predict.train_multi_fit), its time ratio and exposed seconds per byte replace
o_s and κ/B, and its held-out errors set the interval. Unfitted otherwise: κ and B need
measurements on several GPUs; the point estimate takes κ = 0 for
DDP and FSDP (their collectives overlap the backward pass and the next layer's compute), κ = 1 for
TP (its all-reduces sit on the critical path), B = the datasheet NVLink bandwidth; the interval
covers κ ∈ [0, 1] and B down to half the datasheet figure.
"""

from __future__ import annotations

from typing import Any

from jouleprof.predict.scaling import TrainLaw, predict_energy_j, predict_time_s

LINK_BYTES_S = {"h200": 450e9}
"""Per-direction NVLink bandwidth per GPU from the datasheet (H200 SXM: 900 GB/s total); not
measured by this project."""
LINK_LOW_FRACTION = 0.5
"""The interval's low end of the link bandwidth, as a fraction of the datasheet figure."""
KAPPA = {"ddp": 0.0, "fsdp": 0.0, "tp": 1.0, "none": 0.0}
"""Exposed share of communication in the point estimate (unfitted; see the module docstring)."""


def share(cfg, gpus: int, strategy: str) -> dict[str, float]:
    """FLOPs, bytes moved and communication bytes of one GPU's share of the step."""
    from jouleprof.predict.train_features import (
        VOCAB,
        analytic_counts,
        layer_parameter_count,
        train_features,
    )

    f = train_features(cfg, gpus=gpus, strategy=strategy)
    F, M, C = f["train_flops"], f["bytes_moved"], f["comm_bytes"]
    if gpus > 1 and strategy == "fsdp":
        M -= f["optimizer_traffic_bytes"] * (1 - 1 / gpus)
    if gpus > 1 and strategy == "tp":
        a = analytic_counts(cfg)
        L, H, T = cfg.layers, cfg.hidden, a["tokens"]
        head_fwd = T * (2 * H * H + 2 * H * VOCAB)
        layer_f = F - 3 * head_fwd
        F = layer_f / gpus + 3 * head_fwd
        layer_params = L * layer_parameter_count(H)
        state_per_param = 3 * 4 + 2 * 4 + 7 * 4  # params read 3×, grads 2×, AdamW (fp32)
        layer_state = layer_params * state_per_param
        act_per_byte = 2 if cfg.precision == "bf16" else 4
        layer_act = 2 * T * L * 17 * H * act_per_byte  # written and read (train_features)
        M = M - layer_state * (1 - 1 / gpus) - layer_act * (1 - (10 + 24 / gpus) / 34)
    return {"train_flops": F, "bytes_moved": M, "comm_bytes": C, "tokens_per_gpu": f["tokens"]}


def _step(law: TrainLaw, cfg, sh: dict[str, float], overhead: float, comm_s: float):
    t1 = float(
        predict_time_s(law, [cfg.layers], [cfg.hidden], [sh["train_flops"]], [sh["bytes_moved"]])[0]
    )
    t = overhead * t1 + comm_s
    e = float(
        predict_energy_j(
            law, [t], [cfg.hidden], [sh["train_flops"]], [sh["bytes_moved"] + sh["comm_bytes"]]
        )[0]
    )
    return t1, t, e


def _eta(law: TrainLaw, cfg, gpus: int, strategy: str, t_n: float) -> float:
    """Speedup over ideal (predict.train_features.efficiency_speedup): the predicted one-GPU time
    of the whole step's work (DDP/FSDP: batch N·B on one GPU; TP: the same batch) over N·t_N."""
    from dataclasses import replace

    from jouleprof.predict.train_features import efficiency_speedup

    whole = replace(cfg, strategy="none", batch=cfg.batch * (1 if strategy == "tp" else gpus))
    sh = share(whole, 1, "none")
    t_whole = float(
        predict_time_s(
            law, [whole.layers], [whole.hidden], [sh["train_flops"]], [sh["bytes_moved"]]
        )[0]
    )
    return efficiency_speedup(t_whole, t_n, gpus)


def strategy_overhead(law: TrainLaw, strategy: str) -> tuple[float, str | None]:
    """(time ratio o_s, a note when it was not measured)."""
    if strategy == "none":
        return 1.0, None
    o = law.strategy_overhead.get(strategy)
    if not o or o.get("time_ratio") is None:
        return 1.0, f"the {strategy} wrapper's own cost was not measured on one GPU (taken as 1)"
    return float(o["time_ratio"]), None


def predict_config(
    law: TrainLaw, cfg, gpus: int = 1, strategy: str = "none", gpu: str = "h200"
) -> dict[str, Any]:
    """Joules and seconds per step of `cfg` (per-GPU batch) on `gpus` GPUs, with intervals."""
    if gpus < 1:
        raise ValueError(f"gpus must be ≥ 1, got {gpus}")
    if gpus > 1 and strategy == "none":
        raise ValueError("gpus > 1 needs a strategy: ddp, fsdp or tp")
    if strategy == "tp" and (cfg.hidden % gpus or cfg.heads % gpus):
        raise ValueError(
            f"tensor parallelism over {gpus} GPUs needs hidden ({cfg.hidden}) and heads "
            f"({cfg.heads}) divisible by {gpus}"
        )
    notes: list[str] = []
    sh = share(cfg, gpus, strategy)
    fitted = law.multi_gpu.get(strategy) if gpus > 1 else None
    if fitted:  # the several-GPU factor replaces the one-GPU ratio and κ/B
        o_s, note = fitted["time_ratio"], None
    else:
        o_s, note = strategy_overhead(law, strategy)
    if note:
        notes.append(note)
    link = LINK_BYTES_S.get(gpu.lower())
    if gpus > 1 and link is None:
        raise ValueError(
            f"no link bandwidth known for gpu {gpu!r}: known are {sorted(LINK_BYTES_S)}"
        )
    C = sh["comm_bytes"]
    if fitted:
        comm_s = fitted["s_per_byte"] * C
    elif gpus > 1:
        comm_s = KAPPA[strategy] * C / link
    else:
        comm_s = 0.0
    _, t, e_gpu = _step(law, cfg, sh, o_s, comm_s)
    e = gpus * e_gpu
    he, ht = law.rel_err_q90, law.t_rel_err_q90
    if fitted:
        he = fitted.get("rel_err_q90") or he
        ht = fitted.get("t_rel_err_q90") or ht
    j_lo, j_hi = e * (1 - he), e * (1 + he)
    s_lo, s_hi = t * (1 - ht), t * (1 + ht)
    validated = gpus == 1 and strategy == "none"
    if fitted:
        counts = fitted.get("gpus") or []
        validated = gpus in counts and bool(fitted.get("held_out_rows"))
        notes.append(
            f"{strategy} on {gpus} GPUs: the several-GPU factor fitted on "
            f"{len(fitted.get('rows') or [])} measured rows at "
            f"{'/'.join(map(str, counts))} GPUs (time ratio {o_s:.3f}, "
            f"{fitted['s_per_byte'] * 1e12:.3g} ps exposed per byte)"
            + ("" if gpus in counts else f"; {gpus} GPUs is outside them: extrapolated")
        )
    elif gpus > 1:
        # κ ∈ [0, 1], link bandwidth down to LINK_LOW_FRACTION of the datasheet
        _, t_fast, e_fast = _step(law, cfg, sh, o_s, 0.0)
        _, t_slow, e_slow = _step(law, cfg, sh, o_s, C / (link * LINK_LOW_FRACTION))
        j_lo, j_hi = gpus * e_fast * (1 - he), gpus * e_slow * (1 + he)
        s_lo, s_hi = t_fast * (1 - ht), t_slow * (1 + ht)
        notes.append(
            f"{gpus}-GPU prediction not validated: it rests on an unfitted efficiency factor "
            f"(exposed communication κ ∈ [0, 1] and a datasheet link bandwidth, "
            f"{link / 1e9:.0f} GB/s per direction, down to {LINK_LOW_FRACTION:g}×); the interval "
            "covers that range; no multi-GPU measurement has been fitted"
        )
    elif strategy != "none" and note is None:
        notes.append(
            f"{strategy} on one GPU: the one-GPU law times the wrapper's measured time ratio "
            f"({o_s:.3f}); checked only at the configuration it was measured on"
        )
    samples = cfg.batch * (1 if strategy == "tp" else gpus)
    return {
        "j_per_step": e,
        "j_per_sample": e / samples,
        "s_per_step": t,
        "j_per_step_lo": j_lo,
        "j_per_step_hi": j_hi,
        "s_per_step_lo": s_lo,
        "s_per_step_hi": s_hi,
        "eta": _eta(law, cfg, gpus, strategy, t) if gpus > 1 else None,
        "gpus": gpus,
        "strategy": strategy,
        "train_flops_per_gpu": sh["train_flops"],
        "bytes_moved_per_gpu": sh["bytes_moved"],
        "comm_bytes_per_gpu": C,
        "strategy_time_ratio": o_s,
        "validated": validated,
        "source": "predicted",
        "notes": notes,
    }
