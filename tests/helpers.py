"""Helpers shared by the test packages: a public function, or every function of a module, run on
its numba kernel or on its NumPy formula (the switch of minippo.kernels)."""
from __future__ import annotations

import functools

from minippo import kernels


def with_kernels(fn, flag: bool):
    """``fn`` called inside ``kernels.use_kernels(flag)``: its numba kernel (True) or its NumPy body (False)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with kernels.use_kernels(flag):
            return fn(*args, **kwargs)
    run.__name__ = f"{fn.__name__}[{'kernel' if flag else 'numpy'}]"
    return run


class KernelPath:
    """The functions of ``module``, each called through :func:`with_kernels` with ``flag``:
    ``KernelPath(layers, False).gelu_forward(x)`` is the NumPy GELU whatever the switch says."""

    def __init__(self, module, flag: bool):
        self.module, self.flag = module, flag

    def __getattr__(self, name):
        return with_kernels(getattr(self.module, name), self.flag)

    def __repr__(self):
        return f"<{self.module.__name__}, {'kernel' if self.flag else 'numpy'} path>"
