"""The DPO run: configuration, the whole-model gradient of one step, lr = 0, the step improves its own pairs,
the reward-model stage's pairs and split, resume, NaN guard, every metric in the glossary, the command."""
import json
import shutil

import numpy as np
import pytest

from tests.rlhf.ppo_helpers import world
from minippo.io import load_checkpoint, read_metrics
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.nn.gradcheck import assert_gradients
from minippo.rlhf.checkpoint import save_model
from minippo.rlhf.data.preferences import make_preference_pairs
from minippo.rlhf.dpo import dpo_loss_and_grads, pair_batch, response_logprobs, response_mask
from minippo.rlhf.dpo_config import DPOConfig
from minippo.rlhf.metrics import DPO_GLOSSARY, without_timing
from minippo.flags import field_docs
from minippo.rlhf.rm_train import RMConfig, load_pairs, train_reward_model
from minippo.rlhf.run.dpo_trainer import DPOTrainer


def tiny_pairs(sft, tok, n_prompts=8, seed=0):
    """``(train, heldout)``: K = 3 samples of the random tiny policy per prompt, every pair labelled."""
    pairs = make_preference_pairs(sft, tok, n_prompts, responses_per_prompt=3, rng=np.random.default_rng(seed),
                                  label_temperature=0.1, max_new_tokens=8)
    return pairs.split(0.25, np.random.default_rng(seed + 1))


def tiny_cfg(**kw) -> DPOConfig:
    base = dict(steps=4, batch_prompts=2, warmup_steps=0, eval_every=2, n_eval=4, max_new_tokens=6, checkpoint_every=2,
                lr=1e-3)
    return DPOConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def setup():
    sft, _, tok = world()
    train, heldout = tiny_pairs(sft, tok)
    return sft, tok, train, heldout


# ---- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw, field", [
    (dict(beta=0.0), "beta"), (dict(beta=float("inf")), "beta"), (dict(loss_type="hinge"), "loss_type"),
    (dict(label_smoothing=0.5), "label_smoothing"), (dict(loss_type="ipo", label_smoothing=0.1), "label_smoothing"),
    (dict(steps=0), "steps"), (dict(batch_prompts=0), "batch_prompts"), (dict(lr=-1.0), "lr"),
    (dict(lr=float("inf")), "lr"), (dict(warmup_steps=300), "warmup_steps"), (dict(lr_schedule="step"), "lr_schedule"),
    (dict(adam_betas=(0.9, 1.0)), "adam_betas"), (dict(temperature=0.0), "temperature"),
    (dict(eval_every=-1), "eval_every"), (dict(logp_average=1), "logp_average"), (dict(max_grad_norm=0.0), "max_grad_norm"),
])
def test_bad_configuration_names_the_field(kw, field):
    with pytest.raises(ValueError, match=f"`{field}"):
        DPOConfig(**kw)


def test_every_field_is_documented_and_round_trips():
    cfg = DPOConfig()
    docs = field_docs(DPOConfig)
    assert set(docs) == set(cfg.to_dict()) and all(len(d) > 20 for d in docs.values())
    assert DPOConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="`dpo_config` has the unknown field"):
        DPOConfig.from_dict({"learning_rate": 1.0})


# ---- one step --------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(loss_type="ipo", logp_average=True), dict(label_smoothing=0.2)])
def test_step_gradients_every_tensor(setup, kw):
    """dpo_loss_and_grads of a float64 model against central differences, tensor by tensor (whole model: 1e-5)."""
    sft, tok, train, _ = setup
    cfg64 = GPTConfig(**{**sft.cfg.to_dict(), "dtype": "float64"})
    rng = np.random.default_rng(3)
    policy = TinyGPT.from_params(cfg64, {k: v.astype(np.float64) + rng.normal(0, 0.05, v.shape)
                                         for k, v in sft.params.items()})
    ref = TinyGPT.from_params(cfg64, {k: v.astype(np.float64) for k, v in sft.params.items()})
    mb = pair_batch(train, 2, 0, 0)
    cfg = tiny_cfg(beta=0.5, **kw)
    _, _, grads = dpo_loss_and_grads(policy, ref, mb, cfg)
    assert_gradients(lambda: dpo_loss_and_grads(policy, ref, mb, cfg)[0], policy.params, grads, tol=1e-5,
                     max_entries=6, rng=np.random.default_rng(0))


