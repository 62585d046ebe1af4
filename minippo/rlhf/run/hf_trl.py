"""TRL's GRPOTrainer on minippo's exported models, the way minippo reads them (torch, transformers, trl: lazy).

Used by ``examples/continue_in_trl.py`` (a run continued in TRL) and ``minippo bench --only trl`` (TRL's
iteration timed against minippo's). Two things differ between TRL's defaults and how minippo's models read:

- **The reward.** TRL's path for a reward *model* re-tokenises the decoded ``prompt + completion`` text
  without special tokens: no ``<bos>``, no EOS, so it reads minippo's reward model where it never learned.
  :class:`ExportedReward` is a reward *function* instead: ``<bos> prompt response`` where the response keeps
  the EOS it generated (TRL's ``completion_ids``), read by the exported ``GPT2ForSequenceClassification`` at
  the last token that is not ``<pad>`` (the EOS when there is one, as the export's README says), then turned
  into the sequence score by minippo's own :func:`~minippo.rlhf.reward_model.sequence_scores` with the run's
  settings (``missing_eos_penalty`` for a response without EOS, the length terms if the run used them).
- **Positions.** TRL's loss forward passes no ``position_ids``, and GPT-2 then numbers a short prompt's left
  padding as if it were text; :func:`minippo_positions` (a forward pre-hook) passes minippo's
  ``max(cumsum(attention_mask) - 1, 0)`` instead (``generate`` builds the same ones itself).

Legend: B completions per step, G completions per prompt (GRPO's group, TRL ``num_generations``).
"""
from __future__ import annotations

import numpy as np

from minippo.rlhf.data.corpus import sample_prompts
from minippo.rlhf.reward_model import sequence_scores

SCORE_FIELDS = ("missing_eos_penalty", "length_penalty", "length_bonus", "length_norm_alpha", "score_clip")


def minippo_positions(module, args, kwargs):
    """Forward pre-hook: ``position_ids = max(cumsum(attention_mask) - 1, 0)`` when none are given."""
    mask = kwargs.get("attention_mask")
    if kwargs.get("position_ids") is None and mask is not None and kwargs.get("past_key_values") is None:
        kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return args, kwargs


class ExportedReward:
    """TRL reward function: minippo's sequence score from the exported reward model in ``folder``.

    ``tokenizer`` is the exported (Hugging Face) tokenizer; ``score_settings`` a dict holding the PPO config
    fields of :data:`SCORE_FIELDS` it has (a run's ``ppo_config``: ``missing_eos_penalty`` at least; the length
    terms only if the run used PPO's knobs).
    """

    __name__ = "minippo_reward_model"           # the name TRL logs it under (rewards/minippo_reward_model)

    def __init__(self, folder, tokenizer, score_settings: dict):
        from transformers import AutoModelForSequenceClassification   # lazy: the optional hf extra
        if "missing_eos_penalty" not in score_settings:
            raise ValueError("`score_settings` lacks missing_eos_penalty (a PPO config's field)")
        self.model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
        # canonical PPO has no length terms: the fields a run's config lacks keep sequence_scores' neutral defaults
        self.tok, self.score_kw = tokenizer, {k: score_settings[k] for k in SCORE_FIELDS if k in score_settings}

    def __call__(self, prompts, completions, completion_ids, **kwargs) -> list[float]:
        import torch                                  # lazy: the optional hf extra
        rows = [[self.tok.bos_token_id] + self.tok(p, add_special_tokens=False)["input_ids"] + list(c)
                for p, c in zip(prompts, completion_ids)]
        ids = torch.full((len(rows), max(map(len, rows))), self.tok.pad_token_id, dtype=torch.long)   # (B, T)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):                 # right-padded: positions 0, 1, ... are minippo's
            ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
        with torch.no_grad():
            rm_scores = self.model(input_ids=ids, attention_mask=mask).logits[:, 0].double().numpy()   # (B,)
        ended = np.array([self.tok.eos_token_id in c for c in completion_ids])                       # (B,)
        lengths = np.array([len(c) for c in completion_ids])          # response tokens, the EOS included
        return sequence_scores(rm_scores, ended, lengths, **self.score_kw).tolist()   # as minippo's rollout


def check_tokenizer(tok) -> None:
    """TRL tokenises prompts with the tokenizer's special tokens: they must give ``<bos> prompt`` (no EOS)."""
    ids = tok("the film")["input_ids"]
    if ids[0] != tok.bos_token_id or tok.eos_token_id in ids:
        raise ValueError(f"the exported tokenizer encodes 'the film' as {ids}; TRL needs <bos> + text without "
                         f"an EOS ({tok.bos_token_id} first, no {tok.eos_token_id}) to prompt the policy")


def grpo_trainer(policy_hf, rm_hf, ppo_cfg: dict, *, out_dir, steps: int, batch: int, group: int, lr: float,
                 beta: float = 0.0, n_prompts: int = 256, seed: int = 0, callbacks=None, logging_steps: int = 1):
    """``trl.GRPOTrainer`` on the exported policy ``policy_hf`` with :class:`ExportedReward` of ``rm_hf``: ``steps``
    steps of ``batch`` completions, ``group`` per prompt, responses of ``ppo_cfg``'s ``max_new_tokens`` at its
    ``temperature``, on the CPU in float32; one generation batch and one optimizer step per step; TRL logs (and
    prints) its metrics every ``logging_steps`` steps."""
    import torch                                                        # lazy: the optional hf extra
    from datasets import Dataset                                       # lazy: the optional hf extra
    from transformers import AutoModelForCausalLM, AutoTokenizer       # lazy: the optional hf extra
    from trl import GRPOConfig, GRPOTrainer                            # lazy: the optional hf extra
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(policy_hf))
    check_tokenizer(tok)
    model = AutoModelForCausalLM.from_pretrained(str(policy_hf), dtype=torch.float32)
    config = GRPOConfig(
        output_dir=str(out_dir), max_steps=steps, per_device_train_batch_size=batch, num_generations=group,
        max_completion_length=ppo_cfg["max_new_tokens"], temperature=ppo_cfg["temperature"], top_k=0, top_p=1.0,
        learning_rate=lr, beta=beta, logging_steps=logging_steps, report_to="none", save_strategy="no", use_cpu=True,
        bf16=False, seed=seed, disable_tqdm=True, dataloader_num_workers=0)
    prompts = Dataset.from_dict({"prompt": sample_prompts(n_prompts, seed=seed)})
    trainer = GRPOTrainer(model=model, reward_funcs=[ExportedReward(rm_hf, tok, ppo_cfg)], args=config,
                          train_dataset=prompts, processing_class=tok, callbacks=callbacks)
    for m in (trainer.model, trainer.ref_model):
        if m is not None:
            m.register_forward_pre_hook(minippo_positions, with_kwargs=True)
    return trainer
