"""minippo.studies.verdicts: the course's one rule (holds / does not hold / not shown at this size)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from minippo.studies import verdicts as V
from minippo.studies.sweep_stats import compare, compare_paired, pooled_seed_std, seed_compare


def test_decide_has_three_outcomes_in_both_directions():
    assert V.decide(0.5, 0.2, +1) == V.HOLDS            # 2.5 s.e. the predicted way
    assert V.decide(-0.5, 0.2, +1) == V.FAILS           # 2.5 s.e. the other way
    assert V.decide(0.3, 0.2, +1) == V.NOT_SHOWN        # 1.5 s.e.: within the noise
    assert V.decide(-0.5, 0.2, -1) == V.HOLDS and V.decide(0.5, 0.2, -1) == V.FAILS
    assert V.decide(0.4, 0.2, +1) == V.HOLDS            # exactly 2 s.e. counts
    assert V.decide(0.5, None, +1) == V.NOT_SHOWN       # one seed: no noise estimate
    assert V.decide(0.0, 0.0, +1) == V.NOT_SHOWN and V.decide(1e-9, 0.0, +1) == V.HOLDS
    for bad in (dict(diff=np.nan, se=0.1), dict(diff=1.0, se=-0.1), dict(diff=1.0, se=np.inf)):
        with pytest.raises(ValueError):
            V.decide(expect=1, **bad)
    with pytest.raises(ValueError, match="`expect`"):
        V.decide(1.0, 0.1, 0)


@pytest.mark.parametrize("expect", [+1, -1])
def test_a_comparison_can_say_each_outcome_from_seed_numbers(expect):
    """The rule applied to seed values: clearly apart either way, overlapping, and a single seed."""
    a = np.array([0.40, 0.42, 0.38])
    far = a + 0.5 * expect                              # the claimed direction, far beyond the noise
    wrong = a - 0.5 * expect
    close = np.array([0.45, 0.36, 0.41])                # overlapping seeds
    noise = pooled_seed_std([a, far])[0]
    kw = dict(expect=expect, labels=("a", "b"), quantity="gold")
    assert V.comparison("k", "b beats a", compare(a, far, noise), **kw).outcome == V.HOLDS
    assert V.comparison("k", "b beats a", compare(a, wrong, noise), **kw).outcome == V.FAILS
    c = compare(a, close, pooled_seed_std([a, close])[0])
    v = V.comparison("k", "b beats a", c, **kw)
    assert v.outcome == V.NOT_SHOWN and "within 2 s.e." in v.because
    one = V.comparison("k", "b beats a", seed_compare(a[:1], far[:1], None), **kw)
    assert one.outcome == V.NOT_SHOWN and "one seed" in one.because
    paired = V.comparison("k", "b beats a", compare_paired(a, far), noise="task", **kw)
    assert paired.outcome == V.HOLDS and "task noise" in paired.rule


def test_a_comparison_says_its_direction_in_words():
    c = {"diff": -0.197, "se": 0.05}
    v = V.comparison("whitening", "Advantage whitening raises the gold.", c, expect=-1,
                     labels=("whitening ON", "whitening OFF"), quantity="gold", values=(0.599, 0.402))
    assert v.outcome == V.HOLDS
    assert v.because.startswith("whitening OFF lower than whitening ON in gold: +0.402 vs +0.599")
    v = V.comparison("whitening", "Advantage whitening raises the gold.", {"diff": 0.197, "se": 0.05}, expect=-1,
                     labels=("whitening ON", "whitening OFF"), quantity="gold", values=(0.402, 0.599))
    assert v.outcome == V.FAILS and v.because.startswith("whitening OFF higher than whitening ON in gold")
    text = v.render()
    assert "DOES NOT HOLD" in text and "rule: holds when" in text and "diff = 0.197" in text


def test_measurement_with_and_without_noise():
    v = V.measurement("k", "TRPO stays in its trust region", 0.96, 1.0, "<=", "max KL / delta")
    assert v.outcome == V.HOLDS and v.kind == V.MEASUREMENT
    assert V.measurement("k", "c", 1.01, 1.0, "<=", "x").outcome == V.FAILS
    assert V.measurement("k", "c", 0.3, 0.0, ">", "bias", se=0.1).outcome == V.HOLDS
    assert V.measurement("k", "c", 0.1, 0.0, ">", "bias", se=0.1).outcome == V.NOT_SHOWN
    assert V.measurement("k", "c", -0.3, 0.0, ">", "bias", se=0.1).outcome == V.FAILS
    with pytest.raises(ValueError, match="`sense`"):
        V.measurement("k", "c", 1.0, 0.0, "!=", "x")


def test_an_identity_cannot_be_not_shown_and_combinations_follow_logic():
    assert V.identity("k", "c", True, "r").outcome == V.HOLDS
    assert V.identity("k", "c", False, "r").outcome == V.FAILS
    with pytest.raises(ValueError, match="cannot be"):
        V.Verdict("k", "c", V.IDENTITY, "r", {}, V.NOT_SHOWN)
    with pytest.raises(ValueError, match="`kind`"):
        V.Verdict("k", "c", "opinion", "r", {}, V.HOLDS)
    h, f = V.identity("h", "c", True, "r"), V.identity("f", "c", False, "r")
    n = V.comparison("n", "c", {"diff": 0.1, "se": 0.1}, expect=1, labels=("a", "b"), quantity="q")
    assert V.all_of("k", "c", [h, h]).outcome == V.HOLDS and V.all_of("k", "c", [h, n]).outcome == V.NOT_SHOWN
    assert V.all_of("k", "c", [n, f]).outcome == V.FAILS and V.all_of("k", "c", [h, n]).kind == V.COMPARISON
    assert V.any_of("k", "c", [f, h]).outcome == V.HOLDS and V.any_of("k", "c", [f, n]).outcome == V.NOT_SHOWN
    assert V.any_of("k", "c", [f, f]).outcome == V.FAILS
    with pytest.raises(ValueError, match="share the key"):
        V.by_key([h, h])


def test_as_dict_is_plain_json_and_table_lists_each_claim_per_seed():
    v = V.measurement("k", "c", np.float32(0.5), 1.0, "<", "x", numbers={"n": np.int64(3)})
    d = v.as_dict()
    assert json.loads(json.dumps(d)) == d and d["numbers"]["n"] == 3
    t = V.table([("04", {0: [v], 1: [V.measurement("k", "c", 2.0, 1.0, "<", "x")]})])
    assert "| 04 | c | measurement |" in t and t.splitlines()[-1].endswith("| holds | does not hold |")


def test_importable_without_the_rlhf_stack():
    """Lessons 01-07 use the verdicts; importing them must not pull in the RLHF pipeline."""
    code = ("import sys; import minippo.studies.verdicts, lessons._common; "
            "bad = [m for m in sys.modules if m.startswith(('minippo.rlhf', 'tokenizers'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
