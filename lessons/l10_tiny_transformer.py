r"""Lesson 10 - tiny_transformer: hand-written backprop checked tensor by tensor, then SFT.

Pipeline step: the model itself, and stage 1 of RLHF (SFT -> reward model -> RL): supervised fine-tuning on
demonstrations. The same TinyGPT class is the actor, the critic (its scalar head), the frozen reference and
the reward model of the later lessons, so everything PPO computes rests on its gradients being right.

Paper: the GPT-2 architecture (Radford et al. 2019) at toy size, trained on the language-model loss

$$
L(\theta) = -\frac{1}{N} \sum_{t} \log \pi_\theta(x_{t+1} \mid x_{\le t})
$$

over the valid tokens of a batch, with a scalar head $V_\theta(s_t)$ read from the same last hidden state.

The figure:
(a) Gradient check of the WHOLE model, every tensor, in float64: the analytic gradients of
    $L = -\mathrm{mean} \log \pi(\text{target}) + \tfrac12 \mathrm{mean} (V - R)^2$ (the LM head and the scalar
    head together, with a left- and a right-padded row) against central differences
    $(L(p + h) - L(p - h)) / 2h$. Each tensor's relative error $\|g - g_{num}\| / \max(\|g\|, \|g_{num}\|)$ must
    be <= 1e-5; it is ~1e-9.
(b) SFT loss curve: a fresh model starts at $\ln V$ (it spreads its probability evenly over the V tokens),
    falls through the unigram baseline (word frequencies without context) and ends far below it: the gap is
    grammar and sentiment read from the context.
(c) What the simulated human (gold score) thinks of sentences written from <bos> alone, before and after
    SFT, next to real corpus sentences: untrained text is gibberish (gold -3, the penalty cap); after SFT most
    samples are grammatical sentences with no penalty at all.
(d) The samples themselves.

Exercises:
1. Break one backward line (e.g. drop the 1/sqrt(hs) in attention or the tied-embedding sum in
   TinyGPT.backward) and rerun (a): which tensors fail, and why exactly those?
2. Train with n_embd=32 and with n_layer=1 (edit LESSON_SFT): how close do they get to the same
   held-out loss? Does the penalty-free fraction follow the loss?
3. Sample the trained model at temperature 0.5 and 1.5 (minippo.rlhf.sft.sample_and_judge): what
   happens to the penalty-free fraction and to the variety of the sentences?
4. Implement it: `minippo exercise start layernorm_backward`, then `minippo exercise check layernorm_backward`.

Questions: Q28, Q31.
"""
from __future__ import annotations

import tempfile
import textwrap
import time

import numpy as np

from lessons._common import Verdict, by_key, comparison, diff_text, identity, lesson_main, measurement, pyplot, save
from minippo.blas import single_blas_thread
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.nn.gradcheck import check_gradients
from minippo.rl.losses import logprobs_backward, logprobs_from_logits
from minippo.rlhf.data.corpus import generate_corpus
from minippo.rlhf.generate import generate_text, show_sample
from minippo.rlhf.data.gold import gold_breakdown, gold_scores
from minippo.rlhf.sft import SFTConfig, init_model, sample_and_judge, train_sft

# the lesson's SFT: the pipeline's model (`minippo sft`) with 1000 steps instead of 1500 (its CPU seconds,
# beside the machine's matmul GFLOP/s: README, "How long each lesson takes")
LESSON_SFT = SFTConfig(steps=1000, eval_interval=25, ckpt_interval=1000, n_samples=128)
QUICK_SFT = SFTConfig(corpus_size=1200, heldout_frac=0.1, vocab_size=160, n_layer=1, n_head=2, n_embd=32,
                      batch_size=16, steps=60, lr=5e-3, warmup_steps=5, eval_interval=10, ckpt_interval=60,
                      n_samples=16)
PROMPTS = ["the film was", "i thought the", "overall , the", "the actors"]


