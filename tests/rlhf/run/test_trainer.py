"""The stage-3 trainer: configuration, gradients of the minibatch loss, lr = 0, resume, NaN guard, variants
(canonical PPO, PPO with the knobs, the critic-free family)."""
import json
import shutil

import numpy as np
import pytest

from tests.rlhf.ppo_helpers import tiny_config, world
from minippo.io import STATE, CorruptFileError, load_checkpoint, read_metrics
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.nn.gradcheck import assert_gradients
from minippo.nn.optim import AdamW
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.critic import ValueNorm
from minippo.rlhf.metrics import GLOSSARY, without_timing
from minippo.studies.pitfalls import logp_rounding_tolerance, lr_zero_verdict, recompute_logp
from minippo.flags import field_docs
from minippo.rlhf.ppo_config import PPOConfig
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.metrics import update_metrics
from minippo.rlhf.ppo import forward_response
from minippo.rlhf.ppo_knobs import KnobsConfig, KnobsState, knobs_update, minibatch_loss_and_grads
from minippo.rlhf.ppo import Rollout
from minippo.rlhf import ppo, ppo_knobs
from minippo.rlhf.run.configs import config_from_dict
from minippo.rlhf.run.trainer import PPOTrainer


# ---- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw, field", [
    (dict(kl_ref_coef=-0.1), "kl_ref_coef"),
    (dict(update_epochs=0), "update_epochs"),
    (dict(batch_size=8, minibatch_size=16), "minibatch_size"),
    (dict(batch_size=8, minibatch_size=3), "minibatch_size"),
    (dict(clip_eps=0.0), "clip_eps"),
    (dict(clip_eps_value=-1.0), "clip_eps_value"),
    (dict(lam=1.5), "lam"),
    (dict(temperature=0.0), "temperature"),
    (dict(lr=-1e-4), "lr"),
    (dict(critic="twin"), "critic"),
    (dict(advantage_estimator="vtrace"), "advantage_estimator"),
    (dict(kl_ref_controller="pid"), "kl_ref_controller"),
    (dict(samples_per_prompt=3, batch_size=8, minibatch_size=4), "samples_per_prompt"),
    (dict(advantage_estimator="rloo", samples_per_prompt=1), "samples_per_prompt"),
    (dict(ratio_threshold=0.5), "ratio_threshold"),
    (dict(value_clip=1), "value_clip"),
    (dict(adam_betas=(0.9, 1.0)), "adam_betas"),
    (dict(iterations=4, warmup_iterations=4), "warmup_iterations"),
    (dict(warmup_iterations=-1), "warmup_iterations"),
    (dict(clip_eps_high=0.0), "clip_eps_high"),
    (dict(loss_agg="seq-sum"), "loss_agg"),
    (dict(ratio_level="response"), "ratio_level"),
    (dict(kl_ref_loss_estimator="k4"), "kl_ref_loss_estimator"),
    (dict(kl_old_action="adapt"), "kl_old_action"),
    (dict(kl_old_action="adapt_lr"), "kl_old_target"),
    (dict(kl_old_action="adapt_lr", kl_old_target=0.05), "lr_schedule"),
    (dict(kl_old_action="adapt_lr", kl_old_target=0.05, lr_schedule="constant", lr=0.1), "lr"),
    (dict(max_grad_norm=0.0), "max_grad_norm"),
])
def test_bad_configuration_names_the_field(kw, field):
    """Each field in the class that has it: canonical PPO's, the knobs', the critic-free family's (a field two
    classes share is checked in both)."""
    classes = [cls for cls in (PPOConfig, KnobsConfig, GRPOConfig) if set(kw) <= set(cls.__dataclass_fields__)]
    assert classes
    for cls in classes:
        with pytest.raises(ValueError, match=f"`{field}"):
            cls(**kw)


def test_canonical_ppo_has_at_most_25_fields():
    assert len(PPOConfig.__dataclass_fields__) <= 25


@pytest.mark.parametrize("cls", [PPOConfig, KnobsConfig, GRPOConfig])
def test_every_field_is_documented_and_round_trips(cls):
    cfg = cls()
    docs = field_docs(cls)
    assert set(docs) == set(cfg.to_dict()) and all(len(d) > 20 for d in docs.values())
    assert cls.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert config_from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg           # what a run folder reads back
    with pytest.raises(ValueError, match="unknown"):
        cls.from_dict({"learning_rate": 1.0})


# ---- the minibatch loss: gradients against finite differences ---------------------------------

def gradcheck_setup(critic_kind, stop_gradient=False):
    sft = TinyGPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dtype="float64"), seed=3)
    rng = np.random.default_rng(4)
    for p in sft.params.values():                    # O(0.3) weights: every path carries gradient
        p += rng.normal(0, 0.3, p.shape)
    actor = sft.copy()
    state = KnobsState(actor=actor, ref=None, critic=sft.copy() if critic_kind == "separate" else None,
                       reward_model=None, tokenizer=None, opt_actor=None, opt_critic=None, kl_ctl=None,
                       value_norm=ValueNorm(False), rng=np.random.default_rng(0))
    B, Tp, Tn = 3, 3, 4
    V = 16
    response = rng.integers(3, V, (B, Tn))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    ro = Rollout(prompt_ids=rng.integers(3, V, (B, Tp)), prompt_mask=np.array([[0, 1, 1], [1, 1, 1], [0, 0, 1]]),
                 response=response, response_mask=mask,
                 logp=rng.normal(-2.8, 0.4, (B, Tn)), logp_ref=rng.normal(-2.8, 0.4, (B, Tn)),
                 values=rng.normal(0, 1, (B, Tn)), rm_scores=np.zeros(B), scores=np.zeros(B), ended=np.ones(B, bool))
    ro.adv, ro.returns = rng.normal(0, 1, (B, Tn)) * mask, rng.normal(0, 1, (B, Tn)) * mask
    ptx = (rng.integers(0, V, (2, 5)), rng.integers(0, V, (2, 5)), np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
           np.ones((2, 5), dtype=np.int64))
    return state, ro, ptx


VARIANTS = {"defaults": {},
            "grpo 1/|o|, k2 loss, clip-higher": dict(loss_agg="seq-mean-token-mean", kl_ref_loss_estimator="k2",
                                                     clip_eps_high=0.28),
            "dr grpo constant, k1 loss, gspo ratio": dict(loss_agg="seq-mean-token-sum-norm", kl_ref_loss_estimator="k1",
                                                          ratio_level="sequence", clip_eps=0.05)}


@pytest.mark.slow      # the knobs' variants; the canonical loss is checked by default
@pytest.mark.parametrize("critic_kind, stop_gradient, variant", [
    ("separate", False, "defaults"), ("shared", False, "defaults"), ("shared", True, "defaults"),
    ("separate", False, "grpo 1/|o|, k2 loss, clip-higher"), ("shared", False, "dr grpo constant, k1 loss, gspo ratio")])
