"""``minippo import-hf``: a Hugging Face GPT-2 folder (``config.json``, ``model.safetensors``, tokenizer
files) into a TinyGPT model folder; a ``GPT2ForSequenceClassification`` becomes a reward model folder.

Legend: V vocab, T block, C channels. The name map, the position ids and the reward model's head are
explained in :mod:`minippo.rlhf.run.hf` (the export). Reading needs no torch: ``model.safetensors`` is
parsed here (:func:`read_safetensors`, BF16 and F16 widened to float32 losslessly).

What TinyGPT cannot compute is refused with :class:`~minippo.rlhf.run.hf.UnsupportedConfig` naming the
``config.json`` field (:data:`REQUIRED`, ``n_inner``, ``tie_word_embeddings``, ``architectures``,
``id2label``) or the tensor. From a folder written by ``minippo export``, what GPT-2 cannot hold
comes back too: a language model's ``scalar_head`` and the model folder's state (its weights are the folder's, bitwise the
export's when nothing changed them); a reward model's original head, gain and bias when its tensors
are still what the export wrote, else its Hugging Face weights as they are (gain 1, bias 0 and the
same scores as ``GPT2ForSequenceClassification``, to float rounding).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from minippo.io import in_file
from minippo.nn.attention import LN_EPS
from minippo.nn.gpt import GPTConfig, TinyGPT, param_shapes
from minippo.rlhf.data.tokenizer import Tokenizer
from minippo.rlhf.reward_model import STATE_KEY, RewardModel
from minippo.rlhf.checkpoint import TOKENIZER_FILE, resolve_model_dir, save_model
from minippo.rlhf.run.hf import (
    EXTRA_FILE,
    LM,
    SEQ_CLS,
    UnsupportedConfig,
    fold_score_head,
    hf_name,
    minippo_tokenizer_json,
    read_config_json,
    report_errors,
)


# buffers of older GPT-2 checkpoints (the causal mask), not parameters: skipped
BUFFERS = (".attn.bias", ".attn.masked_bias")
# config field -> (the value TinyGPT computes, why another cannot be represented)
REQUIRED = {
    "model_type": ("gpt2", "TinyGPT is GPT-2's architecture only"),
    "activation_function": ("gelu_new", "TinyGPT's GELU is the tanh form"),
    "layer_norm_epsilon": (LN_EPS, "TinyGPT's LayerNorm epsilon is fixed"),
    "scale_attn_weights": (True, "TinyGPT scales attention scores by 1 / sqrt(head size)"),
    "scale_attn_by_inverse_layer_idx": (False, "TinyGPT does not scale attention by 1 / (layer + 1)"),
    "reorder_and_upcast_attn": (False, "TinyGPT has no reordered / upcast attention"),
    "add_cross_attention": (False, "TinyGPT is a decoder without cross-attention"),
}
_SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as float32 / float64 NumPy arrays, without torch.

    The format: an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape",
    "data_offsets"}}``, the raw bytes. F16 and BF16 (which NumPy lacks: its 16 bits are the top half of a
    float32) are widened to float32, losslessly. A file that is not one (truncated, a header that is not a JSON
    object of tensors) is a :class:`minippo.io.CorruptFileError` naming it.
    """
    data = Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    with in_file(path):
        if len(data) < 8 + n:
            raise ValueError(f"not a safetensors file, or truncated (its header needs {n} bytes, {len(data)} in all)")
        header = json.loads(data[8:8 + n])
        if not isinstance(header, dict):
            raise ValueError(f"the header must be a JSON object of tensors, got {type(header).__name__}")
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        with in_file(path):
            begin, end = (8 + n + o for o in info["data_offsets"])
            if not 8 + n <= begin <= end <= len(data):
                raise ValueError(f"tensor {name}'s bytes [{begin}, {end}) are not in the file (truncated?)")
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in _SAFETENSORS_DTYPES:
            a = np.frombuffer(raw, dtype=np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<"))
            a = a.astype(np.float32 if info["dtype"] == "F16" else a.dtype.newbyteorder("="))
        else:
            raise UnsupportedConfig(f"{path}: tensor {name} has dtype {info['dtype']}; TinyGPT reads float weights")
        with in_file(path):
            out[name] = a.reshape(info["shape"]).copy()
    return out


def gpt_config_from_hf(config: dict, dtype: str) -> GPTConfig:
    """The GPTConfig of a GPT-2 ``config.json`` (a dict), or :class:`UnsupportedConfig` naming the field."""
    for field, (value, why) in REQUIRED.items():
        got = config.get(field, value if field != "model_type" else None)
        if got != value:
            raise UnsupportedConfig(f"config.json: {field} = {got!r} cannot be represented (must be {value!r}: {why})")
    n_embd = config.get("n_embd")
    if config.get("n_inner") not in (None, 4 * n_embd if isinstance(n_embd, int) else None):
        raise UnsupportedConfig(f"config.json: n_inner = {config['n_inner']!r} cannot be represented (TinyGPT's "
                                f"MLP is 4 * n_embd = {4 * n_embd} wide; use null)")
    try:
        return GPTConfig(vocab_size=config.get("vocab_size"), block_size=config.get("n_positions"),
                         n_layer=config.get("n_layer"), n_head=config.get("n_head"), n_embd=n_embd, dtype=dtype,
                         init_std=config.get("initializer_range", 0.02))
    except (ValueError, TypeError) as e:
        raise UnsupportedConfig(f"config.json: {e}") from None


def _architecture(config: dict, tensors: dict) -> str:
    archs = config.get("architectures") or ([SEQ_CLS] if "score.weight" in tensors else [LM])
    if len(archs) != 1 or archs[0] not in (LM, SEQ_CLS, "GPT2Model"):
        raise UnsupportedConfig(f"config.json: architectures = {archs!r} cannot be represented "
                                f"(one of {LM}, {SEQ_CLS}, GPT2Model)")
    arch = LM if archs[0] == "GPT2Model" else archs[0]
    if arch == LM and config.get("tie_word_embeddings", True) is not True:
        raise UnsupportedConfig("config.json: tie_word_embeddings = false cannot be represented (TinyGPT's LM head "
                                "is the token embedding)")
    if arch == SEQ_CLS and len(config.get("id2label") or {"0": "LABEL_0"}) != 1:
        raise UnsupportedConfig(f"config.json: id2label has {len(config['id2label'])} labels; a reward model has "
                                f"num_labels = 1")
    return arch


def _load_weights(folder: Path) -> dict[str, np.ndarray]:
    """The tensors of ``model.safetensors`` (or of the shards its index lists)."""
    if (folder / "model.safetensors").is_file():
        return read_safetensors(folder / "model.safetensors")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        tensors = {}
        for shard in sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())):
            tensors.update(read_safetensors(folder / shard))
        return tensors
    if (folder / "pytorch_model.bin").is_file():
        raise UnsupportedConfig(f"{folder} has pytorch_model.bin only: re-save it with "
                                f"save_pretrained(..., safe_serialization=True) (reading .bin needs torch)")
    raise FileNotFoundError(f"{folder} has no model.safetensors")