def test_response_mask_and_logprobs_count_response_tokens_only(setup):
    sft, tok, train, _ = setup
    mb = pair_batch(train, 2, 0, 0)
    m = response_mask(mb)
    n = mb.mask.sum(axis=1)
    assert (m.sum(axis=1) == n - mb.prompt_len).all() and (m[mb.mask == 0] == 0).all()
    seq, _ = response_logprobs(sft, mb)
    # the same number from one row at a time, token by token (rows are right-padded prompt ++ response)
    for i in (0, len(seq) - 1):
        row, k = mb.sequences[i, :n[i]], int(mb.prompt_len[i])
        logits, _, _ = sft.forward(row[None, :-1])
        z = logits[0].astype(np.float64)
        logq = z - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) - z.max(-1, keepdims=True)
        by_hand = sum(logq[t - 1, row[t]] for t in range(k, n[i]))
        # float32 logits: one row alone vs the batch may round differently (CONTRIBUTING); 1e-4 nats per response
        assert seq[i] == pytest.approx(by_hand, abs=1e-4)


def test_response_logprobs_divide_the_logits_by_the_temperature(setup):
    """response_logprobs at temperature 0.7: the sum over the response tokens of log_softmax(logits / 0.7),
    written out for one row at a time (float32 logits: 1e-4 nats per response, as above), and not the
    temperature-1 sum. Catches the temperature not applied to the log-probs."""
    sft, tok, train, _ = setup
    mb = pair_batch(train, 2, 0, 0)
    n = mb.mask.sum(axis=1)
    seq, _ = response_logprobs(sft, mb, temperature=0.7)
    for i in (0, len(seq) - 1):
        row, k = mb.sequences[i, :n[i]], int(mb.prompt_len[i])
        logits, _, _ = sft.forward(row[None, :-1])
        z = logits[0].astype(np.float64) / 0.7
        logq = z - z.max(-1, keepdims=True)
        logq = logq - np.log(np.exp(logq).sum(-1, keepdims=True))
        by_hand = sum(logq[t - 1, row[t]] for t in range(k, n[i]))
        assert seq[i] == pytest.approx(by_hand, abs=1e-4)
        assert abs(response_logprobs(sft, mb)[0][i] - by_hand) > 1e-2


def test_the_implicit_reward_is_beta_times_the_log_ratio(setup):
    """evaluate_pairs' implicit_reward of each response: beta (log pi(y|x) - log pi_ref(y|x)), here with
    beta 0.5 and a policy whose weights are moved away from the reference, against the two sequence
    log-probs computed directly (float32 logits, other batch shapes: 1e-4 nats per log-prob, times beta).
    Catches the reward without its beta."""
    from minippo.rlhf.dpo import evaluate_pairs
    sft, tok, train, heldout = setup
    policy = sft.copy()
    rng = np.random.default_rng(0)
    for p in policy.params.values():
        p += rng.normal(0, 0.05, p.shape).astype(p.dtype)
    out = evaluate_pairs(policy, sft, heldout, tiny_cfg(beta=0.5))
    seq, ref = response_logprobs(policy, heldout)[0], response_logprobs(sft, heldout)[0]
    assert np.abs(seq - ref).max() > 1e-2
    np.testing.assert_allclose(out["implicit_reward"], 0.5 * (seq - ref), rtol=0, atol=0.5 * 2e-4)


