"""Lesson 21's tools: the gold reward model adapter, Pareto frontiers and their interpolation, the seed-range
comparison, within-prompt centring, DPO's implicit reward report and the log-prob shifts."""
import numpy as np
import pytest

from tests.rlhf.ppo_helpers import tiny_config, world
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.data.preferences import make_preference_pairs
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.generate import encode_prompts, generate
from minippo.rlhf.run.trainer import PPOTrainer
from minippo.studies.dpo_frontier import (GoldRewardModel, centered_by_prompt, compare_at, front_at,
                                          implicit_reward_report, logp_shift, matched_comparisons, method_fronts,
                                          pareto_front)


def test_gold_reward_model_scores_the_decoded_text_and_normalises():
    sft, _, tok = world()
    ids, mask = encode_prompts(tok, ["the film was", "i thought the movie"] * 4)
    gen = generate(sft, ids, mask, max_new_tokens=6, rng=np.random.default_rng(0), eos_id=tok.eos_id, pad_id=tok.pad_id)
    g = GoldRewardModel(tok)
    raw = gold_scores(tok.decode_batch(gen.sequences))
    np.testing.assert_array_equal(g.score(gen.sequences, gen.attn_mask), raw)
    gain, bias = g.normalize(gen.sequences, gen.attn_mask)
    s = g.score(gen.sequences, gen.attn_mask)
    assert s.mean() == pytest.approx(0.0, abs=1e-12) and s.std() == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(ValueError, match="`sequences`"):
        g.normalize(gen.sequences[:1], gen.attn_mask[:1])
    with pytest.raises(ValueError, match="`gain`"):
        GoldRewardModel(tok, gain=0.0)
    # PPO runs against it (PPO-GT): no network, so the critic starts from the SFT trunk
    tr = PPOTrainer(tiny_config(iterations=1, critic_init="sft"), sft, g, tok)
    r = tr.step()
    assert np.isfinite(r["objective/scores"]) and r["objective/rm_scores"] == pytest.approx(
        (r["gold/score"] * g.gain + g.bias), rel=1e-9)


