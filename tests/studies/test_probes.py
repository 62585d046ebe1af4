"""minippo.studies.probes: the per-token probes of lessons 13 and 15 against the trainer's own numbers and loops."""
import numpy as np
import pytest

from minippo.blas import single_blas_thread
from minippo.rl.kl import kl_estimate
from minippo.rl.losses import kl_exact_from_logits
from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.generate import encode_prompts, sampling_distribution
from minippo.rl.gae import gae
from minippo.rlhf.ppo import rollout
from minippo.rlhf.ppo_knobs import shaped_rewards
from minippo.rlhf.run.trainer import PPOTrainer
from minippo.studies.kl_moments import topk_mass_decomposition
from minippo.studies.probes import kl_probe, rollout_logprobs, tempered_policy, token_credit, update_kl
from tests.rlhf.ppo_helpers import state_of, tiny_config, world


def _rollout(cfg=None, seed=0):
    sft, rm, tok = world("float64")
    cfg = cfg or tiny_config(batch_size=6, minibatch_size=3)
    with single_blas_thread():        # as in the trainer: the probes recompute on one BLAS thread too
        ro = rollout(state_of(cfg, sft, rm, tok, seed), cfg, *encode_prompts(tok, sample_prompts(6, seed=seed)))
    return ro, sft, rm, tok, cfg


def test_rollout_logprobs_are_the_rollouts_own_and_update_kl_measures_the_step():
    ro, sft, rm, tok, cfg = _rollout()
    # the same batch, shapes and BLAS thread count as the rollout's forward pass: bitwise on any machine
    np.testing.assert_array_equal(rollout_logprobs(sft, ro, cfg.temperature), np.where(ro.response_mask != 0, ro.logp, 0))
    same = update_kl(sft, ro, cfg.temperature)
    assert same["approx_kl"] == 0.0 and not same["log_ratio"].any()
    # after a real PPO step the probe equals k3(pi_old, pi) computed by hand on the rollout's tokens
    tr = PPOTrainer(tiny_config(lr=1e-2), sft, rm, tok)
    seen = {}
    tr.step(callback=lambda t, r, rec: seen.update(u=update_kl(t.actor, r, t.cfg.temperature), ro=r))
    r, u = seen["ro"], seen["u"]
    m = r.response_mask != 0
    logp_new = rollout_logprobs(tr.actor, r, tr.cfg.temperature)
    assert u["approx_kl"] == pytest.approx(kl_estimate(r.logp.astype(np.float64), logp_new, "k3")[m].mean(), rel=1e-12)
    assert u["approx_kl"] > 0
    np.testing.assert_allclose(u["log_ratio"][m], (logp_new - r.logp)[m], rtol=1e-12)
    assert not u["log_ratio"][~m].any()


def test_token_credit_matches_the_trainer_and_the_return_to_go():
    ro, *_ = _rollout()
    beta = 0.3
    for shaping in ("kl_final", "uniform"):
        cfg = tiny_config(batch_size=6, minibatch_size=3, reward_shaping=shaping, whiten_advantages=False)
        # steps 3-4 of knobs_iteration: the shaped rewards, GAE (not whitened here)
        ro.rewards, ro.kl, ro.non_score_reward = shaped_rewards(ro.scores, ro.logp, ro.logp_ref, ro.response_mask,
                                                                beta, shaping=cfg.reward_shaping)
        adv, ret = gae(ro.rewards, ro.values, ro.response_mask, gamma=cfg.gamma, lam=cfg.lam)
        got = token_credit(ro, beta, shaping=shaping, lam=cfg.lam)
        np.testing.assert_allclose(got["rewards"], ro.rewards, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got["adv"], adv, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got["returns"], ret, rtol=1e-10, atol=1e-12)
        # values 0, lam 1: each token is credited with its return-to-go, by a plain loop
        rtg = token_credit(ro, beta, shaping=shaping, values=np.zeros_like(ro.logp), lam=1.0)["adv"]
        for b in range(ro.batch_size):
            n = int(ro.response_mask[b].sum())
            kl = ro.logp[b, :n] - ro.logp_ref[b, :n]
            for t in range(n):
                score_part = ro.scores[b] if shaping == "kl_final" else ro.scores[b] * (n - t) / n
                assert rtg[b, t] == pytest.approx(score_part - beta * kl[t:].sum(), abs=1e-10)
            assert not rtg[b, n:].any()
    with pytest.raises(ValueError, match="`shaping`"):
        token_credit(ro, beta, shaping="spread")


