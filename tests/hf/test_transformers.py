"""The export against the real libraries: ``minippo rlhf --quick --out R && minippo export R/ppo/policy --hf H``,
then transformers loads H with no code of ours and computes what TinyGPT computes.

- logits on padded batches (left-padded prompts ++ right-padded responses) to 1e-4, float32, at every real token
  (padded positions hold meaningless numbers on both sides: nothing real attends to them);
- the same greedy continuation of five prompts (``generate(do_sample=False)`` vs our ``top_k=1``);
- the reward model's score (GPT2ForSequenceClassification reads the last non-pad token) to 1e-4;
- import of folders transformers itself re-saved (``save_pretrained``), as a TRL run would leave them;
- tokenizer ids, padding and decoding equal for texts with special tokens and their literal spellings.
"""
from types import SimpleNamespace

import numpy as np
import pytest

REASON = ("needs torch and transformers: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu "
          "(the CPU build), then pip install -e '.[test,hf]'")
torch = pytest.importorskip("torch", reason=REASON)
transformers = pytest.importorskip("transformers", reason=REASON)

from minippo.cli import main  # noqa: E402  (after the skips: these tests need torch)
from minippo.rlhf.data.corpus import sample_prompts  # noqa: E402
from minippo.rlhf.data.tokenizer import Tokenizer  # noqa: E402
from minippo.rlhf.generate import encode_prompts, generate  # noqa: E402
from minippo.rlhf.reward_model import RewardModel, last_token_index  # noqa: E402
from minippo.rlhf.checkpoint import load_model  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The quick pipeline and its three models exported, through the commands a user types."""
    root = tmp_path_factory.mktemp("hf")
    R = root / "R"
    assert main(["rlhf", "--quick", "--out", str(R), "--no-progress"]) == 0
    for name, folder in (("H", R / "ppo" / "policy"), ("H_rm", R / "rm"), ("H_sft", R / "sft")):
        assert main(["export", str(folder), "--hf", str(root / name)]) == 0
    policy, state = load_model(R / "ppo")
    tok = Tokenizer.load(state["tokenizer"])
    return SimpleNamespace(root=root, R=R, H=root / "H", H_rm=root / "H_rm", policy=policy, tok=tok,
                           rm=RewardModel.load(R / "rm")[0])


def hf_model(folder, cls="AutoModelForCausalLM"):
    return getattr(transformers, cls).from_pretrained(str(folder)).eval()


def positions(mask):
    """minippo's position ids in torch: (attention_mask.cumsum(-1) - 1).clamp(min=0)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def sampled_batch(run, n=12, seed=0):
    """Left-padded prompts ++ right-padded responses of varied lengths (sampled at temperature 1)."""
    ids, mask = encode_prompts(run.tok, sample_prompts(n, seed=seed))
    gen = generate(run.policy, ids, mask, max_new_tokens=12, rng=np.random.default_rng(seed),
                   eos_id=run.tok.eos_id, pad_id=run.tok.pad_id)
    assert (gen.attn_mask[:, 0] == 0).any() and (gen.attn_mask[:, -1] == 0).any()   # both kinds of padding
    return gen.sequences, gen.attn_mask


def test_policy_logits_equal_on_padded_batches(run):
    hf = hf_model(run.H)
    assert type(hf).__name__ == "GPT2LMHeadModel" and hf.dtype == torch.float32
    seqs, mask = sampled_batch(run)
    ours, _, _ = run.policy.forward(seqs, mask)                                    # (B, T, V)
    t_ids, t_mask = torch.tensor(seqs), torch.tensor(mask)
    with torch.no_grad():
        theirs = hf(input_ids=t_ids, attention_mask=t_mask, position_ids=positions(t_mask)).logits.numpy()
        arange = hf(input_ids=t_ids, attention_mask=t_mask).logits.numpy()
    real = mask.astype(bool)
    diff = float(np.abs(theirs - ours)[real].max())
    print(f"policy, padded batch {seqs.shape}: max |logit diff| over real tokens = {diff:.2e}")
    assert diff <= TOL
    # without position_ids GPT-2 numbers positions 0, 1, ... from the first (padded) column: wrong when left-padded
    assert np.abs(arange - ours)[real].max() > 1e-2
    # right padding only (real tokens from column 0): GPT-2's default positions are ours
    ids_r, mask_r = run.tok.pad_right(run.tok.encode_batch(["the film was", "a long and very slow story ."],
                                                           add_bos=True, add_eos=True))
    ours_r, _, _ = run.policy.forward(ids_r, mask_r)
    with torch.no_grad():
        theirs_r = hf(input_ids=torch.tensor(ids_r), attention_mask=torch.tensor(mask_r)).logits.numpy()
    assert np.abs(theirs_r - ours_r)[mask_r.astype(bool)].max() <= TOL