def actor_critic_loss(model, idx, targets, mask, attn_mask, R):
    """L = -mean log pi(targets) + 0.5 mean (V - R)^2 over mask == 1, and its gradients (hand-written)."""
    logits, values, cache = model.forward(idx, attn_mask, scalar=True)      # (B, T, V), (B, T)
    logp, c_logp = logprobs_from_logits(logits, targets)                     # (B, T)
    n = mask.sum()
    loss = -(logp * mask).sum() / n + 0.5 * (((values - R) ** 2) * mask).sum() / n
    dlogits = logprobs_backward(-mask / n, c_logp)                           # d loss / d logits
    grads = model.backward(cache, dlogits=dlogits, dscalar=(values - R) * mask / n)
    return float(loss), grads


def gradient_check(seed: int, quick: bool):
    """Check every tensor of a tiny float64 TinyGPT; returns the GradCheckResult (a table)."""
    rng = np.random.default_rng([seed, 10])
    model = TinyGPT(GPTConfig(vocab_size=16, block_size=8, n_layer=2, n_head=2, n_embd=8, dtype="float64"), rng=rng)
    for p in model.params.values():                 # O(0.3) values everywhere, so every path carries gradient
        p += rng.normal(0.0, 0.3, p.shape)
    B, T = 3, 8
    idx, targets = rng.integers(0, 16, (B, T)), rng.integers(0, 16, (B, T))
    attn_mask = np.ones((B, T), dtype=np.int64)
    attn_mask[1, :3] = 0                            # a left-padded prompt
    attn_mask[2, 5:] = 0                            # a right-padded response
    mask = attn_mask.astype(np.float64)
    R = rng.normal(size=(B, T))                     # value targets
    _, grads = actor_critic_loss(model, idx, targets, mask, attn_mask, R)
    f = lambda: actor_critic_loss(model, idx, targets, mask, attn_mask, R)[0]
    return check_gradients(f, model.params, grads, tol=1e-5, max_entries=8 if quick else None,
                           rng=np.random.default_rng(seed))


def run(quick: bool = False, seed: int = 0) -> dict:
    with single_blas_thread():            # tiny matrices: one BLAS thread is much faster
        return _run(quick, seed)


def _run(quick: bool, seed: int) -> dict:
    t0 = time.perf_counter()
    check = gradient_check(seed, quick)
    t_check = time.perf_counter() - t0

    cfg = SFTConfig.from_dict({**(QUICK_SFT if quick else LESSON_SFT).to_dict(), "seed": seed})
    with tempfile.TemporaryDirectory(prefix="minippo_l10_") as out:
        r = train_sft(cfg, out, progress=False)
    tok, model = r["tokenizer"], r["model"]
    rng = np.random.default_rng([seed, 11])
    before, before_stats = sample_and_judge(init_model(cfg, tok.vocab_size), tok, cfg.n_samples, 1.0, rng)
    prompted, prompted_gen = generate_text(model, tok, PROMPTS, rng=rng)
    hist = r["history"]
    corpus = generate_corpus(len(before), seed=seed + 1000)
    return {
        "gradcheck": check, "gradcheck_ok": check.ok, "gradcheck_max_rel_err": max(x.rel_err for x in check),
        "gradcheck_seconds": t_check,
        "steps": np.array([h["step"] for h in hist if "train/loss" in h]),
        "train_loss": np.array([h["train/loss"] for h in hist if "train/loss" in h]),
        "eval_steps": np.array([h["step"] for h in hist if "eval/heldout_loss" in h]),
        "heldout_loss": np.array([h["eval/heldout_loss"] for h in hist if "eval/heldout_loss" in h]),
        "initial_loss": r["initial_loss"], "ln_V": r["ln_V"], "final_loss": r["heldout_loss"],
        "unigram_loss": r["unigram_loss"], "vocab_size": tok.vocab_size, "n_params": r["n_params"],
        "config": cfg, "sft_seconds": r["train_seconds"],
        "before": before, "before_stats": before_stats,
        "after": r["samples"], "after_stats": {k: r[k] for k in before_stats},
        "prompted": prompted, "prompted_gold": gold_scores(prompted), "prompted_ended": prompted_gen.ended.copy(),
        "corpus_gold": gold_scores(corpus),
        # the sentiment term of the gold (module docstring of rlhf/data/gold.py), sample by sample
        "after_sentiment": np.array([gold_breakdown(t)["sentiment"] for t, _ in r["samples"]]),
        "corpus_sentiment": np.array([gold_breakdown(t)["sentiment"] for t in corpus]),
    }


