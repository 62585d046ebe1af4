"""DAPO's dynamic sampling in the critic-free iteration (GRPOConfig.dynamic_sampling): a group whose scores are all
equal is dropped and more groups are sampled until the batch is full; the cap on extra rounds is respected; off,
the iteration is steps 1-6 of grpo.py called by hand, bitwise; the generations joined from several rounds keep
each row's tokens and log-probabilities; DAPO's soft overlong punishment, on, is eq. (13) computed by hand added
to each score before the advantages (the filter sees it too)."""
import numpy as np
import pytest

from minippo.rlhf import grpo
from minippo.rlhf.generate import join_generations
from minippo.rlhf.grpo import GRPOConfig, grpo_iteration, grpo_update, group_advantages
from minippo.rlhf.ppo import per_token_rewards, response_logprobs, sample, score
from tests.rlhf.ppo_helpers import state_of, world

N, G = 4, 3                                     # group size, groups per batch


def config(**kw) -> GRPOConfig:
    base = dict(iterations=2, batch_size=N * G, samples_per_prompt=N, minibatch_size=N * G // 2,
                max_new_tokens=6, update_epochs=2, checkpoint_every=1, kl_ref_controller="fixed",
                kl_ref_coef=0.0, missing_eos_penalty=0.0)
    return GRPOConfig(**{**base, **kw})


class PromptRule:
    """A reward model for the test: every response to a prompt whose second token id is even scores 0 (a
    group with no signal; 16 of the 37 prompts), the others score the sum of their real token ids modulo 5
    (mostly unequal in a group); ``constant=True``: every response scores 0."""

    def __init__(self, constant: bool = False):
        self.constant = constant

    def score(self, sequences, attn_mask):
        out = np.zeros(len(sequences))
        for b, (ids, m) in enumerate(zip(sequences, attn_mask)):
            real = ids[m != 0]
            if not self.constant and real[2] % 2:                    # real[0] is <bos>
                out[b] = float(real.sum() % 5)
        return out


def dynamic_state(cfg, rm, seed=0):
    sft, _, tok = world()
    state = state_of(cfg, sft, rm, tok, seed=seed)
    return state


def rounds_by_hand(state, cfg, rounds):
    """The generations the iteration draws, replayed on a twin state: ``rounds`` rounds of G groups."""
    return [sample(state, cfg, *state.prompts.draw(G, state.rng, repeat=N)) for _ in range(rounds)]


def all_equal(scores) -> bool:
    return len(set(np.asarray(scores).tolist())) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_groups_whose_scores_are_all_equal_are_dropped_until_the_batch_is_full(seed):
    cfg = config(dynamic_sampling=True, dynamic_max_rounds=8)
    state, twin = dynamic_state(cfg, PromptRule(), seed), dynamic_state(cfg, PromptRule(), seed)
    ro, update = grpo_iteration(state, cfg)
    # replay: keep, in the order drawn, the groups whose N scores are not all equal, until G of them
    gens, kept, zero = rounds_by_hand(twin, cfg, 9), [], 0
    for r, gen in enumerate(gens):
        s = PromptRule().score(gen.sequences, gen.attn_mask)
        for g in range(G):
            if all_equal(s[g * N:(g + 1) * N]):
                zero += 1
            else:
                kept.append(gen.response[g * N:(g + 1) * N])
        if len(kept) >= G:
            break
    rounds = r + 1
    assert rounds > 1, "the test needs a dropped group: choose another seed"
    assert update["dapo/extra_samples"] == (rounds - 1) * cfg.batch_size
    assert update["dapo/zero_variance_share"] == zero / (rounds * G)
    assert ro.batch_size == cfg.batch_size
    for g in range(G):                                   # the batch: the kept groups, in order, none all-equal
        assert not all_equal(ro.scores[g * N:(g + 1) * N])
        want = kept[g]
        got = ro.response[g * N:(g + 1) * N]
        width = max(want.shape[1], got.shape[1])
        pad = lambda a: np.pad(a, ((0, 0), (0, width - a.shape[1])))            # noqa: E731 (pad id 0)
        np.testing.assert_array_equal(pad(got), pad(want))
    assert np.all(ro.adv.any(axis=1).reshape(G, N).any(axis=1))          # every group carries a gradient


