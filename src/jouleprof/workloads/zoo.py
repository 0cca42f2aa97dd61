"""Image models by name, randomly initialized: `timm:NAME`, `torchvision:NAME`, `hf:NAME`, or
`path/to/module.py:factory`.

`resolve(spec)` returns a `ZooModel`: a zero-argument factory that builds the `nn.Module` (random
weights, nothing downloaded) and the input shape of one sample (C, H, W). Nothing heavy is imported
until `resolve` runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouleprof.extras import advice

SOURCES = ("timm", "torchvision", "hf", "file")
DEFAULT_INPUT = (3, 224, 224)


@dataclass(frozen=True)
class ZooModel:
    """A model named by a spec, ready to be built."""

    spec: str
    """The spec as given, e.g. "timm:resnet50"."""
    source: str
    """Where it comes from: one of SOURCES."""
    name: str
    """The model's name inside its source (a file spec: the factory's name)."""
    factory: Callable[[], Any]
    """Builds the nn.Module with random initialization (no weights are downloaded)."""
    input_shape: tuple[int, int, int]
    """(C, H, W) of one sample: the model's own input size where it declares one, else 3x224x224."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if len(self.input_shape) != 3 or min(self.input_shape) < 1:
            raise ValueError(f"input_shape must be (C, H, W) > 0, got {self.input_shape}")


def _timm(name: str) -> ZooModel:
    try:
        import timm
    except ImportError as e:
        raise ValueError(
            "timm models need the timm package: pip install 'jouleprof[predict]'"
        ) from e
    if not timm.is_model(name):
        close = timm.list_models(f"*{name[:6]}*")[:8]
        hint = f"; similar names: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown timm model {name!r}{hint} (timm.list_models() lists them all)")
    cfg = timm.models.get_pretrained_cfg(name)
    shape = tuple(getattr(cfg, "input_size", None) or DEFAULT_INPUT) if cfg else DEFAULT_INPUT
    return ZooModel(
        f"timm:{name}", "timm", name, lambda: timm.create_model(name, pretrained=False), shape
    )


_TV_INPUT = {"inception_v3": (3, 299, 299)}


def _torchvision(name: str) -> ZooModel:
    try:
        import torchvision
    except ImportError as e:
        raise ValueError(
            "torchvision models need torchvision: pip install 'jouleprof[predict]'"
        ) from e
    names = torchvision.models.list_models(module=torchvision.models)
    if name not in names:
        close = [n for n in names if n[:4] == name[:4]][:8]
        hint = f"; similar names: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown torchvision classification model {name!r}{hint}")

    def build():
        kw = {"weights": None}
        if name == "inception_v3":
            kw["aux_logits"] = False
            kw["init_weights"] = False
        if name.startswith("googlenet"):
            kw.update(aux_logits=False, init_weights=False)
        return torchvision.models.get_model(name, **kw)

    return ZooModel(
        f"torchvision:{name}", "torchvision", name, build, _TV_INPUT.get(name, DEFAULT_INPUT)
    )


def _hf(name: str) -> ZooModel:
    try:
        import transformers
    except ImportError as e:
        raise ValueError(f"hf models need transformers: {advice('transformers')}") from e
    path = Path(name)
    try:
        # A local directory or an id already in the local cache; never a download.
        config = transformers.AutoConfig.from_pretrained(name, local_files_only=True)
    except Exception as e:
        where = "directory" if path.exists() else "cached hub id"
        raise ValueError(
            f"hf model {name!r}: no config found as a local {where} ({type(e).__name__}); "
            "give a directory holding config.json (nothing is downloaded)"
        ) from e
    size = getattr(config, "image_size", 224)
    size = size[0] if isinstance(size, list | tuple) else int(size)
    chans = int(getattr(config, "num_channels", 3))

    def build():
        from transformers import AutoModelForImageClassification

        return AutoModelForImageClassification.from_config(config)

    return ZooModel(f"hf:{name}", "hf", name, build, (chans, size, size))


def _file(path_s: str, factory: str) -> ZooModel:
    path = Path(path_s)
    if not path.is_file():
        raise ValueError(f"model file {path_s!r} does not exist (spec: path/to/module.py:factory)")
    modspec = importlib.util.spec_from_file_location(f"_jp_zoo_{path.stem}", path)
    if modspec is None or modspec.loader is None:
        raise ValueError(f"cannot import {path_s!r} as a Python module")
    mod = importlib.util.module_from_spec(modspec)
    modspec.loader.exec_module(mod)
    fn = getattr(mod, factory, None)
    if not callable(fn):
        found = [n for n in dir(mod) if callable(getattr(mod, n)) and not n.startswith("_")]
        raise ValueError(f"{path_s!r} has no callable {factory!r}; callables there: {found[:10]}")
    shape = tuple(getattr(fn, "input_shape", DEFAULT_INPUT))
    return ZooModel(f"{path_s}:{factory}", "file", factory, fn, shape)


def resolve(spec: str) -> ZooModel:
    """The model named by `spec` (see the module docstring); ValueError naming what was wrong."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(
            f"model spec {spec!r} must look like timm:NAME, torchvision:NAME, hf:NAME or "
            "path/to/module.py:factory"
        )
    head, _, rest = spec.rpartition(":")
    prefix, _, name = spec.partition(":")
    if prefix == "timm":
        return _timm(name)
    if prefix == "torchvision":
        return _torchvision(name)
    if prefix == "hf":
        return _hf(name)
    if head.endswith(".py"):
        return _file(head, rest)
    raise ValueError(
        f"model spec {spec!r}: unknown source {prefix!r}; use timm:NAME, torchvision:NAME, "
        "hf:NAME or path/to/module.py:factory"
    )
