"""What each of the four models of RLHF-PPO costs: parameters, bytes, activations, passes per iteration.

Legend: B batch (sequences), T tokens, C channels (n_embd), V vocab, H heads, L layers, F MLP width.

The four models (Q31): the actor and the critic are TRAINED (weights + gradients +
AdamW moments + the activations of a forward-and-backward pass), the reference and the reward model
are FROZEN (weights + a forward pass). Memory (Q33): one (B, T, V) array at
B = 4, T = 2048, V = 32k is 1 GB in float32, so the experience buffer stores the log-probability of
the TAKEN token (one scalar per token), never the distributions.

Two families of shapes (:class:`ModelShape`):

* ``"gpt2"`` is TinyGPT exactly: learned positions, LayerNorm with bias, a 4C GELU MLP with biases,
  the LM head tied to ``wte``, and the scalar head ``(C, 1) + (1,)`` that every TinyGPT carries.
  :func:`param_count` equals ``TinyGPT.num_params()`` and :func:`activation_bytes` equals the bytes
  of the cache TinyGPT's forward pass keeps for backward (both tested against real arrays).
* ``"llama"`` (Touvron et al. 2023): RoPE (no position table), RMSNorm (weight only), a SwiGLU MLP
  of width F without biases, an untied LM head; the policy and reference carry the LM head
  ``(V, C)``, the critic and the reward model replace it by a scalar head ``(C, 1) + (1,)``.
  :meth:`ModelShape.llama_7b` has 6,738,415,616 parameters with the LM head (LLaMA-7B's count).

Byte conventions (:class:`Precision`): ``FP32`` is our NumPy models (4-byte weights, 4-byte
gradients, two 4-byte AdamW moments: 16 bytes per trained parameter, 4 per frozen one).
``MIXED`` is mixed-precision training as in ZeRO (Rajbhandari et al. 2020): fp16 weights (2) and
gradients (2), an fp32 master copy (4) and two fp32 Adam moments (8): 16 bytes per trained
parameter, 2 per frozen one; activations in fp16, the (B, T, V) log-softmax arrays in fp32.

Activations of a training pass are counted as TinyGPT keeps them, per token and per block::

    LayerNorm / RMSNorm x2     xhat C + rstd 1, and the normalised output C (next linear's input)
    attention                  q, k, v 3C; probabilities H*T (quadratic in T); merged heads C
    MLP (gpt2, F = 4C)         pre-activation F, tanh F, GELU output F
    MLP (llama, SwiGLU)        gate F, up F, silu(gate) F, their product F
    total (gpt2)               20 C + 2 + H T per token per block   (+ token/position ids, ln_f)

With gradient checkpointing (the usual fix, Q33) only each block's input (C per token) is kept and one
block's caches are rebuilt at a time during backward.

With padding, TinyGPT keeps less: its row-wise layers run on the N real tokens only, so every term
above counts N tokens except q, k, v and the probabilities, which attention keeps on the whole (B, T)
grid (``activation_bytes(..., n_real=N)``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from minippo.checks import check_choice, check_range
from minippo.nn.gpt import TinyGPT
from minippo.nn.optim import AdamW
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig

GB = 1e9
#: (B, T, V)-sized arrays that ``minippo.rlhf.ppo.minibatch_loss_and_grads`` holds at once: the logits,
#: the log-softmax and the softmax (one array each, shared by the log-prob and entropy caches) and the
#: gradient d loss / d logits the backward builds from them (lesson 12 compares the total with a
#: tracemalloc peak)
VOCAB_ARRAYS_TRAIN = 4
#: ... and that a forward-only log-prob pass (old policy, reference) holds: the logits and the softmax
VOCAB_ARRAYS_FORWARD = 2


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer, enough to count its parameters and activations."""

    n_layer: int
    """L, transformer blocks."""
    n_embd: int
    """C, width of the residual stream."""
    n_head: int
    """H, attention heads (divides C)."""
    vocab_size: int
    """V, vocabulary size."""
    seq_len: int
    """Context length: rows of the learned position table (gpt2); the longest T (llama)."""
    family: str = "gpt2"
    """``"gpt2"`` (TinyGPT) or ``"llama"`` (see the module docstring)."""
    d_ff: int | None = None
    """F, MLP width: 4C for gpt2 (None), 11008 for LLaMA-7B."""

    def __post_init__(self):
        for name in ("n_layer", "n_embd", "n_head", "vocab_size", "seq_len"):
            check_range(name, getattr(self, name), 1, None, integer=True)
        check_choice("family", self.family, ("gpt2", "llama"))
        if self.n_embd % self.n_head:
            raise ValueError(f"`n_embd` (={self.n_embd}) must be divisible by `n_head` (={self.n_head})")
        if self.family == "llama":
            check_range("d_ff", self.d_ff, 1, None, integer=True)
        elif self.d_ff not in (None, 4 * self.n_embd):
            raise ValueError(f"`d_ff` must be None (= 4 n_embd) for the gpt2 family, got {self.d_ff!r}")

    @property
    def ff(self) -> int:
        return 4 * self.n_embd if self.d_ff is None else self.d_ff

    @classmethod
    def from_gpt_config(cls, cfg) -> "ModelShape":
        """The shape of a TinyGPT (``minippo.nn.gpt.GPTConfig``)."""
        return cls(cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, cfg.block_size)

    @classmethod
    def llama_7b(cls, seq_len: int = 2048) -> "ModelShape":
        """LLaMA-7B: L = 32, C = 4096, H = 32 (Touvron et al. 2023, Table 2), V = 32000, F = 11008."""
        return cls(32, 4096, 32, 32000, seq_len, family="llama", d_ff=11008)


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of each kind of state, and per activation value."""

    name: str
    weights: int
    grads: int
    master: int
    """An fp32 copy of the weights that the optimiser updates (mixed precision), else 0."""
    adam: int
    """Both AdamW moments m and v together."""
    activations: int
    logits: int
    """Per value of the (B, T, V) arrays: 4, since the log-softmax runs in fp32 in both conventions."""


FP32 = Precision("fp32 (our NumPy models)", weights=4, grads=4, master=0, adam=8, activations=4, logits=4)
MIXED = Precision("mixed fp16/fp32 (ZeRO convention)", weights=2, grads=2, master=4, adam=8, activations=2,
                  logits=4)


# ----------------------------------------------------------------------------------------------
# parameters
# ----------------------------------------------------------------------------------------------

def param_count(shape: ModelShape, heads=("lm", "scalar")) -> int:
    """Number of parameters of ``shape`` with the given output heads.

    ``heads`` : subset of ``("lm", "scalar")``. gpt2: the LM head is tied to ``wte`` (free) and a
    TinyGPT always has both heads, so ``param_count(ModelShape.from_gpt_config(cfg))`` equals
    ``TinyGPT(cfg).num_params()``. llama: ``"lm"`` adds the untied ``(V, C)`` output matrix.
    """
    for h in heads:
        check_choice("heads", h, ("lm", "scalar"))
    V, C, L, F = shape.vocab_size, shape.n_embd, shape.n_layer, shape.ff
    if shape.family == "gpt2":
        embed = V * C + shape.seq_len * C                          # wte, wpe
        attn = C * 3 * C + 3 * C + C * C + C                       # c_attn, c_proj with biases
        mlp = C * F + F + F * C + C                                # c_fc, c_proj with biases
        block = attn + mlp + 2 * 2 * C                             # + ln_1, ln_2 (w, b)
        final = 2 * C                                              # ln_f
        lm_head = 0                                                # tied to wte
    else:
        embed = V * C                                              # tok_embeddings (RoPE has no table)
        block = 4 * C * C + 3 * C * F + 2 * C                      # wq wk wv wo, w1 w2 w3, 2 RMSNorm
        final = C                                                  # final RMSNorm
        lm_head = V * C                                            # untied output matrix
    n = embed + L * block + final
    n += lm_head if "lm" in heads else 0
    n += C + 1 if "scalar" in heads else 0
    return int(n)


# ----------------------------------------------------------------------------------------------
# activations, logits, KV cache
# ----------------------------------------------------------------------------------------------

def block_cache_per_token(shape: ModelShape, T: int) -> dict[str, int]:
    """Values one block keeps for backward, per token, by term (see the module docstring)."""
    C, H, F = shape.n_embd, shape.n_head, shape.ff
    return {"norms": 2 * (2 * C + 1),                              # xhat, rstd, normalised output (x2)
            "qkv": 3 * C,
            "attention probs": H * T,                              # (B, H, T, T): quadratic in T
            "attention out": C,                                    # merged heads, c_proj's input
            "mlp": (3 if shape.family == "gpt2" else 4) * F}


def activation_bytes(shape: ModelShape, B: int, T: int, itemsize: int = 4, *, mode: str = "train",
                     n_real: int | None = None) -> int:
    """Bytes of activations of one pass over (B, T) tokens (logits excluded: see :func:`logits_bytes`).

    mode : ``"train"`` everything a forward pass keeps for backward (TinyGPT's caches: the token and
        position ids as int64, every block's caches, ln_f's xhat, rstd and output);
        ``"checkpointed"`` each block's input (C per token) plus one block's caches;
        ``"forward"`` a forward-only pass: one block's working set (nothing is kept for backward),
        what a framework's no-grad mode needs. TinyGPT has no such mode: its frozen forward passes
        build the ``"train"`` caches and drop them when the call returns.
    n_real : the real (not padding) tokens of the batch, N <= B T; None: all B T are real.
        TinyGPT runs every row-wise layer on the N real tokens only (padding-free rows); only
        attention's q, k, v and weights sit on the whole (B, T) grid; the cache also keeps the
        real tokens' grid indices.
    """
    check_choice("mode", mode, ("train", "checkpointed", "forward"))
    for name, v in (("B", B), ("T", T), ("itemsize", itemsize)):
        check_range(name, v, 1, None, integer=True)
    N = B * T if n_real is None else n_real
    check_range("n_real", N, 1, B * T, integer=True)
    C, L = shape.n_embd, shape.n_layer
    terms = block_cache_per_token(shape, T)                        # values per token per block
    grid = terms["qkv"] + terms["attention probs"]                 # per (B, T) position
    row = sum(terms.values()) - grid                               # per real token
    ids = (2 if shape.family == "gpt2" else 1) * 8                 # int64 token (and position) ids, bytes
    ids += 8 if N < B * T else 0                                   # the real tokens' int64 grid indices
    head = 2 * C + 1                                               # ln_f: xhat, rstd, output
    # the blocks whose caches are held, and what else is kept per real token (each block's input)
    blocks, inputs = {"train": (L, 0), "checkpointed": (1, L * C), "forward": (1, 0)}[mode]
    per_real = blocks * row + inputs + head
    return int(B * T * blocks * grid * itemsize + N * (per_real * itemsize + ids))


def logits_bytes(B: int, T: int, V: int, itemsize: int = 4, n_arrays: int = 1) -> int:
    """Bytes of ``n_arrays`` arrays of shape (B, T, V) (logits, softmax, ...): Q33."""
    return int(n_arrays * B * T * V * itemsize)


def kv_cache_bytes(shape: ModelShape, B: int, T: int, itemsize: int = 4) -> int:
    """Keys and values of every block for T positions: ``2 L B T C`` values (TinyGPT preallocates
    ``(B, H, block_size, C / H)`` per block for each, plus a small int mask not counted here)."""
    return int(2 * shape.n_layer * B * T * shape.n_embd * itemsize)


def buffer_bytes(B: int, T: int, V: int, itemsize: int = 4, *, full_distributions: bool = False) -> int:
    """The experience buffer of one iteration (the per-token 7-tuple, Q25), right-padded (B, T).

    Per token: the action id (int64), log_prob (old policy), the reference log-prob, value, reward,
    advantage, return, and the response mask: 6 floats + 8 + itemsize bytes. With
    ``full_distributions`` the old-policy and reference log_probs are stored as whole (V,) rows
    instead of the taken token's scalar: 2 V floats instead of 2.
    """
    floats = 6 + (2 * V - 2 if full_distributions else 0)
    return int(B * T * (floats * itemsize + 8 + itemsize))


# ----------------------------------------------------------------------------------------------
# the four models
# ----------------------------------------------------------------------------------------------

ROLES = {  # name -> (what it does, trained?, output head)
    "actor": ("policy pi_theta: generates, trained by L^CLIP", True, "lm"),
    "critic": ("value V(s_t): baseline for GAE, trained by L^VF", True, "scalar"),
    "reference": ("frozen SFT copy pi_ref: the KL anchor", False, "lm"),
    "reward": ("frozen reward model: one score per response", False, "scalar"),
}


@dataclass
class ModelMemory:
    """Bytes of one model in one PPO setup (0 where it does not apply)."""

    name: str
    trained: bool
    params: int
    weights: int
    grads: int
    optimizer: int
    """AdamW moments plus the fp32 master copy (mixed precision)."""
    activations: int
    logits: int
    """(B, T, V) arrays of the LM-head models."""

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer + self.activations + self.logits


def model_memory(shape: ModelShape, name: str, precision: Precision, B: int, T: int, *,
                 critic: str = "separate", checkpointing: bool = False) -> ModelMemory:
    """Memory of model ``name`` (a key of :data:`ROLES`) of the PPO setup ``critic``.

    Trained models: weights, gradients, optimizer state, training activations of a (B, T) minibatch
    and, for the actor, the :data:`VOCAB_ARRAYS_TRAIN` vocab-sized arrays. Frozen models: weights and
    a forward-only pass (the reference also its :data:`VOCAB_ARRAYS_FORWARD` vocab-sized arrays).
    ``critic="shared"``: the critic is a value head ``(C, 1) + (1,)`` on the actor's trunk (its
    activations are the actor's); ``"none"``: no critic (GRPO / RLOO): all zeros.
    """
    check_choice("name", name, tuple(ROLES))
    check_choice("critic", critic, ("separate", "shared", "none"))
    _, trained, head = ROLES[name]
    p = precision
    if name == "critic" and critic == "none":
        return ModelMemory(name, False, 0, 0, 0, 0, 0, 0)
    if name == "critic" and critic == "shared":
        # a (C, 1) + (1,) head reading the actor's last hidden state: its only activations are its outputs
        n = shape.n_embd + 1
        return ModelMemory(name, True, n, n * p.weights, n * p.grads, n * (p.master + p.adam),
                           B * T * p.activations, 0)
    # a TinyGPT always carries both heads (the LM head is tied: free); a llama model only its own
    n = param_count(shape, ("lm", "scalar") if shape.family == "gpt2" else (head,))
    mode = ("checkpointed" if checkpointing else "train") if trained else "forward"
    acts = activation_bytes(shape, B, T, p.activations, mode=mode)
    n_vocab = (VOCAB_ARRAYS_TRAIN if trained else VOCAB_ARRAYS_FORWARD) if head == "lm" else 0
    return ModelMemory(name, trained, n, n * p.weights, n * p.grads if trained else 0,
                       n * (p.master + p.adam) if trained else 0, acts,
                       logits_bytes(B, T, shape.vocab_size, p.logits, n_vocab))


def four_models(shape: ModelShape, precision: Precision, B: int, T: int, *, critic: str = "separate",
                checkpointing: bool = False) -> list[ModelMemory]:
    """:func:`model_memory` of the models PPO keeps (the critic row is dropped when ``critic="none"``)."""
    names = [n for n in ROLES if not (n == "critic" and critic == "none")]
    return [model_memory(shape, n, precision, B, T, critic=critic, checkpointing=checkpointing) for n in names]


def total_bytes(rows) -> int:
    """Sum over models of their totals: an upper bound of a setup's memory (in practice the
    generation, the frozen models' forward passes and the update do not all hold activations at once)."""
    return int(sum(r.total for r in rows))


