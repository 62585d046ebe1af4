"""Status codes the numba kernels of minippo.rl return instead of raising.

A kernel validates its inputs while it computes (one pass over memory) and, on the first bad
entry, returns a status code with the argument's index and the position; the Python wrapper
turns that into the same ``ValueError`` the NumPy reference raises through ``minippo.checks``.
"""
from __future__ import annotations

import numpy as np

OK = 0
NONFINITE = 1     # an input array holds NaN or +/-inf          (argument index = which array)
MASK_VALUE = 2    # the mask holds something other than 0 or 1
MASK_HOLE = 3     # a valid token follows a padding token in a row (mask not right-padded)


def raise_for_status(status: int, which: int, b: int, t: int, names: list[str],
                     arrays: list[np.ndarray], mask: np.ndarray, one_d: bool,
                     mask_name: str = "mask") -> None:
    """Raise the ``ValueError`` described by a kernel's ``(status, which, b, t)``; no-op on OK.

    ``one_d``: the caller's arrays were 1-D and reshaped to (1, N) for the kernel, so the
    position is reported as ``t`` alone.
    """
    if status == OK:
        return
    pos = t if one_d else (b, t)
    if status == NONFINITE:
        raise ValueError(f"`{names[which]}` must be finite, found {arrays[which][b, t]!r} at {pos}")
    if status == MASK_VALUE:
        raise ValueError(f"`{mask_name}` must contain only 0 and 1, found {mask[b, t]!r} at {pos}")
    if status == MASK_HOLE:
        row = (np.asarray(mask[b]) != 0).astype(int).tolist()
        raise ValueError(f"`{mask_name}` row {b} has a hole: valid tokens must be contiguous and start at "
                         f"position 0 (right padding); row is {row}")
    raise RuntimeError(f"unknown kernel status {status}")  # pragma: no cover - a bug in a kernel
