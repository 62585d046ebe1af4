"""minippo.studies.study: variants run from the cached quick stages, deterministically, judged alike."""
import numpy as np

from minippo.rlhf.metrics import without_timing
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.studies.study import Study, final


def _without_timing(records):
    return [without_timing(r) for r in records]


def test_sweep_is_deterministic_and_evaluates_every_seed():
    study = Study(quick=True, seed=0, n_eval=8)
    variants = {"eps0.1": {"clip_eps": 0.1}, "eps0.3": {"clip_eps": 0.3}}
    a = study.sweep(variants, seeds=(0, 1), base={"iterations": 2})
    b = study.sweep({"eps0.1": {"clip_eps": 0.1}}, seeds=(0,), base={"iterations": 2})
    assert set(a) == set(variants)
    assert all(len(v["records"]) == 2 and len(v["eval"]) == 2 for v in a.values())
    # same config and seed -> the same numbers and samples; another seed -> other samples
    assert _without_timing(a["eps0.1"]["records"][0]) == _without_timing(b["eps0.1"]["records"][0])
    assert a["eps0.1"]["eval"][0]["texts"] == b["eps0.1"]["eval"][0]["texts"]
    assert a["eps0.1"]["eval"][0]["texts"] != a["eps0.1"]["eval"][1]["texts"]
    # the variants really differ (clip_eps changes the update)
    assert _without_timing(a["eps0.1"]["records"][0]) != _without_timing(a["eps0.3"]["records"][0])
    # every evaluation is on the study's prompts, one response each
    assert all(len(e["gold"]) == 8 for v in a.values() for e in v["eval"])
    assert study.reference["gold"].shape == (8,)


def test_final_averages_the_last_iterations():
    recs = [{"x": float(i)} for i in range(10)]
    assert final(recs, "x", last=4) == 7.5


def test_evaluate_scores_with_the_reward_model_given():
    study = Study(quick=True, seed=0, n_eval=4)

    class Constant:                                  # any object with RewardModel.score's signature
        def score(self, sequences, attn_mask):
            return np.full(len(sequences), 7.0)

    a = study.evaluate(study.sft)
    b = study.evaluate(study.sft, reward_model=Constant())
    assert a["texts"] == b["texts"] and np.array_equal(a["gold"], b["gold"])     # same samples ...
    assert np.all(b["rm"] == 7.0) and not np.all(a["rm"] == 7.0)                # ... scored by the given RM


def test_heldout_sequences_and_lm_loss():
    import pytest

    from minippo.blas import single_blas_thread
    from minippo.rlhf.data.corpus import generate_corpus
    from minippo.rlhf.data.batches import split_corpus
    from minippo.rlhf.lm_train import heldout_loss
    from minippo.rlhf.run.trainer import sft_training_sequences

    study = Study(quick=True, seed=0, n_eval=8)
    c = study.sft_state["sft_config"]
    _, held_texts = split_corpus(generate_corpus(c["corpus_size"], seed=c["seed"]), c["heldout_frac"])
    held = study.heldout_sequences
    assert 0 < len(held) <= len(held_texts) and len(study.ptx_sequences) > len(held)
    # the held-out split is the tail of the corpus: its first sentence decodes to the first held-out text
    assert study.tokenizer.decode(held[0][1:-1].tolist()).strip() == held_texts[0].strip()
    loss = study.lm_loss(study.sft)
    # lm_loss runs on one BLAS thread: so does the direct call, the same products in the same order -> bitwise
    # (on the default thread count a kernel may split the work, and sum it, differently: Haswell / Zen do)
    with single_blas_thread():
        assert loss == heldout_loss(study.sft, held, study.tokenizer.pad_id)
    assert 0 < study.lm_loss(study.sft, n=5) and study.lm_loss(study.sft, n=5) != loss
    with pytest.raises(ValueError, match="`n`"):
        study.lm_loss(study.sft, n=0)
    with pytest.raises(ValueError, match="`split`"):
        sft_training_sequences(study.sft_state, study.tokenizer, split="test")


def test_sweep_times_each_run_and_collects_extra():
    study = Study(quick=True, seed=0, n_eval=8)
    out = study.sweep({"a": {}}, seeds=(0, 1), base={"iterations": 1}, evaluate=False,
                      extra=lambda r: (r["config"].seed, len(r["records"])))
    assert out["a"]["extra"] == [(0, 1), (1, 1)] and out["a"]["eval"] == []
    assert all(t["wall"] > 0 and t["cpu"] > 0 for t in out["a"]["time"])
    assert "extra" not in study.sweep({"a": {}}, seeds=(0,), base={"iterations": 1}, evaluate=False)["a"]


def test_sweep_passes_the_reward_model_and_the_callback():
    from minippo.rlhf.reward_model import RewardModel

    study = Study(quick=True, seed=0, n_eval=4)
    rm = study.reward_model
    shifted = RewardModel(rm.model, gain=rm.gain, bias=rm.bias + 5.0)        # the same RM, scores + 5
    seen = []

    def callback(trainer, rollout, record):
        seen.append(trainer.state.reward_model)
        record["extra/mean_score"] = float(rollout.rm_scores.mean())

    base = {"config": KnobsConfig, "iterations": 1, "critic_bias_init": "keep"}
    a = study.sweep({"v": {}}, seeds=(0,), base=base)["v"]
    b = study.sweep({"v": {}}, seeds=(0,), base=base, reward_model=shifted, callback=callback)["v"]
    assert seen == [shifted]                                                 # trained against the given RM
    rec_a, rec_b = a["records"][0][0], b["records"][0][0]
    assert rec_b["extra/mean_score"] == rec_b["objective/rm_scores"]          # the callback's entry is kept
    assert np.isclose(rec_b["objective/rm_scores"], rec_a["objective/rm_scores"] + 5.0)
    assert np.allclose(b["eval"][0]["rm"], a["eval"][0]["rm"] + 5.0)          # and evaluated with it


def test_sweep_evaluates_each_variant_at_its_own_response_length():
    study = Study(quick=True, seed=0, n_eval=8)
    out = study.sweep({"short": {"max_new_tokens": 4}}, seeds=(0,), base={"iterations": 1})
    assert out["short"]["eval"][0]["length"].max() <= 4
