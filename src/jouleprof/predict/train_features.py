"""Cheap proxies of a BERT training configuration: compute, memory traffic, communication.

Two sources, both without a GPU:

- `analytic_counts(cfg)`: closed-form counts of the protocol's step (matmul FLOPs of forward and
  backward, parameters, gradient and optimizer-state bytes, saved-activation bytes);
- `traced_counts(cfg)`: a FakeTensor trace of one forward+backward (torch's FlopCounterMode for
  FLOPs, and the bytes every operator reads and writes, by dtype), which needs no memory for the
  tensors and so works for any size on a laptop.

`train_features(cfg, gpus, strategy)` combines them with the communication bytes a strategy moves
per step (ring all-reduce / all-gather / reduce-scatter volumes) into the dict the scaling law
(`predict.scaling`) reads. Every figure is per step, per configuration; units in the names.
"""

from __future__ import annotations

import functools
from typing import Any

VOCAB = 30522
FP32 = 4
BF16 = 2


def _cfg_tuple(cfg) -> tuple:
    return (cfg.layers, cfg.hidden, cfg.heads, cfg.seq, cfg.batch, cfg.precision)


def layer_parameter_count(h: int) -> int:
    """Parameters of one encoder layer (attention q, k, v, output; two LayerNorms; 4H MLP)."""
    return 4 * (h * h + h) + 2 * h + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * h


def parameter_count(layers: int, hidden: int, seq: int) -> int:
    """Parameters of BertForMaskedLM (tied decoder weights, 4H intermediate)."""
    h, v, pos = hidden, VOCAB, max(512, seq)
    emb = v * h + pos * h + 2 * h + 2 * h  # word, position, token type, LayerNorm
    head = h * h + h + 2 * h + v  # transform dense + LayerNorm + decoder bias (weight tied)
    return emb + layers * layer_parameter_count(h) + head


def analytic_counts(cfg) -> dict[str, float]:
    """Closed-form per-step counts of the protocol (one GPU's share, batch cfg.batch).

    FLOPs count a multiply-add as 2; backward as twice the forward (weights and inputs).
    """
    L, H, S, B = cfg.layers, cfg.hidden, cfg.seq, cfg.batch
    tokens = B * S
    dense_fwd = tokens * (L * 24 * H * H + 2 * H * H + 2 * H * VOCAB)
    attn_fwd = tokens * L * 4 * S * H  # QK^T and AV
    fwd = dense_fwd + attn_fwd
    params = parameter_count(L, H, S)
    act_dtype = BF16 if cfg.precision == "bf16" else FP32
    # Saved activations per token per layer ≈ 34·H bytes in 16-bit with fused attention
    # (Korthikanti et al. 2022), doubled for fp32; plus the logits (B·S·V) and their fp32 loss copy.
    act_bytes = tokens * L * 17 * H * act_dtype + tokens * VOCAB * (act_dtype + FP32)
    return {
        "tokens": float(tokens),
        "params": float(params),
        "fwd_flops": float(fwd),
        "attn_flops": float(3 * attn_fwd),
        "train_flops": float(3 * fwd),
        "param_bytes": float(params * FP32),
        "grad_bytes": float(params * FP32),
        "optimizer_state_bytes": float(params * 2 * FP32),
        # one AdamW step reads p, g, m, v and writes p, m, v (fp32)
        "optimizer_traffic_bytes": float(params * 7 * FP32),
        "activation_bytes": float(act_bytes),
    }


@functools.lru_cache(maxsize=256)
def _traced(key: tuple) -> dict[str, float]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from jouleprof.workloads.bert import BertTrainConfig, hf_config

    layers, hidden, heads, seq, batch, precision = key
    cfg = BertTrainConfig(
        layers=layers, hidden=hidden, heads=heads, seq=seq, batch=batch, precision=precision
    )

    class _Bytes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.by_dtype: dict[str, float] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.is_view or func in (torch.ops.aten.detach.default,):
                return out
            for t in torch.utils._pytree.tree_leaves((args, kwargs, out)):
                if isinstance(t, torch.Tensor):
                    k = str(t.dtype).removeprefix("torch.")
                    self.by_dtype[k] = self.by_dtype.get(k, 0.0) + t.numel() * t.element_size()
            return out

    from transformers import BertForMaskedLM

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = BertForMaskedLM(hf_config(cfg))
        ids = torch.randint(0, VOCAB, (batch, seq))
        labels = ids.clone()
        flops = FlopCounterMode(display=False)
        counter = _Bytes()
        ctx = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if precision == "bf16"
            else torch.autocast("cpu", enabled=False)
        )
        with flops, counter:
            with ctx:
                loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
    out = {"traced_train_flops": float(flops.get_total_flops())}
    out.update({f"traced_bytes_{k}": v for k, v in counter.by_dtype.items()})
    out["traced_bytes_total"] = float(sum(counter.by_dtype.values()))
    return out


