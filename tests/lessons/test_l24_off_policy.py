"""Smoke test of lesson 24 on two seeds: what holds exactly holds on both (sequence IS unbiased wherever the
sampler covers pi, the Monte Carlo check), every printed verdict follows from the numbers run() returned
(recomputed here from the raw numbers, not by the lesson's helpers), and each verdict helper can say all of
its outcomes."""
import numpy as np
import pytest

from lessons import l24_off_policy as lesson
from tests.helpers import line_with, quick_runs

pytestmark = pytest.mark.slow      # lesson runs on the shared SFT and RM stages (pytest -m slow)

OUTCOMES = ("holds", "does not hold", "not shown at this size")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return quick_runs(lesson, tmp_path_factory)


def expected(r) -> dict:
    """Each claim's outcome from the raw numbers, written out apart from lesson.claims()."""
    s, c = r["a"]["samplers"], r["c"]["rows"]
    rel = lambda n, e, k="rel_bias": s[n]["rows"][e][k]                     # noqa: E731

    def less(a, b):
        return "holds" if a < 0.95 * b else ("does not hold" if a > 1.05 * b else "not shown at this size")

    def more_share(p, q):
        d, se = p["outside"] - q["outside"], np.hypot(p["se"], q["se"])
        return "holds" if d > 2 * se else ("does not hold" if d < -2 * se else "not shown at this size")

    cover = max(rel(n, "IS, sequence") for n in ("fp16 logits", "bf16 logits", "bf16 logits, truncated",
                                                  "stale by 1", "stale by 2"))
    trunc = min(row["rel_bias"] for n in ("top-p 0.9", "top-k 3") for row in s[n]["rows"].values())
    tok = rel("stale by 2", "IS, token")
    mc_tol = 4 / np.sqrt(2 * (r["sizes"]["batches"] - 1))
    mc_ok = all(v["z"] <= 5 and abs(v["spread_ratio"] - 1) <= mc_tol for v in r["mc"].values())
    bf = s["bf16 logits"]["rows"]["uncorrected"]
    return [
        "holds" if cover < 1e-9 else "does not hold",
        "holds" if trunc > 0.05 else ("does not hold" if trunc < 1e-9 else "not shown at this size"),
        less(tok, rel("stale by 2", "uncorrected")) if tok > 1e-9 else "does not hold",
        less(rel("stale by 2", "TIS C=1.2, sequence", "spread"), rel("stale by 2", "IS, sequence", "spread")),
        less(rel("stale by 2", "IS, sequence") + 1e-9, rel("stale by 2", "TIS C=1.2, sequence")),
        less(bf["bias"], 0.1 * bf["spread"]),
        less(rel("stale by 2", "IS, sequence", "rel_rmse"), rel("stale by 2", "uncorrected", "rel_rmse")),
        "holds" if mc_ok else "does not hold",
        "holds" if c["bf16 logits"]["count"] > 0 else "not shown at this size",
        more_share(c["bf16 logits"], c["fp16 logits"]),
        more_share(c[f"stale by {lesson.STALE_ITERATIONS} PPO iterations"], c["bf16 logits"]),
        "holds" if c["top-p 0.9"]["count"] == 0 else "does not hold",
    ]


@pytest.mark.parametrize("seed", [0, 1])
def test_l24_identities_hold_on_every_seed(runs, seed):
    r = runs[seed]
    s = r["a"]["samplers"]
    for name in ("fp16 logits", "bf16 logits", "bf16 logits, truncated", "stale by 1", "stale by 2"):
        assert s[name]["rows"]["IS, sequence"]["rel_bias"] < 1e-9, name       # importance sampling: unbiased
    for name in ("top-p 0.9", "top-k 3"):
        assert min(row["rel_bias"] for row in s[name]["rows"].values()) > 0.05, name   # missing support
    assert r["claims"][next(k for k in r["claims"] if "agree with Monte Carlo" in k)][0] == "holds"
    rows = r["c"]["rows"]
    assert rows["same sampler (control)"]["max_abs_log_ratio"] == 0.0        # the option off: q = pi, bitwise
    assert rows["top-p 0.9"]["max_abs_log_ratio"] <= -np.log(0.9) + 1e-5     # pi / q = kept mass >= 0.9 (float32)


@pytest.mark.parametrize("seed", [0, 1])
def test_l24_verdicts_follow_the_numbers(runs, seed):
    r = runs[seed]
    want = expected(r)
    got = [outcome for outcome, _, _ in r["claims"].values()]
    assert got == want
    if seed == 0:
        out = runs["printed"]
        assert (runs["out"] / "l24_off_policy.png").stat().st_size > 50_000
        for (claim, (outcome, number, rule)), w in zip(r["claims"].items(), want):
            line = line_with(out, f"  - {claim}: ")
            assert f": {w} ({number:+.3g}; {rule})" in line, line
        for name, row in r["c"]["rows"].items():
            assert f"{row['outside']:8.4f} +- {row['se']:6.4f} {row['count']:6d}" in line_with(out, f"    {name} ")
        bias = out.split("bias ||E[g] - grad J||")[1].split("noise of one batch")[0]
        for est in lesson.op.ESTIMATORS:                                     # the exact bias table, every cell
            cells = [f"{lesson._cell(r['a']['samplers'][n]['rows'][est]['rel_bias']):>11}" for n in r["a"]["samplers"]]
            assert "".join(cells) in line_with(bias, f"    {est} "), est
        assert f"{r['time']['wall']:.1f} s wall" in out


def test_verdict_helpers_say_every_outcome():
    assert [lesson.verdict_exact_less(a, 1.0) for a in (0.5, 2.0, 1.0)] == list(OUTCOMES)
    assert [lesson.verdict_positive(x) for x in (0.2, 0.0, 0.01)] == list(OUTCOMES)
    p = lambda x, se: {"outside": x, "se": se}                               # noqa: E731
    assert [lesson.verdict_share_more(p(0.3, 0.01), p(0.1, 0.01)), lesson.verdict_share_more(p(0.1, 0.01), p(0.3, 0.01)),
            lesson.verdict_share_more(p(0.1, 0.05), p(0.12, 0.05))] == list(OUTCOMES)
    assert lesson.verdict_any_outside({"count": 0}) == "not shown at this size"
    assert lesson.verdict_identity([1e-12]) == "holds" and lesson.verdict_identity([1e-3]) == "does not hold"
    bad = {"x": {"z": 9.0, "spread_ratio": 1.0}}
    assert lesson.verdict_mc(bad, 100) == "does not hold" and lesson.verdict_mc({"x": {"z": 0.0, "spread_ratio": 1.0}}, 100) == "holds"