def test_trimming_keeps_every_real_token(setup):
    """trim_columns drops only the columns no row uses: every row keeps all its real tokens (the same ids,
    in order) and the longest row fills the last column. Integers: compared exactly. Catches a trim one
    column short (the longest response losing its last token)."""
    from minippo.rlhf.dpo import trim_columns
    _, _, train, _ = setup
    wide = train.select_groups(np.arange(2))
    wide = type(wide)(**{**wide.__dict__, "sequences": np.pad(wide.sequences, ((0, 0), (0, 2))),
                         "mask": np.pad(wide.mask, ((0, 0), (0, 2)))})
    trimmed = trim_columns(wide)
    assert trimmed.mask.shape[1] == wide.mask.sum(axis=1).max() and trimmed.mask[:, -1].any()
    for i in range(len(wide.mask)):
        np.testing.assert_array_equal(trimmed.sequences[i][trimmed.mask[i] != 0], wide.sequences[i][wide.mask[i] != 0])


def test_lr_zero_keeps_the_implicit_rewards_at_zero(setup):
    """Policy and reference are copies: log pi = log pi_ref bitwise (same computation, same shapes), h = 0."""
    sft, tok, train, heldout = setup
    tr = DPOTrainer(tiny_cfg(lr=0.0, steps=2), sft, tok, train, heldout)
    for r in tr.train():
        assert r["loss"] == pytest.approx(np.log(2), rel=1e-15)
        assert r["rewards/chosen"] == r["rewards/rejected"] == r["rewards/margins"] == r["rewards/accuracies"] == 0.0
    assert r["eval_loss"] == pytest.approx(np.log(2), rel=1e-15) and r["objective/kl_exact"] == 0.0


def test_steps_raise_the_margin_of_the_pairs_they_train_on(setup):
    sft, tok, train, heldout = setup
    cfg = tiny_cfg(steps=8, lr=3e-3, beta=0.5, batch_prompts=train.n_groups, eval_every=8)   # every pair, every step
    recs = DPOTrainer(cfg, sft, tok, train, heldout).train()
    assert recs[0]["loss"] == pytest.approx(np.log(2), rel=1e-6)
    assert recs[-1]["rewards/margins"] > 0.3 and recs[-1]["loss"] < 0.6 and recs[-1]["rewards/accuracies"] > 0.8


def test_every_glossary_metric_is_written(tmp_path, setup):
    sft, tok, train, heldout = setup
    DPOTrainer(tiny_cfg(steps=2), sft, tok, train, heldout, out_dir=tmp_path).train()
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert set(recs[-1]) == set(DPO_GLOSSARY) and set(DPO_GLOSSARY) - set(recs[0]) == {
        k for k in DPO_GLOSSARY if k.startswith("eval_") or k in ("gold/score", "objective/kl",
                                                                    "objective/kl_exact", "response/length")}
    assert (tmp_path / "policy" / "weights.safetensors").exists()


# ---- the pairs: the reward-model stage's, split as it split them -----------------------------

def test_load_pairs_gives_the_reward_models_split(tmp_path):
    sft, _, tok = world()
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    rm_cfg = RMConfig(n_prompts=8, responses_per_prompt=3, heldout_frac=0.25, epochs=1, n_eval=4, n_evals=1,
                      max_new_tokens=8, n_train=5)
    r = train_reward_model(rm_cfg, tmp_path / "sft", tmp_path / "rm", progress=False)
    for folder in (tmp_path / "rm", tmp_path / "rm" / "model"):
        train, heldout, cfg = load_pairs(folder)
        assert cfg == rm_cfg and train.n_groups == 5
        for ours, theirs in ((train, r["train"]), (heldout, r["heldout"])):
            np.testing.assert_array_equal(ours.sequences, theirs.sequences)
            np.testing.assert_array_equal(ours.chosen_idx, theirs.chosen_idx)
            np.testing.assert_array_equal(ours.rejected_idx, theirs.rejected_idx)
    (tmp_path / "rm" / "pairs.npz").unlink()
    with pytest.raises(FileNotFoundError, match="pairs.npz is missing"):
        load_pairs(tmp_path / "rm")