def test_greedy_continuation_of_five_prompts_is_the_same(run):
    """The issue's check: AutoModelForCausalLM + AutoTokenizer on the exported folder, nothing of ours."""
    hf = hf_model(run.H)
    tok = transformers.AutoTokenizer.from_pretrained(str(run.H))
    prompts = sample_prompts(5, seed=3)
    batch = tok(prompts, padding=True, return_tensors="pt")          # <bos> + prompt, left-padded
    ids, mask = encode_prompts(run.tok, prompts)
    assert np.array_equal(batch["input_ids"].numpy(), ids) and np.array_equal(batch["attention_mask"].numpy(), mask)
    n_new = 16
    gen = generate(run.policy, ids, mask, max_new_tokens=n_new, rng=np.random.default_rng(0), top_k=1,
                   eos_id=run.tok.eos_id, pad_id=run.tok.pad_id)
    with torch.no_grad():
        out = hf.generate(**batch, do_sample=False, max_new_tokens=n_new)
    theirs = out[:, ids.shape[1]:].numpy()
    ours = np.zeros_like(theirs)
    ours[:, :gen.response.shape[1]] = gen.response[:, :theirs.shape[1]]
    for p, a, b in zip(prompts, ours, theirs):
        print(f"{p!r}: minippo {a.tolist()} / transformers {b.tolist()}")
    assert np.array_equal(ours, theirs)
    assert tok.batch_decode(out, skip_special_tokens=True) == run.tok.decode_batch(gen.sequences)


def test_reward_model_score_equals_ours_at_the_last_real_token(run):
    hf = hf_model(run.H_rm, "AutoModelForSequenceClassification")
    assert type(hf).__name__ == "GPT2ForSequenceClassification"
    assert hf.config.num_labels == 1 and hf.config.pad_token_id == run.tok.pad_id
    seqs, mask = sampled_batch(run, seed=1)
    # Hugging Face reads the rightmost token that is not pad_token_id: our last real token, as no real token is <pad>
    non_pad = (seqs != hf.config.pad_token_id) * np.arange(seqs.shape[1])
    assert np.array_equal(non_pad.argmax(-1), last_token_index(mask))
    t_ids, t_mask = torch.tensor(seqs), torch.tensor(mask)
    with torch.no_grad():
        theirs = hf(input_ids=t_ids, attention_mask=t_mask, position_ids=positions(t_mask)).logits[:, 0].numpy()
    ours = run.rm.score(seqs, mask)                                                 # gain * raw + bias
    diff = float(np.abs(theirs - ours).max())
    print(f"reward model, {len(ours)} padded rows: max |score diff| = {diff:.2e} (scores {ours.min():+.2f}..{ours.max():+.2f})")
    assert diff <= TOL
    ids_r, mask_r = run.tok.pad_right(run.tok.encode_batch(["the film was great", "bad ."], add_bos=True, add_eos=True))
    with torch.no_grad():                                     # right padding: no position_ids needed
        theirs_r = hf(input_ids=torch.tensor(ids_r), attention_mask=torch.tensor(mask_r)).logits[:, 0].numpy()
    assert np.abs(theirs_r - run.rm.score(ids_r, mask_r)).max() <= TOL