def test_minibatch_loss_gradients_every_tensor(critic_kind, stop_gradient, variant):
    """loss = L^CLIP + c1 L^VF(clipped) - c2 S + ptx LM + KL loss: hand-written gradients of every
    actor and critic tensor against central differences (float64, whole model), with the default
    options and with the aggregations, KL estimators and ratios of lesson 22."""
    state, ro, ptx = gradcheck_setup(critic_kind, stop_gradient)
    actor = state.actor
    base = dict(clip_eps=0.2, clip_eps_value=0.3, vf_coef=0.7, ent_coef=0.05, ptx_coef=0.3, kl_ref_loss_coef=0.2,
                temperature=0.8, critic=critic_kind, shared_stop_gradient=stop_gradient)
    cfg = tiny_config(**{**base, **VARIANTS[variant]})
    terms, stats, g_actor, g_critic = minibatch_loss_and_grads(state, ro, cfg, ptx)
    assert 0 < stats["clipfrac"] < 1 and 0 < stats["vf_clipfrac"] < 1      # both clips are active somewhere
    loss = lambda: minibatch_loss_and_grads(state, ro, cfg, ptx)[0]["loss/total"]   # noqa: E731
    if stop_gradient:
        # the value loss reaches only the head; the numerical gradient of the trunk would include it,
        # so the trunk is checked against the loss without the value term
        head = {k: actor.params[k] for k in ("scalar_head.w", "scalar_head.b")}
        assert_gradients(loss, head, {k: g_actor[k] for k in head}, tol=1e-5)
        cfg0 = cfg.replace(vf_coef=0.0)
        trunk_grads = minibatch_loss_and_grads(state, ro, cfg0, ptx)[2]
        for k in actor.params:
            if not k.startswith("scalar_head"):
                np.testing.assert_array_equal(g_actor[k], trunk_grads[k])
        return
    assert_gradients(loss, actor.params, g_actor, tol=1e-5)
    if critic_kind == "separate":
        assert_gradients(loss, state.critic.params, g_critic, tol=1e-5)


@pytest.mark.parametrize("entries", [pytest.param(8, id="8 entries per tensor"),
                                     pytest.param(None, id="every entry", marks=pytest.mark.slow)])
def test_canonical_minibatch_loss_gradients_every_tensor(entries):
    """Canonical PPO's loss L^CLIP + c1 L^VF(clipped) - c2 S (ppo.minibatch_loss_and_grads): hand-written
    gradients of every actor and critic tensor against central differences (float64, whole model); and the same
    terms, statistics and gradients as the knobs' loss with every knob at its default, bitwise. The fast suite
    checks 8 random entries of every tensor; the slow suite every entry of every tensor."""
    state, ro, _ = gradcheck_setup("separate")
    cfg = tiny_config(clip_eps=0.2, clip_eps_value=0.3, vf_coef=0.7, ent_coef=0.05, temperature=0.8)
    assert type(cfg) is PPOConfig
    terms, stats, g_actor, g_critic = ppo.minibatch_loss_and_grads(state, ro, cfg)
    assert 0 < stats["clipfrac"] < 1 and 0 < stats["vf_clipfrac"] < 1
    loss = lambda: ppo.minibatch_loss_and_grads(state, ro, cfg)[0]["loss/total"]   # noqa: E731
    assert_gradients(loss, state.actor.params, g_actor, tol=1e-5, max_entries=entries)
    assert_gradients(loss, state.critic.params, g_critic, tol=1e-5, max_entries=entries)
    k_terms, k_stats, k_actor, k_critic = minibatch_loss_and_grads(state, ro, KnobsConfig.from_dict(cfg.to_dict()))
    assert {k: v for k, v in k_terms.items() if k in terms} == terms
    assert {k: v for k, v in k_stats.items() if k in stats} == stats
    for mine, theirs in ((g_actor, k_actor), (g_critic, k_critic)):
        assert all(np.array_equal(mine[k], theirs[k]) for k in mine)


def test_critic_free_actor_loss_gradients_with_the_kl_term():
    """The critic-free family's actor loss L_pi - c2 S + beta L_KL (grpo.actor_loss, k3 against pi_ref with
    beta 0.1): its hand-written gradient against central differences (float64, whole model; 8 entries of the
    tied LM head, the last LayerNorm and one block's MLP, tol 1e-5 as above). Catches the KL term's gradient
    with the wrong sign."""
    from minippo.rlhf import grpo
    state, ro, _ = gradcheck_setup("none")
    cfg = GRPOConfig(kl_ref_loss_coef=0.1, ent_coef=0.05, temperature=0.8, clip_eps=0.2)

    def total():
        terms, stats, _, _, _ = grpo.actor_loss(state, ro, cfg)
        return terms["loss/policy"] - cfg.ent_coef * stats["entropy_agg"] + cfg.kl_ref_loss_coef * terms["loss/kl"]

    _, _, dlogits, _, cache = grpo.actor_loss(state, ro, cfg)
    grads = ppo.backward_response(state.actor, cache, dlogits=dlogits)
    picked = ("wte", "ln_f.w", "h.0.mlp.c_proj.w")         # the LM head (tied), the last LayerNorm, one block
    assert_gradients(total, {k: state.actor.params[k] for k in picked}, {k: grads[k] for k in picked}, tol=1e-5,
                     max_entries=8)


