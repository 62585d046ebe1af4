"""AdamW against a hand-computed example, decoupled weight decay, clipping, LR schedules."""
import math

import numpy as np
import pytest

from minippo.nn.optim import AdamW, clip_grad_norm, global_norm, lr_at


def test_adamw_two_steps_by_hand():
    # one scalar-like 2-D parameter so that weight decay applies
    p = {"w": np.array([[1.0, -2.0]])}
    opt = AdamW(p, lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.5)
    g1, g2 = np.array([[0.5, 1.0]]), np.array([[-1.0, 3.0]])
    w = np.array([[1.0, -2.0]])
    # step 1: m = 0.1 g1, v = 0.01 g1^2, m_hat = g1, v_hat = g1^2 -> update = g1/(|g1| + eps) + wd * w
    m, v = 0.1 * g1, 0.01 * g1 ** 2
    w1 = w - 0.1 * ((m / 0.1) / (np.sqrt(v / 0.01) + 1e-8) + 0.5 * w)
    opt.step({"w": g1})
    np.testing.assert_allclose(p["w"], w1, rtol=1e-14)
    np.testing.assert_allclose(p["w"], [[1.0 - 0.1 * (1 + 0.5), -2.0 - 0.1 * (1 - 1.0)]], rtol=1e-7)
    # step 2 by hand, bias corrections 1 - 0.9^2 = 0.19 and 1 - 0.99^2 = 0.0199
    m = 0.9 * m + 0.1 * g2
    v = 0.99 * v + 0.01 * g2 ** 2
    w2 = w1 - 0.1 * ((m / 0.19) / (np.sqrt(v / 0.0199) + 1e-8) + 0.5 * w1)
    opt.step({"w": g2})
    np.testing.assert_allclose(p["w"], w2, rtol=1e-14)
    assert opt.t == 2


def test_weight_decay_is_decoupled_and_skips_1d_params():
    p = {"w": np.full((2, 2), 3.0), "b": np.full(2, 3.0)}
    opt = AdamW(p, lr=0.01, weight_decay=0.1)
    zero = {"w": np.zeros((2, 2)), "b": np.zeros(2)}
    opt.step(zero)
    # zero gradient: Adam's term is 0, so only the decoupled decay moves w (by lr * wd * w); b (1-D) does not move
    np.testing.assert_allclose(p["w"], 3.0 - 0.01 * 0.1 * 3.0, rtol=1e-14)
    np.testing.assert_array_equal(p["b"], 3.0)
    # decoupled: the decay does not go through the moments (they stay zero)
    assert np.all(opt.m["w"] == 0) and np.all(opt.v["w"] == 0)


def test_adamw_lr_override_zero_and_float32():
    p = {"w": np.ones((3, 3), np.float32)}
    opt = AdamW(p, lr=0.1, weight_decay=0.1)
    opt.step({"w": np.ones((3, 3), np.float32)}, lr=0.0)
    np.testing.assert_array_equal(p["w"], 1.0)          # lr = 0 leaves the parameters unchanged
    opt.step({"w": np.ones((3, 3), np.float32)})
    assert p["w"].dtype == np.float32 and np.all(p["w"] < 1.0)


def test_adamw_state_roundtrip():
    rng = np.random.default_rng(0)
    p1 = {"w": rng.standard_normal((3, 2))}
    p2 = {"w": p1["w"].copy()}
    o1, o2 = AdamW(p1, lr=0.01), AdamW(p2, lr=0.01)
    for _ in range(3):
        o1.step({"w": rng.standard_normal((3, 2))})
    o2.load_state_dict(*o1.state_dict())
    p2["w"][...] = p1["w"]
    g = rng.standard_normal((3, 2))
    o1.step({"w": g})
    o2.step({"w": g})
    np.testing.assert_array_equal(p1["w"], p2["w"])


def test_adamw_state_is_checked_whole_before_anything_is_assigned():
    """Issue 13 item 1: a moment of shape (1,) was broadcast into every entry, an int32 one cast, a missing one a
    bare KeyError."""
    p = {"w": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)}
    opt = AdamW(p, lr=0.01)
    opt.step({"w": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)})
    arrays, scalars = opt.state_dict()
    arrays = {k: v.copy() for k, v in arrays.items()}
    m_before = {k: v.copy() for k, v in opt.m.items()}
    for bad, sc, match in [({**arrays, "v.b": np.ones(1, np.float32)}, scalars, r"`arrays\['v.b'\]` must have shape"),
                           ({**arrays, "m.w": arrays["m.w"].astype(np.float64)}, scalars, "must have dtype float32"),
                           ({k: v for k, v in arrays.items() if k != "m.b"}, scalars, r"`arrays\['m.b'\]` is missing"),
                           ({**arrays, "m.x": np.ones(1)}, scalars, "not a moment of these parameters"),
                           ({**arrays, "v.w": -arrays["v.w"] - 1}, scalars, "must be >= 0"),
                           ({**arrays, "m.w": arrays["m.w"] * np.nan}, scalars, "must be finite"),
                           (arrays, {"t": 1.5, "lr": 0.01}, r"`scalars\['t'\]` must be an integer"),
                           (arrays, {"t": 1, "lr": float("inf")}, r"`scalars\['lr'\]` must be a finite number")]:
        with pytest.raises(ValueError, match=match):
            opt.load_state_dict(bad, sc)
        assert all((opt.m[k] == m_before[k]).all() for k in p) and opt.t == 1      # nothing assigned


