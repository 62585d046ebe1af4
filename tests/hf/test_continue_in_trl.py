"""``examples/continue_in_trl.py`` (``minippo/rlhf/run/hf_trl.py``) at tiny size: TRL's GRPOTrainer trains minippo's exported policy with the
exported reward model, ``minippo import-hf`` reads it back and minippo judges it. Fails if the weights did not
change or a reward is not finite; and the reward TRL is given is minippo's own sequence score (the exported
reward model read at the EOS, the missing-EOS penalty subtracted), checked against ``RewardModel.score``."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REASON = "needs torch, transformers and trl: pip install -e '.[test,hf]'"
torch = pytest.importorskip("torch", reason=REASON)
pytest.importorskip("transformers", reason=REASON)
pytest.importorskip("trl", reason=REASON)

from minippo.cli import main  # noqa: E402  (after the skips)
from minippo.rlhf.checkpoint import load_model  # noqa: E402
from minippo.rlhf.reward_model import RewardModel, has_eos, sequence_scores  # noqa: E402
from minippo.rlhf.data.tokenizer import Tokenizer  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "continue_in_trl.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    R = tmp_path_factory.mktemp("trl") / "R"
    assert main(["rlhf", "--quick", "--out", str(R), "--no-progress"]) == 0
    return R


def test_trl_trains_the_export_and_minippo_reads_it_back(run, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), str(run), "--out", str(out), "--steps", "3", "--batch", "8", "--group", "4",
           "--prompts", "24", "--eval", "32"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["steps"] == 3 and s["rewards_finite"] and all(math.isfinite(r) for r in s["rewards"])
    assert s["max_weight_change"] > 0, "TRL's training left the weights unchanged"
    for side in ("minippo", "trl"):
        assert all(math.isfinite(v) for v in s["judged"][side].values())
    # a folder that holds files is refused, before anything is written
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 2 and "holds files" in again.stderr


def test_the_reward_given_to_trl_is_minippos_sequence_score(run, tmp_path):
    from transformers import AutoTokenizer
    from minippo.rlhf.run import hf_trl
    assert main(["export", str(run / "rm"), "--hf", str(tmp_path / "rm_hf")]) == 0
    assert main(["export", str(run / "ppo" / "policy"), "--hf", str(tmp_path / "pol_hf")]) == 0
    hf_tok = AutoTokenizer.from_pretrained(str(tmp_path / "pol_hf"))
    hf_trl.check_tokenizer(hf_tok)
    _, state = load_model(run / "ppo" / "policy")
    penalty = state["ppo_config"]["missing_eos_penalty"]
    assert penalty > 0                                   # so that the missing EOS shows in the numbers
    reward = hf_trl.ExportedReward(tmp_path / "rm_hf", hf_tok, state["ppo_config"])
    tok = Tokenizer.load(state["tokenizer"])
    prompts = ["the film was", "i think the", "overall , the"]
    responses = [tok.encode(" good and fun .", add_eos=True), tok.encode(" very slow"), tok.encode(" a story", add_eos=True)]
    got = reward(prompts=prompts, completions=None, completion_ids=responses)
    # minippo: <bos> prompt response, right-padded, the RM's normalised score, the penalty without an EOS
    rows = [tok.encode(p, add_bos=True) + r for p, r in zip(prompts, responses)]
    ids, mask = tok.pad_right(rows)
    rm, _ = RewardModel.load(run / "rm")
    resp, rmask = tok.pad_right(responses)
    ended = has_eos(resp, rmask, tok.eos_id)
    want = sequence_scores(rm.score(ids, mask), ended, rmask.sum(1), missing_eos_penalty=penalty)
    assert list(ended) == [True, False, True]
    # float32 forward on both sides, different summation orders: 1e-4 as tests/hf/test_transformers.py
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_bench_trl_times_both_iterations_and_prints_the_ratio(capsys):
    """``minippo bench --only trl`` runs both sides at its sizes (no duration is asserted: only that each side
    ran, on the batch it was given, and that the printed ratio is the quotient of the printed times)."""
    from minippo.bench import trl as bench_trl
    from minippo.bench.report import Report
    bench_trl.bench(Report(), quick=True)
    out = capsys.readouterr().out
    times = {}
    for label in ("GRPOTrainer step", "minippo GRPO iteration"):
        line = next(ln for ln in out.splitlines() if label in ln)
        value, unit = line.split()[-2:]
        times[label] = float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]
    ratio = float(next(ln for ln in out.splitlines() if "TRL time / minippo time" in ln).split()[-1].rstrip("x"))
    assert all(t > 0 for t in times.values())
    # the printed times are rounded to 2 decimals of ms: the quotient agrees to that rounding
    assert ratio == pytest.approx(times["GRPOTrainer step"] / times["minippo GRPO iteration"], rel=1e-2)
