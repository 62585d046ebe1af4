"""Hugging Face GPT-2 folders: the name map, and writing / reading one (``minippo export``, ``minippo import-hf``).

Legend: V vocab, T block (GPT-2's ``n_positions``), C channels (``n_embd``), L layers (``n_layer``).

TinyGPT is GPT-2's architecture (pre-LN blocks, GELU in its tanh form = ``activation_function="gelu_new"``,
LayerNorm eps 1e-5, the LM head tied to ``wte``, weights stored input-major like GPT-2's ``Conv1D``), so
the export renames every tensor (the table below) and transposes none but the reward model's head::

    minippo (weights.safetensors)   Hugging Face (model.safetensors)                 shape
    wte, wpe                        transformer.wte.weight, transformer.wpe.weight   (V, C), (T, C)
    h.{i}.ln_1.w, .b                transformer.h.{i}.ln_1.weight, .bias             (C,)
    h.{i}.attn.c_attn.w, .b         transformer.h.{i}.attn.c_attn.weight, .bias      (C, 3C), (3C,)
    h.{i}.attn.c_proj.w, .b         transformer.h.{i}.attn.c_proj.weight, .bias      (C, C), (C,)
    h.{i}.ln_2.w, .b                transformer.h.{i}.ln_2.weight, .bias             (C,)
    h.{i}.mlp.c_fc.w, .b            transformer.h.{i}.mlp.c_fc.weight, .bias         (C, 4C), (4C,)
    h.{i}.mlp.c_proj.w, .b          transformer.h.{i}.mlp.c_proj.weight, .bias       (4C, C), (C,)
    ln_f.w, ln_f.b                  transformer.ln_f.weight, .bias                   (C,)
    the LM head x @ wte.T           lm_head.weight: tied to wte, not stored (tie_word_embeddings)
    scalar_head.w, .b               reward model: score.weight (1, C), see below; policy / SFT: no place
                                    in GPT2LMHeadModel (kept in minippo_extra.safetensors)

**Position ids.** TinyGPT numbers positions ``max(cumsum(attn_mask) - 1, 0)``, so padding never shifts a
real token. Hugging Face's GPT-2 forward uses ``arange(T)`` unless ``position_ids`` is passed: right-padded
rows (real tokens from column 0) get our numbers anyway; left-padded ones need
``position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)``. ``generate`` builds exactly that for
GPT-2 (transformers 5.24 ``_prepare_position_ids_for_generation``: ``cumsum - 1``, 0 on padding; 4.57's
``prepare_inputs_for_generation`` puts 1 on padding), then counts on from the last one, as our KV cache
does. Positions of padding differ (meaningless there on both sides: nothing real attends to them).

**Reward model** (``GPT2ForSequenceClassification``, ``num_labels`` 1). Ours is ``score = gain * (x . w + b)
+ bias`` with ``x = ln_f(h) = g * xhat + beta``; GPT-2's head is ``Linear(bias=False)``: ``x' . w'``. Its
model has no LM head, so ``ln_f.bias`` may absorb the constant: with ``w' = gain * w`` and
``c = gain * b + bias``, ``beta' = beta + delta`` where ``delta = c w' / (w' . w')`` (the smallest change
with ``w' . delta = c``) gives ``w' . (g * xhat + beta') = gain * (x . w + b) + bias`` exactly in real
numbers (float32 rounding aside; computed in float64). Hugging Face reads the score at the rightmost token
whose id is not ``pad_token_id`` (left or right padding), ours at the last ``attn_mask`` 1: the two agree
when every padded column holds ``<pad>`` (id 0) and no real token is id 0, which is how our batches are
padded. Pass ``position_ids`` as above whenever a row has left padding (a prompt ++ response row does).

**Round trip.** The export keeps what GPT-2 cannot hold, for :func:`import_hf`: the original
``scalar_head`` (and, for a reward model, the original ``ln_f.b``) in ``minippo_extra.safetensors``,
and the model folder's state (SFT / PPO / RM configs, gain, bias) under ``"minippo"`` in ``config.json``;
transformers ignores both. Import restores them: a language model's head and state beside the
weights the folder holds (the export's, bitwise, when nothing changed them); a reward model's
original head when its exported tensors are still what the export wrote, else its Hugging Face
weights as they are (gain 1, bias 0). Any config TinyGPT cannot compute is refused, naming the field.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import save as st_save
from tokenizers import Tokenizer as HFTokenizer, processors

from minippo.io import atomic_write_bytes, atomic_write_text, read_json, write_folder
from minippo.nn.attention import LN_EPS
from minippo.nn.gpt import GPTConfig, param_shapes
from minippo.rlhf.data.tokenizer import BOS, EOS, PAD, Tokenizer
from minippo.rlhf.reward_model import STATE_KEY, RewardModel
from minippo.rlhf.checkpoint import RESERVED, TOKENIZER_FILE, load_model, resolve_model_dir

EXPORT_FORMAT = "minippo.hf_export/1"
EXTRA_FILE = "minippo_extra.safetensors"       # what GPT-2 cannot hold (scalar head, the RM's original ln_f.b)
LM, SEQ_CLS = "GPT2LMHeadModel", "GPT2ForSequenceClassification"


class UnsupportedConfig(ValueError):
    """A Hugging Face config or weight file TinyGPT cannot represent (the message names the field)."""


def hf_name(name: str) -> str:
    """The Hugging Face name of a TinyGPT parameter (not the scalar head): ``h.0.ln_1.w`` ->
    ``transformer.h.0.ln_1.weight``."""
    stem, _, leaf = name.rpartition(".")
    if name in ("wte", "wpe"):
        return f"transformer.{name}.weight"
    return f"transformer.{stem}.{ {'w': 'weight', 'b': 'bias'}[leaf] }"


def model_kind(state: dict) -> str:
    """``"reward_model"``, ``"policy"`` (a PPO actor), ``"sft"`` or ``"model"`` from a model folder's state."""
    if STATE_KEY in state:
        return "reward_model"
    if "ppo_config" in state:
        return "policy"
    return "sft" if "sft_config" in state else "model"