def aggregate_by_loops(x, mask, loss_agg, norm_len):
    """An aggregated per-token term written out response by response (independent of rl/masked.py)."""
    rows = [[x[b, t] for t in range(x.shape[1]) if mask[b, t]] for b in range(x.shape[0])]
    if loss_agg == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if loss_agg == "seq-mean-token-mean":
        return sum(sum(r) / max(len(r), 1) for r in rows) / len(rows)
    return sum(sum(r) for r in rows) / (len(rows) * norm_len)


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_every_loss_term_uses_the_same_aggregation(loss_agg):
    """cfg.loss_agg aggregates the policy, value, entropy and KL terms alike: each term of the minibatch loss
    against the per-token formula aggregated by loops (float64 throughout: rel 1e-12 covers the summation
    order); the logged entropy stays the per-token mean whatever the aggregation."""
    state, ro, _ = gradcheck_setup("separate")
    cfg = tiny_config(clip_eps=0.2, clip_eps_high=0.28, clip_eps_value=0.3, ent_coef=0.05, kl_ref_loss_coef=0.2,
                      kl_ref_loss_estimator="k2", temperature=0.8, critic="separate", loss_agg=loss_agg)
    terms, stats, _, _ = minibatch_loss_and_grads(state, ro, cfg, None)
    m = ro.response_mask
    logits, _, _ = forward_response(state.actor, ro.sequences, ro.attn_mask, ro.prompt_len)
    _, values, _ = forward_response(state.critic, ro.sequences, ro.attn_mask, ro.prompt_len, scalar=True)
    z = logits / 0.8
    logq = z - z.max(-1, keepdims=True)
    logq = logq - np.log(np.exp(logq).sum(-1, keepdims=True))                      # (B, Tn, V) log pi
    ent = -(np.exp(logq) * logq).sum(-1)                                            # (B, Tn) H
    logp = np.take_along_axis(logq, ro.response[..., None], -1)[..., 0]             # (B, Tn)
    r = np.exp(logp - ro.logp)
    surr = np.minimum(r * ro.adv, np.clip(r, 0.8, 1.28) * ro.adv)                   # L^CLIP's term, band [0.8, 1.28]
    k2 = 0.5 * (logp - ro.logp_ref) ** 2
    v_clip = ro.values + np.clip(values - ro.values, -0.3, 0.3)
    vf = 0.5 * np.maximum((values - ro.returns) ** 2, (v_clip - ro.returns) ** 2)
    agg = lambda x: aggregate_by_loops(x, m, loss_agg, cfg.max_new_tokens)          # noqa: E731
    assert terms["loss/policy"] == pytest.approx(-agg(surr), rel=1e-12)
    assert terms["loss/entropy"] == pytest.approx(-agg(ent), rel=1e-12)
    assert terms["loss/kl"] == pytest.approx(agg(k2), rel=1e-12)
    assert terms["loss/value"] == pytest.approx(agg(vf), rel=1e-12)
    assert stats["entropy"] == pytest.approx(ent[m == 1].mean(), rel=1e-12)


# ---- whole iterations --------------------------------------------------------------------------

def test_lr_zero_gives_ratio_one_to_float32_rounding():
    """lr = 0: what is exact on every machine, and what holds to float32 rounding (pitfalls.py docstring)."""
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(lr=0.0, batch_size=16, minibatch_size=4, temperature=0.7), sft, rm, tok)
    before = {k: v.copy() for k, v in tr.actor.params.items()}
    rec = tr.step()
    ro = tr.last_rollout
    # exact on any machine: lr = 0 moves no parameter, not one bit
    assert all((before[k] == v).all() for k, v in tr.actor.params.items())
    # exact on any machine: the same batch, the same shapes, the same (single) BLAS thread -> bitwise logp_old
    assert np.array_equal(recompute_logp(tr.actor, ro, temperature=0.7), ro.logp)
    # to float32 rounding: the minibatches hold 4 of the rollout's 16 rows, and a BLAS kernel may sum a product of
    # 4*T rows in another order than one of 16*T rows (OpenBLAS Haswell / Zen do). The tolerance on |delta logp| is
    # eps32 * (4L + 2) * sqrt(4C) * max|logp| = 1.19e-7 * 6 * 8 * max|logp| (L 1, C 16), ~6e-5 at max|logp| 10;
    # measured: 0 with the SkylakeX / Sandybridge kernels, ~1e-6 with Haswell / Zen (logp_rounding_tolerance).
    tol = logp_rounding_tolerance(tr.actor.cfg, np.abs(ro.logp[ro.response_mask != 0]).max())
    fm = tr.first_minibatch
    assert set(fm) == {"ratio_mean", "ratio_min", "ratio_max", "approx_kl", "clipfrac"}
    v = lr_zero_verdict(fm, tol)
    assert v["verdict"] in ("bitwise", "rounding"), (fm, v)
    # |log r| <= tol + eps32 (r = exp(delta logp) is itself rounded to one float32 ulp)
    assert v["max_abs_log_ratio"] <= tol + np.finfo(np.float32).eps
    # k3 = (r - 1) - log r per token, with r one ulp off exp(delta logp): |k3| <= (eps32 + t^2 / 2) e^t, t = tol + eps32
    assert abs(fm["approx_kl"]) <= v["approx_kl_tol"] and abs(rec["policy/approxkl_max"]) <= v["approx_kl_tol"]
    assert abs(fm["ratio_mean"] - 1.0) <= np.expm1(v["log_ratio_tol"]) and abs(rec["val/ratio"] - 1.0) <= np.expm1(
        v["log_ratio_tol"])
    # exact on any machine: rounding-sized ratios are deep inside the clip band [0.8, 1.2], nothing is clipped
    assert fm["clipfrac"] == 0.0 and rec["policy/clipfrac_avg"] == 0.0


def test_lr_zero_verdict_follows_the_numbers():
    tol = 1e-5
    assert lr_zero_verdict({"ratio_min": 1.0, "ratio_max": 1.0, "approx_kl": 0.0, "clipfrac": 0.0}, tol)["verdict"] \
        == "bitwise"
    near = {"ratio_min": float(np.float32(np.exp(-2e-6))), "ratio_max": float(np.float32(np.exp(3e-6))),
            "approx_kl": 2e-9, "clipfrac": 0.0}
    v = lr_zero_verdict(near, tol)
    assert v["verdict"] == "rounding" and v["max_abs_log_ratio"] == pytest.approx(3e-6, rel=0.05)
    for bad in ({**near, "ratio_max": 1.001}, {**near, "approx_kl": 1e-6}, {**near, "clipfrac": 0.01}):
        assert lr_zero_verdict(bad, tol)["verdict"] == "bug", bad
    with pytest.raises(ValueError, match="`stats`"):
        lr_zero_verdict({"ratio_mean": 1.0}, tol)


def test_logp_rounding_tolerance_formula():
    cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=64)
    eps = float(np.finfo(np.float32).eps)
    assert logp_rounding_tolerance(cfg, 0.5) == pytest.approx(eps * 10 * 16)          # max(1, scale)
    assert logp_rounding_tolerance(cfg, 8.0) == pytest.approx(eps * 10 * 16 * 8)
    cfg64 = GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=64, dtype="float64")
    assert logp_rounding_tolerance(cfg64, 1.0) == pytest.approx(np.finfo(np.float64).eps * 10 * 16)


def test_lr_warm_up_then_schedule():
    """warmup_iterations = 2: lr * 1/2, lr * 2/2, then the linear decay over the remaining iterations."""
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=4, warmup_iterations=2, lr=1e-3, batch_size=8, minibatch_size=8),
                    sft, rm, tok)
    lrs = [tr.step()["lr"] for _ in range(4)]
    np.testing.assert_allclose(lrs, [5e-4, 1e-3, 1e-3, 5e-4], rtol=1e-12)


