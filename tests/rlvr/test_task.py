"""The arithmetic task: the tokenizer's round trip, the verifier on right / wrong / malformed answers (text and
token ids), the teacher's slips (its accuracy is the exact expectation), the held-out split, determinism with an
explicit Generator, the answer-only SFT batches."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minippo.io import CorruptFileError
from minippo.rlhf.data.batches import lm_batch
from minippo.rlvr.task import Problem, Problems, TaskSFTConfig, answer_batch, sft_batcher, teacher_answer
from minippo.rlvr.tokenizer import ALPHABET, CharTokenizer
from minippo.rlvr.verifier import Verifier, parse_prompt, verify, well_formed

TOK = CharTokenizer()


# ---- the tokenizer --------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=12))
def test_tokenizer_round_trip(text):
    ids = TOK.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == TOK.bos_id and ids[-1] == TOK.eos_id and len(ids) == len(text) + 2
    assert TOK.decode(ids) == text and TOK.decode(TOK.encode(text)) == text


def test_tokenizer_ids_specials_and_decoding_rules():
    assert TOK.vocab_size == 15 and (TOK.pad_id, TOK.bos_id, TOK.eos_id) == (0, 1, 2)
    assert TOK.encode("23+58=81") == [5, 6, 13, 8, 11, 14, 11, 4]
    # decoding stops at the first EOS and drops <pad> / <bos>; skip_special=False shows them by name
    assert TOK.decode([1, 5, 2, 6, 0]) == "2"
    assert TOK.decode([1, 5, 2, 6, 0], skip_special=False) == "<bos>2<eos>3<pad>"
    ids, mask = TOK.pad_left([[1, 5], [1, 5, 6, 7]])
    assert ids.tolist() == [[0, 0, 1, 5], [1, 5, 6, 7]] and mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]


def test_tokenizer_refuses_unknown_characters_and_ids(tmp_path):
    with pytest.raises(ValueError, match=r"`text` '2\*3' has the character '\*' at position 1"):
        TOK.encode("2*3")
    with pytest.raises(ValueError, match="`ids` must be < 15"):
        TOK.decode([1, 15])
    with pytest.raises(TypeError, match="`texts` must be a list of str"):
        TOK.encode_batch("23")
    with pytest.raises(ValueError, match="`alphabet` must not repeat"):
        CharTokenizer("00")


def test_tokenizer_save_load_and_a_bpe_file_refused(tmp_path):
    path = TOK.save(tmp_path)
    again = CharTokenizer.load(tmp_path)
    assert again.alphabet == TOK.alphabet and again.encode("9+9=18") == TOK.encode("9+9=18")
    path.write_text('{"model": {"type": "BPE"}}')
    with pytest.raises(CorruptFileError, match="not a character tokenizer"):
        CharTokenizer.load(path)


# ---- the verifier ---------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt, response, ended, want", [
    ("23+58=", "81", True, 1),
    ("0+0=", "0", True, 1),
    ("99+99=", "198", True, 1),
    ("23+58=", "71", True, 0),            # the carry forgotten
    ("58+63=", "21", True, 0),            # the hundreds' carry forgotten
    ("23+58=", "081", True, 0),           # a leading zero
    ("23+58=", "81+", True, 0),           # a sign in the answer
    ("23+58=", "", True, 0),              # nothing
    ("23+58=", "81", False, 0),           # no EOS: unfinished
])
def test_verify_right_wrong_malformed(prompt, response, ended, want):
    assert verify(prompt, response, ended) == want


@pytest.mark.parametrize("prompt", ["23+58", "23-58=", "2+3+4=", "+3=", "03+4=", "a+b="])
def test_a_bad_prompt_is_refused(prompt):
    with pytest.raises(ValueError, match="`prompt` must look like 'a\\+b='"):
        parse_prompt(prompt)


def test_well_formed():
    assert well_formed("0") and well_formed("120") and not well_formed("") and not well_formed("01")
    assert not well_formed("1=2")


def rows(*pairs, ended=True):
    """Token rows <bos> prompt response [<eos>] as a generation returns them: prompt left-padded, response
    right-padded."""
    prompts = [TOK.encode(p, add_bos=True) for p, _ in pairs]
    responses = [TOK.encode(r) + [TOK.eos_id] * ended if isinstance(r, str) else r for _, r in pairs]
    p_ids, p_mask = TOK.pad_left(prompts)
    r_ids, r_mask = TOK.pad_right(responses)
    return np.concatenate([p_ids, r_ids], axis=1), np.concatenate([p_mask, r_mask], axis=1)


def test_verifier_scores_token_rows_like_the_text_verifier():
    ids, mask = rows(("23+58=", "81"), ("23+58=", "71"), ("5+5=", "10"), ("5+5=", "010"), ("99+9=", "108"))
    right, formed = Verifier(TOK).check(ids, mask)
    assert right.tolist() == [True, False, True, False, True]
    assert formed.tolist() == [True, True, True, False, True]
    assert Verifier(TOK).score(ids, mask).tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_verifier_gives_zero_to_unfinished_answers_and_sampled_specials():
    ids, mask = rows(("23+58=", "81"), ("2+2=", "4"), ended=False)          # no EOS
    assert Verifier(TOK).score(ids, mask).tolist() == [0.0, 0.0]
    # "8 1 <bos> <eos>" decodes to "81" once specials are dropped: the verifier reads ids, not text
    ids, mask = rows(("23+58=", [11, 4, TOK.bos_id, TOK.eos_id]), ("23+58=", [11, TOK.pad_id, 4, TOK.eos_id]))
    assert Verifier(TOK).score(ids, mask).tolist() == [0.0, 0.0]


def test_verifier_refuses_a_row_that_is_not_a_problem():
    ids, mask = TOK.pad_right([TOK.encode("2+3", add_bos=True)])
    with pytest.raises(ValueError, match="row 0 has no '=' token"):
        Verifier(TOK).score(ids, mask)


# ---- the teacher and the problems -------------------------------------------------------------------

def test_a_perfect_teacher_adds_and_a_slipping_one_forgets_carries_only():
    rng = np.random.default_rng(0)
    for a, b in itertools.product(range(0, 100, 7), range(0, 100, 9)):
        assert teacher_answer(a, b, 0.0, rng) == str(a + b)
    assert teacher_answer(47, 38, 1.0, rng) == "75" and teacher_answer(58, 63, 1.0, rng) == "11"
    assert teacher_answer(23, 45, 1.0, rng) == "68"                        # no carry: nothing to forget


def test_the_teachers_accuracy_is_its_exact_expectation():
    # right iff no carry is forgotten: E[(1 - slip) ^ #carries] over the 10,000 problems, computed exactly
    def carries(a, b):
        n, c = 0, 0
        while a or b or c:
            c = (a % 10 + b % 10 + c) // 10
            n, a, b = n + c, a // 10, b // 10
        return n
    exact = np.mean([0.5 ** carries(a, b) for a in range(100) for b in range(100)])
    assert abs(exact - 0.589375) < 1e-12                                   # "59 %" in minippo/rlvr/task.py
    cfg = TaskSFTConfig(n_train=20000)
    demos = Problems(cfg).demonstrations()
    acc = np.mean([verify(d[:d.index("=") + 1], d[d.index("=") + 1:]) for d in demos])
    # 20,000 Bernoulli draws (the held-out problems excluded): s.e. sqrt(0.24 / 20000) = 0.0035; 4 s.e.
    assert abs(acc - exact) < 0.014


def test_heldout_problems_never_appear_in_training_draws_or_demonstrations():
    cfg = TaskSFTConfig(n_heldout=2000, n_train=5000)
    p = Problems(cfg)
    held = {q.prompt for q in p.heldout}
    assert len(held) == 2000
    assert not held & {q.prompt for q in p.draw(20000, np.random.default_rng(1))}
    assert not held & {d[:d.index("=") + 1] for d in p.demonstrations()}


def test_the_same_generator_seed_gives_the_same_problems_and_demonstrations():
    cfg = TaskSFTConfig.quick()
    a, b = Problems(cfg), Problems(cfg)
    assert a.heldout == b.heldout and a.demonstrations() == b.demonstrations()
    assert a.draw(50, np.random.default_rng(7)) == b.draw(50, np.random.default_rng(7))
    assert a.draw(50, np.random.default_rng(7)) != a.draw(50, np.random.default_rng(8))
    assert Problems(TaskSFTConfig.quick(seed=1)).heldout != a.heldout


def test_problem_prompt_and_answer():
    assert Problem(23, 58).prompt == "23+58=" and Problem(23, 58).answer == "81"


def test_sft_batches_count_the_answer_and_the_eos_only():
    seqs = [np.array(TOK.encode(t, add_bos=True, add_eos=True)) for t in ("23+58=81", "5+5=10", "99+99=198")]
    idx, targets, mask, attn = answer_batch(seqs, TOK.pad_id, equals_id=TOK.id_of("="))
    ref = lm_batch(seqs, TOK.pad_id)
    assert (idx == ref[0]).all() and (targets == ref[1]).all() and (attn == ref[3]).all()
    for b, text in enumerate(("23+58=81", "5+5=10", "99+99=198")):
        counted = [TOK.decode([t], skip_special=False) for t, m in zip(targets[b], mask[b]) if m]
        assert "".join(counted) == text.split("=")[1] + "<eos>"
    assert sft_batcher(TOK)(seqs, TOK.pad_id)[2].tolist() == mask.tolist()


@pytest.mark.parametrize("field, value, needle", [
    ("digits", 4, "`digits` must be in [1, 3]"),
    ("carry_slip", 1.5, "`carry_slip` must be in [0, 1]"),
    ("n_heldout", 6000, "`n_heldout` must be in [1, 5000]"),
    ("block_size", 10, "`block_size` (10) must be >= 11"),
    ("n_train", 0, "`n_train` must be in [1, inf)"),
])
def test_task_config_validation_names_the_field(field, value, needle):
    with pytest.raises(ValueError) as err:
        TaskSFTConfig(**{field: value})
    assert needle in str(err.value)