def params_from_hf(tensors: dict, cfg: GPTConfig, arch: str) -> dict[str, np.ndarray]:
    """TinyGPT parameters (scalar head 0, or the score head) from Hugging Face tensors; unknown or missing
    names and wrong shapes are :class:`UnsupportedConfig`."""
    t = {(k if k.startswith(("transformer.", "score.", "lm_head.")) else "transformer." + k): v
         for k, v in tensors.items() if not k.endswith(BUFFERS)}
    params, shapes = {}, param_shapes(cfg)
    for name, shape in shapes.items():
        if name.startswith("scalar_head"):
            continue
        key = hf_name(name)
        if key not in t:
            raise UnsupportedConfig(f"model.safetensors has no {key}")
        if tuple(t[key].shape) != shape:
            raise UnsupportedConfig(f"model.safetensors: {key} has shape {tuple(t[key].shape)}, config.json "
                                    f"implies {shape}")
        params[name] = t.pop(key)
    lm_head = t.pop("lm_head.weight", None)
    if lm_head is not None and not np.array_equal(lm_head, params["wte"]):
        raise UnsupportedConfig("model.safetensors: lm_head.weight differs from transformer.wte.weight: untied "
                                "embeddings cannot be represented")
    score = t.pop("score.weight", None)
    if arch == SEQ_CLS and (score is None or score.shape != (1, cfg.n_embd)):
        raise UnsupportedConfig(f"model.safetensors: a reward model needs score.weight of shape (1, {cfg.n_embd})")
    if t:
        raise UnsupportedConfig(f"model.safetensors: tensors TinyGPT has no place for: {sorted(t)[:4]}")
    params["scalar_head.w"] = np.zeros(shapes["scalar_head.w"]) if score is None else score.T.copy()
    params["scalar_head.b"] = np.zeros(1)
    return params