def test_an_iteration_writes_every_glossary_metric(tmp_path):
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=2), sft, rm, tok, out_dir=tmp_path, log_exact_kl=True, dump_rollouts=True)
    tr.train()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 2 and set(records[0]) == set(GLOSSARY)
    assert (tmp_path / "policy" / "weights.safetensors").exists() and (tmp_path / "rollouts" / "iter_0001.npz").exists()
    # KL estimates agree at iteration 0 (reference = policy): both exactly 0
    assert records[0]["objective/kl"] == 0.0 and records[0]["objective/kl_exact"] == pytest.approx(0.0, abs=1e-6)
    assert records[1]["episode"] == 16 and records[1]["iteration"] == 1


def test_critic_bias_starts_at_the_mean_score():
    sft, rm, tok = world()
    seen = {}
    tr = PPOTrainer(tiny_config(iterations=1), sft, rm, tok)
    tr.step(callback=lambda t, ro, rec: seen.update(ro=ro))
    ro = seen["ro"]
    m = ro.response_mask
    assert (ro.values * m).sum() / m.sum() == pytest.approx(ro.scores.mean(), abs=1e-5)
    # ... and the stored values are the ones the shifted critic gives now (before its first update)
    tr2 = PPOTrainer(tiny_config(iterations=1, lr=0.0), sft, rm, tok)
    tr2.step(callback=lambda t, ro, rec: seen.update(ro2=ro))
    ro2 = seen["ro2"]
    h = forward_response(tr2.state.critic, ro2.sequences, ro2.attn_mask, ro2.prompt_len, scalar=True)[1]
    fresh = h.astype(np.float64) * ro2.response_mask
    np.testing.assert_allclose(fresh, ro2.values, atol=1e-5)


def test_the_mean_score_shift_moves_a_normalised_head_by_shift_over_sigma():
    """init_bias_to_mean_score, hand-worked: values (1, 2 | 3) on the valid tokens (mean 2), scores (4, 6)
    (mean 5): the shift is 3, added to every value; a head whose output is denormalised with sigma 2
    (V = sigma h + mu) moves its bias by 3 / 2, from 0.5 to 2. Dyadic numbers: exact in float64 (and in
    the float32 bias). Catches shift * sigma for shift / sigma."""
    from minippo.rlhf.critic import init_bias_to_mean_score
    head = {"scalar_head.b": np.array([0.5], dtype=np.float32)}
    values = np.array([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    assert init_bias_to_mean_score(head, values, np.array([4.0, 6.0]), mask, sigma=2.0) == 3.0
    assert head["scalar_head.b"][0] == 2.0


def test_an_sft_critic_is_the_sft_trunk_with_a_zero_head():
    """build_critic("sft"): a copy of the SFT model whose value head (w and b) is 0, so every value is 0
    exactly, whatever head the SFT model carried (here one set to 1 and 0.5); the trunk is the SFT model's,
    bit for bit, and the SFT model itself is untouched. Catches the head's w kept."""
    from minippo.rlhf.critic import build_critic
    sft = TinyGPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dtype="float64"), seed=3)
    sft.params["scalar_head.w"][...] = 1.0
    sft.params["scalar_head.b"][...] = 0.5
    critic = build_critic("sft", sft, None, seed=0)
    assert not critic.params["scalar_head.w"].any() and not critic.params["scalar_head.b"].any()
    assert all(np.array_equal(critic.params[k], v) for k, v in sft.params.items() if not k.startswith("scalar_head"))
    assert (sft.params["scalar_head.w"] == 1.0).all()
    _, values, _ = critic.forward(np.array([[1, 5, 7, 2]]), np.ones((1, 4), dtype=np.int64), scalar=True, logits=False)
    assert not values.any()


def test_value_norm_merges_its_running_statistics_exactly():
    """ValueNorm.update merges (mean, var, count) of the returns seen so far with each new batch's: after
    the batches (1, 2, 3) and (10, 20) (the masked-out 99 never counts) it holds the mean and the population
    variance of all five numbers, as np.mean / np.var give them (float64, a handful of operations: rel
    1e-12), and its sigma is their standard deviation. Catches the between-batch term of the merged M2
    without its count, the merged mean weighted by the old count, and the variance taken for sigma."""
    norm = ValueNorm(True)
    head = {"scalar_head.w": np.ones((2, 1)), "scalar_head.b": np.zeros(1)}
    norm.update(np.array([[1.0, 2.0, 3.0]]), np.array([[1, 1, 1]]), head)
    norm.update(np.array([[10.0, 20.0, 99.0]]), np.array([[1, 1, 0]]), head)
    seen = np.array([1.0, 2.0, 3.0, 10.0, 20.0])
    assert norm.count == 5
    assert norm.mean == pytest.approx(seen.mean(), rel=1e-12) and norm.var == pytest.approx(seen.var(), rel=1e-12)
    assert norm.mu_sigma == pytest.approx((seen.mean(), seen.std()), rel=1e-12)      # sigma: the std


def test_value_norm_rescales_the_head_so_every_value_stays():
    """PopArt, hand-worked: a head w = (2, 1), b = 0.5 on the features x = (1, 3) outputs h = 5.5, the value
    V = sigma h + mu = 5.5 before any statistics (mu 0, sigma 1); after an update with the returns (1, 2, 3)
    (mu 2, sigma sqrt(2/3)) the rescaled head gives the same V for any x (here x and 2x; float64: rel
    1e-12). Catches w left unscaled (only b moved)."""
    norm = ValueNorm(True)
    head = {"scalar_head.w": np.array([[2.0], [1.0]]), "scalar_head.b": np.array([0.5])}
    xs = np.array([[1.0, 3.0], [2.0, 6.0]])
    before = [float(x @ head["scalar_head.w"][:, 0] + head["scalar_head.b"][0]) for x in xs]
    assert before == [5.5, 10.5]
    norm.update(np.array([[1.0, 2.0, 3.0]]), np.array([[1, 1, 1]]), head)
    mu, sigma = norm.mu_sigma
    after = [sigma * float(x @ head["scalar_head.w"][:, 0] + head["scalar_head.b"][0]) + mu for x in xs]
    assert (mu, sigma) != (0.0, 1.0) and after == pytest.approx(before, rel=1e-12)


def test_value_normalisation_preserves_the_values():
    sft, rm, tok = world(dtype="float64")
    model, value_norm = sft.copy(), ValueNorm(True)
    rng = np.random.default_rng(0)
    seqs, attn = rng.integers(3, tok.vocab_size, (3, 9)), np.ones((3, 9), dtype=np.int64)
    values = lambda: value_norm.denormalise(forward_response(model, seqs, attn, 4, scalar=True)[1])   # noqa: E731
    v0 = values()
    for shift in (5.0, -2.0):
        value_norm.update(rng.normal(shift, 3.0, (3, 5)), np.ones((3, 5)), model.params)
        np.testing.assert_allclose(values(), v0, atol=1e-10)
    assert value_norm.mu_sigma[1] > 1.5