def test_pareto_front_by_hand():
    kl = [0.0, 1.0, 2.0, 2.0, 3.0, 0.5, 4.0]
    gold = [0.0, 0.5, 0.4, 0.7, 0.6, -0.1, 0.9]
    kf, gf, kl_max = pareto_front(kl, gold)
    np.testing.assert_array_equal(kf, [0.0, 1.0, 2.0, 4.0])
    np.testing.assert_array_equal(gf, [0.0, 0.5, 0.7, 0.9])
    assert kl_max == 4.0
    at = front_at((kf, gf, kl_max), [0.5, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(at[:3], [0.25, 0.8, 0.9], rtol=1e-15)
    assert np.isnan(at[3])                                   # never credited with a KL it did not reach
    # past the best point the frontier stays at the best gold, up to the largest KL any checkpoint reached
    kf, gf, kl_max = pareto_front(kl + [9.0], gold + [-1.0])
    assert kl_max == 9.0 and gf[-1] == 0.9
    np.testing.assert_allclose(front_at((kf, gf, kl_max), [6.0, 9.0]), [0.9, 0.9], rtol=1e-15)
    assert np.isnan(front_at((kf, gf, kl_max), [9.5])[0]) and np.isnan(front_at((kf + 1, gf, kl_max), [0.5])[0])
    with pytest.raises(ValueError, match="`gold`"):
        pareto_front([0.0, 1.0], [0.0])


def test_compare_at_gives_the_difference_and_its_seed_noise():
    c = compare_at([0.5, 0.6], [0.3, 0.4])
    # diff = mean(a) - mean(b); pooled seed std over the two: each group +-0.05 around its mean -> 0.0707
    assert c["diff"] == pytest.approx(0.2) and c["se"] == pytest.approx(np.sqrt(0.005) * 1.0)
    assert not c["overlap"] and c["range_a"] == (0.5, 0.6)
    c = compare_at([0.3, 0.6], [0.5, 0.55])
    assert c["overlap"] and c["diff"] == pytest.approx(0.45 - 0.525)
    c = compare_at([np.nan, 0.5], [0.4])                              # one seed each after the NaN: no noise
    assert c["reached"] and c["diff"] == pytest.approx(0.1) and c["se"] is None
    assert not compare_at([np.nan], [0.4])["reached"]


def test_centered_by_prompt():
    x = np.array([1.0, 3.0, 10.0, 20.0, 30.0])
    np.testing.assert_allclose(centered_by_prompt(x, np.array([0, 0, 1, 1, 1])), [-1, 1, -10, 0, 10])


def test_implicit_reward_report_and_logp_shift():
    sft, rm, tok = world()
    pairs = make_preference_pairs(sft, tok, 4, responses_per_prompt=3, rng=np.random.default_rng(0),
                                  label_temperature=0.1, max_new_tokens=8)
    policy = sft.copy()
    policy.params["ln_f.b"] += 0.3 * np.random.default_rng(1).standard_normal(policy.params["ln_f.b"].shape).astype(
        np.float32)
    rep = implicit_reward_report(policy, sft, rm, pairs, DPOConfig(beta=0.5))
    ev = rep["dpo"]["eval"]
    r = ev["implicit_reward"]
    np.testing.assert_allclose(r, 0.5 * (ev["logp"] - ev["ref_logp"]), rtol=1e-12)
    assert rep["dpo"]["accuracy"] == np.mean(r[pairs.chosen_idx] > r[pairs.rejected_idx])
    assert rep["rm"]["accuracy"] == np.mean(rm.raw_score(pairs.sequences, pairs.mask)[pairs.chosen_idx] >
                                            rm.raw_score(pairs.sequences, pairs.mask)[pairs.rejected_idx])
    assert -1 <= rep["dpo"]["pearson"] <= 1 and -1 <= rep["rm"]["pearson_raw"] <= 1
    shift = logp_shift(ev, pairs)
    d = ev["logp"] - ev["ref_logp"]
    dc, dr = d[pairs.chosen_idx], d[pairs.rejected_idx]
    assert shift["chosen"] == pytest.approx(dc.mean()) and shift["rejected"] == pytest.approx(dr.mean())
    assert shift["both_fell"] == np.mean((dc < 0) & (dr < 0))
    assert shift["margin"] == pytest.approx(dc.mean() - dr.mean())
    same = implicit_reward_report(sft, sft, rm, pairs, DPOConfig())          # the policy is the reference
    assert (same["dpo"]["eval"]["implicit_reward"] == 0).all() and same["dpo"]["accuracy"] == 0.0


def test_method_fronts_and_matched_comparisons_by_hand():
    pts = lambda *kg: {"points": [{"kl": k, "gold": g} for k, g in kg]}     # noqa: E731
    runs = {"A": {"s1": [pts((0, 0.0), (1, 0.6)), pts((0, 0.0), (1, 0.5))],
                  "s2": [pts((0, 0.0), (3, 0.2)), pts((0, 0.0), (4, 0.9))]},
            "B": {"s1": [pts((0, 0.0), (2, 0.2)), pts((0, 0.0), (2, 0.3))]}}
    fronts = method_fronts(runs, 2)
    np.testing.assert_array_equal(fronts["A"][0][0], [0, 1])               # seed 0: (3, 0.2) is dominated
    assert fronts["A"][0][2] == 3 and fronts["A"][1][2] == 4 and fronts["B"][1][2] == 2
    np.testing.assert_array_equal(fronts["A"][1][1], [0.0, 0.5, 0.9])       # seed 1: both settings' points
    c = matched_comparisons(fronts, [("A", "B")], n_kl=2)[("A", "B")]
    np.testing.assert_allclose(c["kl"], [1.0, 2.0])                         # up to the smallest reach, 2 nats
    np.testing.assert_allclose(c["a"], [[0.6, 0.6], [0.5, 0.5 + 0.4 / 3]], rtol=1e-12)
    np.testing.assert_allclose(c["b"], [[0.1, 0.2], [0.15, 0.3]], rtol=1e-12)
    assert all(x["reached"] and x["diff"] > 0 for x in c["cmp"])
    with pytest.raises(ValueError, match="`n_seeds`"):
        method_fronts(runs, 0)