def _short(text: str, width: int = 78) -> str:
    return textwrap.shorten(text, width, placeholder=" ...") if text else "(empty)"


def two_sample(a, b) -> dict:
    """mean(b) - mean(a) of two independent samples, se = sqrt(var_a / n_a + var_b / n_b) (ddof 1), clear beyond 2 se."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(b.mean() - a.mean())
    se = float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))
    return {"diff": diff, "se": se, "clear": abs(diff) >= 2 * se}


GRAD_TOL = 1e-5            # the whole model's relative error in float64 (check_gradients' tolerance)


def verdicts(r: dict) -> list[Verdict]:
    """The lesson's claims, each judged from the numbers of ``r`` (noise: the spread of the samples)."""
    sa, sc = r["after_sentiment"], r["corpus_sentiment"]
    worded = (float(np.mean(sa != 0)), float(np.mean(sc != 0)))
    return [
        identity("gradcheck", "The hand-written backward pass is the gradient: every tensor of TinyGPT agrees with "
                 "central differences.", r["gradcheck_ok"], f"holds when every one of the {len(r['gradcheck'])} "
                 f"tensors has relative error <= {GRAD_TOL:g} (float64)",
                 {"largest relative error": r["gradcheck_max_rel_err"]}),
        measurement("uniform_start", "A fresh model guesses uniformly: its held-out loss is ln V.",
                    abs(r["initial_loss"] - r["ln_V"]) / r["ln_V"], 0.01, "<", "|initial loss - ln V| / ln V"),
        measurement("context_helps", "After SFT the context is worth something: the held-out loss beats the unigram "
                    "baseline.", r["unigram_loss"] - r["final_loss"], 0.0, ">", "unigram - final loss (nats/token)",
                    fmt=".2f"),
        comparison("sft_gold_gain", "After SFT the model writes better sentences than the untrained one (gold of "
                   "samples from <bos>).", two_sample([g for _, g in r["before"]], [g for _, g in r["after"]]),
                   expect=+1, labels=("before SFT", "after SFT"), quantity="gold",
                   values=(r["before_stats"]["sample_gold_mean"], r["after_stats"]["sample_gold_mean"]), fmt="+.2f",
                   noise="sampling"),
        measurement("uses_sentiment_words", "The SFT samples carry sentiment words at least half as often as the "
                    "corpus (SFT has picked up the corpus's sentiment vocabulary).", worded[0] / max(worded[1], 1e-12),
                    0.5, ">=", "share with a sentiment word, samples / corpus", fmt=".2f",
                    numbers={"samples": worded[0], "corpus": worded[1]}),
    ]