# ---- the run folder: resume, NaN guard, the command ------------------------------------------

def test_resume_equals_an_uninterrupted_run(tmp_path, setup):
    sft, tok, train, heldout = setup
    cfg = tiny_cfg(steps=6, checkpoint_every=2, eval_every=3)
    full = DPOTrainer(cfg, sft, tok, train, heldout, out_dir=tmp_path / "full")
    full.train()
    part = DPOTrainer(cfg, sft, tok, train, heldout, out_dir=tmp_path / "part")
    part.train(until=5)                       # checkpoint at 4, then one more step: "crashed" there
    resumed = DPOTrainer(cfg, sft, tok, train, heldout, out_dir=tmp_path / "part", resume=True)
    assert resumed.step_count == 4            # the record of step 4 written before the crash is dropped
    resumed.train()
    a = [without_timing(r) for r in read_metrics(tmp_path / "full" / "metrics.jsonl")]
    b = [without_timing(r) for r in read_metrics(tmp_path / "part" / "metrics.jsonl")]
    assert len(a) == len(b) == 6 and a == b
    for k, v in full.policy.params.items():
        np.testing.assert_array_equal(v, resumed.policy.params[k])
    with pytest.raises(ValueError, match=r"was made with another configuration: beta \(stored 0.1, requested 0.5\)"):
        DPOTrainer(cfg.replace(beta=0.5), sft, tok, train, heldout, out_dir=tmp_path / "part", resume=True)
    more = DPOTrainer(cfg.replace(steps=8, checkpoint_every=4), sft, tok, train, heldout, out_dir=tmp_path / "part",
                      resume=True)                      # steps and checkpoint_every may change on resume
    assert more.step_count == 6


def test_nan_guard_names_the_metric_and_keeps_the_checkpoint(tmp_path, setup, monkeypatch):
    import minippo.rlhf.dpo as dpo_module
    sft, tok, train, heldout = setup
    tr = DPOTrainer(tiny_cfg(steps=4, checkpoint_every=1), sft, tok, train, heldout, out_dir=tmp_path)
    tr.step()
    good = {k: v.copy() for k, v in tr.policy.params.items()}
    saved = tr.policy.params["ln_f.b"][0]
    tr.policy.params["ln_f.b"][0] = np.nan                      # a broken parameter is named by the model
    with pytest.raises(ValueError, match=r"`params\['ln_f.b'\]` must be finite.*\(the parameter `policy.ln_f.b` is "
                                         r"not finite\): training stopped at step 1; the last good checkpoint "
                                         r"\(step 1\) is kept"):
        tr.step()
    tr.policy.params["ln_f.b"][0] = saved
    real = dpo_module.logprobs_from_logits                      # non-finite log-probs: the metric is named
    monkeypatch.setattr(dpo_module, "logprobs_from_logits", lambda *a: (np.full_like(real(*a)[0], np.nan), real(*a)[1]))
    with pytest.raises(ValueError, match=r"`logps` of the policy is nan at response row 0, token column 1 \(every "
                                         r"parameter is finite; the largest is .*\): training stopped at step 1"):
        tr.step()
    monkeypatch.setattr(dpo_module, "logprobs_from_logits", real)
    real_loss = dpo_module.dpo_loss                             # a non-finite loss
    monkeypatch.setattr(dpo_module, "dpo_loss", lambda *a, **k: (float("inf"),) + real_loss(*a, **k)[1:])
    with pytest.raises(ValueError, match=r"`loss` is inf \(every parameter is finite.*\): training stopped at step 1"):
        tr.step()
    arrays, state = load_checkpoint(tmp_path / "checkpoint")
    assert state["step"] == 1 and len(read_metrics(tmp_path / "metrics.jsonl")) == 1
    for k, v in good.items():
        np.testing.assert_array_equal(arrays["policy/" + k], v)
        np.testing.assert_array_equal(tr.policy.params[k], v)   # nothing was applied after the first step
    monkeypatch.setattr(dpo_module, "dpo_loss", real_loss)
    fresh = DPOTrainer(tiny_cfg(), sft, tok, train, heldout, out_dir=tmp_path / "new")
    fresh.policy.params["ln_f.b"][0] = np.inf
    with pytest.raises(ValueError, match="no checkpoint had been written yet"):
        fresh.step()


