"""Exercise ``k3``: the k3 estimator of KL(pi || pi_ref) per token and its gradient with respect to logp.

Legend: "..." any shape (the estimator works token by token).

The student writes ``k3(logp, logp_ref) -> (kl, dlogp)``: ``kl`` as
``minippo.rl.kl.kl_estimate(logp, logp_ref, kind="k3")`` and ``dlogp = d kl / d logp`` token by
token (the gradient of ``minippo.rl.group_advantages.grpo_kl_loss`` before its mean). Checked: values
against the library, zero and non-negativity, central differences in float64, the precision near
rho = 1, and the direction of the ratio.
"""
from __future__ import annotations

import numpy as np

from minippo.exercises.grading import Case, as_arrays, call, close, fmt, max_err
from minippo.nn.gradcheck import numerical_gradient
from minippo.rl.kl import kl_estimate

NAME = "k3"
FUNCTION = "k3"
SUMMARY = "the k3 estimate (rho - 1) - log rho of KL(pi || pi_ref) per token, and d k3 / d logp"
LESSON = "lessons/l15_kl_control.py"
REFERENCE = "minippo.rl.kl.kl_estimate (kind='k3')"

_HEADER = '''"""minippo exercise `k3`: the k3 estimator of KL(pi || pi_ref) (Schulman 2020, "Approximating KL divergence").

In RLHF the per-token reward carries -beta * kl_t (Ziegler et al. 2019; InstructGPT eq. (2)), and the
PPO losses monitor approx_kl; both are estimated from the log-probabilities of the SAMPLED tokens
only. k3 is unbiased, never negative, and has a low variance when the two policies are close.

Write the body of `k3` below, then run the project's checks on it:

    minippo exercise check k3          (add --dir D when this file is not in ./exercises)
"""
import numpy as np


'''

_SIGNATURE = '''def k3(logp, logp_ref):
    """Per-token k3 estimate of KL(pi || pi_ref) and its gradient with respect to logp.

    For a token a_t sampled from pi, with rho_t = pi_ref(a_t|s_t) / pi(a_t|s_t):

        log rho_t = logp_ref_t - logp_t
        k3_t      = (rho_t - 1) - log rho_t            >= 0, and 0 exactly when logp == logp_ref
        d k3_t / d logp_t = 1 - rho_t

    Parameters
    ----------
    logp : float64 array of any shape, log pi(a_t|s_t) of tokens sampled from pi.
    logp_ref : float64 array of the same shape, log pi_ref(a_t|s_t) of the same tokens.

    Returns
    -------
    kl : float64 array like logp, k3_t token by token (no mean).
    dlogp : float64 array like logp, d k3_t / d logp_t token by token.

    Precision: when the policies are close, rho - 1 is a difference of two nearly equal numbers;
    compute it as np.expm1(log_rho) (accurate to the last digit) rather than np.exp(log_rho) - 1.
    """
'''

_TODO = '''    raise NotImplementedError("k3: write the body (the docstring has the formula)")
'''

_SOLUTION_BODY = '''    log_rho = logp_ref - logp                                      # log pi_ref / pi
    rho_minus_1 = np.expm1(log_rho)                                # rho - 1, exact near rho = 1
    kl = rho_minus_1 - log_rho                                     # (rho - 1) - log rho
    dlogp = -rho_minus_1                                           # d/dlogp: -rho + 1
    return kl, dlogp
'''

TEMPLATE = _HEADER + _SIGNATURE + _TODO
SOLUTION = _HEADER + _SIGNATURE + _SOLUTION_BODY


def _student(fn, logp, logp_ref):
    return as_arrays(call(fn, logp, logp_ref), ("kl", "dlogp"), (logp.shape, logp.shape))


def _value_hint(kl, logp, logp_ref) -> str:
    """What the student's values look like, when they are wrong."""
    if close(kl, logp - logp_ref):
        return "that is k1 = logp - logp_ref (unbiased but can be negative); k3 = (rho - 1) - log rho"
    if close(kl, kl_estimate(logp_ref, logp, "k3")):
        return ("your ratio is upside down: rho = pi_ref / pi = exp(logp_ref - logp) (the tokens were sampled "
                "from pi)")
    if close(kl, 0.5 * (logp - logp_ref) ** 2):
        return "that is k2 = 0.5 (log rho)^2; k3 = (rho - 1) - log rho"
    return "k3 = (rho - 1) - log rho with log rho = logp_ref - logp"


def _grad_hint(d, logp, logp_ref) -> str:
    rho = np.exp(logp_ref - logp)
    if close(d, rho - 1):
        return ("your gradient is rho - 1: that is d k3 / d logp_ref, or the sign is flipped; "
                "d/dlogp [(rho - 1) - log rho] = -rho + 1 because d rho / d logp = -rho")
    if close(d, -rho):
        return "you differentiated rho - 1 but not -log rho (whose derivative with respect to logp is +1)"
    return "d k3 / d logp = 1 - rho, rho = exp(logp_ref - logp)"