def narrative(r: dict) -> str:
    V = by_key(verdicts(r))
    L = []
    L.append(f"(a) Gradient check of every tensor of a float64 TinyGPT (LM loss + scalar-head value loss, "
             f"padded rows), {r['gradcheck_seconds']:.1f} s:")
    L.append(r["gradcheck"].table())
    L.append(f"    largest relative error {r['gradcheck_max_rel_err']:.1e} (tolerance 1e-5).")
    L.append(V["gradcheck"].render("    "))
    c = r["config"]
    L.append(f"(b) SFT: {r['n_params']:,} parameters (L={c.n_layer}, H={c.n_head}, C={c.n_embd}, V={r['vocab_size']}), "
             f"{c.steps} steps of {c.batch_size} sentences in {r['sft_seconds']:.1f} s.")
    L.append(f"    initial held-out loss {r['initial_loss']:.3f} nats/token vs ln V = {r['ln_V']:.3f}.")
    L.append(V["uniform_start"].render("    "))
    L.append(f"    final held-out loss {r['final_loss']:.3f} vs unigram baseline {r['unigram_loss']:.3f}: "
             f"{r['unigram_loss'] - r['final_loss']:+.2f} nats per token.")
    L.append(V["context_helps"].render("    "))
    bs, af = r["before_stats"], r["after_stats"]
    L.append(f"(c) gold of {len(r['after'])} samples from <bos>: before SFT mean {bs['sample_gold_mean']:+.2f} "
             f"({bs['sample_penalty_free']:.0%} penalty-free), after {af['sample_gold_mean']:+.2f} "
             f"({af['sample_penalty_free']:.0%} penalty-free, {af['sample_ended']:.0%} ended with <eos>); "
             f"corpus sentences {r['corpus_gold'].mean():+.2f}.")
    L.append("(d) before SFT:")
    for (t, g), e in zip(r["before"][:2], bs["sample_ended_each"]):
        L.append(f"    gold {g:+.2f} | {show_sample(_short(t, 100), e)}")
    L.append("    after SFT:")
    for (t, g), e in zip(r["after"][:5], af["sample_ended_each"]):
        L.append(f"    gold {g:+.2f} | {show_sample(t, e)}")
    for t, g, e in zip(r["prompted"], r["prompted_gold"], r["prompted_ended"]):
        L.append(f"    gold {g:+.2f} | {show_sample(t, e)}   (prompted)")
    gold_gain = two_sample([g for _, g in r["before"]], [g for _, g in r["after"]])
    L.append(f"SFT's effect on the gold of samples from <bos>: {diff_text(gold_gain, '+.2f', 'sampling')}.")
    L.append(V["sft_gold_gain"].render())
    sa, sc = r["after_sentiment"], r["corpus_sentiment"]
    senti = two_sample(sc, sa)
    worded = (np.mean(sa != 0), np.mean(sc != 0))                # share with at least one sentiment word
    L.append(f"Sentiment of the SFT samples {sa.mean():+.2f} ({np.mean(sa > 0):.0%} positive, {worded[0]:.0%} with a "
             f"sentiment word) vs the corpus {sc.mean():+.2f} ({np.mean(sc > 0):.0%} positive, {worded[1]:.0%}), "
             f"difference {diff_text(senti, '+.2f', 'sampling')}. SFT imitates the corpus at best; the reward model "
             "and PPO (lessons 11-14) are what push it towards the sentences humans prefer.")
    L.append(V["uses_sentiment_words"].render())
    return "\n".join(L)


def main(argv=None) -> dict:
    return lesson_main(__doc__, __name__, run, narrative, plot, argv)


