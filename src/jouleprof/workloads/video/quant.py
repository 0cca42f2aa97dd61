"""Frozen quantized bases: every Linear of a backbone (its head excepted) as a bitsandbytes layer.

- `bits=4`: `Linear4bit` with NF4 weights (QLoRA), double-quantized statistics, computing in the
  precision's dtype;
- `bits=8`: `Linear8bitLt` (LLM.int8, outlier threshold 6.0), frozen int8 weights.

The weights are quantized when the model moves to the GPU (bitsandbytes' own behaviour), so
`quantize_linears` runs on the CPU model and the caller moves it. Biases stay float and can
train (BitFit on an int8 base).

bitsandbytes' CUDA int8 matmul takes inputs of two or three dimensions only, and Swin3D's MLPs
pass (B, T, H, W, C): the 8-bit layer here (`int8_linear_class`) folds the leading dimensions
into one around the base layer's forward and unfolds them after. It also keeps each bias in the
dtype it was built with: bitsandbytes' own forward rewrites `bias.data` to the input's dtype, so a
BitFit bias under bf16 autocast silently became bf16 after the optimizer was built (no fp32
master copy), and on the H200 fused AdamW then refused Swin3D's step ("params, grads, exp_avgs,
and exp_avg_sqs must have same dtype"). Here a trained bias of another dtype is added as a cast copy
after the int8 product, so its gradient arrives in the parameter's own dtype.
"""

from __future__ import annotations

from torch import nn

from jouleprof.errors import JouleprofError


def _bnb():
    try:
        import bitsandbytes as bnb
    except ImportError as e:
        raise JouleprofError(
            "4-bit / 8-bit bases need bitsandbytes: pip install 'jouleprof[quant]' (and a CUDA GPU)"
        ) from e
    return bnb


_INT8_LINEAR = None


def int8_linear_class():
    """`bnb.nn.Linear8bitLt` taking inputs of any rank (the module docstring), a subclass so
    that PEFT's dispatch (an isinstance check on Linear8bitLt) wraps it as it wraps its base;
    made once, on first use (bitsandbytes is imported only where an 8-bit base is asked for)."""
    global _INT8_LINEAR
    if _INT8_LINEAR is None:
        bnb = _bnb()

        class Linear8bitLtND(bnb.nn.Linear8bitLt):
            """Linear8bitLt over the last dimension of an input of any rank."""

            def forward(self, x):
                folded = x.reshape(-1, x.shape[-1]) if x.dim() > 3 else x
                bias = self.bias
                if bias is None or bias.dtype == x.dtype or not bias.requires_grad:
                    out = super().forward(folded)  # a frozen bias may be cast in place
                else:  # the base would cast a trained bias's data: add a cast copy instead
                    self.bias = None
                    try:
                        out = super().forward(folded)
                    finally:
                        self.bias = bias
                    out = out + bias.to(out.dtype)
                return out.reshape(*x.shape[:-1], -1) if x.dim() > 3 else out

        _INT8_LINEAR = Linear8bitLtND
    return _INT8_LINEAR


def quantize_linears(model: nn.Module, bits: int, compute_dtype, skip: tuple[str, ...]) -> int:
    """Replace each nn.Linear of `model` not under a `skip` prefix; returns how many."""
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    bnb = _bnb()
    targets = [
        (name, m)
        for name, m in model.named_modules()
        if type(m) is nn.Linear and not any(name == s or name.startswith(s + ".") for s in skip)
    ]
    for name, lin in targets:
        has_bias = lin.bias is not None
        if bits == 4:
            q = bnb.nn.Linear4bit(
                lin.in_features,
                lin.out_features,
                bias=has_bias,
                compute_dtype=compute_dtype,
                compress_statistics=True,
                quant_type="nf4",
            )
            q.weight = bnb.nn.Params4bit(
                lin.weight.data.clone(),
                requires_grad=False,
                quant_type="nf4",
                compress_statistics=True,
                module=q,
            )
        else:
            q = int8_linear_class()(
                lin.in_features,
                lin.out_features,
                bias=has_bias,
                has_fp16_weights=False,
                threshold=6.0,
            )
            q.weight = bnb.nn.Int8Params(
                lin.weight.data.clone(), requires_grad=False, has_fp16_weights=False
            )
        if has_bias:
            q.bias = nn.Parameter(lin.bias.data.clone())
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, q)
    return len(targets)


def logical_numel(p) -> int:
    """A parameter's element count before packing (a 4-bit tensor stores two per byte)."""
    qs = getattr(p, "quant_state", None)
    if qs is not None and getattr(qs, "shape", None) is not None:
        n = 1
        for d in qs.shape:
            n *= int(d)
        return n
    return p.numel()