def test_target_kl_stops_the_update_and_ratio_threshold_skips():
    sft, rm, tok = world()
    # the 1st minibatch (before any step) measures only float32 rounding: |approx KL| <= (eps32 + t^2/2) e^t ~ 1.2e-7
    # (pitfalls.lr_zero_verdict; ~3e-9 measured with the Haswell kernel, 0 with SkylakeX); after one lr 3e-2 step the
    # 2nd measures ~1.5e-2. A target of 1e-6 sits between the two on any BLAS kernel.
    tr = PPOTrainer(tiny_config(lr=3e-2, kl_old_target=1e-6, update_epochs=3), sft, rm, tok)
    rec = tr.step()
    assert rec["early_stop_epoch"] == 0 and rec["policy/steps"] == 1     # the 2nd minibatch exceeded it
    # a rollout whose stored log-probs are 1 nat below the policy's: ratio e > threshold, every step skipped
    tr = PPOTrainer(tiny_config(ratio_threshold=2.0), sft, rm, tok)
    seen = {}
    tr.step(callback=lambda t, ro, r: seen.update(ro=ro))
    ro = seen["ro"]
    ro.logp = (ro.logp - 1.0) * ro.response_mask
    before = {k: v.copy() for k, v in tr.actor.params.items()}
    tr.state.rng = np.random.default_rng(0)
    upd = update_metrics(knobs_update(tr.state, ro, tr.cfg))
    assert upd["policy/skipped_minibatches"] == tr.cfg.update_epochs * tr.cfg.num_minibatches and upd["policy/steps"] == 0
    assert all((before[k] == v).all() for k, v in tr.actor.params.items())


def test_the_minibatch_above_kl_old_target_is_not_applied_and_one_at_it_is():
    """ppo_update's early stop (canonical PPO): a minibatch whose approx KL is ABOVE kl_old_target stops the
    update before its step: no parameter of either model moves and no AdamW step is counted, one history row without a
    grad norm, early_stop_epoch 0. A target equal to that approx KL does not stop it (strict >). Catches
    applying the minibatch that tripped the stop, and >= for >. The approx KL of the first minibatch is computed
    once here and once inside ppo_update by the same call on the same arrays: equal bit for bit."""
    import copy
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(lr=3e-2, update_epochs=2), sft, rm, tok)
    tr.step()                                          # the actor moves away from the rollout's pi_old
    state, ro = tr.state, tr.last_rollout
    rng0 = np.random.default_rng(5)
    first = next(ppo.epoch_minibatches(ro.batch_size, tr.cfg.minibatch_size, 2, copy.deepcopy(rng0)))[1]
    kl0 = ppo.minibatch_loss_and_grads(state, ro.take(first), tr.cfg)[1]["approx_kl"]
    assert kl0 > 0
    models = (state.actor, state.critic)
    before = [{k: v.copy() for k, v in m.params.items()} for m in models]
    moments = [copy.deepcopy(o.__dict__) for o in (state.opt_actor, state.opt_critic)]
    state.rng = copy.deepcopy(rng0)
    upd = ppo.ppo_update(state, ro, tr.cfg.replace(kl_old_target=kl0 / 2))
    assert upd["early_stop_epoch"] == 0 and len(upd["history"]) == 1
    assert upd["history"][0]["grad_norm"] is None and upd["history"][0]["approx_kl"] == kl0
    for m, b in zip(models, before):
        assert all(np.array_equal(b[k], v) for k, v in m.params.items())
    for o, mo in zip((state.opt_actor, state.opt_critic), moments):
        assert o.t == mo["t"]
    state.rng = copy.deepcopy(rng0)
    upd = ppo.ppo_update(state, ro, tr.cfg.replace(kl_old_target=kl0))
    assert upd["history"][0]["approx_kl"] == kl0 and upd["history"][0]["grad_norm"] is not None
    assert any(not np.array_equal(before[0][k], v) for k, v in state.actor.params.items())


def test_kl_adapted_lr_follows_the_rule_minibatch_by_minibatch(monkeypatch):
    """kl_old_action="adapt_lr": every minibatch is applied (no early stop), and the rate of each actor step is the
    rule applied, by hand, to the approx KL of that minibatch and of all the ones before it (the rate carried
    across iterations), except each update's first (no step taken yet: its KL is rounding); the critic keeps its
    constant rate."""
    sft, rm, tok = world()
    cfg = tiny_config(iterations=3, lr=3e-3, lr_schedule="constant", kl_old_target=2e-4, kl_old_action="adapt_lr",
                      update_epochs=3)
    tr = PPOTrainer(cfg, sft, rm, tok)
    kls, lrs, critic_lrs = [], [], []
    loss_and_grads = ppo_knobs.minibatch_loss_and_grads

    def spy(*args, **kwargs):
        out = loss_and_grads(*args, **kwargs)
        kls.append(out[1]["approx_kl"])
        return out
    monkeypatch.setattr(ppo_knobs, "minibatch_loss_and_grads", spy)
    for opt, seen in ((tr.state.opt_actor, lrs), (tr.state.opt_critic, critic_lrs)):
        monkeypatch.setattr(opt, "step", lambda grads, lr=None, _step=opt.step, _seen=seen: (_seen.append(lr),
                                                                                            _step(grads, lr=lr)))
    records = tr.train()
    steps = cfg.update_epochs * cfg.num_minibatches
    assert len(kls) == len(lrs) == cfg.iterations * steps                  # nothing stopped, nothing skipped
    assert all(r["early_stop_epoch"] is None and r["policy/steps"] == steps for r in records)
    lr, expect = cfg.lr, []
    for i, kl in enumerate(kls):           # rsl_rl's rule, written out: / 1.5 above 2 x target, x 1.5 below half
        if i % steps == 0:                 # an update's first minibatch: pi is still pi_old, the rate is kept
            pass
        elif kl > 2 * cfg.kl_old_target:
            lr = max(lr / 1.5, 1e-5)
        elif 0 < kl < cfg.kl_old_target / 2:
            lr = min(lr * 1.5, 1e-2)
        expect.append(lr)
    assert lrs == expect and len(set(lrs)) > 2                              # the rate moved, both ways or more
    assert [r["lr"] for r in records] == expect[steps - 1::steps]          # logged: the rate the update ended at
    assert tr.state.kl_old_lr == expect[-1] and critic_lrs == [cfg.lr] * len(lrs)


