"""The predictor that ships in the package, and `predict_inference`, the one call behind
`jouleprof predict infer`.

models/layerwise_<gpu>.pkl holds a LayerwisePredictor trained on that GPU's measurements (a
pickle of plain Python and scikit-learn objects; loads without a GPU). Where none ships, the
uncalibrated RooflinePredictor is used and every output says so.
"""

from __future__ import annotations

import pickle
from importlib import resources
from pathlib import Path

from jouleprof.predict.layerwise import LayerwisePredictor, Prediction, RooflinePredictor
from jouleprof.predict.roofline import GpuSpec, load_gpu

TRAINED_ON = "h200"


def model_path(gpu_name: str = TRAINED_ON):
    return resources.files("jouleprof.predict") / "models" / f"layerwise_{gpu_name}.pkl"


def load_predictor(path: str | Path | None = None) -> LayerwisePredictor | RooflinePredictor:
    """The shipped trained predictor, or the uncalibrated roofline one where none ships."""
    p = Path(path) if path is not None else model_path()
    if not Path(str(p)).is_file():
        if path is not None:
            raise ValueError(f"predictor file {path!r} does not exist")
        return RooflinePredictor()
    try:
        with open(p, "rb") as f:
            obj = pickle.load(f)  # noqa: S301 - the package's own file
    except ModuleNotFoundError as e:
        raise ValueError(
            f"the trained predictor needs {e.name}: pip install 'jouleprof[predict]'"
        ) from e
    if not isinstance(obj, LayerwisePredictor):
        raise ValueError(f"{p} does not hold a LayerwisePredictor")
    return obj


def save_predictor(pred: LayerwisePredictor, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        pickle.dump(pred, f, protocol=4)
    return p


def predict_inference(spec: str, batch: int, precision: str, gpu: str | GpuSpec = "h200",
                      predictor=None) -> Prediction:  # fmt: skip
    """Predict one pass of the model named `spec` (see workloads.zoo.resolve)."""
    from jouleprof.predict.features import trace_model
    from jouleprof.workloads.zoo import resolve

    g = gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)
    feats = trace_model(resolve(spec), int(batch), precision)
    pred = predictor if predictor is not None else load_predictor()
    return pred.predict(feats, g)