def traced_counts(cfg) -> dict[str, float]:
    """FLOPs and bytes (by dtype) of one forward+backward, from a FakeTensor trace (no memory,
    no GPU; a few seconds for BERT-large on a laptop). The optimizer step is not traced: its
    traffic is `analytic_counts`' optimizer_traffic_bytes."""
    return dict(_traced(_cfg_tuple(cfg)))


def comm_bytes(params: int, gpus: int, strategy: str, cfg=None) -> dict[str, float]:
    """Bytes each GPU sends per step under a strategy (ring algorithms: an all-reduce of N bytes
    moves 2(n-1)/n·N per GPU, an all-gather or reduce-scatter (n-1)/n·N)."""
    if gpus <= 1 or strategy == "none":
        return {"allreduce_bytes": 0.0, "allgather_bytes": 0.0, "reducescatter_bytes": 0.0}
    f = (gpus - 1) / gpus
    grads = params * FP32
    if strategy == "ddp":
        return {
            "allreduce_bytes": 2 * f * grads,
            "allgather_bytes": 0.0,
            "reducescatter_bytes": 0.0,
        }
    if strategy == "fsdp":
        # parameters gathered for forward and the encoder layers' again for backward (FSDP2
        # keeps the root's — embeddings, MLM head — gathered between the two; without cfg, an
        # upper bound: everything twice); gradients reduce-scattered
        again = grads if cfg is None else cfg.layers * layer_parameter_count(cfg.hidden) * FP32
        return {
            "allreduce_bytes": 0.0,
            "allgather_bytes": f * (grads + again),
            "reducescatter_bytes": f * grads,
        }
    if strategy == "tp":
        if cfg is None:
            raise ValueError("tp communication depends on the activations: pass cfg")
        act = cfg.batch * cfg.seq * cfg.hidden * (BF16 if cfg.precision == "bf16" else FP32)
        # two all-reduces of the activations per layer forward, two backward
        return {
            "allreduce_bytes": 4 * cfg.layers * 2 * f * act,
            "allgather_bytes": 0.0,
            "reducescatter_bytes": 0.0,
        }
    raise ValueError(f"strategy must be none, ddp, fsdp or tp, got {strategy!r}")


def train_features(
    cfg, gpus: int = 1, strategy: str = "none", trace: bool = False
) -> dict[str, Any]:
    """All proxies of one configuration on `gpus` GPUs (per GPU unless named _total)."""
    if gpus < 1:
        raise ValueError(f"gpus must be ≥ 1, got {gpus}")
    a = analytic_counts(cfg)
    feats: dict[str, Any] = dict(a)
    feats["bytes_moved"] = (
        3 * a["param_bytes"]
        + 2 * a["grad_bytes"]
        + a["optimizer_traffic_bytes"]
        + 2 * a["activation_bytes"]
    )
    feats["arith_intensity_flop_per_byte"] = a["train_flops"] / feats["bytes_moved"]
    c = comm_bytes(int(a["params"]), gpus, strategy, cfg)
    feats.update(c)
    feats["comm_bytes"] = sum(c.values())
    feats["gpus"] = gpus
    feats["strategy"] = strategy
    if trace:
        feats.update(traced_counts(cfg))
    return feats


def efficiency_speedup(t1_s: float, tn_s: float, n: int, work_ratio: float = 1.0) -> float:
    """Hardware efficiency as measured speedup over ideal: (t1 / tn) / n for the same total work
    (work_ratio rescales when the n-GPU run does work_ratio× the one-GPU run's work)."""
    if n < 1 or not (t1_s > 0 and tn_s > 0):
        raise ValueError("efficiency needs n ≥ 1 and positive times")
    return (work_ratio * t1_s / tn_s) / n