def test_no_gradient_clipping_with_max_grad_norm_none():
    """max_grad_norm None: the steps take the raw gradient, whose norm is still logged; with a clip below every
    norm each step is scaled (policy/grad_clip_frac 1)."""
    sft, rm, tok = world()
    recs = {}
    for name, clip in (("off", None), ("tight", 1e-6)):
        tr = PPOTrainer(tiny_config(iterations=1, max_grad_norm=clip), sft, rm, tok)
        recs[name] = (tr.step(), {k: v.copy() for k, v in tr.actor.params.items()})
    (off, p_off), (tight, p_tight) = recs["off"], recs["tight"]
    assert off["policy/grad_clip_frac"] == 0.0 and tight["policy/grad_clip_frac"] == 1.0
    assert off["policy/grad_norm_avg"] > 1e-6
    assert any(not np.array_equal(p_off[k], p_tight[k]) for k in p_off)     # the clip changed the steps


def test_critic_free_estimators_give_one_advantage_per_response():
    sft, rm, tok = world()
    seen = {}
    for name in ("grpo", "rloo", "reinforce"):
        cfg = GRPOConfig(iterations=1, batch_size=8, minibatch_size=4, max_new_tokens=8, update_epochs=2,
                         checkpoint_every=1, advantage_estimator=name, samples_per_prompt=4, kl_ref_coef=0.0,
                         kl_ref_loss_coef=0.1)
        tr = PPOTrainer(cfg, sft, rm, tok)
        rec = tr.step(callback=lambda t, ro, r: seen.update(ro=ro))
        ro = seen["ro"]
        m = ro.response_mask == 1
        adv_seq = ro.adv[np.arange(ro.batch_size), 0]                    # every row has a first token
        np.testing.assert_allclose(ro.adv, adv_seq[:, None] * m)        # the same advantage on each valid token
        s = ro.scores.reshape(2, 4)
        if name == "rloo":                                                # leave-one-out baseline, by hand
            expect = s - (s.sum(axis=1, keepdims=True) - s) / 3
        elif name == "grpo":
            expect = (s - s.mean(axis=1, keepdims=True)) / (s.std(axis=1, ddof=1, keepdims=True) + 1e-6)
        else:
            expect = s - s.mean()
        np.testing.assert_allclose(adv_seq, expect.ravel(), rtol=1e-6, atol=1e-9)
        assert rec["loss/kl_avg"] > 0 and rec["loss/value_avg"] == 0.0 and tr.state.opt_critic is None


@pytest.mark.parametrize("kw", [dict(critic="none"), dict(critic="shared", value_norm=True),
                                dict(kl_ref_controller="fixed", reward_shaping="uniform", whiten_rewards=True),
                                dict(kl_ref_controller="ppo_paper", top_k=5, ent_coef=0.01, length_bonus=0.1),
                                dict(critic_init="random", samples_per_prompt=2, value_clip=False)])
def test_variants_run(kw):
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=2, **kw), sft, rm, tok)
    recs = tr.train()
    assert all(np.isfinite(v) for r in recs for v in r.values() if isinstance(v, float))
    if kw.get("critic") == "none":
        assert tr.state.opt_critic is None and recs[-1]["loss/value_avg"] == 0.0
    if kw.get("kl_ref_controller") == "fixed":
        assert recs[0]["kl_coef"] == recs[1]["kl_coef"] == tr.cfg.kl_ref_coef
    if kw.get("kl_ref_controller") == "ppo_paper":          # KL far below target / 1.5: beta halves
        assert recs[0]["objective/kl"] < tr.cfg.kl_ref_target / 1.5 and recs[1]["kl_coef"] == tr.cfg.kl_ref_coef / 2


def test_adaptive_controller_follows_ziegler():
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=2, kl_ref_coef=0.1, kl_ref_target=0.5, kl_ref_horizon=100.0), sft, rm, tok)
    r0, r1 = tr.train()
    err = min(max(r0["objective/kl"] / 0.5 - 1, -0.2), 0.2)
    assert r1["kl_coef"] == pytest.approx(0.1 * (1 + err * 8 / 100.0))


def test_the_kl_controller_reads_the_kl_per_response():
    """Step 6 of ppo_iteration feeds beta's controller objective/kl, the KL of a whole response (its
    per-token k1 summed), averaged over the batch, with n_steps = batch_size: on the second iteration (the
    actor has moved, kl != 0) the number it receives is that sum written out as a loop over rows and valid
    tokens (float64, <= 8 x 8 terms: rel 1e-12). Catches the mean per token fed instead."""
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=2, lr=3e-2), sft, rm, tok)
    tr.step()
    got, seen, real = [], {}, tr.state.kl_ctl.update
    tr.state.kl_ctl.update = lambda kl, n_steps: (got.append((kl, n_steps)), real(kl, n_steps))
    tr.step(callback=lambda t, ro, rec: seen.update(ro=ro))
    ro = seen["ro"]
    rows = [sum(ro.kl[b, t] for t in range(ro.kl.shape[1]) if ro.response_mask[b, t]) for b in range(ro.batch_size)]
    assert len(got) == 1 and got[0][1] == 8 and abs(sum(rows)) > 1e-3
    assert got[0][0] == pytest.approx(sum(rows) / len(rows), rel=1e-12)


def test_resume_equals_an_uninterrupted_run(tmp_path):
    sft, rm, tok = world()
    cfg = tiny_config(iterations=4, checkpoint_every=2)
    full = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "full")
    full.train()
    part = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "part")
    part.train(until=3)                       # checkpoint at 2, then one more iteration: "crashed" there
    resumed = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "part", resume=True)
    assert resumed.iteration == 2             # the metric of iteration 2 written before the crash is dropped
    resumed.train()
    a = [without_timing(r) for r in read_metrics(tmp_path / "full" / "metrics.jsonl")]
    b = [without_timing(r) for r in read_metrics(tmp_path / "part" / "metrics.jsonl")]
    assert len(a) == len(b) == 4 and a == b
    for k, v in full.actor.params.items():
        np.testing.assert_array_equal(v, resumed.actor.params[k])
    with pytest.raises(ValueError, match=r"another configuration: lr \(stored 0.0001, requested 0.001\)"):
        PPOTrainer(cfg.replace(lr=1e-3), sft, rm, tok, out_dir=tmp_path / "part", resume=True)