@pytest.mark.parametrize("kw, name", [(dict(lr=-1), "`lr`"), (dict(betas=(1.0, 0.9)), r"`betas\[0\]`"),
                                      (dict(betas=(0.9, -0.1)), r"`betas\[1\]`"), (dict(eps=0), "`eps`"),
                                      (dict(weight_decay=-0.1), "`weight_decay`")])
def test_adamw_validation(kw, name):
    with pytest.raises(ValueError, match=name):
        AdamW({"w": np.ones(2)}, **kw)


def test_clip_grad_norm():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}       # global norm 5
    assert global_norm(g) == pytest.approx(5.0)
    assert clip_grad_norm(g, 10.0) == pytest.approx(5.0)
    np.testing.assert_array_equal(g["a"], [3.0, 0.0])              # under the limit: untouched
    assert clip_grad_norm(g, 1.0) == pytest.approx(5.0)             # returns the norm before clipping
    assert global_norm(g) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(g["a"] / g["b"][0, 0], [0.75, 0.0])  # direction kept
    bad = {"a": np.array([np.nan, 1.0])}
    assert math.isnan(clip_grad_norm(bad, 1.0)) and bad["a"][1] == 1.0
    with pytest.raises(ValueError, match="`max_norm`"):
        clip_grad_norm(g, 0.0)


def test_lr_schedules():
    # warm-up: linear from lr/warmup to lr
    assert [lr_at(s, 100, 1.0, warmup_steps=4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_at(50, 100, 0.3, schedule="constant") == 0.3
    # linear: lr at the first post-warm-up step, halfway at the middle, min_lr at step == total_steps
    assert lr_at(0, 100, 1.0, schedule="linear") == 1.0
    assert lr_at(50, 100, 1.0, schedule="linear", min_lr=0.2) == pytest.approx(0.6)
    assert lr_at(100, 100, 1.0, schedule="linear", min_lr=0.2) == pytest.approx(0.2)
    # cosine: half a cosine from lr to min_lr
    assert lr_at(10, 110, 1.0, warmup_steps=10) == pytest.approx(1.0)
    assert lr_at(60, 110, 1.0, warmup_steps=10) == pytest.approx(0.5)
    assert lr_at(35, 110, 1.0, warmup_steps=10) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_at(110, 110, 1.0, warmup_steps=10, min_lr=0.1) == pytest.approx(0.1)
    assert lr_at(500, 110, 1.0, warmup_steps=10, min_lr=0.1) == pytest.approx(0.1)   # stays at min_lr
    # monotone decay after warm-up
    lrs = [lr_at(s, 200, 1.0, warmup_steps=20) for s in range(20, 200)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


@pytest.mark.parametrize("kw, name", [(dict(schedule="step"), "`schedule`"),
                                      (dict(schedule="exp", warmup_steps=5), "`schedule`"),
                                      (dict(warmup_steps=-1), "`warmup_steps`"), (dict(step=-1), "`step`"),
                                      (dict(total_steps=0), "`total_steps`")])
def test_lr_at_validation(kw, name):
    args = dict(step=1, total_steps=10, lr=0.1)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        lr_at(args.pop("step"), args.pop("total_steps"), args.pop("lr"), **args)


def test_clip_grad_norm_scales_to_max_norm_not_to_one():
    """Mutation audit: ``scale = 1 / norm`` instead of ``max_norm / norm`` clips every gradient to norm 1,
    which ``test_clip_grad_norm`` (max_norm 1) cannot tell apart; here max_norm is 2."""
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}       # global norm 5 (hand-worked)
    assert clip_grad_norm(g, 2.0) == pytest.approx(5.0, rel=1e-15)  # 3-4-5 in float64: exact up to 1 ulp
    # scale = 2 / (5 + 1e-6): the 1e-6 guard moves the result by 2e-7 relative, so rel=1e-6
    assert global_norm(g) == pytest.approx(2.0, rel=1e-6)
    np.testing.assert_allclose(g["a"], [1.2, 0.0], rtol=1e-6)      # 3 * 2/5
    np.testing.assert_allclose(g["b"], [[1.6]], rtol=1e-6)         # 4 * 2/5
