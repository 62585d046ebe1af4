"""Judging a policy: fresh samples for fixed prompts, scored by the simulated human, the RM and the KL.

Legend: N prompts (one response each), Tn response tokens.

The question of RLHF is whether the policy got better *for the human* (gold score), not only for the
reward model it was optimised against, and how far it moved from the reference to get there (KL).
:func:`evaluate_policy` answers both on the same prompts for any policy (SFT before PPO, PPO after),
sampling at the training temperature::

    gold      gold_score(prompt + response)                          the simulated human (never trained on)
    rm        reward_model.score(...)                                 the proxy PPO maximised (normalised)
    kl        sum_t (logp_t - logp_ref_t)                             k1 per response, as ``objective/kl``
    kl_exact  sum_t KL(pi(.|s_t) || pi_ref(.|s_t))                    from the full distributions
    length    response tokens (EOS included); ended: an EOS was produced
"""
from __future__ import annotations

import numpy as np

from minippo.checks import check_range
from minippo.rl.losses import kl_exact_from_logits, logprobs_from_logits
from minippo.rlhf.data.gold import gold_scores
from minippo.rlhf.generate import encode_prompts, generate, show_sample
from minippo.rlhf.ppo import forward_response
from minippo.rlhf.reward_model import has_eos


def evaluate_policy(policy, ref, reward_model, tokenizer, prompts: list[str], *, rng: np.random.Generator,
                    max_new_tokens: int, temperature: float = 1.0, batch_size: int = 128) -> dict:
    """One fresh response per prompt from ``policy``, judged by gold, the RM and the KL to ``ref``.

    Parameters
    ----------
    policy, ref : TinyGPT (pass the same model twice for a KL of 0)
    reward_model : RewardModel, or None (no ``rm`` / ``rm_mean`` in the result: a DPO run has no reward model)
    tokenizer : Tokenizer; prompts : list of N str
    rng : np.random.Generator for the sampling; max_new_tokens, temperature : as in training
    batch_size : prompts per generation call

    Returns
    -------
    dict of (N,) arrays ``gold``, ``rm``, ``kl``, ``kl_exact``, ``length``, ``ended``, the list ``texts``, and
    the summary floats ``gold_mean``, ``gold_std``, ``rm_mean``, ``kl_mean``, ``kl_exact_mean``,
    ``length_mean``, ``ended_frac``.
    """
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("`prompts` must be a non-empty list of str")
    check_range("batch_size", batch_size, 1, None, integer=True)
    keys = ("gold", "rm", "kl", "kl_exact", "length", "ended") if reward_model is not None else (
        "gold", "kl", "kl_exact", "length", "ended")
    parts = {k: [] for k in keys}
    texts = []
    for i in range(0, len(prompts), batch_size):
        ids, mask = encode_prompts(tokenizer, list(prompts[i:i + batch_size]))               # (b, Tp)
        gen = generate(policy, ids, mask, max_new_tokens=max_new_tokens, rng=rng, temperature=temperature,
                       eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
        m = gen.response_mask
        logits, _, _ = forward_response(policy, gen.sequences, gen.attn_mask, gen.prompt_len)   # (b, Tn, V)
        ref_logits, _, _ = forward_response(ref, gen.sequences, gen.attn_mask, gen.prompt_len)
        logp, _ = logprobs_from_logits(logits, gen.response, temperature)
        logp_ref, _ = logprobs_from_logits(ref_logits, gen.response, temperature)
        batch_texts = tokenizer.decode_batch(gen.sequences)
        texts += batch_texts
        parts["gold"].append(gold_scores(batch_texts))
        if reward_model is not None:
            parts["rm"].append(reward_model.score(gen.sequences, gen.attn_mask))
        parts["kl"].append(((logp.astype(np.float64) - logp_ref) * m).sum(axis=1))
        parts["kl_exact"].append((kl_exact_from_logits(logits, ref_logits, temperature) * m).sum(axis=1))
        parts["length"].append(m.sum(axis=1))
        parts["ended"].append(has_eos(gen.response, m, tokenizer.eos_id))
    out = {k: np.concatenate(v) for k, v in parts.items()}
    out["texts"] = texts
    if reward_model is not None:
        out["rm_mean"] = float(out["rm"].mean())
    out.update(gold_mean=float(out["gold"].mean()), gold_std=float(out["gold"].std()), kl_mean=float(out["kl"].mean()),
               kl_exact_mean=float(out["kl_exact"].mean()), length_mean=float(out["length"].mean()),
               ended_frac=float(out["ended"].mean()))
    return out


#: a score moved between the two samples of a prompt when it changed by more than this fraction of the before
#: policy's standard deviation of that score over all evaluated prompts (:func:`disagreements`)
MOVE_FRAC = 0.1
#: mark -> what it means (the line above the table of ``samples.md`` prints them with the rule)
MARKS = {"hacking": "RM up, gold down: the trained policy's sample pleased the reward model more and the simulated "
                    "human less (reward hacking, lesson 19)",
         "regression": "gold down, RM not up: a worse sample for the human, and the reward model did not prefer it",
         "RM down, gold up": "the reward model under-rated a sample the human liked better"}


def disagreements(before: dict, after: dict, frac: float = MOVE_FRAC) -> dict:
    """Where the proxy (RM) and the gold score disagree about the two policies' samples of each prompt.

    A score moved up (down) when ``after - before`` exceeds ``+tol`` (is below ``-tol``), ``tol = frac *
    std(before)`` of that score over all N prompts. Returns ``{"marks": list of N str ("" when no mark),
    "tol_gold", "tol_rm", "counts": mark -> how many of the N prompts}``; the marks are :data:`MARKS`: "hacking"
    (RM up, gold down), "regression" (gold down, RM not up), "RM down, gold up". Each row compares two
    fresh samples, so a single row is an anecdote; the counts are the measurement.
    """
    check_range("frac", frac, 0, None)
    tol_gold, tol_rm = frac * float(np.std(before["gold"])), frac * float(np.std(before["rm"]))
    d_gold, d_rm = np.asarray(after["gold"]) - before["gold"], np.asarray(after["rm"]) - before["rm"]   # (N,)
    gold = np.where(d_gold > tol_gold, 1, np.where(d_gold < -tol_gold, -1, 0))                         # (N,)
    rm = np.where(d_rm > tol_rm, 1, np.where(d_rm < -tol_rm, -1, 0))
    marks = ["hacking" if g < 0 and r > 0 else "regression" if g < 0 else "RM down, gold up" if g > 0 and r < 0
             else "" for g, r in zip(gold, rm)]
    return {"marks": marks, "tol_gold": tol_gold, "tol_rm": tol_rm,
            "counts": {m: marks.count(m) for m in MARKS}}


def samples_markdown(prompts: list[str], before: dict, after: dict, n: int = 16,
                     names: tuple[str, str] = ("SFT", "PPO")) -> str:
    """A Markdown table of the first ``n`` prompts with both policies' texts, gold and RM scores and the mark of
    :func:`disagreements` (the rule and the counts over all prompts on the line above it); a response cut at
    ``max_new_tokens`` without an EOS is marked (:func:`minippo.rlhf.generate.show_sample`)."""
    a, b = names
    d = disagreements(before, after)
    counts = ", ".join(f"{k} {v}" for k, v in d["counts"].items())
    rule = (f"Marks: the gold or the RM score of the {b} sample moved up (down) when it differs from the {a} "
            f"sample's by more than {MOVE_FRAC:g} x the {a} samples' std of that score ({len(prompts)} prompts: "
            f"gold {d['tol_gold']:.3f}, RM {d['tol_rm']:.3f}). "
            + " ".join(f"**{k}**: {v}." for k, v in MARKS.items())
            + f" Each row compares two fresh samples; over all {len(prompts)} prompts: {counts}.")
    rows = [rule, "", f"| # | {a} sample | gold | RM | {b} sample | gold | RM | mark |",
            "|---|---|---|---|---|---|---|---|"]
    for i in range(min(n, len(prompts))):
        mark = f"**{d['marks'][i]}**" if d["marks"][i] else ""
        rows.append(f"| {i} | {show_sample(before['texts'][i], before['ended'][i])} | {before['gold'][i]:+.2f} | "
                    f"{before['rm'][i]:+.2f} | {show_sample(after['texts'][i], after['ended'][i])} | "
                    f"{after['gold'][i]:+.2f} | {after['rm'][i]:+.2f} | {mark} |")
    return "\n".join(rows)