def test_resume_with_a_kl_adapted_lr_equals_an_uninterrupted_run(tmp_path):
    """The KL-adapted rate is part of the checkpoint: a resumed run continues from the rate the KL had set, not
    from cfg.lr, and its metrics and weights equal an uninterrupted run's."""
    sft, rm, tok = world()
    cfg = tiny_config(iterations=4, checkpoint_every=2, lr=3e-3, lr_schedule="constant", kl_old_target=2e-4,
                      kl_old_action="adapt_lr")
    full = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "full")
    full.train()
    part = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "part")
    part.train(until=3)
    part.close()
    bad = tmp_path / "bad"                                   # the same folder with a rate outside the rule's bounds
    shutil.copytree(tmp_path / "part", bad)
    state = json.loads((bad / "checkpoint" / STATE).read_text())
    (bad / "checkpoint" / STATE).write_text(json.dumps({**state, "kl_old_lr": 0.5}))
    with pytest.raises(CorruptFileError, match=r"`kl_old_lr` must be in \[1e-05, 0.01\], got 0.5"):
        PPOTrainer(cfg, sft, rm, tok, out_dir=bad, resume=True)
    resumed = PPOTrainer(cfg, sft, rm, tok, out_dir=tmp_path / "part", resume=True)
    a = [without_timing(r) for r in read_metrics(tmp_path / "full" / "metrics.jsonl")]
    assert resumed.iteration == 2 and resumed.state.kl_old_lr == a[1]["lr"] != cfg.lr
    resumed.train()
    b = [without_timing(r) for r in read_metrics(tmp_path / "part" / "metrics.jsonl")]
    assert len(a) == len(b) == 4 and a == b and len({r["lr"] for r in a}) > 1
    for k, v in full.actor.params.items():
        np.testing.assert_array_equal(v, resumed.actor.params[k])


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_nan_guard_names_the_metric_and_keeps_the_checkpoint(tmp_path):
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(iterations=4, checkpoint_every=1), sft, rm, tok, out_dir=tmp_path)
    tr.step()
    good = {k: v.copy() for k, v in tr.actor.params.items()}
    # a critic blowing up: values ~1e30, float32 gradients overflow -> the update stops before any step
    w = tr.state.critic.params["scalar_head.w"]
    saved_w, w[...] = w.copy(), 1e30
    with pytest.raises(ValueError, match=r"`policy/grad_norm` is nan at iteration 1"):
        tr.step()
    assert all((good[k] == v).all() for k, v in tr.actor.params.items())
    # a reward model returning NaN: caught in the rollout, named with the iteration
    w[...] = saved_w
    tr.state.reward_model.gain = float("nan")
    with pytest.raises(ValueError, match=r"`rm_scores` must be finite.*iteration 1"):
        tr.step()
    arrays, state = load_checkpoint(tmp_path / "checkpoint")
    assert state["iteration"] == 1 and np.isfinite(arrays["critic/scalar_head.w"]).all()
    for k, v in good.items():
        np.testing.assert_array_equal(arrays["actor/" + k], v)
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 1


def test_nan_policy_loss_is_named(monkeypatch):
    import minippo.rlhf.ppo as upd
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(), sft, rm, tok)
    real = upd.clipped_policy_loss
    monkeypatch.setattr(upd, "clipped_policy_loss", lambda *a, **k: (float("nan"),) + tuple(real(*a, **k)[1:]))
    with pytest.raises(ValueError, match=r"`loss/policy` is nan at iteration 0"):
        tr.step()


@pytest.mark.parametrize("argv, field", [(["--loss-agg", "seq-sum"], "loss_agg"), (["--clip-eps-high", "0"], "clip_eps_high"),
                                         (["--ratio-level", "response"], "ratio_level"),
                                         (["--kl-ref-loss-estimator", "k4"], "kl_ref_loss_estimator")])
def test_a_bad_flag_value_is_one_line_naming_the_field(tmp_path, capsys, argv, field):
    """PPOConfig.__post_init__ rejects the value before any model is loaded; the command says so in one line
    on stderr and exits 2 (a usage error: tests/test_cli.py)."""
    from minippo.cli import main   # as test_minippo_ppo_command below
    rc = main(["ppo", "--sft", str(tmp_path / "no_sft"), "--rm", str(tmp_path / "no_rm"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and f"`{field}`" in err and err.count("\n") == 1 and "Traceback" not in err


def test_minippo_ppo_command(tmp_path, capsys):
    from minippo.cli import main
    sft, rm, tok = world()
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    rm.save(tmp_path / "rm" / "model", tokenizer=tok)
    rc = main(["ppo", "--sft", str(tmp_path / "sft"), "--rm", str(tmp_path / "rm"), "--out", str(tmp_path / "ppo"),
               "--quick", "--iterations", "2", "--batch-size", "8", "--minibatch-size", "4", "--max-new-tokens", "6",
               "--value-norm", "true", "--target-kl", "none", "--no-progress", "--loss-agg", "seq-mean-token-sum-norm",
               "--clip-eps-high", "0.28", "--ratio-level", "sequence", "--kl-ref-loss-estimator", "k2"])
    cap = capsys.readouterr()
    assert rc == 0 and "gold/score" in cap.out
    assert "--target-kl is deprecated: it is now --kl-old-target" in cap.err      # the old flag still works
    saved = json.loads((tmp_path / "ppo" / "config.json").read_text())
    assert saved["iterations"] == 2 and saved["value_norm"] is True and saved["kl_old_target"] is None
    assert (saved["loss_agg"], saved["clip_eps_high"], saved["ratio_level"], saved["kl_ref_loss_estimator"]) == (
        "seq-mean-token-sum-norm", 0.28, "sequence", "k2")                  # lesson 22's options are flags
    assert len(read_metrics(tmp_path / "ppo" / "metrics.jsonl")) == 2


def files(folder) -> dict:
    """Every file's bytes (but the lock file): what a refused command must leave as it was."""
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".minippo.lock"}


@pytest.mark.parametrize("command", ["ppo", "grpo"])
def test_a_resume_from_another_sft_or_reward_model_is_refused_before_anything_is_written(tmp_path, capsys, command):
    """`minippo ppo` / `minippo grpo` with --out holding a checkpoint resumed it whatever --sft and --rm were given:
    a resume from another SFT model (the reference policy) or reward model went on silently under other inputs. The
    checkpoint records the SHA-256 of both weights files and a resume compares them now, before anything is
    written; a checkpoint that records none (written before this) is resumed as before."""
    from minippo.cli import main
    sft, rm, tok = world()
    other_sft, other_rm, _ = world(seed=1)                 # the same shapes, other weights
    for name, model in (("sft", sft), ("other_sft", other_sft)):
        save_model(tmp_path / name / "model", model, tokenizer=tok)
    for name, model in (("rm", rm), ("other_rm", other_rm)):
        model.save(tmp_path / name / "model", tokenizer=tok)
    out = tmp_path / "run"

    def run(sft_dir, rm_dir, iterations):
        return main([command, "--sft", str(sft_dir), "--rm", str(rm_dir), "--out", str(out), "--quick",
                     "--iterations", str(iterations), "--batch-size", "8", "--minibatch-size", "4",
                     "--max-new-tokens", "6", "--no-progress"])

    assert run(tmp_path / "sft", tmp_path / "rm", 1) == 0
    capsys.readouterr()
    before = files(out)
    for flag, sft_dir, rm_dir in (("sft", "other_sft", "rm"), ("rm", "sft", "other_rm")):
        assert run(tmp_path / sft_dir, tmp_path / rm_dir, 2) == 1
        err, given = capsys.readouterr().err, tmp_path / (sft_dir if flag == "sft" else rm_dir) / "model"
        assert f"the checkpoint in {out / 'checkpoint'} was made from another --{flag} (stored " in err, err
        assert f"in {tmp_path / flag / 'model'}, given " in err and f"in {given}); nothing was changed. To start " \
            f"fresh, use another folder than {out} (or delete it)\n" in err and err.count("\n") == 1
        assert files(out) == before
    state_path = out / "checkpoint" / STATE
    assert set(json.loads(state_path.read_text())["inputs"]) == {"sft", "rm"}
    assert run(tmp_path / "sft" / "model", tmp_path / "rm" / "model", 2) == 0       # the same models, other paths
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({k: v for k, v in state.items() if k != "inputs"}))   # before this change
    assert run(tmp_path / "other_sft", tmp_path / "other_rm", 3) == 0
    assert len(read_metrics(out / "metrics.jsonl")) == 3


def test_optimizers_hold_the_models_arrays():
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(), sft, rm, tok)
    s = tr.state
    assert isinstance(s.opt_actor, AdamW)
    assert all(s.opt_actor.params[k] is s.actor.params[k] for k in s.actor.params)
    assert all(s.opt_critic.params[k] is s.critic.params[k] for k in s.critic.params)
    # the reference is a frozen copy, not the actor
    assert all(s.ref.params[k] is not s.actor.params[k] for k in s.actor.params)