def static_bytes(rows) -> int:
    """Weights, gradients and optimizer states of every model: what stays resident all run long."""
    return int(sum(r.weights + r.grads + r.optimizer for r in rows))


# ----------------------------------------------------------------------------------------------
# forward / backward passes per PPO iteration
# ----------------------------------------------------------------------------------------------

def passes_per_iteration(cfg, decode_steps: int | None = None) -> dict[str, dict[str, int]]:
    """Model calls of one ``PPOTrainer.step`` with ``cfg`` (a PPOConfig, KnobsConfig or GRPOConfig), as the
    trainer makes them.

    Rollout (steps 1-2 of ``ppo_iteration``): the actor generates (one ``prefill`` of the prompts and
    ``decode_steps`` one-token ``decode_step`` calls, at most ``max_new_tokens - 1``, the default
    here), then one full forward each: actor (logp_old, and the values of a shared critic), reference
    (logp_ref), separate critic (values), reward model (score; one call per 256 rows). Update
    (step 5): ``update_epochs x batch_size / minibatch_size`` minibatches, each one forward and
    one backward of the actor and of a separate critic (plus an actor forward and backward on corpus
    text with PPO-ptx). A target-KL early stop ends the update sooner: these are the maxima.

    Returns name -> {"prefill", "decode", "forward", "backward"} call counts, and
    {"forward_rows", "backward_rows"}: sequences processed (a full pass over the batch = batch_size).
    """
    steps = cfg.max_new_tokens - 1 if decode_steps is None else decode_steps
    check_range("decode_steps", steps, 0, cfg.max_new_tokens - 1, integer=True)
    B, K, M = cfg.batch_size, cfg.update_epochs, cfg.num_minibatches
    knobs = isinstance(cfg, KnobsConfig)
    ptx = knobs and cfg.ptx_coef > 0
    separate = cfg.critic == "separate" if knobs else not isinstance(cfg, GRPOConfig)

    def calls(prefill=0, decode=0, forward=0, backward=0, forward_rows=0, backward_rows=0):
        return dict(prefill=prefill, decode=decode, forward=forward, backward=backward,
                    forward_rows=forward_rows, backward_rows=backward_rows)

    upd = K * M                                               # minibatch steps
    extra_f, extra_r = (upd, upd * cfg.ptx_batch_size) if ptx else (0, 0)
    out = {"actor": calls(1, steps, 1 + upd + extra_f, upd + extra_f, B + K * B + extra_r, K * B + extra_r),
           "reference": calls(forward=1, forward_rows=B)}
    if separate:
        out["critic"] = calls(forward=1 + upd, backward=upd, forward_rows=B + K * B, backward_rows=K * B)
    n_chunks = math.ceil(B / 256)
    out["reward"] = calls(forward=n_chunks, forward_rows=B)
    return out