def fold_score_head(ln_f_b, w, b, gain: float, bias: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(score.weight (1, C), ln_f.bias (C,))`` with ``w' . (g xhat + beta') = gain * (x . w + b) + bias``.

    ``w' = gain * w``, ``beta' = beta + c w' / (w' . w')``, ``c = gain * b + bias`` (module docstring),
    in float64, cast to ``dtype``. A head of zeros cannot carry a constant: ``ValueError``.
    """
    w_new = gain * np.asarray(w, dtype=np.float64)[:, 0]                    # (C,)
    norm2 = float(w_new @ w_new)
    if norm2 == 0.0:
        raise ValueError("the reward model's scalar_head.w is all zeros: GPT-2's bias-free score head cannot "
                         "carry its constant (train the reward model first)")
    c = gain * float(np.asarray(b)[0]) + bias
    beta = np.asarray(ln_f_b, dtype=np.float64) + c * w_new / norm2         # (C,)
    return w_new.astype(dtype)[None, :], beta.astype(dtype)


def hf_config(cfg: GPTConfig, arch: str, block: dict) -> dict:
    """``config.json`` of a GPT-2 with TinyGPT's shape; ``block`` goes under ``"minippo"``."""
    config = {
        "architectures": [arch], "model_type": "gpt2",
        "vocab_size": cfg.vocab_size, "n_positions": cfg.block_size, "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,          # TinyGPT has no dropout
        "initializer_range": cfg.init_std, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "add_cross_attention": False, "tie_word_embeddings": True, "use_cache": True,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": cfg.dtype, "dtype": cfg.dtype,       # the 4.x and the 5.x spelling
    }
    if arch == SEQ_CLS:
        config.update(num_labels=1, id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    config["minippo"] = block
    return config


def hf_tokenizer_json(tokenizer_json: str, *, add_eos: bool = False) -> str:
    """Our ``tokenizer.json`` with a post-processor that puts ``<bos>`` in front of every text (and, ``add_eos``,
    ``<eos>`` after it), so that ``tokenizer(text)`` gives the ids our models were trained on: a prompt for the
    policy (``encode(text, add_bos=True)``), a finished response for the reward model, whose score is read at the
    EOS (``encode(text, add_bos=True, add_eos=True)``); ``add_special_tokens=False`` leaves them out.
    :func:`minippo_tokenizer_json` takes the post-processor off again."""
    tok = HFTokenizer.from_str(tokenizer_json)
    end, end_b = (f" {EOS}", f" {EOS}:1") if add_eos else ("", "")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A{end}", pair=f"{BOS} $A{end} {BOS}:1 $B:1{end_b}",
        special_tokens=[(BOS, 1), (EOS, 2)] if add_eos else [(BOS, 1)])
    return tok.to_str()