def test_the_reference_stays_the_sft_model_while_pi_old_moves_every_iteration():
    """Q32: pi_old, the ratio's denominator, is the actor at the start of each iteration and moves every
    iteration; pi_ref stays the SFT model, bit for bit, for the whole run."""
    sft, rm, tok = world()
    tr = PPOTrainer(tiny_config(), sft, rm, tok)
    sft_params = {k: v.copy() for k, v in sft.params.items()}
    olds = []
    for _ in range(2):
        olds.append(tr.actor.copy())                    # pi_old of this iteration: the actor before it
        tr.step()
        ro, T = tr.last_rollout, tr.cfg.temperature
        # the rollout's logp are pi_old's and its logp_ref pi_ref's (recomputed: the same products, bitwise)
        assert np.array_equal(recompute_logp(olds[-1], ro, temperature=T), ro.logp)
        assert np.array_equal(recompute_logp(sft, ro, temperature=T), ro.logp_ref)
    assert all(np.array_equal(tr.state.ref.params[k], sft_params[k]) for k in sft_params)
    assert all(np.array_equal(sft.params[k], sft_params[k]) for k in sft_params)
    assert any(not np.array_equal(olds[0].params[k], olds[1].params[k]) for k in sft_params)   # pi_old moved


def test_renamed_fields_are_accepted_for_one_release():
    """One vocabulary: the old names of renamed PPOConfig fields still load (old config.json files), with a
    DeprecationWarning naming the new name; both names at once is an error."""
    from minippo.rlhf.ppo_config import RENAMED
    old = {"ppo_epochs": 2, "kl_coef": 0.3, "kl_controller": "fixed", "kl_target": 5.0, "kl_horizon": 500.0,
           "kl_estimator": "k3", "kl_loss_coef": 0.1, "target_kl": 0.05}
    assert set(old) == set(RENAMED)
    with pytest.warns(DeprecationWarning) as caught:
        cfg = config_from_dict(old)                       # what a run folder's stored config goes through
    assert sorted(str(w.message) for w in caught) == sorted(f"PPOConfig field `{k}` is now `{v}`" for k, v in RENAMED.items())
    assert cfg == KnobsConfig(**{RENAMED[k]: v for k, v in old.items()})       # kl_ref_estimator: a knob
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="`kl_coef` and `kl_ref_coef`"):
        PPOConfig.from_dict({"kl_coef": 0.1, "kl_ref_coef": 0.2})


def test_a_stage_folder_of_the_wrong_kind_is_refused_naming_the_flag_exit_2(tmp_path, capsys):
    """``--sft`` naming a reward model trained PPO from its trunk as if it were a policy (exit 0); ``--rm`` naming a
    policy said "`directory` ... holds no reward model", exit 1; ``--ptx-coef`` with a policy that records no SFT
    corpus (a PPO policy) was a KeyError traceback."""
    from minippo import cli
    sft, rm, tok = world()
    save_model(tmp_path / "policy", sft, tokenizer=tok)                 # a PPO policy: no sft_config
    rm.save(tmp_path / "rm", tokenizer=tok)
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    out = tmp_path / "out"
    for argv, line in (
            (["--sft", tmp_path / "rm", "--rm", tmp_path / "rm"], f"--sft: {tmp_path / 'rm'} holds a reward model"),
            (["--sft", tmp_path / "sft", "--rm", tmp_path / "policy"], f"--rm: {tmp_path / 'policy'} holds a "
             "model but no reward model"),
            (["--sft", tmp_path / "policy", "--rm", tmp_path / "rm", "--ptx-coef", "0.1"], "--ptx-coef 0.1: "
             f"`ptx_coef` > 0 trains on the SFT run's own corpus, which {tmp_path / 'policy'} does not record")):
        rc = cli.main(["ppo", *map(str, argv), "--out", str(out), "--no-progress"])
        _, err = capsys.readouterr()
        assert rc == 2 and err.startswith(f"minippo ppo: error: {line}") and err.count("\n") == 1, err
        assert not out.exists()


def test_grpo_into_a_ppo_runs_folder_is_refused_by_its_config_not_by_a_tensor(tmp_path, capsys):
    """`minippo grpo --out <a PPO run>` said "unexpected tensor 'critic/...'" (exit 1), as if the checkpoint were
    corrupt: the config is compared before the tensors are read, and names the fields that differ."""
    from minippo.cli import main
    sft, rm, tok = world()
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    rm.save(tmp_path / "rm" / "model", tokenizer=tok)
    out = tmp_path / "run"
    flags = ["--sft", str(tmp_path / "sft"), "--rm", str(tmp_path / "rm"), "--out", str(out), "--quick",
             "--iterations", "1", "--batch-size", "8", "--minibatch-size", "4", "--max-new-tokens", "6",
             "--no-progress"]
    assert main(["ppo", *flags]) == 0
    capsys.readouterr()
    before = files(out)
    assert main(["grpo", *flags]) == 1
    err = capsys.readouterr().err
    assert f"the PPO run in {out} was made with another configuration: " in err and "tensor" not in err, err
    assert files(out) == before
