"""One builder per model family: full-size (random or loaded weights) and tiny CPU configs.

Weights: None builds the architecture with random initialization. A local path loads from disk
(a Hugging Face model folder for VideoMAE/TimeSformer; a .pth/.pt/.safetensors state dict for
Swin3D/Hiera, where a head of another class count is dropped and re-initialized). Anything else
is a hub id or checkpoint name, loaded the library's own way (from its cache; nothing is
downloaded where there is no network).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jouleprof.errors import JouleprofError
from jouleprof.extras import advice

log = logging.getLogger(__name__)


def _init_record(weights: str | None, note: str = "") -> dict[str, Any]:
    if weights is None:
        return {"weights": None, "source": "random", "note": note or "random initialization"}
    src = "local" if Path(weights).exists() else "hub"
    return {"weights": str(weights), "source": src, "note": note}


def _load_state_dict(path: Path) -> dict:
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        sd = load_file(str(path))
    else:
        sd = torch.load(str(path), map_location="cpu", weights_only=True)
    for key in ("model_state", "state_dict", "model"):  # common checkpoint wrappers
        if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
            sd = sd[key]
    return sd


def _load_into(net, path: Path) -> str:
    """Load a state dict, dropping entries whose shape differs (a head of another class count)."""
    sd = _load_state_dict(path)
    own = net.state_dict()
    dropped = [k for k, v in sd.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
    for k in dropped:
        sd.pop(k)
    missing, unexpected = net.load_state_dict(sd, strict=False)
    return (
        f"loaded {path.name}; re-initialized {len(dropped)} mismatched tensor(s) "
        f"{dropped[:4]}; missing {len(missing)}, unexpected {len(unexpected)}"
    )


def sinusoid_table(n_position: int, d_hid: int):
    """VideoMAE's fixed sin-cos position table, (1, n_position, d_hid) float32: the same
    values as transformers' `get_sinusoid_encoding_table` (the same float64 operations, then
    float32), computed in one array operation instead of a Python loop over every position and
    dimension (2 s of VideoMAE-B's 3 s build on a CPU, paid by every probe and study cell)."""
    import numpy as np
    import torch

    hid = np.arange(d_hid)
    angle = np.arange(n_position)[:, None] / np.power(10000, 2 * (hid // 2) / d_hid)[None, :]
    angle[:, 0::2] = np.sin(angle[:, 0::2])
    angle[:, 1::2] = np.cos(angle[:, 1::2])
    return torch.FloatTensor(angle).unsqueeze(0)


@contextlib.contextmanager
def _fast_videomae_table(cls_name: str) -> Iterator[None]:
    """While a VideoMAE model is built: its position table from `sinusoid_table`."""
    mod = None
    if cls_name.startswith("VideoMAE"):
        try:
            from transformers.models.videomae import modeling_videomae as mod
        except ImportError:
            mod = None
    if mod is None or not hasattr(mod, "get_sinusoid_encoding_table"):
        yield
        return
    original = mod.get_sinusoid_encoding_table
    mod.get_sinusoid_encoding_table = sinusoid_table
    try:
        yield
    finally:
        mod.get_sinusoid_encoding_table = original


def _hf(spec, cls_name: str, config_fn, num_classes, weights, tiny, frames, size):
    with _fast_videomae_table(cls_name):
        return _hf_build(spec, cls_name, config_fn, num_classes, weights, tiny, frames, size)


def _hf_build(spec, cls_name: str, config_fn, num_classes, weights, tiny, frames, size):
    import transformers

    from jouleprof.workloads.video.classifier import VideoClassifier

    cls = getattr(transformers, cls_name)
    if weights is not None:
        try:
            net = cls.from_pretrained(weights, num_labels=num_classes, ignore_mismatched_sizes=True)
        except OSError as e:
            raise JouleprofError(
                f"cannot load {spec.name} weights from {weights!r}: {e}. Give a local model "
                "folder, or a hub id already in the Hugging Face cache"
            ) from e
        init = _init_record(weights, f"from_pretrained; classifier head for {num_classes} classes")
    else:
        net = cls(config_fn(tiny, num_classes, frames, size))
        init = _init_record(None)
    blocks = (
        "videomae.encoder.layer" if cls_name.startswith("VideoMAE") else "timesformer.encoder.layer"
    )
    return VideoClassifier(
        spec,
        net,
        head_name="classifier",
        channels_first=False,
        hf_output=True,
        block_names=(blocks,),
        num_classes=num_classes,
        frames=frames,
        size=size,
        init=init,
    )


def _videomae_config(tiny, num_classes, frames, size):
    from transformers import VideoMAEConfig

    kw = dict(image_size=size, num_frames=frames, num_labels=num_classes, use_mean_pooling=True)
    if tiny:
        kw.update(
            patch_size=8,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
    return VideoMAEConfig(**kw)


def _timesformer_config(tiny, num_classes, frames, size):
    from transformers import TimesformerConfig

    # Natively 8 frames (as the K400 checkpoint): a 16-frame clip interpolates the time
    # embeddings. Tiny: 2 native frames fed 4, the same interpolation.
    kw = dict(image_size=size, num_frames=2 if tiny else 8, num_labels=num_classes)
    if tiny:
        kw.update(
            patch_size=8,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
    return TimesformerConfig(**kw)


def build_videomae(spec, num_classes, *, weights, tiny, frames, size):
    return _hf(
        spec,
        "VideoMAEForVideoClassification",
        _videomae_config,
        num_classes,
        weights,
        tiny,
        frames,
        size,
    )


def build_timesformer(spec, num_classes, *, weights, tiny, frames, size):
    return _hf(
        spec,
        "TimesformerForVideoClassification",
        _timesformer_config,
        num_classes,
        weights,
        tiny,
        frames,
        size,
    )


def build_swin3d(spec, num_classes, *, weights, tiny, frames, size):
    from torchvision.models.video import swin_transformer as sw

    from jouleprof.workloads.video.classifier import VideoClassifier
    from jouleprof.workloads.video.swin_patch import patch_swin3d

    note = ""
    if tiny:
        net = sw.SwinTransformer3d(
            patch_size=[2, 4, 4],
            embed_dim=16,
            depths=[2, 2],
            num_heads=[1, 2],
            window_size=[2, 4, 4],
            stochastic_depth_prob=0.0,
            num_classes=num_classes,
        )
    elif weights is not None and Path(weights).exists():
        net = sw.swin3d_b(weights=None, num_classes=num_classes)
        note = _load_into(net, Path(weights))
    elif weights is not None:
        try:
            w = sw.Swin3D_B_Weights[weights]
        except KeyError:
            raise JouleprofError(
                f"swin3d-b weights {weights!r} is neither a file nor one of "
                f"{', '.join(x.name for x in sw.Swin3D_B_Weights)}"
            ) from None
        net = sw.swin3d_b(weights=w)  # from torch.hub's cache (downloads only with a network)
        if num_classes != net.head.out_features:
            import torch.nn as nn

            net.head = nn.Linear(net.head.in_features, num_classes)
        note = f"torchvision {w}; head re-initialized for {num_classes} classes"
    else:
        net = sw.swin3d_b(weights=None, num_classes=num_classes)
    n = patch_swin3d(net)
    init = _init_record(weights, (note + "; " if note else "") + f"{n} attention modules patched")
    return VideoClassifier(
        spec,
        net,
        head_name="head",
        channels_first=True,
        hf_output=False,
        block_names=("features",),
        num_classes=num_classes,
        frames=frames,
        size=size,
        init=init,
    )


def build_hiera(spec, num_classes, *, weights, tiny, frames, size):
    import warnings

    try:
        with warnings.catch_warnings():
            # hiera-transformer imports timm's old `timm.models.layers` path, which newer timm
            # warns about on every import: the user's terminal need not carry it.
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"timm\.models")
            import hiera
    except ImportError as e:
        raise JouleprofError(
            f"hiera-b needs the hiera-transformer package: {advice('hiera')}"
        ) from e
    from torch import nn

    from jouleprof.workloads.video.classifier import VideoClassifier

    note = ""
    # hiera_base_16x224's architecture, built directly so that another clip size can be given.
    video = dict(
        q_stride=(1, 2, 2),
        mask_unit_size=(1, 8, 8),
        patch_kernel=(3, 7, 7),
        patch_stride=(2, 4, 4),
        patch_padding=(1, 3, 3),
        sep_pos_embed=True,
        input_size=(frames, size, size),
        num_classes=num_classes,
    )
    if tiny:
        net = hiera.Hiera(embed_dim=16, num_heads=1, stages=(1, 1, 1, 1), **video)
    elif weights is not None and Path(weights).exists():
        net = hiera.Hiera(embed_dim=96, num_heads=1, stages=(2, 3, 16, 3), **video)
        note = _load_into(net, Path(weights))
    elif weights is not None:
        if (frames, size) != (16, 224):
            raise JouleprofError(
                "hiera-b checkpoints are for 16x224 clips: use frames=16, size=224"
            )
        # A checkpoint name of hiera_base_16x224 (e.g. mae_k400_ft_k400), through torch.hub.
        net = hiera.hiera_base_16x224(pretrained=True, checkpoint=weights, num_classes=num_classes)
        note = f"hiera checkpoint {weights}"
    else:
        net = hiera.Hiera(embed_dim=96, num_heads=1, stages=(2, 3, 16, 3), **video)
    # Hiera's head applies softmax in eval mode; the interface returns logits in both modes.
    net.head.act_func = nn.Identity()
    return VideoClassifier(
        spec,
        net,
        head_name="head.projection",
        channels_first=True,
        hf_output=False,
        block_names=("blocks",),
        num_classes=num_classes,
        frames=frames,
        size=size,
        init=_init_record(weights, note),
    )


BUILDERS = {
    "videomae": build_videomae,
    "timesformer": build_timesformer,
    "swin3d": build_swin3d,
    "hiera": build_hiera,
}