def minippo_tokenizer_json(tokenizer_json: str) -> str:
    """``tokenizer.json`` of an export without its post-processor: the text our Tokenizer saves."""
    tok = HFTokenizer.from_str(tokenizer_json)
    tok.post_processor = None
    return tok.to_str()


def tokenizer_files(tokenizer_json: str, block_size: int, *, add_eos: bool = False) -> dict[str, str]:
    """``tokenizer.json`` (ours + the ``<bos>`` (``add_eos``: and ``<eos>``) post-processor),
    ``tokenizer_config.json`` and
    ``special_tokens_map.json``. ``split_special_tokens``: the text "<eos>" is text, as in our tokenizer
    (``encode_special_tokens``); ``padding_side`` left, for prompts (the reward model reads right padding too);
    ``model_input_names`` without ``token_type_ids``, which transformers 4.x's PreTrainedTokenizerFast returns by
    default (zeros) and GPT-2 adds as ``wte[token_type_ids]``: ``generate(**tok(...))`` would be wrong."""
    specials = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **specials, "model_max_length": block_size,
              "padding_side": "left", "split_special_tokens": True, "clean_up_tokenization_spaces": False,
              "model_input_names": ["input_ids", "attention_mask"],     # no token_type_ids: GPT-2 would add wte[0]
              "added_tokens_decoder": {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                                "normalized": False, "single_word": False}
                                       for i, t in enumerate((PAD, BOS, EOS))}}
    return {TOKENIZER_FILE: hf_tokenizer_json(tokenizer_json, add_eos=add_eos),
            "tokenizer_config.json": json.dumps(config, indent=2),
            "special_tokens_map.json": json.dumps(specials, indent=2)}


# ----------------------------------------------------------------------------------------------
# export
# ----------------------------------------------------------------------------------------------

def export_hf(model_dir, out_dir, *, log=print, force: bool = False) -> dict:
    """Write the model folder ``model_dir`` (an SFT model, a PPO policy or a reward model; or the run folder
    holding it) as a Hugging Face GPT-2 folder ``out_dir``, which must be new or empty (``force``: an earlier
    export there is replaced; never another folder). Returns ``{"kind", "architecture", "out", "not_mapped"}``;
    every line of ``not_mapped`` is also logged and written to the folder's README.md."""
    check_target(out_dir, force)                              # before any work
    src = resolve_model_dir(model_dir)
    model, state = load_model(src)
    kind = model_kind(state)
    cfg, p = model.cfg, model.params
    tensors = {hf_name(k): p[k] for k in param_shapes(cfg) if not k.startswith("scalar_head")}
    extra = {"scalar_head.w": p["scalar_head.w"], "scalar_head.b": p["scalar_head.b"]}
    extra_state = {k: v for k, v in state.items() if k not in RESERVED}
    not_mapped, example = [], None
    if kind == "reward_model":
        arch = SEQ_CLS
        rm = RewardModel(model, gain=state[STATE_KEY]["gain"], bias=state[STATE_KEY]["bias"])
        extra["ln_f.b"] = p["ln_f.b"]
        tensors["score.weight"], tensors["transformer.ln_f.bias"] = fold_score_head(
            p["ln_f.b"], p["scalar_head.w"], p["scalar_head.b"], rm.gain, rm.bias, cfg.dtype)
        not_mapped += ["the score's bias and normalisation (scalar_head.b, gain, bias) have no place in "
                       "GPT-2's bias-free score head: folded into score.weight and ln_f.bias (exact up to "
                       "float32 rounding); this ln_f.bias is wrong for the LM head, which "
                       "GPT2ForSequenceClassification does not have"]
        if state["tokenizer"] is not None:
            example = eos_example(rm, Tokenizer.load(state["tokenizer"]))
    else:
        arch = LM
        critic = (state.get("ppo_config") or {}).get("critic")
        what = ("the value head of the shared critic (ppo_config critic = 'shared')" if critic == "shared"
                else "unused by this model" if critic is None else f"unused: the critic was {critic!r}")
        not_mapped.append(f"scalar_head ({what}) has no place in GPT2LMHeadModel: kept in {EXTRA_FILE}, "
                          f"which transformers ignores")
        if critic == "separate":
            not_mapped.append("the separate critic is not part of the policy folder (it is in the PPO run's "
                              "checkpoint/): not exported")
    if state["extra_arrays"]:
        not_mapped.append(f"extra arrays {sorted(state['extra_arrays'])} (optimizer state): not exported")
    if state["tokenizer"] is None:
        not_mapped.append("no tokenizer.json beside the model: the export has no tokenizer files")
    block = {"format": EXPORT_FORMAT, "kind": kind, "source": str(src), "extra_file": EXTRA_FILE,
             "not_mapped": not_mapped, "state": extra_state}
    files = {"config.json": json.dumps(hf_config(cfg, arch, block), indent=2, sort_keys=True)}
    if state["tokenizer"] is not None:
        files.update(tokenizer_files(Path(state["tokenizer"]).read_text(encoding="utf-8"), cfg.block_size,
                                     add_eos=arch == SEQ_CLS))     # the reward model scores <bos> text <eos>
    files["README.md"] = export_readme(kind, arch, src, not_mapped, example)
    out = _write_folder(out_dir, {"model.safetensors": st_save(tensors, metadata={"format": "pt"}),
                                  EXTRA_FILE: st_save(extra, metadata={"format": EXPORT_FORMAT})}, files, force)
    for line in not_mapped:
        log(f"not mapped: {line}")
    return {"kind": kind, "architecture": arch, "out": out, "not_mapped": not_mapped}


