"""Judging a policy on held-out problems: pass@k from n samples per problem, and how long its answers are.

Legend: P problems, n samples per problem, B = P * n rows, Tn response tokens.

For each held-out problem the policy writes ``n`` fresh answers at the sampling temperature; the verifier
counts the right ones, ``c``. Then, per problem, the unbiased pass@k of Chen et al. 2021 eq. (1)
(:func:`minippo.rl.pass_k.pass_at_k`, needs ``n >= k``), averaged over the problems::

    pass@k = mean_p [ 1 - C(n - c_p, k) / C(n, k) ]        pass@1 = mean_p c_p / n, the pass rate

pass@1 is what one answer is worth; pass@k at large k asks whether the right answer is anywhere in what
the policy samples (Yue et al. 2025, arXiv:2504.13837, compare the two before and after RL). Beside them: the
mean response length (tokens, the EOS included) of the right answers and of the wrong ones (every answer
that is not right: wrong sums, malformed and unfinished ones), the share of well-formed answers, and the
share of problems whose n answers are all right or all wrong (those of a group of n would give a
group-relative method no signal: :func:`minippo.rl.dapo.zero_variance_groups`).

Exercise: write pass@k yourself, `minippo exercise start pass_at_k` (graded by `minippo exercise check pass_at_k`).
"""
from __future__ import annotations

import numpy as np

from minippo.blas import single_blas_thread
from minippo.checks import check_range
from minippo.rl.pass_k import pass_at_k
from minippo.rlhf.generate import encode_prompts, generate

KS = (1, 4, 16, 64)           # the k of pass@k that ``minippo rlvr`` prints (n >= 64 samples per problem)
CHUNK_ROWS = 4096             # rows sampled at once: bounds the activations' memory, not the result


def sample_answers(policy, tokenizer, verifier, prompts: list[str], n: int, *, max_new_tokens: int,
                   temperature: float, rng: np.random.Generator) -> dict:
    """``n`` sampled answers to each prompt, verified: ``right`` and ``formed`` (P, n) bool, ``lengths`` (P, n)
    int (response tokens, the EOS included), and ``texts`` (P, n) of the answers (the text before the EOS)."""
    check_range("n", n, 1, None, integer=True)
    rows = [p for p in prompts for _ in range(n)]                        # (B,) problem-major
    right, formed, lengths, texts = [], [], [], []
    per_chunk = max(1, CHUNK_ROWS // n) * n                              # whole problems per chunk
    with single_blas_thread():
        for i in range(0, len(rows), per_chunk):
            ids, mask = encode_prompts(tokenizer, rows[i:i + per_chunk])    # (b, Tp) left-padded
            gen = generate(policy, ids, mask, max_new_tokens=max_new_tokens, rng=rng, temperature=temperature,
                           eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
            ok, fine = verifier.check(gen.sequences, gen.attn_mask)
            right.append(ok), formed.append(fine), lengths.append(gen.lengths)
            texts += tokenizer.decode_batch(gen.response)
    P = len(prompts)
    return {"right": np.concatenate(right).reshape(P, n), "formed": np.concatenate(formed).reshape(P, n),
            "lengths": np.concatenate(lengths).reshape(P, n), "texts": np.array(texts, dtype=object).reshape(P, n)}


def evaluate_pass_at_k(policy, tokenizer, verifier, problems, n: int, *, max_new_tokens: int, temperature: float,
                       rng: np.random.Generator, ks=KS) -> dict:
    """pass@k for every k of ``ks`` (each <= ``n``) on ``problems`` (their ``prompt``), and the answers' lengths.

    Returns a dict: ``pass@k`` for each k (mean over problems), ``n_problems``, ``n_samples`` (= n),
    ``length_right`` / ``length_wrong`` (mean response tokens of the right / other answers; None when there
    is none), ``formed`` (share of well-formed answers), ``all_right`` / ``all_wrong`` (share of problems whose
    n answers are all right / all wrong), ``per_problem_right`` (list of c per problem) and ``samples`` (the
    first problems' prompt, answer and first answers, for printing).
    """
    for k in ks:
        check_range("k", k, 1, n, integer=True)
    s = sample_answers(policy, tokenizer, verifier, [p.prompt for p in problems], n,
                       max_new_tokens=max_new_tokens, temperature=temperature, rng=rng)
    c = s["right"].sum(axis=1)                                           # (P,) right answers per problem
    out = {f"pass@{k}": float(np.mean(pass_at_k(np.full(len(problems), n), c, k))) for k in ks}
    lengths, right = s["lengths"], s["right"]
    out.update({
        "n_problems": len(problems), "n_samples": n,
        "length_right": float(lengths[right].mean()) if right.any() else None,
        "length_wrong": float(lengths[~right].mean()) if (~right).any() else None,
        "formed": float(s["formed"].mean()),
        "all_right": float(np.mean(c == n)), "all_wrong": float(np.mean(c == 0)),
        "per_problem_right": [int(x) for x in c],
        "samples": [{"prompt": p.prompt, "answer": p.answer, "answers": list(s["texts"][i, :4])}
                    for i, p in enumerate(problems[:8])],
    })
    return out