def test_the_cap_on_extra_rounds_is_respected(monkeypatch):
    cfg = config(dynamic_sampling=True, dynamic_max_rounds=2)
    calls = {"n": 0}
    real = grpo.sample

    def counted(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, "sample", counted)
    state, twin = dynamic_state(cfg, PromptRule(constant=True)), dynamic_state(cfg, PromptRule(constant=True))
    ro, update = grpo_iteration(state, cfg)
    assert calls["n"] == 1 + 2                                   # the first round and two extra ones, no more
    assert update["dapo/extra_samples"] == 2 * cfg.batch_size and update["dapo/zero_variance_share"] == 1.0
    # nothing had a signal: the batch is the first round's groups, and every advantage is exactly 0
    first = rounds_by_hand(twin, cfg, 1)[0]
    np.testing.assert_array_equal(ro.response, first.response[:, :ro.response.shape[1]])
    assert not first.response_mask[:, ro.response.shape[1]:].any()
    assert np.all(ro.adv == 0.0)
    monkeypatch.setattr(grpo, "sample", real)
    cfg0 = config(dynamic_sampling=True, dynamic_max_rounds=0)
    _, update0 = grpo_iteration(dynamic_state(cfg0, PromptRule(constant=True)), cfg0)
    assert update0["dapo/extra_samples"] == 0                    # cap 0: one round, as without it


def by_hand(twin, cfg, penalty=None):
    """Steps 1-6 of grpo.py's docstring on ``twin``, one plain call each (the iteration before dynamic
    sampling and the overlong punishment); ``penalty(lengths) -> (B,)`` is added to the scores before the
    rewards. Returns the rollout and the update's history."""
    gen = sample(twin, cfg, *twin.prompts.draw(cfg.num_prompts, twin.rng, repeat=cfg.samples_per_prompt))
    want = score(twin, cfg, gen, np.zeros(gen.response_mask.shape, dtype=np.float64))
    if penalty is not None:
        want.scores = want.scores + penalty(want.lengths)
    want.rewards, want.kl, want.non_score_reward = per_token_rewards(want.scores, want.logp, want.logp_ref,
                                                                     want.response_mask, twin.kl_ctl.value)
    want.adv = group_advantages(want.sequence_returns, want.response_mask, cfg).astype(np.float64)
    want.returns = (want.adv + want.values) * want.response_mask
    return want, grpo_update(twin, want, cfg)["history"]


def assert_same_iteration(state, twin, ro, update, want, hist):
    for name, a in ro.arrays().items():
        np.testing.assert_array_equal(a, want.arrays()[name], err_msg=name)
    assert update["history"] == hist
    for k, v in state.actor.params.items():
        np.testing.assert_array_equal(v, twin.actor.params[k], err_msg=k)


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_off_is_the_iteration_called_by_hand_bitwise(estimator):
    """Dynamic sampling and the overlong punishment off (their defaults): the iteration before them."""
    cfg = config(advantage_estimator=estimator, kl_ref_coef=0.1)
    assert cfg.overlong_max_len is None and not cfg.dynamic_sampling
    sft, rm, tok = world()
    state, twin = state_of(cfg, sft, rm, tok, seed=3), state_of(cfg, sft, rm, tok, seed=3)
    ro, update = grpo_iteration(state, cfg)
    assert_same_iteration(state, twin, ro, update, *by_hand(twin, cfg))
    assert update["dapo/extra_samples"] == 0 and not any(k.startswith("dapo/overlong") for k in update)
    share = np.mean([all_equal(ro.scores[g * N:(g + 1) * N]) for g in range(G)])
    assert update["dapo/zero_variance_share"] == share