#: the text the reward model's card scores with and without its EOS (:func:`eos_example`)
EXAMPLE_TEXT = "the film was superb ."
#: how to install what loads an export, and which torch build that is (the export's README and minippo's README)
INSTALL = ("Loading it needs `torch` and `transformers` (minippo's `hf` extra asks for torch>=2.13,<3 and "
           "transformers>=4.57,<6, and trl>=1.16,<2 for examples/continue_in_trl.py). From PyPI on Linux, `pip install torch` takes the CUDA build (several GB); the "
           "CPU build is enough here: `pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu` "
           "first, then `pip install transformers` (or `pip install -e \".[test,hf]\"` in minippo's clone: the "
           "torch already installed satisfies the extra). `python -c \"import torch; print(torch.version.cuda)\"` "
           "prints None for a CPU build.")


def eos_example(rm: RewardModel, tokenizer: Tokenizer, text: str = EXAMPLE_TEXT) -> dict:
    """The reward model's score of ``text`` read at its EOS (``<bos> text <eos>``, the convention) and read at its
    last word (``<bos> text``, no EOS): the card shows both, computed at export."""
    rows = [tokenizer.encode(text, add_bos=True, add_eos=True), tokenizer.encode(text, add_bos=True)]
    ids, mask = tokenizer.pad_right(rows)
    with_eos, without = rm.score(ids, mask)
    return {"text": text, "with_eos": float(with_eos), "without_eos": float(without)}


def export_readme(kind: str, arch: str, src, not_mapped: list[str], example: dict | None = None) -> str:
    """The README.md of an export (its card): what it is, what loading it installs, how to load it, the position
    ids, for a reward model where its score is read (the EOS, ``example`` from :func:`eos_example`), what does
    not map."""
    auto = "AutoModelForSequenceClassification" if arch == SEQ_CLS else "AutoModelForCausalLM"
    use = ("scores = model(ids, attention_mask=mask, position_ids=pos).logits[:, 0]   # = our normalised score"
           if arch == SEQ_CLS else
           "out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20)   # greedy")
    encoded = ("<bos> + text + <eos>, left-padded with <pad>" if arch == SEQ_CLS else
               "<bos> + text, left-padded with <pad>")
    card = ""
    if arch == SEQ_CLS:
        card = ("## Where the score is read: at the EOS\n\nThe reward model was trained on finished responses, "
                "`<bos> prompt response <eos>`, and its score is read at the last real token: the EOS. This "
                "folder's tokenizer appends it (`tok(texts)` gives `<bos> text <eos>`; `add_special_tokens=False` "
                "gives neither); with another tokenizer, append `tok.eos_token` to each text. Hugging Face reads "
                "the score at the rightmost token that is not `<pad>` (id 0): pad with `<pad>`, left or right. A "
                "text without its EOS is read at its last word, which the reward model was not trained to score")
        if example is not None:
            card += (f": computed at export, `{example['text']}` scores {example['with_eos']:+.2f} read at its "
                     f"EOS (its score) and {example['without_eos']:+.2f} read at its last word")
        card += ".\n\n"
    return (f"# A minippo {kind} as a Hugging Face {arch}\n\nExported by `minippo export` from `{src}`. "
            f"{INSTALL}\n\n"
            f"```python\nimport torch\nfrom transformers import AutoTokenizer, {auto}\n"
            f"tok = AutoTokenizer.from_pretrained(DIR)\nmodel = {auto}.from_pretrained(DIR).eval()\n"
            f"batch = tok(texts, padding=True, return_tensors='pt')   # {encoded}\n"
            f"ids, mask = batch['input_ids'], batch['attention_mask']\n"
            f"pos = (mask.cumsum(-1) - 1).clamp(min=0)                         # minippo's position ids\n{use}\n```\n\n"
            "Position ids: GPT-2's forward numbers positions 0, 1, ... unless `position_ids` is passed; minippo "
            "skips padding (`max(cumsum(mask) - 1, 0)`). Pass `position_ids` whenever a row is left-padded; "
            "`generate` builds them from the attention mask itself.\n\n"
            + card
            + "## What does not map\n\n" + "".join(f"- {line}\n" for line in not_mapped)
            + f"\n`{EXTRA_FILE}` and the `minippo` entry of `config.json` let `minippo import-hf` restore the "
              "model folder bitwise.\n")