def test_minippo_dpo_command(tmp_path, capsys):
    sft, _, tok = world()
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    rm_cfg = RMConfig(n_prompts=8, responses_per_prompt=3, heldout_frac=0.25, epochs=1, n_eval=4, n_evals=1,
                      max_new_tokens=8)
    train_reward_model(rm_cfg, tmp_path / "sft", tmp_path / "rm", progress=False)
    shutil.rmtree(tmp_path / "rm" / "model")            # DPO needs the pairs, not the reward model
    from minippo.cli import main
    rc = main(["dpo", "--sft", str(tmp_path / "sft"), "--pairs", str(tmp_path / "rm"), "--out", str(tmp_path / "dpo"),
               "--quick", "--steps", "3", "--batch-prompts", "2", "--eval-every", "3", "--n-eval", "4",
               "--max-new-tokens", "6", "--loss-type", "ipo", "--beta", "0.5", "--warmup-steps", "0", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "rewards/accuracies" in out and "gold/score" in out
    saved = json.loads((tmp_path / "dpo" / "config.json").read_text())
    assert (saved["steps"], saved["loss_type"], saved["beta"]) == (3, "ipo", 0.5)
    assert len(read_metrics(tmp_path / "dpo" / "metrics.jsonl")) == 3
    # a user's mistake is one line naming the flag or the path, no traceback (issue 13 item 9)
    base = ["dpo", "--sft", str(tmp_path / "sft"), "--no-progress"]
    rc = main(base + ["--pairs", str(tmp_path / "nope"), "--out", str(tmp_path / "o1")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"minippo dpo: error: --pairs: {tmp_path / 'nope' / 'pairs.npz'} is missing")
    rc = main(base + ["--pairs", str(tmp_path / "rm"), "--out", str(tmp_path / "o2"), "--beta", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err == "minippo dpo: error: --beta 0: `beta` must be in (0, inf), got 0.0\n"
    (tmp_path / "rm" / "pairs.npz").write_bytes(b"\x00" * 7)
    rc = main(base + ["--pairs", str(tmp_path / "rm"), "--out", str(tmp_path / "o3"), "--quick"])
    err = capsys.readouterr().err
    assert rc == 1 and err.endswith("pairs.npz: not a .npz archive of preference pairs\n") and "Traceback" not in err
    assert err.count("\n") == 1


def test_a_resume_from_another_sft_model_or_other_pairs_is_refused_before_anything_is_written(tmp_path, capsys):
    """`minippo dpo` with --out holding a checkpoint resumed it whatever --sft and --pairs were given (its data_info
    was stored but never compared): a resume from another SFT model or on other pairs went on silently. The
    checkpoint records the SHA-256 of the SFT weights and of pairs.npz, and a resume compares them and the pairs'
    split now, before anything is written; a checkpoint that records no inputs (written before this) is resumed."""
    from minippo.cli import main
    sft, _, tok = world()
    other_sft, _, _ = world(seed=1)                        # the same shape, other weights
    for name, model in (("sft", sft), ("other_sft", other_sft)):
        save_model(tmp_path / name / "model", model, tokenizer=tok)
    for name, n_prompts in (("rm", 8), ("other_rm", 12)):
        rm_cfg = RMConfig(n_prompts=n_prompts, responses_per_prompt=3, heldout_frac=0.25, epochs=1, n_eval=4,
                          n_evals=1, max_new_tokens=8)
        train_reward_model(rm_cfg, tmp_path / "sft", tmp_path / name, progress=False)
    out = tmp_path / "dpo"

    def run(sft_dir, pairs_dir, steps):
        return main(["dpo", "--sft", str(sft_dir), "--pairs", str(pairs_dir), "--out", str(out), "--quick", "--steps",
                     str(steps), "--batch-prompts", "2", "--eval-every", "0", "--max-new-tokens", "6",
                     "--warmup-steps", "0", "--no-progress"])

    assert run(tmp_path / "sft", tmp_path / "rm", 1) == 0
    capsys.readouterr()
    before = snapshot(out)
    for flag, sft_dir, pairs_dir, given in (("sft", "other_sft", "rm", "other_sft/model"),
                                            ("pairs", "sft", "other_rm", "other_rm")):
        assert run(tmp_path / sft_dir, tmp_path / pairs_dir, 2) == 1
        err = capsys.readouterr().err
        stored = tmp_path / ("sft/model" if flag == "sft" else "rm")
        assert f"the checkpoint in {out / 'checkpoint'} was made from another --{flag} (stored " in err, err
        assert f"in {stored}, given " in err and f"in {tmp_path / given}); nothing was changed. To start fresh, use " \
            f"another folder than {out} (or delete it)\n" in err and err.count("\n") == 1
        assert snapshot(out) == before
    state_path = out / "checkpoint" / "state.json"
    state = json.loads(state_path.read_text())
    assert set(state["inputs"]) == {"sft", "pairs"}
    state_path.write_text(json.dumps({k: v for k, v in state.items() if k != "inputs"}))   # before this change
    assert run(tmp_path / "other_sft", tmp_path / "other_rm", 2) == 1         # its data_info: the pairs' split
    assert "(its pairs) was made with another configuration: heldout_pairs (stored 6, requested 9)" in \
        capsys.readouterr().err
    assert run(tmp_path / "other_sft", tmp_path / "rm" / "model", 2) == 0     # no identity recorded: accepted
    assert json.loads(state_path.read_text())["inputs"]["sft"]["folder"] == str(tmp_path / "other_sft" / "model")
    assert len(read_metrics(out / "metrics.jsonl")) == 2


@pytest.mark.slow
def test_rlhf_method_dpo_quick(tmp_path, capsys):
    """`minippo rlhf --method dpo --quick` on a folder holding the quick SFT and reward-model stages and PPO's
    results: the stages are reused, DPO trains on the stage's pairs, the same evaluation as PPO's judges it, and
    DPO writes its own files beside PPO's (issue 26 item 1: PPO's samples.md, summary.json and figure stay as they
    were)."""
    from minippo.cli import main
    from minippo.rlhf.run.pipeline import prepare_stages
    cache = prepare_stages(quick=True, log=lambda *a: None)
    for stage in ("sft", "rm"):
        shutil.copytree(cache / stage, tmp_path / stage)
    ppo_files = {"samples.md": b"# Samples before and after PPO", "summary.json": b'{"method": "ppo"}',
                 "figures/ppo_curves.png": b"PNG of PPO"}
    for name, data in ppo_files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    assert main(["rlhf", "--quick", "--method", "dpo", "--out", str(tmp_path), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("reusing") == 2 and "[3/3] DPO:" in printed and "-> DPO" in printed
    assert {name: (tmp_path / name).read_bytes() for name in ppo_files} == ppo_files
    summary = json.loads((tmp_path / "summary_dpo.json").read_text())
    e = summary["eval"]
    assert summary["method"] == "dpo" and set(e) >= {"sft", "dpo"} and e["sft"]["kl_mean"] == 0.0
    assert e["dpo"]["kl_exact_mean"] > 0 and np.isfinite(e["dpo"]["gold_mean"])
    assert summary["figure"] == str(tmp_path / "figures" / "dpo_curves.png")
    assert (tmp_path / "figures" / "dpo_curves.png").stat().st_size > 20_000
    info = json.loads((tmp_path / "dpo" / "policy" / "state.json").read_text())["data"]
    assert info["train_prompts"] + info["heldout_prompts"] == RMConfig.quick().n_prompts
    assert "| DPO |" in (tmp_path / "samples_dpo.md").read_text()
    # a second run reuses the DPO stage and reproduces the evaluation
    assert main(["rlhf", "--quick", "--method", "dpo", "--out", str(tmp_path), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("reusing") == 3
    assert json.loads((tmp_path / "summary_dpo.json").read_text())["eval"] == e
    # the DPO policy records its pairs: pairs sampled again by another version are not trained over silently
    assert set(json.loads((tmp_path / "dpo" / "policy" / "state.json").read_text())["inputs"]) == {"sft", "pairs"}
    pairs = tmp_path / "rm" / "pairs.npz"
    pairs.write_bytes(pairs.read_bytes() + b"\0")
    assert main(["rlhf", "--quick", "--method", "dpo", "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'dpo' / 'policy'} (stage dpo of the run in {tmp_path}) was made from another --pairs" in err


# ---- the run-folder rules of issue 13 (minippo.runs), kept by the DPO run --------------------

@pytest.fixture
def stopped(tmp_path, setup):
    """A DPO run folder stopped after 2 of 4 steps (checkpoint at step 2)."""
    sft, tok, train, heldout = setup
    cfg = tiny_cfg(steps=4, checkpoint_every=2, eval_every=2)
    tr = DPOTrainer(cfg, sft, tok, train, heldout, out_dir=tmp_path)
    tr.train(until=2)
    tr.close()
    return tmp_path, cfg


def snapshot(folder):
    """Every file's bytes (but the lock file): what a refused resume must leave as it was."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".minippo.lock"}


def test_a_second_writer_on_a_dpo_folder_refuses_before_writing(tmp_path, setup):
    from tests.test_runs import hold_lock
    from minippo.runs import RunFolderBusy
    sft, tok, train, heldout = setup
    p = hold_lock(tmp_path)                              # a real second process holds the folder
    try:
        with pytest.raises(RunFolderBusy, match=f"{tmp_path} is being written by another process \\(pid {p.pid}"):
            DPOTrainer(tiny_cfg(), sft, tok, train, heldout, out_dir=tmp_path)
        assert sorted(x.name for x in tmp_path.iterdir()) == [".minippo.lock"]
    finally:
        p.kill()
        p.wait()
    DPOTrainer(tiny_cfg(), sft, tok, train, heldout, out_dir=tmp_path).close()     # the holder is gone


@pytest.mark.parametrize("change, match", [
    (lambda a: a.update({"policy/wte": a["policy/wte"][:1]}), r"'policy/wte' has shape \(1, 16\), expected"),
    (lambda a: a.update({"policy/ln_f.w": np.ones(16, np.int32)}), "'policy/ln_f.w' has dtype I32, expected float32"),
    (lambda a: a.update({"opt/m.ln_f.b": np.zeros(1, np.float32)}), r"'opt/m.ln_f.b' has shape \(1,\)"),
    (lambda a: a.pop("policy/ln_f.b"), "tensor 'policy/ln_f.b' is missing"),
    (lambda a: a.update({"junk": np.zeros((64, 64), np.float32)}), "unexpected tensor 'junk'"),
    (lambda a: a["policy/wpe"].__setitem__((3, 2), np.nan), r"'policy/wpe' holds nan at \(3, 2\)"),
])
def test_a_tampered_dpo_checkpoint_is_refused_before_anything_is_assigned(stopped, setup, change, match):
    from safetensors.numpy import load_file, save_file
    from minippo.io import WEIGHTS, CorruptFileError
    folder, cfg = stopped
    sft, tok, train, heldout = setup
    path = folder / "checkpoint" / WEIGHTS
    arrays = load_file(str(path))
    change(arrays)
    save_file(arrays, str(path))
    before = snapshot(folder)
    with pytest.raises(CorruptFileError, match=match) as info:
        DPOTrainer(cfg, sft, tok, train, heldout, out_dir=folder, resume=True)
    assert str(info.value).startswith(f"{path}: ")
    assert snapshot(folder) == before                    # metrics.jsonl and the rest untouched


@pytest.mark.parametrize("entry, value, match", [
    ("step", -5, r"`step` must be in \[1, 4\], got -5"),
    ("step", 99, r"`step` must be in \[1, 4\], got 99"),
    ("opt", {"t": 2, "lr": float("inf")}, r"`scalars\['lr'\]` must be a finite number"),
    ("dpo_config", {"learning_rate": 1.0}, "unknown field"),
    ("format", "minippo.ppo/2", "not a DPO checkpoint"),
])
def test_a_bad_dpo_state_entry_stops_the_resume_before_any_file_is_rewritten(stopped, setup, entry, value, match):
    from minippo.io import STATE, CorruptFileError
    folder, cfg = stopped
    sft, tok, train, heldout = setup
    path = folder / "checkpoint" / STATE
    state = json.loads(path.read_text())
    state[entry] = value
    path.write_text(json.dumps(state))
    before = snapshot(folder)
    with pytest.raises(CorruptFileError, match=match) as info:
        DPOTrainer(cfg, sft, tok, train, heldout, out_dir=folder, resume=True)
    assert str(info.value).startswith(f"{path}: ")
    assert snapshot(folder) == before and len(read_metrics(folder / "metrics.jsonl")) == 2


def test_a_folder_holding_a_dpo_run_is_never_overwritten(stopped, setup):
    from minippo.runs import ConfigMismatch
    folder, cfg = stopped
    sft, tok, train, heldout = setup
    before = snapshot(folder)
    with pytest.raises(FileExistsError, match=f"{folder} already holds a DPO run .*nothing was overwritten"):
        DPOTrainer(cfg, sft, tok, train, heldout, out_dir=folder)            # resume=False on an existing run
    with pytest.raises(ConfigMismatch, match=r"loss_type \(stored 'sigmoid', requested 'ipo'\)"):
        DPOTrainer(cfg.replace(loss_type="ipo"), sft, tok, train, heldout, out_dir=folder, resume=True)
    assert snapshot(folder) == before
    with pytest.raises(ValueError, match=r"`max_new_tokens` = 100000 does not fit"):
        DPOTrainer(cfg.replace(max_new_tokens=100000), sft, tok, train, heldout, out_dir=folder / "new")
    assert not (folder / "new" / "config.json").exists()


def test_the_pipeline_refuses_a_dpo_stage_made_with_another_config(tmp_path):
    """The reuse rule (README "What a run folder guarantees") for `minippo rlhf --method dpo`: a DPO stage is reused
    only with the config it was made with; otherwise the command refuses before writing anything."""
    from minippo.rlhf.run.pipeline import check_reuse, stage_configs
    from minippo.runs import ConfigMismatch
    sft, _, tok = world()
    save_model(tmp_path / "sft" / "model", sft, tokenizer=tok)
    rm_cfg = RMConfig(n_prompts=8, responses_per_prompt=3, heldout_frac=0.25, epochs=1, n_eval=4, n_evals=1,
                      max_new_tokens=8)
    train_reward_model(rm_cfg, tmp_path / "sft", tmp_path / "rm", progress=False)
    cfg = tiny_cfg(steps=2)
    from minippo.rlhf.run.dpo_trainer import run_dpo
    run_dpo(cfg, tmp_path / "sft", tmp_path / "rm", tmp_path / "dpo", progress=False).close()
    sft_cfg, _, ppo_cfg = stage_configs(quick=True)
    check_reuse(tmp_path, sft_cfg, rm_cfg, ppo_cfg, stages=("rm", "dpo"), dpo_cfg=cfg)       # same config: reused
    with pytest.raises(ConfigMismatch, match=r"stage dpo .*beta \(stored 0.1, requested 0.3\).*delete .*dpo"):
        check_reuse(tmp_path, sft_cfg, rm_cfg, ppo_cfg, stages=("rm", "dpo"), dpo_cfg=cfg.replace(beta=0.3))
