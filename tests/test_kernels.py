"""minippo.kernels: the one switch between the NumPy formulas and the numba kernels."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minippo import kernels
from minippo._lazy import LazyModule

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, **env) -> str:
    """Run ``code`` in a fresh interpreter from the repository root; return its stdout."""
    environ = {k: v for k, v in os.environ.items() if k != kernels.ENV_VAR} | env
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_environment_variable_values():
    assert kernels._flag_from_environment({}) is True                       # default: kernels on
    assert kernels._flag_from_environment({"MINIPPO_KERNELS": "1"}) is True
    assert kernels._flag_from_environment({"MINIPPO_KERNELS": "0"}) is False
    assert kernels._flag_from_environment({"MINIPPO_KERNELS": " 0\n"}) is False
    for bad in ("", "yes", "2", "true"):
        with pytest.raises(ValueError, match="`MINIPPO_KERNELS` must be 0"):
            kernels._flag_from_environment({"MINIPPO_KERNELS": bad})


def test_the_process_reads_the_variable_once_at_import():
    assert run_python("from minippo import kernels; print(kernels.enabled())") == "True"
    assert run_python("from minippo import kernels; print(kernels.enabled())", MINIPPO_KERNELS="0") == "False"


def test_use_kernels_sets_and_restores_the_flag():
    start = kernels.enabled()
    with kernels.use_kernels(False):
        assert kernels.enabled() is False and kernels.ON is False      # the attribute the formulas read
        with kernels.use_kernels(True):
            assert kernels.enabled() is True and kernels.ON is True
        assert kernels.enabled() is False and kernels.ON is False
    assert kernels.enabled() is start and kernels.ON is start
    with pytest.raises(RuntimeError):
        with kernels.use_kernels(not start):
            raise RuntimeError("inside the block")
    assert kernels.enabled() is start                                       # restored after an exception
    with pytest.raises(TypeError, match="`flag`"):
        with kernels.use_kernels(0):
            pass


def test_importing_the_switch_imports_neither_numba_nor_numpy():
    out = run_python("import sys; from minippo import kernels; kernels.enabled(); "
                     "print('numba' in sys.modules, 'numpy' in sys.modules)")
    assert out == "False False"


def test_lazy_module_imports_at_first_use_and_sees_monkeypatches(monkeypatch):
    import json
    lazy = LazyModule("json")
    assert "not imported yet" in repr(lazy)
    assert lazy.dumps([1]) == "[1]"
    assert "(imported)" in repr(lazy)
    monkeypatch.setattr(json, "dumps", lambda x: "patched")
    assert lazy.dumps([1]) == "patched"                                     # looked up on the module each time
    with pytest.raises(AttributeError):
        lazy.no_such_name


STEP = """
import sys
import numpy as np
from minippo import kernels
from minippo.nn.gpt import GPTConfig, TinyGPT
from minippo.rl.gae import gae
from minippo.rl.losses import clipped_policy_loss
print('numba' in sys.modules)                                   # after the imports
model = TinyGPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8), seed=0)
idx = np.arange(12).reshape(2, 6) % 11
model.lm_loss_and_grads(idx, idx, np.ones((2, 6)))
z = np.zeros((2, 6), dtype=np.float32)
gae(z, z, None)
clipped_policy_loss(z, z, z)
print(kernels.enabled(), 'numba' in sys.modules)                 # after a step, GAE and L^CLIP
"""


def test_with_kernels_off_numba_is_never_imported():
    """Importing the formula modules never loads numba; with MINIPPO_KERNELS=0 running them does not either."""
    assert run_python(STEP, MINIPPO_KERNELS="0").split() == ["False", "False", "False"]
    assert run_python(STEP).split() == ["False", "True", "True"]   # on: the first kernel call loads it
