"""DAPO's dynamic sampling in the critic-free iteration (GRPOConfig.dynamic_sampling): a group whose scores are all
equal is dropped and more groups are sampled until the batch is full; the cap on extra rounds is respected; off,
the iteration is steps 1-6 of grpo.py called by hand, bitwise; the generations joined from several rounds keep
each row's tokens and log-probabilities."""
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


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_off_is_the_iteration_called_by_hand_bitwise(estimator):
    cfg = config(advantage_estimator=estimator, kl_ref_coef=0.1)
    sft, rm, tok = world()
    state, twin = state_of(cfg, sft, rm, tok, seed=3), state_of(cfg, sft, rm, tok, seed=3)
    ro, update = grpo_iteration(state, cfg)
    # steps 1-6 of the module docstring, one plain call each (the iteration before dynamic sampling)
    gen = sample(twin, cfg, *twin.prompts.draw(cfg.num_prompts, twin.rng, repeat=cfg.samples_per_prompt))
    want = score(twin, cfg, gen, np.zeros(gen.response_mask.shape, dtype=np.float64))
    want.rewards, want.kl, want.non_score_reward = per_token_rewards(want.scores, want.logp, want.logp_ref,
                                                                     want.response_mask, twin.kl_ctl.value)
    want.adv = group_advantages(want.sequence_returns, want.response_mask, cfg).astype(np.float64)
    want.returns = (want.adv + want.values) * want.response_mask
    hist = grpo_update(twin, want, cfg)["history"]
    for name, a in ro.arrays().items():
        np.testing.assert_array_equal(a, want.arrays()[name], err_msg=name)
    assert update["history"] == hist
    for k, v in state.actor.params.items():
        np.testing.assert_array_equal(v, twin.actor.params[k], err_msg=k)
    assert update["dapo/extra_samples"] == 0
    share = np.mean([all_equal(ro.scores[g * N:(g + 1) * N]) for g in range(G)])
    assert update["dapo/zero_variance_share"] == share


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
