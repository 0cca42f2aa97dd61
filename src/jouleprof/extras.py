"""Which optional package each part of jouleprof needs, and the install line that brings it.

The core installs light (numpy, pandas, scipy, typer, rich, nvidia-ml-py); training, video,
reports, prediction and Slurm come with extras (pyproject.toml). A command that needs a package
that is not installed says which, and which extra installs it, before it starts any work
(`require`); an import that fails deeper down is told the same way by the CLI (`advice`).
"""

from __future__ import annotations

import importlib.util

from jouleprof.errors import JouleprofError

EXTRA_OF: dict[str, str] = {
    "torch": "torch",
    "torchvision": "video",
    "transformers": "train",
    "peft": "video",
    "av": "video",
    "timm": "video",
    "hiera": "video",
    "bitsandbytes": "quant",
    "matplotlib": "report",
    "jinja2": "report",
    "pyarrow": "report",
    "sklearn": "predict",
    "statsmodels": "predict",
    "submitit": "slurm",
    "codecarbon": "crosscheck",
    "zeus": "crosscheck",
}
"""Top-level module → the extra of pyproject.toml that installs it."""

VIDEO_MODULES = ("torch", "torchvision", "transformers", "peft")
"""What every video model needs (each family adds its own: hiera, timm; int8 and QLoRA
bitsandbytes), checked before a video command starts."""

_PIP_NAME = {"sklearn": "scikit-learn", "hiera": "hiera-transformer"}


def advice(module: str) -> str | None:
    """How to install the package of `module` (dotted names allowed); None where it is not one
    of jouleprof's optional packages."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"pip install 'jouleprof[{extra}]' (or pip install {_PIP_NAME.get(top, top)})"


def install_line(module: str) -> str:
    """The install line for `module`: its extra's (`advice`) where it is one of jouleprof's
    optional packages, else a plain pip install of it."""
    return advice(module) or f"pip install {module}"


def require(what: str, *modules: str, extra: str | None = None) -> None:
    """Raise JouleprofError naming the first of `modules` that is not installed, what needs it
    (`what`, e.g. "jouleprof study video") and the install line: of `extra` where given (the
    one that brings all the command needs), else of the module's own; nothing is imported."""
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except (ImportError, ValueError):  # a parent missing, or sys.modules[m] set to None
            found = False
        if not found:
            how = f"pip install 'jouleprof[{extra}]'" if extra else install_line(m)
            raise JouleprofError(f"{what} needs {m}, which is not installed: {how}")