def value_checks() -> list[Case]:
    logp = np.array([[-1.0, -2.0, -0.5], [-3.0, -0.1, -1.2]])                 # (2, 3)
    logp_ref = np.array([[-1.5, -1.0, -0.5], [-0.2, -2.5, -1.3]])
    want = kl_estimate(logp, logp_ref, "k3")
    rng = np.random.default_rng(0)
    far_p, far_r = rng.uniform(-8, 0, size=50), rng.uniform(-8, 0, size=50)    # (50,) far apart

    def run_values(fn):
        kl, _ = _student(fn, logp, logp_ref)
        return f"kl {fmt(kl)}", close(kl, want), _value_hint(kl, logp, logp_ref)

    def run_zero(fn):
        x = np.array([-0.7, -2.0, -5.0])
        kl, d = _student(fn, x, x)
        ok = bool(np.all(np.abs(kl) <= 1e-15) and np.all(np.abs(d) <= 1e-15))
        return f"kl {fmt(kl)}, dlogp {fmt(d)}", ok, "rho = 1 when logp == logp_ref: k3 = 0 and its gradient 0"

    def run_nonneg(fn):
        kl, _ = _student(fn, far_p, far_r)
        want_far = kl_estimate(far_p, far_r, "k3")
        ok = bool(np.all(kl >= 0)) and close(kl, want_far)
        return f"min kl {fmt(np.min(kl))}, {max_err(kl, want_far)}", ok, _value_hint(kl, far_p, far_r)

    def run_1d(fn):
        kl, d = _student(fn, far_p[:7], far_r[:7])
        return f"kl {max_err(kl, kl_estimate(far_p[:7], far_r[:7], 'k3'))}", close(
            kl, kl_estimate(far_p[:7], far_r[:7], "k3")), "work token by token on any shape (here (7,))"

    return [Case("values on a (2, 3) batch vs the library", f"kl {fmt(want)}", run_values),
            Case("logp == logp_ref: kl 0 and gradient 0", "kl 0, dlogp 0", run_zero),
            Case("never negative, policies far apart", "min kl >= 0, as the library", run_nonneg),
            Case("any shape: (7,) inputs", "kl as the library", run_1d)]


def precision_check() -> list[Case]:
    d = np.array([1e-6, -1e-6, 3e-7])                                # log rho, policies very close
    logp, logp_ref = np.full(3, -1.0), -1.0 + d
    # k3 = (e^d - 1) - d = d^2/2 + d^3/6 + ...: the series is exact to ~1e-25 here
    want = d ** 2 / 2 + d ** 3 / 6 + d ** 4 / 24

    def run(fn):
        kl, _ = _student(fn, logp, logp_ref)
        # rtol 1e-6: expm1 gets ~1e-16 relative; np.exp(d) - 1 loses ~1e-16 / 5e-13 ~ 2e-4 of k3 ~ 5e-13
        ok = close(kl, want, rtol=1e-6, atol=0.0)
        if not close(kl, want, rtol=0.1, atol=0.0):             # not a loss of digits: a wrong formula
            return f"kl {fmt(kl)}", ok, _value_hint(kl, logp, logp_ref)
        return f"kl {fmt(kl)}", ok, ("rho - 1 computed as np.exp(log_rho) - 1 loses most digits when rho is close "
                                     "to 1: use np.expm1(log_rho)")

    return [Case("precision near rho = 1 (log rho = 1e-6)", f"kl {fmt(want)} (rtol 1e-6)", run)]


def gradient_checks() -> list[Case]:
    rng = np.random.default_rng(1)
    logp, logp_ref = rng.uniform(-4, -0.1, size=(3, 4)), rng.uniform(-4, -0.1, size=(3, 4))
    # central differences of the sum of the TRUE k3 (each token's k3 depends on its own logp only)
    x = logp.copy()
    num = numerical_gradient(lambda: float(kl_estimate(x, logp_ref, "k3").sum()), x)

    def run_fd(fn):
        _, d = _student(fn, logp, logp_ref)
        # h = 1e-6 central differences: error ~ h^2 |k3'''| + eps |k3| / h ~ 1e-10 on these O(1) values
        ok = close(d, num, rtol=1e-6, atol=1e-7)
        return f"dlogp {max_err(d, num)}", ok, _grad_hint(d, logp, logp_ref)

    def run_formula(fn):
        _, d = _student(fn, logp, logp_ref)
        want = 1 - np.exp(logp_ref - logp)
        return f"dlogp {max_err(d, want)}", close(d, want), _grad_hint(d, logp, logp_ref)

    return [Case("gradient vs central differences (float64)", "|err| <= 1e-7 + 1e-6 |grad|", run_fd),
            Case("gradient = 1 - rho", "dlogp = 1 - exp(logp_ref - logp)", run_formula)]


def cases() -> list[Case]:
    """Every check of the exercise, in the order the table shows them."""
    return value_checks() + precision_check() + gradient_checks()