def _backward_rows(args, kwargs) -> int:
    """B of a ``backward(cache, dlogits=None, dscalar=None)`` call: the rows of the gradient it is
    given (dlogits (B, T, V) or dscalar (B, T); 0 without either), whatever the model's cache
    holds."""
    given = [kwargs.get("dlogits"), kwargs.get("dscalar"), *args[1:3]]
    return next((int(np.shape(g)[0]) for g in given if g is not None), 0)


class PassCounter:
    """Count (and time) the passes real TinyGPT instances make, to check :func:`passes_per_iteration`.

    ``with PassCounter({"actor": trainer.actor, ...}) as pc: trainer.step()`` wraps each model's
    ``forward`` (every full pass: ``forward``, ``lm_loss``, ``lm_loss_and_grads``), ``backward``,
    ``prefill`` and ``decode_step`` on the instance, and restores them on exit. ``pc.counts`` has the
    layout of :func:`passes_per_iteration`; ``pc.seconds[name]`` the wall-clock seconds spent in each kind of
    call (``prefill``, ``decode``, ``forward``, ``backward``). A model given under two names (a shared critic IS
    the actor) is counted under the first.

    ``methods`` counts and times any other method the same way: ``methods={"kl controller": (state.kl_ctl,
    "update")}`` gives ``pc.method_calls["kl controller"] = {"calls": n, "seconds": s}`` (lesson 12: what the
    adaptive KL controller costs, Q34). ``split=(ppo, "ppo_update")`` splits the counts where that function
    is first called: ``pc.before`` (the passes until then: one iteration's rollout) and ``pc.after`` (from then
    on: its update), both in the layout of ``pc.counts`` (lesson 14).
    """

    def __init__(self, models: dict, methods: dict | None = None, split: tuple | None = None):
        self.models, self.counts, self.seconds = {}, {}, {}
        for name, model in models.items():
            if model is not None and all(model is not m for m in self.models.values()):
                self.models[name] = model
                self.counts[name] = dict(prefill=0, decode=0, forward=0, backward=0, forward_rows=0,
                                         backward_rows=0)
                self.seconds[name] = dict(prefill=0.0, decode=0.0, forward=0.0, backward=0.0)
        self.methods = dict(methods or {})
        self.method_calls = {name: {"calls": 0, "seconds": 0.0} for name in self.methods}
        self.split, self.before = split, None

    @staticmethod
    def _wrap(obj, method, count: dict, seconds: dict, key: str, seconds_key: str, rows=None,
              busy=None):
        """Replace ``obj.method`` by a wrapper adding 1 to ``count[key]`` (and the rows to
        ``count[key + "_rows"]``) and its duration to ``seconds[seconds_key]``. ``busy`` (a list
        shared by the wrappers of one model) holds True while one of them runs: a pass inside
        another pass of the same model (the forward pass a prefill runs) is part of that pass,
        not counted again."""
        inner = getattr(obj, method)                                # the bound class method
        busy = [False] if busy is None else busy

        def counted(*args, **kwargs):
            if busy[0]:
                return inner(*args, **kwargs)
            count[key] += 1
            if rows is not None:
                count[key + "_rows"] += rows(args, kwargs)
            t0 = time.perf_counter()
            busy[0] = True
            try:
                return inner(*args, **kwargs)
            finally:
                busy[0] = False
                seconds[seconds_key] += time.perf_counter() - t0
        setattr(obj, method, counted)                               # an instance attribute shadows it

    def __enter__(self) -> "PassCounter":
        for name, model in self.models.items():
            c, t, busy = self.counts[name], self.seconds[name], [False]
            self._wrap(model, "forward", c, t, "forward", "forward",
                       lambda a, k: np.shape(a[0])[0], busy)                  # idx (B, T)
            self._wrap(model, "backward", c, t, "backward", "backward", _backward_rows, busy)
            self._wrap(model, "prefill", c, t, "prefill", "prefill", busy=busy)
            self._wrap(model, "decode_step", c, t, "decode", "decode", busy=busy)
        for name, (obj, method) in self.methods.items():
            calls = self.method_calls[name]
            self._wrap(obj, method, calls, calls, "calls", "seconds")
        if self.split is not None:
            obj, name = self.split
            inner = getattr(obj, name)

            def marked(*args, **kwargs):                            # the counts so far: the part before
                if self.before is None:
                    self.before = {m: dict(c) for m, c in self.counts.items()}
                return inner(*args, **kwargs)
            setattr(obj, name, marked)
            self._split_inner = inner
        return self

    @property
    def after(self) -> dict:
        """The counts from the first call of the ``split`` function on (``counts - before``)."""
        before = self.before or {m: {k: 0 for k in c} for m, c in self.counts.items()}
        return {m: {k: v - before[m][k] for k, v in c.items()} for m, c in self.counts.items()}

    def __exit__(self, *exc) -> None:
        for model in self.models.values():
            for method in ("forward", "backward", "prefill", "decode_step"):
                vars(model).pop(method, None)
        for obj, method in self.methods.values():
            vars(obj).pop(method, None)
        if self.split is not None:
            setattr(self.split[0], self.split[1], self._split_inner)