def read_config_json(folder) -> dict:
    """``<folder>/config.json`` as a dict; a file that is not a JSON object is a ``ValueError`` naming it."""
    path = Path(folder) / "config.json"
    config = read_json(path)                               # CorruptFileError (a ValueError) naming the file
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


def check_target(out_dir, force: bool) -> None:
    """An export's folder must be new or empty; with ``force`` an earlier export is replaced, never another folder
    (``FileExistsError`` naming it, ``NotADirectoryError`` for a file). An earlier export may have been trained
    further elsewhere (transformers keeps our ``minippo`` entry in the ``config.json`` it saves), so it is replaced
    only when asked."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file, not a folder")
    if not out.exists() or not any(out.iterdir()):
        return
    try:
        earlier = (out / "config.json").is_file() and "minippo" in read_config_json(out)
    except ValueError as exc:
        raise FileExistsError(f"{out} exists and is not an earlier minippo export ({exc}): not overwriting it") \
            from None
    if not earlier:
        raise FileExistsError(f"{out} exists and is not an earlier minippo export: not overwriting it")
    if not force:
        raise FileExistsError(f"{out} holds an earlier export (maybe trained further since): not overwriting it; "
                              "--force replaces it")


def _write_folder(out_dir, blobs: dict[str, bytes], texts: dict[str, str], force: bool = False) -> Path:
    """Write the files into ``<out>.tmp`` and swap it in (:func:`~minippo.io.write_folder`); an existing ``out``
    is replaced only under the rule of :func:`check_target`, moved to ``<out>.old`` and deleted after the swap
    (stopped while deleting, it left a half-deleted export in ``out`` that --force then refused)."""
    out = Path(out_dir)
    check_target(out, force)

    def fill(tmp: Path) -> None:
        for name, data in blobs.items():
            atomic_write_bytes(tmp / name, data)
        for name, text in texts.items():
            atomic_write_text(tmp / name, text)

    return write_folder(out, fill)


# ----------------------------------------------------------------------------------------------
# the commands
# ----------------------------------------------------------------------------------------------

def report_errors(command: str, fn, *args) -> int:
    """Run ``fn(*args)``; bad input becomes one line on stderr and exit status 2 (a path that is not there,
    holds no model, or is a folder it would overwrite) or 1 (a model or config that cannot be converted), never a
    traceback."""
    try:
        fn(*args)
    except (FileNotFoundError, FileExistsError, NotADirectoryError) as e:
        print(f"minippo {command}: error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        print(f"minippo {command}: error: {e}", file=sys.stderr)
        return 1
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="a model folder (SFT model, PPO policy or reward "
                        "model) or the run folder holding it as model/ or policy/")
    parser.add_argument("--hf", required=True, metavar="OUT_DIR", help="the Hugging Face GPT-2 folder to write "
                        "(new or empty; any other folder is refused)")
    parser.add_argument("--force", action="store_true", help="replace an earlier minippo export in OUT_DIR (never "
                        "another folder)")


def cli_main(args) -> int:
    def run():
        r = export_hf(args.model_dir, args.hf, force=args.force)
        auto = "AutoModelForSequenceClassification" if r["architecture"] == SEQ_CLS else "AutoModelForCausalLM"
        print(f"{r['kind']} -> {r['out']} ({r['architecture']}); load it with {auto}.from_pretrained"
              f"({str(r['out'])!r}) and AutoTokenizer; position ids and what does not map: {r['out']}/README.md")
    return report_errors("export", run)