# ---- DAPO's soft overlong punishment (GRPOConfig.overlong_max_len, overlong_cache_len) ----

def r_length(y: int, max_len: int, cache_len: int) -> float:
    """DAPO eq. (13), one response, its three cases written out."""
    if y <= max_len - cache_len:
        return 0.0
    if y <= max_len:
        return ((max_len - cache_len) - y) / cache_len
    return -1.0


def ending_world():
    """The tiny world with a policy that ends its answer with probability about 0.34 at every token (the final
    layer norm outputs a constant along the EOS embedding), so that answers of 1-6 tokens all occur."""
    sft, rm, tok = world()
    eos = sft.params["wte"][tok.eos_id]
    sft.params["ln_f.w"][:] = 0.0
    sft.params["ln_f.b"][:] = 5.0 * eos / (eos @ eos)          # logit of EOS 5, the others about 0
    return sft, rm, tok


def hand_penalty(lengths, max_len=5, cache_len=2):
    return np.array([r_length(int(y), max_len, cache_len) for y in lengths])


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo"])
def test_the_overlong_punishment_is_added_to_the_score_before_the_advantages(estimator):
    """L_max = 5, L_cache = 2 on answers of 1-6 tokens: 0 up to 3 tokens, -0.5 at 4, -1 at 5, -1 at 6
    (beyond L_max); the batch has lengths in all three zones. The iteration equals the steps called by hand
    with R_length added to each score, bitwise; the metrics are R_length's mean and share < 0."""
    cfg = config(advantage_estimator=estimator, overlong_max_len=5, overlong_cache_len=2)
    sft, rm, tok = ending_world()
    state, twin = state_of(cfg, sft, rm, tok, seed=4), state_of(cfg, sft, rm, tok, seed=4)
    ro, update = grpo_iteration(state, cfg)
    pen = hand_penalty(ro.lengths)
    zones = {"within" if y <= 3 else "soft" if y <= 5 else "beyond" for y in ro.lengths}
    assert zones == {"within", "soft", "beyond"}, f"lengths {ro.lengths.tolist()}: choose another seed"
    want, hist = by_hand(twin, cfg, penalty=hand_penalty)
    assert_same_iteration(state, twin, ro, update, want, hist)
    np.testing.assert_array_equal(ro.scores, ro.rm_scores + pen)      # missing_eos_penalty is 0 here
    assert update["dapo/overlong_penalty"] == pen.mean() and update["dapo/overlong_share"] == np.mean(pen < 0)


def test_a_budget_no_answer_reaches_is_grpo_bitwise():
    """L_max - L_cache = max_new_tokens: no answer can be punished (R_length = 0 up to L_max - L_cache,
    the longest answers sit on that edge), so the iteration is GRPO's without the punishment, bitwise: the
    rollout, the update's history and the parameters after it; only the two dapo/overlong metrics are added,
    both 0. (Lesson 23's --full run shows this on a CPU where no quick answer reaches DAPO's budget; this test
    shows it on every CPU.)"""
    off = config()
    on = config(overlong_max_len=off.max_new_tokens + 2, overlong_cache_len=2)
    sft, rm, tok = ending_world()
    state, twin = state_of(on, sft, rm, tok, seed=4), state_of(off, sft, rm, tok, seed=4)
    ro, update = grpo_iteration(state, on)
    want, want_update = grpo_iteration(twin, off)
    assert ro.lengths.max() == off.max_new_tokens, "no answer on the edge: choose another seed"
    assert update["dapo/overlong_penalty"] == 0.0 and update["dapo/overlong_share"] == 0.0
    assert_same_iteration(state, twin, ro, update, want, want_update["history"])
    assert {k: v for k, v in update.items() if not k.startswith(("dapo/overlong", "clock"))} == {
        k: v for k, v in want_update.items() if not k.startswith("clock")}


