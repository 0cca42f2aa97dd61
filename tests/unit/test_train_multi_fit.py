"""The several-GPU efficiency factor (predict.train_multi_fit): fitted on rows made by a known
factor it recovers that factor and predicts held-out rows and larger GPU counts exactly, where
the naive baselines miss; bad input is refused with the reason."""

from __future__ import annotations

import pytest

from jouleprof.predict.train_laws import get_law
from jouleprof.predict.train_multi_fit import (
    MultiRow,
    evaluate,
    fit,
    fit_strategy,
    predict_fitted,
)
from jouleprof.workloads.bert import BertTrainConfig

LAW = get_law("bert", "h200", "bf16")
TRUE = {"ddp": (1.15, 1 / 150e9), "fsdp": (1.9, 1 / 90e9), "tp": (3.0, 1 / 60e9)}
CONFIGS = [
    (12, 768, 16, 128, 32),
    (6, 768, 16, 128, 32),
    (24, 768, 16, 128, 32),
    (12, 1024, 16, 128, 32),
    (12, 512, 8, 128, 32),
    (12, 768, 16, 512, 32),
    (12, 768, 16, 128, 8),
    (12, 768, 16, 128, 128),
]


def _rows(gpus=(2, 4, 8)):
    from jouleprof.predict.train_multi_fit import StrategyFit

    rows = []
    for n in gpus:
        for s, (o, beta) in TRUE.items():
            f = StrategyFit(s, o, beta, (), ())
            for L, H, A, S, B in CONFIGS:
                if s == "tp" and (H % n or A % n):
                    continue
                cfg = BertTrainConfig(layers=L, hidden=H, heads=A, seq=S, batch=B, strategy=s)
                j, t = predict_fitted(LAW, f, cfg, n)
                rows.append(MultiRow(f"{n}-{s}-L{L}-H{H}-S{S}-B{B}", cfg, n, t, j))
    return rows


def test_fit_recovers_the_factor_that_made_the_rows():
    fits = fit(LAW, _rows())
    for s, (o, beta) in TRUE.items():
        assert fits[s].time_ratio == pytest.approx(o, rel=1e-6)
        assert fits[s].s_per_byte == pytest.approx(beta, rel=1e-6)
        assert fits[s].gpus == (2, 4, 8)
    assert fits["ddp"].to_json()["effective_link_gb_s"] == pytest.approx(150.0)


def test_held_out_rows_and_larger_counts_are_predicted_where_baselines_miss():
    ev = evaluate(LAW, _rows())
    for n in ("2", "4", "8"):
        w = ev["leave_one_out_within_count"][n]
        assert w["fitted"]["mape_j_pct"] < 1e-6 and w["fitted"]["mape_s_pct"] < 1e-6
        assert w["ideal_scaling"]["mape_s_pct"] > 10  # no wrapper cost, no communication
        assert w["datasheet"]["mape_s_pct"] > 1
        assert not w["not_predicted"]
    across = ev["larger_from_smaller"]
    assert set(across) == {"4_from_2", "8_from_2+4"}
    assert across["8_from_2+4"]["fitted"]["mape_j_pct"] < 1e-6
    assert {r["gpus"] for r in across["4_from_2"]["rows"]} == {4}


def test_a_row_alone_takes_the_one_gpu_ratio_and_unpredictable_rows_are_named():
    rows = [r for r in _rows(gpus=(2,)) if r.strategy == "ddp"][:1]
    f = fit_strategy(LAW, rows)
    assert f.time_ratio == pytest.approx(LAW.strategy_overhead["ddp"]["time_ratio"])
    assert f.s_per_byte >= 0
    # Leave-one-out on one row has nothing to fit from: named, not guessed.
    ev = evaluate(LAW, rows)
    assert ev["leave_one_out_within_count"]["2"] == {"n": 0, "not_predicted": [rows[0].id]}


def test_bad_rows_are_refused():
    rows = _rows(gpus=(2,))
    with pytest.raises(ValueError, match="no rows"):
        fit_strategy(LAW, [])
    with pytest.raises(ValueError, match="one strategy"):
        fit_strategy(LAW, rows)
    one = MultiRow("x", BertTrainConfig(strategy="ddp"), 1, 0.1, 10.0)
    with pytest.raises(ValueError, match="≥ 2 GPUs"):
        fit_strategy(LAW, [one])


def test_a_law_carrying_the_fit_predicts_with_it_and_says_so():
    from dataclasses import replace

    from jouleprof.predict.train_multi import predict_config
    from jouleprof.predict.train_multi_fit import law_block

    rows = [r for r in _rows(gpus=(2, 4)) if r.strategy in ("ddp", "tp")]
    block = law_block(LAW, rows)
    assert set(block) == {"ddp", "tp"}
    assert block["ddp"]["held_out_rows"] > 0 and block["ddp"]["rel_err_q90"] < 1e-6
    law = replace(LAW, multi_gpu=block)
    cfg = BertTrainConfig(layers=16, hidden=1024, heads=16, seq=256, batch=16, strategy="ddp")
    o, beta = TRUE["ddp"]
    from jouleprof.predict.train_multi_fit import StrategyFit

    want_j, want_s = predict_fitted(LAW, StrategyFit("ddp", o, beta, (), ()), cfg, 4)
    p = predict_config(law, cfg, 4, "ddp")
    assert p["j_per_step"] == pytest.approx(want_j, rel=1e-6)
    assert p["s_per_step"] == pytest.approx(want_s, rel=1e-6)
    assert p["validated"] and any("fitted on" in n for n in p["notes"])
    # 8 GPUs lie outside the counts fitted: predicted, but said to be extrapolated
    p8 = predict_config(law, cfg, 8, "ddp")
    assert not p8["validated"] and any("extrapolated" in n for n in p8["notes"])
    # a strategy without a fit keeps the unfitted estimate and says it is not validated
    pf = predict_config(law, replace(cfg, strategy="fsdp"), 2, "fsdp")
    assert not pf["validated"] and any("not validated" in n for n in pf["notes"])
    # the datasheet baseline of the evaluation is the unfitted estimate, even with a fit loaded
    ev = evaluate(law, rows)
    assert ev["leave_one_out_within_count"]["2"]["datasheet"]["mape_s_pct"] > 1