def test_reward_model_scored_as_its_card_says_gives_our_score_of_the_finished_text(run):
    """Issue 26 item 4: the card of the reward model's export says the score is read at the EOS and that the
    folder's tokenizer appends it; scoring texts exactly as the card's snippet does (tok(texts), left-padded,
    position ids from the mask) gives our reward model's score of `<bos> text <eos>` (1e-4), and the card's
    example numbers are the reward model's own."""
    from minippo.rlhf.run.hf import eos_example
    card = (run.H_rm / "README.md").read_text()
    assert "## Where the score is read: at the EOS" in card and "`tok(texts)` gives `<bos> text <eos>`" in card
    tok = transformers.AutoTokenizer.from_pretrained(str(run.H_rm))
    hf = hf_model(run.H_rm, "AutoModelForSequenceClassification")
    texts = ["the film was superb .", "the plot was dull and far too slow .", sample_prompts(1, seed=7)[0]]
    batch = tok(texts, padding=True, return_tensors="pt")             # the card's line: <bos> text <eos>, left-padded
    ids, mask = run.tok.pad_left(run.tok.encode_batch(texts, add_bos=True, add_eos=True))
    assert np.array_equal(batch["input_ids"].numpy(), ids) and np.array_equal(batch["attention_mask"].numpy(), mask)
    with torch.no_grad():
        theirs = hf(**batch, position_ids=positions(batch["attention_mask"])).logits[:, 0].numpy()
    ours = run.rm.score(ids, mask)
    print(f"reward model, scored as the card says: {np.round(theirs, 3)} vs ours {np.round(ours, 3)}")
    assert np.abs(theirs - ours).max() <= TOL
    ex = eos_example(run.rm, run.tok)
    assert f"scores {ex['with_eos']:+.2f} read at its EOS (its score) and {ex['without_eos']:+.2f}" in card
    one = tok([ex["text"]], return_tensors="pt")
    with torch.no_grad():
        assert abs(float(hf(**one).logits[0, 0]) - ex["with_eos"]) <= TOL


def test_folders_transformers_resaved_import_back(run):
    """What a TRL run leaves is a save_pretrained folder: import it (the GPT-2 weights bitwise; the policy's
    scalar head, which GPT-2 cannot hold, is back only from minippo_extra.safetensors, which a re-save drops)."""
    for src, cls in ((run.H, "AutoModelForCausalLM"), (run.H_rm, "AutoModelForSequenceClassification")):
        resaved = run.root / f"{src.name}_resaved"
        hf_model(src, cls).save_pretrained(str(resaved))
        transformers.AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(resaved))
        assert main(["import-hf", str(resaved), "--out", str(run.root / f"{src.name}_back")]) == 0
    back, state = load_model(run.root / "H_back")
    for k, p in run.policy.params.items():
        if not k.startswith("scalar_head"):
            assert back.params[k].tobytes() == p.tobytes(), k
    assert "ppo_config" in state                         # the model folder's state travels in config.json
    tok = Tokenizer.load(state["tokenizer"])
    assert tok.encode("the film was good .") == run.tok.encode("the film was good .")
    rm_back, _ = RewardModel.load(run.root / "H_rm_back")                    # gain 1, bias 0: the folded head
    seqs, mask = sampled_batch(run, seed=2)
    assert np.abs(rm_back.score(seqs, mask) - run.rm.score(seqs, mask)).max() <= TOL


def test_tokenizer_ids_padding_and_decoding_are_ours(run):
    tok = transformers.AutoTokenizer.from_pretrained(str(run.H))
    ours = run.tok
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (ours.pad_id, ours.bos_id, ours.eos_id)
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<pad>", "<bos>", "<eos>"] and len(tok) == ours.vocab_size
    texts = ["the film was good .", "a", "it was <eos> not the end", "<pad> and <bos> are text here",
             "What a MOVIE!!! 10/10 (really) ~ #1", "   spaces   inside", sample_prompts(1, seed=5)[0]]
    for text in texts:
        assert tok(text)["input_ids"] == ours.encode(text, add_bos=True), text
        assert tok(text, add_special_tokens=False)["input_ids"] == ours.encode(text), text
        assert tok.decode(ours.encode(text, add_bos=True, add_eos=True), skip_special_tokens=True) == \
            ours.decode(ours.encode(text, add_bos=True, add_eos=True)), text
    left = tok(texts, padding=True, return_tensors="np")
    assert set(left) == {"input_ids", "attention_mask"}      # no token_type_ids (GPT-2 would embed them)
    ids, mask = ours.pad_left(ours.encode_batch(texts, add_bos=True))
    assert np.array_equal(left["input_ids"], ids) and np.array_equal(left["attention_mask"], mask)
    tok.padding_side = "right"
    right = tok(texts, padding=True, return_tensors="np")
    ids, mask = ours.pad_right(ours.encode_batch(texts, add_bos=True))
    assert np.array_equal(right["input_ids"], ids) and np.array_equal(right["attention_mask"], mask)