def test_dynamic_sampling_filters_on_the_punished_scores():
    """A reward model that gives every answer 0: a group carries a signal only through its lengths' R_length,
    and the one-round filter's share of zero-variance groups is that of the hand-computed penalties."""
    cfg = config(dynamic_sampling=True, dynamic_max_rounds=0, overlong_max_len=5, overlong_cache_len=2)
    sft, _, tok = ending_world()
    state = state_of(cfg, sft, PromptRule(constant=True), tok, seed=4)
    ro, update = grpo_iteration(state, cfg)
    pen = hand_penalty(ro.lengths)
    share = np.mean([all_equal(pen[g * N:(g + 1) * N]) for g in range(G)])
    assert 0 < share < 1 and update["dapo/zero_variance_share"] == share
    np.testing.assert_array_equal(ro.scores, pen)


@pytest.mark.parametrize("kw, match", [
    (dict(overlong_max_len=0), r"`overlong_max_len` must be in \[1, inf\), got 0"),
    (dict(overlong_max_len=4, overlong_cache_len=5), r"`overlong_cache_len` must be in \[0, 4\], got 5"),
    (dict(overlong_cache_len=2), r"`overlong_cache_len` must be 0 while `overlong_max_len` is None"),
    (dict(overlong_max_len=4, overlong_cache_len=-1), r"`overlong_cache_len` must be in \[0, inf\), got -1"),
    (dict(overlong_max_len=4.5), r"`overlong_max_len` must be an integer"),
])
def test_the_overlong_fields_are_validated_naming_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        config(**kw)


def test_joined_generations_keep_each_rows_tokens_and_logprobs():
    sft, _, tok = world(dtype="float64")
    cfg = config()
    state = state_of(cfg, sft, PromptRule(), tok, seed=5)
    a, b = rounds_by_hand(state, cfg, 2)
    rows_a, rows_b = np.array([4, 5, 6, 7]), np.array([0, 1, 2, 3, 8, 9, 10, 11])
    joined = join_generations([(a, rows_a), (b, rows_b)], tok.pad_id)
    assert joined.sequences.shape[0] == 12
    for part, (gen, rows) in zip((slice(0, 4), slice(4, 12)), ((a, rows_a), (b, rows_b))):
        for i, r in zip(range(12)[part], rows):             # each row's real tokens, in order
            np.testing.assert_array_equal(joined.sequences[i][joined.attn_mask[i] != 0],
                                          gen.sequences[r][gen.attn_mask[r] != 0])
            L = int(gen.response_mask[r].sum())
            np.testing.assert_array_equal(joined.logp[i, :L], gen.logp[r, :L])
            np.testing.assert_array_equal(joined.logp_sampler[i, :L], gen.logp_sampler[r, :L])
        # the model's log-probs of the responses, recomputed in the joined batch: the same numbers up to the
        # float64 rounding of other matmul shapes (1e-12, far above 2e-16 per operation and far below a change)
        mine = response_logprobs(sft, joined.sequences, joined.attn_mask, joined.response, joined.prompt_len)
        theirs = response_logprobs(sft, gen.sequences, gen.attn_mask, gen.response, gen.prompt_len)
        for i, r in zip(range(12)[part], rows):
            L = int(gen.response_mask[r].sum())
            np.testing.assert_allclose(mine[i, :L], theirs[r, :L], rtol=0, atol=1e-12)
    assert joined.response_mask.sum(axis=1).max() == joined.response.shape[1]          # no unused column
    assert joined.attn_mask[:, :joined.prompt_len].sum(axis=1).max() == joined.prompt_len


def test_bad_dynamic_sampling_fields_are_refused():
    with pytest.raises(ValueError, match="`dynamic_sampling` must be True or False"):
        config(dynamic_sampling=1)
    with pytest.raises(ValueError, match="`dynamic_max_rounds` must be in \\[0, inf\\)"):
        config(dynamic_max_rounds=-1)
    with pytest.raises(ValueError, match="`dynamic_sampling` needs a group estimator"):
        config(dynamic_sampling=True, advantage_estimator="reinforce")