def plot(results: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(14, 9.5), layout="constrained", gridspec_kw={"height_ratios": [1, 1]})

    a = ax[0, 0]
    rows = results["gradcheck"]
    errs = np.array([max(x.rel_err, 1e-16) for x in rows])
    a.bar(range(len(rows)), errs, color=["tab:green" if x.ok else "tab:red" for x in rows])
    a.axhline(1e-5, color="k", ls="--", lw=1, label="tolerance 1e-5 (whole model)")
    a.set_yscale("log")
    a.set_ylim(1e-13, 1e-3)
    a.set_xticks(range(len(rows)), [x.name for x in rows], rotation=90, fontsize=7)
    a.set_ylabel("relative error vs central differences")
    a.set_title(f"(a) gradient check of every tensor (float64, LM + scalar head): max {results['gradcheck_max_rel_err']:.1e}")
    a.legend(loc="upper right")

    a = ax[0, 1]
    steps, loss = results["steps"], results["train_loss"]
    a.plot(steps, loss, color="tab:blue", alpha=0.3, lw=0.8, label="train loss (one batch)")
    k = max(1, len(loss) // 30)
    smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
    a.plot(steps[k - 1:], smooth, color="tab:blue", label=f"train loss ({k}-step mean)")
    a.plot(results["eval_steps"], results["heldout_loss"], "o-", color="tab:orange", ms=3, label="held-out loss")
    a.axhline(results["ln_V"], color="tab:red", ls="--", lw=1, label=f"ln V = {results['ln_V']:.2f} (uniform guess)")
    a.axhline(results["unigram_loss"], color="tab:purple", ls=":", lw=1.5,
              label=f"unigram baseline = {results['unigram_loss']:.2f}")
    a.annotate(f"final held-out {results['final_loss']:.2f}", (results["eval_steps"][-1], results["final_loss"]),
               xytext=(-10, 25), textcoords="offset points", ha="right", arrowprops=dict(arrowstyle="->"))
    a.set_ylim(0, results["ln_V"] + 0.7)
    a.set_xlabel("optimizer step")
    a.set_ylabel("cross-entropy (nats per token)")
    c = results["config"]
    a.set_title(f"(b) SFT: {results['n_params']:,} parameters (L={c.n_layer}, C={c.n_embd}, "
                f"V={results['vocab_size']}), batches of {c.batch_size}")
    a.legend(loc="center right")

    a = ax[1, 0]
    bins = np.linspace(-4.0, 1.0, 31)
    bs, af = results["before_stats"], results["after_stats"]
    a.hist([g for _, g in results["before"]], bins=bins, color="tab:gray", alpha=0.7,
           label=f"before SFT: mean {bs['sample_gold_mean']:+.2f}, {bs['sample_penalty_free']:.0%} penalty-free")
    a.hist([g for _, g in results["after"]], bins=bins, color="tab:blue", alpha=0.6,
           label=f"after SFT: mean {af['sample_gold_mean']:+.2f}, {af['sample_penalty_free']:.0%} penalty-free")
    a.hist(results["corpus_gold"], bins=bins, histtype="step", color="k", lw=1.5,
           label=f"corpus sentences: mean {results['corpus_gold'].mean():+.2f}")
    a.set_xlabel("gold score (sentiment in (-1, 1) minus penalties for broken text)")
    a.set_ylabel(f"count (of {len(results['after'])} samples from <bos>)")
    a.set_title("(c) the simulated human judges the samples")
    a.legend(loc="upper left")

    a = ax[1, 1]
    a.axis("off")
    lines = ["BEFORE SFT (random init), from <bos>:"]
    end = lambda e: "" if e else " [no EOS]"                   # noqa: E731  (stopped at the token budget)
    lines += [f"  {g:+.2f}  {_short(t, 70)}{end(e)}" for (t, g), e in zip(results["before"][:3], bs["sample_ended_each"])]
    lines += ["", "AFTER SFT, from <bos>:"]
    lines += [f"  {g:+.2f}  {_short(t, 70)}{end(e)}" for (t, g), e in zip(results["after"][:6], af["sample_ended_each"])]
    lines += ["", "AFTER SFT, from the RLHF prompts:"]
    lines += [f"  {g:+.2f}  {_short(t, 70)}{end(e)}"
              for t, g, e in zip(results["prompted"], results["prompted_gold"], results["prompted_ended"])]
    a.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=8.2, transform=a.transAxes)
    a.set_title("(d) samples at temperature 1 with their gold scores", loc="left")
    fig.suptitle("Lesson 10: TinyGPT -- hand-written backprop checked tensor by tensor; SFT on the review corpus",
                 fontsize=12)
    save(fig, path)


if __name__ == "__main__":
    main()
