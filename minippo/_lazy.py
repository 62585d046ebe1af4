"""Lazy imports: re-exports for package ``__init__`` files (PEP 562 module ``__getattr__``) and
:class:`LazyModule` for the numba kernels' modules.

``import minippo`` (or ``minippo.rl``, ...) must stay fast and must not compile numba kernels, yet a
student should be able to write ``minippo.gae(...)``. Each package lists ``name -> defining module``
and calls :func:`lazy_exports`; the defining module is imported the first time the name is used.
"""
from __future__ import annotations

import importlib


def lazy_exports(package: str, names: dict[str, str], namespace: dict):
    """Return ``(__getattr__, __dir__, __all__)`` for ``package`` re-exporting ``names`` lazily.

    ``namespace`` is the package's ``globals()``: a resolved name is stored there, so each name is
    looked up only once.
    """
    all_names = sorted(names)

    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return all_names

    return __getattr__, __dir__, all_names


class LazyModule:
    """A module imported at its first attribute access: ``_kernels = LazyModule("minippo.rl._kernels")``.

    The formula modules use it for their numba twins, so importing ``minippo.rl.gae`` or
    ``minippo.nn.layers`` does not import numba (~0.3 s) and with ``MINIPPO_KERNELS=0`` numba is never
    loaded. Every attribute is looked up on the real module each time, so a test that monkeypatches
    the real module is seen here too.
    """

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        # only called for names not set in __init__, i.e. the module's own attributes
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"