# ----------------------------------------------------------------------------------------------
# measuring real TinyGPT arrays
# ----------------------------------------------------------------------------------------------

def _unique_arrays(obj, skip_ids, found):
    """Collect the distinct base buffers of the ndarrays nested in tuples/lists of ``obj``."""
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        if id(base) not in skip_ids:
            found[id(base)] = base
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _unique_arrays(x, skip_ids, found)
    return found


def measure_tinygpt(cfg, B: int, T: int, *, seed: int = 0, attn_mask=None) -> dict[str, int]:
    """Bytes of real arrays of a TinyGPT of config ``cfg`` (a ``GPTConfig``) on a (B, T) batch
    (``attn_mask``: its (B, T) 0/1 padding mask; None: every token is real).

    Returns ``params`` (``num_params``), ``weights`` (nbytes of ``params``), ``grads`` (of the
    gradients ``backward`` returns), ``adam`` (AdamW's m and v), ``activations`` (distinct buffers
    in the forward cache, parameters excluded), ``logits`` (the (B, T, V) output) and ``kv_cache``
    (the KV cache ``prefill`` allocates for ``block_size`` positions, key mask excluded).
    """

    check_range("T", T, 1, cfg.block_size, integer=True)
    rng = np.random.default_rng(seed)
    model = TinyGPT(cfg, rng=rng)
    idx = rng.integers(0, cfg.vocab_size, size=(B, T))             # (B, T)
    if attn_mask is None:
        attn_mask = np.ones((B, T), dtype=np.int64)
    logits, values, cache = model.forward(idx, attn_mask, scalar=True)
    skip = {id(p) for p in model.params.values()}
    acts = sum(a.nbytes for a in _unique_arrays(cache, skip, {}).values())
    grads = model.backward(cache, dlogits=np.ones_like(logits), dscalar=np.ones_like(values))
    opt = AdamW(model.params)
    _, kv = model.prefill(idx[:, :1], attn_mask[:, :1])
    return {"params": model.num_params(), "weights": sum(p.nbytes for p in model.params.values()),
            "grads": sum(g.nbytes for g in grads.values()),
            "adam": sum(a.nbytes for a in opt.m.values()) + sum(a.nbytes for a in opt.v.values()),
            "activations": int(acts), "logits": logits.nbytes,
            "kv_cache": sum(a.nbytes for a in kv.k) + sum(a.nbytes for a in kv.v)}
