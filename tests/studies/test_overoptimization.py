"""minippo.studies.overoptimization: Gao et al.'s fits, penalty profiles, checkpoints of a run, cached RM variants."""
import numpy as np
import pytest

from minippo.studies.overoptimization import (KLCheckpoints, fit_gold_curve, gold_peak,
                                           predict_gold_gain, rm_variants)
from minippo.studies.study import Study


@pytest.fixture(scope="module")
def study():
    return Study(quick=True, seed=0, n_eval=6)


@pytest.mark.parametrize("form, alpha, beta", [("bon", 1.2, 0.4), ("rl", 0.8, 0.5)])
def test_fit_recovers_the_coefficients_and_the_peak(form, alpha, beta):
    d = np.linspace(0.0, 6.0, 25)
    true = {"form": form, "alpha": alpha, "beta": beta}
    gain = predict_gold_gain(true, d)
    fit = fit_gold_curve(d, gain, form)
    assert fit["alpha"] == pytest.approx(alpha, abs=1e-10) and fit["beta"] == pytest.approx(beta, abs=1e-10)
    assert fit["rmse"] < 1e-10
    # the closed-form peak agrees with a grid search of the fitted curve
    grid = np.linspace(1e-6, 20.0, 400_001)
    curve = predict_gold_gain(fit, grid)
    assert fit["d_peak"] == pytest.approx(grid[np.argmax(curve)], abs=1e-3)
    assert fit["gain_peak"] == pytest.approx(curve.max(), abs=1e-8)
    # noise: still close
    noisy = gain + np.random.default_rng(0).normal(0, 0.01, d.shape)
    assert fit_gold_curve(d, noisy, form)["d_peak"] == pytest.approx(fit["d_peak"], rel=0.1)


def test_fit_without_turnover_and_bad_input():
    d = np.array([0.0, 1.0, 2.0, 3.0])
    rising = fit_gold_curve(d, 0.5 * d + 0.05 * d ** 2, "bon")          # beta < 0: no peak
    assert rising["d_peak"] == float("inf") and rising["gain_peak"] == float("inf")
    with pytest.raises(ValueError, match="`form`"):
        fit_gold_curve(d, d, "ppo")
    with pytest.raises(ValueError, match="`d`"):
        fit_gold_curve(np.array([0.0, 1.0]), np.array([0.0, 1.0]), "rl")    # one point > 0: rank 1
    with pytest.raises(ValueError, match="`d`"):
        fit_gold_curve(np.array([-1.0, 1.0, 2.0]), np.zeros(3), "bon")
    with pytest.raises(ValueError, match="`gain`"):
        fit_gold_curve(d, np.zeros(3), "bon")


def test_gold_peak():
    assert gold_peak([{"gold": 0.1}, {"gold": 0.5}, {"gold": 0.5}, {"gold": -1.0}]) == 1
    with pytest.raises(ValueError, match="`points`"):
        gold_peak([])


def test_checkpoints_follow_the_run(study):
    cb = KLCheckpoints(study, study.reward_model, every=2)
    cfg = study.config(iterations=3, batch_size=8, minibatch_size=4, kl_ref_controller="fixed", kl_ref_coef=0.0, lr=3e-4)
    study.run(cfg, callback=cb)
    assert [p["iteration"] for p in cb.points] == [0, 2, 3]                 # start, every 2, and the last
    assert cb.points[0]["kl"] == pytest.approx(0.0, abs=1e-9)                 # the initial policy is the reference
    assert cb.points[-1]["kl"] > 0 and np.all(cb.curve("sqrt_kl") >= 0)
    ref = study.evaluate(study.sft, sample_seed=2)
    assert cb.points[0]["gold"] == pytest.approx(ref["gold_mean"]) and cb.points[0]["eval"]["texts"] == ref["texts"]
    with pytest.raises(ValueError, match="`every`"):
        KLCheckpoints(study, every=0)


def test_rm_variants_are_trained_once_then_loaded(study, tmp_path):
    variants = {"tiny data": {"n_train": 8, "epochs": 1, "n_eval": 16}, "main": {}}
    a = rm_variants(study, variants, cache_dir=tmp_path)
    assert not a["tiny data"]["cached"] and a["main"]["cached"]
    assert a["tiny data"]["summary"]["n_train"] < a["main"]["summary"]["n_train"]
    b = rm_variants(study, variants, cache_dir=tmp_path)
    assert b["tiny data"]["cached"]
    seqs, mask = study.tokenizer.pad_left(study.tokenizer.encode_batch(["the film was good .", "bad"], add_bos=True))
    np.testing.assert_array_equal(a["tiny data"]["model"].score(seqs, mask), b["tiny data"]["model"].score(seqs, mask))
    np.testing.assert_array_equal(a["main"]["model"].score(seqs, mask), study.reward_model.score(seqs, mask))
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())      # no temporary folder left
    with pytest.raises(ValueError, match="`variants"):
        rm_variants(study, {}, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="`n_train`"):
        rm_variants(study, {"x": {"n_train": 0}}, cache_dir=tmp_path)