def import_hf(hf_dir, out_dir, *, log=print, force: bool = False) -> dict:
    """Read a Hugging Face GPT-2 folder into a TinyGPT model folder ``out_dir`` (a reward model folder
    for ``GPT2ForSequenceClassification``), which must be new or empty (``force``: a minippo model folder there
    is replaced; never a run folder or another folder). Returns ``{"kind", "out", "restored"}``: ``restored`` is
    True when a minippo export's extra tensors and state were restored (a reward model: bitwise; a
    language model: its scalar head, beside the folder's weights)."""
    folder = Path(hf_dir)
    out = _check_out(out_dir, force)                          # before any work
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{hf_dir} has no config.json: not a Hugging Face model folder")
    config = read_config_json(folder)
    tensors = _load_weights(folder)
    arch = _architecture(config, tensors)
    dtype = "float64" if all(a.dtype == np.float64 for a in tensors.values()) else "float32"
    cfg = gpt_config_from_hf(config, dtype)
    params = params_from_hf(tensors, cfg, arch)
    block = config.get("minippo") if isinstance(config.get("minippo"), dict) else {}
    extra = read_safetensors(folder / EXTRA_FILE) if block and (folder / EXTRA_FILE).is_file() else {}
    state = dict(block.get("state", {}))
    restored = False
    if arch == SEQ_CLS:
        rm_state = state.get(STATE_KEY, {})
        if {"ln_f.b", "scalar_head.w", "scalar_head.b"} <= set(extra) and {"gain", "bias"} <= set(rm_state):
            w, beta = fold_score_head(extra["ln_f.b"], extra["scalar_head.w"], extra["scalar_head.b"],
                                      rm_state["gain"], rm_state["bias"], cfg.dtype)
            if np.array_equal(w.T, params["scalar_head.w"]) and np.array_equal(beta, params["ln_f.b"]):
                params.update({k: extra[k] for k in ("ln_f.b", "scalar_head.w", "scalar_head.b")})
                restored = True
        if not restored:
            if extra:
                log("note: score.weight / ln_f.bias changed after the export: reading them as they are (gain 1, bias 0)")
            state[STATE_KEY] = {"gain": 1.0, "bias": 0.0}
    elif {"scalar_head.w", "scalar_head.b"} <= set(extra):
        params.update({k: extra[k] for k in ("scalar_head.w", "scalar_head.b")})
        restored = True
    if not block:
        state = {"hf_import": {"source": str(folder), "architecture": arch}}
        if arch == SEQ_CLS:
            state[STATE_KEY] = {"gain": 1.0, "bias": 0.0}
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if config.get(name, 0.0):
            log(f"note: {name} = {config[name]} ignored: TinyGPT has no dropout (it does not matter in eval mode)")
    tokenizer = _read_tokenizer(folder, cfg, log)
    model = TinyGPT.from_params(cfg, params)
    if arch == SEQ_CLS:
        rm_state = state.pop(STATE_KEY)
        RewardModel(model, gain=rm_state["gain"], bias=rm_state["bias"]).save(
            out, tokenizer=tokenizer, extra_state={**state, STATE_KEY: rm_state})
    else:
        save_model(out, model, tokenizer=tokenizer, extra_state=state)
    return {"kind": "reward_model" if arch == SEQ_CLS else block.get("kind", "model"), "out": out,
            "restored": restored}


def _read_tokenizer(folder: Path, cfg: GPTConfig, log):
    """Our Tokenizer from ``tokenizer.json`` (specials <pad>, <bos>, <eos> at 0, 1, 2), or None with a note."""
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        log(f"note: {folder} has no {TOKENIZER_FILE}: the model folder has no tokenizer")
        return None
    try:
        tokenizer = Tokenizer(HFTokenizer.from_str(minippo_tokenizer_json(path.read_text(encoding="utf-8"))))
    except Exception as e:                  # a GPT-2 BPE without our specials, or another tokenizer kind
        log(f"note: {path} is not a minippo tokenizer ({e}): the model folder has no tokenizer")
        return None
    if tokenizer.vocab_size > cfg.vocab_size:
        raise UnsupportedConfig(f"{path} has {tokenizer.vocab_size} tokens but config.json vocab_size is "
                                f"{cfg.vocab_size}")
    return tokenizer


def _check_out(out_dir, force: bool) -> Path:
    """``out_dir`` must be new or empty; with ``force`` a minippo model folder there is replaced; a run folder or
    any other folder never (``FileExistsError`` naming it; ``NotADirectoryError`` for a file)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file, not a folder")
    if out.exists() and any(out.iterdir()):
        try:
            resolve_model_dir(out)
        except FileNotFoundError:
            raise FileExistsError(f"{out} exists and is not a minippo model folder: not overwriting it") from None
        if resolve_model_dir(out) != out:
            raise FileExistsError(f"{out} is a run folder, not a model folder: not overwriting it")
        if not force:
            stage = (out.parent / "config.json").is_file() or (out.parent / "metrics.jsonl").is_file()
            whose = f" (the model of the run in {out.parent})" if stage else ""
            raise FileExistsError(f"{out} holds a model{whose}: not overwriting it; --force replaces it")
    return out


def add_arguments(parser) -> None:
    parser.add_argument("hf_dir", metavar="HF_DIR", help="a Hugging Face GPT-2 folder (config.json, model.safetensors, "
                        "tokenizer.json), e.g. written by `minippo export` and trained further elsewhere")
    parser.add_argument("--out", required=True, metavar="MODEL_DIR", help="the model folder to write (new or "
                        "empty; any other folder is refused)")
    parser.add_argument("--force", action="store_true", help="replace a minippo model folder in MODEL_DIR (never a "
                        "run folder or another folder)")


def cli_main(args) -> int:
    def run():
        r = import_hf(args.hf_dir, args.out, force=args.force)
        how = ("read from the Hugging Face weights" if not r["restored"] else "restored bitwise from a minippo export"
               if r["kind"] == "reward_model" else "its weights as the folder holds them, the minippo export's "
               "scalar head and state restored")
        print(f"{args.hf_dir} -> {r['out']} ({r['kind']}, {how}); load it with minippo.load_model({str(r['out'])!r})")
    return report_errors("import-hf", run)
