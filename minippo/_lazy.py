"""Lazy re-exports for package ``__init__`` files (PEP 562 module ``__getattr__``).

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
