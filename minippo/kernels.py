"""The one switch between the NumPy formulas and their numba kernels.

Every formula function a student reads (``minippo.rl.gae.gae``,
``minippo.rl.losses.clipped_policy_loss``, the elementwise layers of ``minippo.nn.layers``, the
sampler's ``minippo.rlhf.generate.sample_from``) has the readable NumPy formula as its body. Its
first line hands the call to a compiled twin when this switch is on::

    if kernels.ON:                   # the same formula, compiled: rl/_kernels.py
        return _kernels.gae(rewards, values, mask, gamma, lam)

``kernels.ON`` is the switch itself, a module attribute read where it is used (no call to step
into); :func:`enabled` returns it.

What runs in each mode:

* ``MINIPPO_KERNELS=1`` (the default): the numba kernels of three modules,
  ``minippo/rl/_kernels.py`` (GAE for tokens and for classic control, the clipped surrogate),
  ``minippo/nn/_kernels.py`` (LayerNorm, GELU, masked softmax, softmax cross-entropy, embedding
  backward, AdamW's update) and ``minippo/rlhf/_kernels.py`` (the token sampler's inverse-CDF scan).
  They return the same outputs as the formulas (same dtypes, stats keys and error messages; equal up
  to rounding, which the ``pytest -m kernels`` parity tests bound) and are what the trainers and
  ``minippo bench`` time.
* ``MINIPPO_KERNELS=0``: the NumPy bodies, the code a student reads, run instead, all of them (the
  sampler included); ``minippo.rl``, ``minippo.nn`` and ``minippo.rlhf`` do not even import numba
  (their kernels' modules load at the first kernel call).

Which calls of one RLHF PPO iteration run compiled code is listed in the docstring of
:mod:`minippo.rlhf.ppo`, the file a reader starts in.

The environment variable is read once, when this module is first imported. Inside a process, switch
with the context manager (tests, ``minippo bench``, lessons)::

    from minippo import kernels
    with kernels.use_kernels(False):
        adv, returns = gae(rewards, values, mask)      # the NumPy formula

The flag is process-wide (not per thread). ``NUMBA_DISABLE_JIT=1`` is a different thing: with the
switch on it still calls the kernels, but numba runs them as plain Python, so a student can step
through a kernel in pdb (slowly); the tests pass that way too.

Importing this module imports neither numba nor NumPy.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

ENV_VAR = "MINIPPO_KERNELS"


def _flag_from_environment(environ) -> bool:
    """``MINIPPO_KERNELS`` as a bool: "1" (or unset) -> True, "0" -> False, anything else a
    ValueError."""
    value = environ.get(ENV_VAR, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"`{ENV_VAR}` must be 0 (NumPy formulas) or 1 (numba kernels), got "
                         f"{value!r}")
    return value == "1"


#: True when the formula functions hand their work to the numba kernels (see the module docstring);
#: read as ``kernels.ON`` (never ``from minippo.kernels import ON``: a copy would not follow
#: :func:`use_kernels`)
ON = _flag_from_environment(os.environ)


def enabled() -> bool:
    """``kernels.ON``: True when the formula functions hand their work to the numba kernels."""
    return ON


@contextlib.contextmanager
def use_kernels(flag: bool) -> Iterator[None]:
    """Run the block with the kernels on (``True``) or the NumPy formulas (``False``); restores the
    previous setting on exit, also after an exception."""
    global ON
    if not isinstance(flag, bool):
        raise TypeError(f"`flag` must be True or False, got {flag!r}")
    previous = ON
    ON = flag
    try:
        yield
    finally:
        ON = previous
