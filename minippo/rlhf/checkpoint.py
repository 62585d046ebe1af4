"""Saving and loading a TinyGPT (and what travels with it): the file format of every RLHF stage.

A model folder (written by :func:`save_model` through :func:`minippo.io.save_checkpoint`, so the
weights and the JSON are swapped in atomically: a crash leaves the previous folder readable)::

    <dir>/weights.safetensors   the parameters under their GPT-2 names ("wte", "h.0.attn.c_attn.w", ...)
                                and any extra arrays under "extra/<name>" (e.g. optimizer moments)
    <dir>/state.json            {"format": "minippo.model/1", "gpt_config": {...},
                                 "extra_array_names": [...], "has_tokenizer": bool,
                                 "blas_kernel": the OpenBLAS kernel it was saved under, **extra_state}
    <dir>/tokenizer.json        a copy of the tokenizer, if one was given (swapped in with the rest)

``load_model(dir)`` returns ``(model, state)`` where ``state`` is that JSON plus ``"extra_arrays"``
(name -> array) and ``"tokenizer"`` (the path of ``tokenizer.json``, or None). Parameters round-trip
bitwise (safetensors stores the raw float32/float64 bytes). ``dir`` may also be a stage's run folder:
its ``model/`` (``minippo sft``, ``minippo rm``) or ``policy/`` (``minippo ppo``) subfolder is read
(:func:`resolve_model_dir`); this is ``minippo.load_model``.

A folder whose state says ``has_tokenizer`` but lacks the file (edited by hand) is reported by
:func:`load_model` (FileNotFoundError) rather than silently loaded without it.

No arrays are computed here (shape legend as in :mod:`minippo.nn.gpt`: V vocab, T block, C channels).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from minippo.blas import blas_core_name
from minippo.io import WEIGHTS, checkpoint_folder, has_checkpoint, load_checkpoint, save_checkpoint
from minippo.nn.gpt import GPTConfig, TinyGPT, param_shapes

FORMAT = "minippo.model/1"
EXTRA = "extra/"
TOKENIZER_FILE = "tokenizer.json"
RESERVED = ("format", "gpt_config", "extra_array_names", "has_tokenizer", "extra_arrays", "tokenizer",
            "blas_kernel")
SUBFOLDERS = ("model", "policy")      # where a stage's run folder keeps its final model


def resolve_model_dir(directory: str | os.PathLike) -> Path:
    """The model folder meant by ``directory``: itself if it holds a checkpoint, else its ``model/`` or
    ``policy/`` subfolder (a run folder of ``minippo sft`` / ``rm`` / ``ppo``).

    A missing folder, or one with none of the three, is a ``FileNotFoundError`` naming it.
    """
    folder = Path(directory)
    if not folder.exists() and not has_checkpoint(folder):
        raise FileNotFoundError(f"{directory} does not exist")
    if has_checkpoint(folder):
        return folder
    for sub in SUBFOLDERS:
        if has_checkpoint(folder / sub):
            return folder / sub
    stages = [d.name for d in sorted(folder.iterdir()) if d.is_dir() and any(has_checkpoint(d / s) for s in SUBFOLDERS)] \
        if folder.is_dir() else []
    hint = f"; it holds the stages {', '.join(f'{directory}/{d}' for d in stages)}: name one" if stages else ""
    raise FileNotFoundError(f"{directory} holds no minippo model (no {WEIGHTS} + state.json in it or in its "
                            f"{' or '.join(s + '/' for s in SUBFOLDERS)} subfolder){hint}")


def save_model(directory: str | os.PathLike, model: TinyGPT, *, tokenizer=None, extra_state: dict | None = None,
               extra_arrays: dict[str, np.ndarray] | None = None) -> Path:
    """Write ``model`` (parameters + GPTConfig) to ``directory``, atomically; returns the folder.

    Parameters
    ----------
    directory : the model folder (created; an existing one is replaced only once the new one is complete)
    model : TinyGPT
    tokenizer : a :class:`minippo.rlhf.data.tokenizer.Tokenizer` to store beside the weights, or None
    extra_state : JSON-serialisable dict merged into ``state.json`` (step counters, configs, RNG
        state, metrics, ...); its keys must not be one of ``RESERVED``
    extra_arrays : more arrays to store (optimizer moments, running statistics, ...)
    """
    if not isinstance(model, TinyGPT):
        raise ValueError(f"`model` must be a TinyGPT, got {type(model).__name__}")
    extra_state = dict(extra_state or {})
    clash = sorted(set(extra_state) & set(RESERVED))
    if clash:
        raise ValueError(f"`extra_state` must not use the reserved keys {clash}")
    extra_arrays = dict(extra_arrays or {})
    for name, a in extra_arrays.items():
        if not isinstance(a, np.ndarray):
            raise ValueError(f"`extra_arrays[{name!r}]` must be a np.ndarray, got {type(a).__name__}")
    model.check_params()
    arrays = {name: model.params[name] for name in param_shapes(model.cfg)}
    arrays.update({EXTRA + name: a for name, a in extra_arrays.items()})
    # the OpenBLAS kernel this process computes with: weights trained under another kernel hold other numbers
    # (minippo.rlhf.run.pipeline.main_job_run copies a run's stages only into the cache of its own kernel)
    state = {"format": FORMAT, "gpt_config": model.cfg.to_dict(), "extra_array_names": sorted(extra_arrays),
             "has_tokenizer": tokenizer is not None, "blas_kernel": blas_core_name(), **extra_state}
    files = {TOKENIZER_FILE: tokenizer.to_str()} if tokenizer is not None else None
    return save_checkpoint(directory, arrays, state, files=files)


def model_expect(state: dict, extra_expect=None) -> dict:
    """The tensors a model folder with this ``state`` must hold (:data:`minippo.io.Expect`): every parameter
    of its ``gpt_config`` in its dtype, and ``extra/<name>`` for every name of ``extra_array_names`` (with
    the shape and dtype ``extra_expect[name]`` when given, whose names must then be exactly those)."""
    if state.get("format") != FORMAT:
        raise ValueError(f"does not hold a minippo model (its format is {state.get('format')!r}, expected {FORMAT!r})")
    cfg = GPTConfig.from_dict(state["gpt_config"])
    names = state["extra_array_names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"`extra_array_names` must be a list of names, got {names!r}")
    if extra_expect is not None and set(names) != set(extra_expect):
        differ = sorted(set(names) ^ set(extra_expect))
        raise ValueError(f"`extra_array_names` must be {sorted(extra_expect)[:3]}..., the arrays this run saves; "
                         f"differs in {differ[:3]}")
    expect = {name: (shape, cfg.dtype) for name, shape in param_shapes(cfg).items()}
    expect.update({EXTRA + n: None if extra_expect is None else extra_expect[n] for n in names})
    return expect


def load_model(directory: str | os.PathLike, *, extra_expect=None) -> tuple[TinyGPT, dict]:
    """Read a folder written by :func:`save_model`: ``(model, state)``, everything checked first.

    ``directory`` is the model folder or a run folder holding it as ``model/`` or ``policy/``
    (:func:`resolve_model_dir`). ``state`` holds ``"gpt_config"`` (a dict), every key of the saved ``extra_state``,
    ``"extra_arrays"`` (name -> array) and ``"tokenizer"`` (path to ``tokenizer.json`` or None;
    load it with ``Tokenizer.load(state["tokenizer"])``).

    Before any array is used, the weights file must hold exactly the parameters of the stored GPTConfig
    (shapes and dtype from the config) and the declared extra arrays (``extra_expect``: name -> (shape,
    dtype) of each, when the caller knows them, e.g. optimizer moments), all finite; anything else is a
    :class:`minippo.io.CorruptFileError` naming the file and the tensor (:func:`minippo.io.read_weights`).
    """
    directory = resolve_model_dir(directory)
    arrays, state = load_checkpoint(directory, lambda st: model_expect(st, extra_expect))
    cfg = GPTConfig.from_dict(state["gpt_config"])
    model = TinyGPT.from_params(cfg, {name: arrays[name] for name in param_shapes(cfg)})
    state["extra_arrays"] = {name: arrays[EXTRA + name] for name in state["extra_array_names"]}
    state["tokenizer"] = None
    if state["has_tokenizer"]:
        path = checkpoint_folder(directory) / TOKENIZER_FILE      # beside the weights (maybe <dir>.old)
        if not path.is_file():
            raise FileNotFoundError(f"{directory} was saved with a tokenizer but {path} is missing")
        state["tokenizer"] = str(path)
    return model, state