def test_tempered_policy_divides_the_logits():
    sft, _, _ = world("float64")
    idx = np.array([[1, 5, 9, 3]])
    hot = tempered_policy(sft, 2.0)
    np.testing.assert_allclose(hot.forward(idx)[0], sft.forward(idx)[0] / 2.0, rtol=1e-10, atol=1e-12)
    assert sft.params["ln_f.w"] is not hot.params["ln_f.w"]                  # a copy: the original is untouched
    with pytest.raises(ValueError, match="`tau`"):
        tempered_policy(sft, 0.0)


def test_kl_probe_exact_kl_and_moments_under_top_k():
    sft, _, tok = world("float64")
    prompts = sample_prompts(8, seed=1)
    same = kl_probe(sft, sft, tok, prompts, rng=np.random.default_rng(0), max_new_tokens=6)
    assert not same["kl_exact"].any() and not same["k1_mean"].any() and not same["k3_var"].any()
    np.testing.assert_array_equal(same["logp"], same["logp_ref"])
    hot = tempered_policy(sft, 2.0)
    p = kl_probe(hot, sft, tok, prompts, rng=np.random.default_rng(0), max_new_tokens=6, top_k=3)
    m = p["mask"] != 0
    np.testing.assert_allclose(p["kl_exact"][m], kl_exact_from_logits(p["logits"], p["logits_ref"])[m], rtol=1e-12)
    # E_q[k1] under the sampler's top-k distribution, by hand
    B, T, V = p["logits"].shape
    q = sampling_distribution(p["logits"].reshape(B * T, V), 1.0, 3).reshape(B, T, V)
    logpi = p["logits"] - np.log(np.exp(p["logits"]).sum(-1, keepdims=True))
    logref = p["logits_ref"] - np.log(np.exp(p["logits_ref"]).sum(-1, keepdims=True))
    np.testing.assert_allclose(p["k1_mean"][m], (q * (logpi - logref)).sum(-1)[m], rtol=1e-9, atol=1e-12)
    dec = topk_mass_decomposition(p["logits"], p["logits_ref"], 3)
    np.testing.assert_allclose((dec["kl_within"] + dec["log_mass_ratio"])[m], p["k1_mean"][m], rtol=1e-9, atol=1e-12)
    assert (dec["mass"][m] < dec["mass_ref"][m]).all()          # flattening moves mass out of the top-k
    assert (p["kl_exact"][m] > 0).all() and not p["kl_exact"][~m].any()
    # every sampled token is one of the top 3 of pi
    sampled = np.take_along_axis(q, p["sequences"][:, -T:, None], axis=-1)[..., 0]          # q of the response tokens
    assert (sampled[m] > 0).all()


def test_advantage_profile_pools_positions_from_both_ends():
    from minippo.studies.probes import advantage_profile

    # two batches of different widths; a response's advantage at token t is score * (t + 1) / n
    rows = []
    rng = np.random.default_rng(0)
    for Tn in (5, 7):
        lengths = rng.integers(2, Tn + 1, size=20)
        scores = rng.normal(size=20)
        mask = (np.arange(Tn)[None, :] < lengths[:, None]).astype(int)
        adv = scores[:, None] * (np.arange(Tn)[None, :] + 1) / lengths[:, None] * mask
        rows.append((adv, mask, scores))
    p = advantage_profile(rows, n_positions=3)
    assert p["n_responses"] == 40
    np.testing.assert_allclose(p["corr_end"][0], 1.0)                    # the last token carries the whole score
    # by hand: mean |A| of the first token over every response
    first = np.concatenate([np.abs(a[:, 0]) for a, _, _ in rows])
    assert p["abs_start"][0] == pytest.approx(first.mean())
    second_last = [abs(a[b, m[b].sum() - 2]) for a, m, _ in rows for b in range(len(a)) if m[b].sum() >= 2]
    assert p["abs_end"][1] == pytest.approx(np.mean(second_last))
    with pytest.raises(ValueError, match="`n_positions`"):
        advantage_profile(rows, 0)
