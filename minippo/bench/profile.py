"""Where the time of a run goes: wall and CPU seconds split by stage and by kind of work.

``python -m minippo.bench.profile`` runs the main job (``minippo rlhf``, default size, into a temporary
folder; ``--quick``: the CI size) and prints the table; ``python -m minippo.bench.profile -m lessons 17``
profiles any module run as ``python -m`` (here a lesson's default run). ``minippo bench --only profile``
prints the main job's table inside the bench.

How it measures. While the run executes, a few functions are wrapped (nothing else changes, and the
wrappers are removed at the end). Each wrapper opens a *stage* (SFT, its held-out evaluation and samples;
the reward model's pair sampling, training steps and evaluation; the PPO rollout and update; the final
evaluation) or a *part* (``prefill`` (with the forward pass it runs) and ``decode`` of the KV cache,
the sampler around them, a model's ``forward`` (with its loss for ``lm_loss_and_grads``), ``backward``,
the AdamW ``optimizer`` step). At each entry and exit the wall clock (``time.perf_counter``) and the
process's CPU clock (``time.process_time``: all threads) are read, and the time since the previous
reading is charged to the innermost open stage and part, so every second is counted once. Time in no
part is ``other``: Python, batching, copies, the PPO loss functions, metrics, checkpoints, I/O.
CPU / wall above 1 means BLAS used both cores.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import runpy
import sys
import tempfile
import time
from collections import defaultdict

# (module, attribute, kind, label): the functions wrapped while profiling. A "stage" names where the run is,
# a "part" what kind of work it does; the innermost open one of each is charged. A function is wrapped in
# its own module and wherever it was imported by name, except one named in a module that imports it
# (``rm_train.sample_policy``: the fresh samples, not the pairs' sampling, which calls it too): only there.
WRAPPED = (
    ("minippo.rlhf.sft", "train_sft", "stage", "SFT steps"),
    ("minippo.rlhf.sft", "_prepare", "stage", "corpus, tokenizer"),
    ("minippo.rlhf.lm_train", "heldout_loss", "stage", "SFT held-out loss"),
    ("minippo.rlhf.sft", "sample_and_judge", "stage", "SFT samples"),
    ("minippo.rlhf.rm_train", "train_reward_model", "stage", "RM other"),
    ("minippo.rlhf.rm_train", "make_preference_pairs", "stage", "RM pair sampling"),
    ("minippo.rlhf.rm_train", "fit_reward_model", "stage", "RM steps"),
    ("minippo.rlhf.rm_train", "evaluate_pairs", "stage", "RM held-out eval"),
    ("minippo.rlhf.rm_train", "sample_policy", "stage", "RM fresh samples"),
    ("minippo.rlhf.run.trainer", "run_ppo", "stage", "PPO other"),
    ("minippo.rlhf.ppo", "rollout", "stage", "PPO rollout"),
    ("minippo.rlhf.ppo", "ppo_update", "stage", "PPO update"),
    ("minippo.rlhf.run.pipeline", "evaluate_stages", "stage", "evaluation"),
    ("minippo.rlhf.generate", "generate", "part", "sampler"),
    ("minippo.nn.gpt", "TinyGPT.prefill", "part", "prefill"),
    ("minippo.nn.gpt", "TinyGPT.decode_step", "part", "decode"),
    ("minippo.nn.gpt", "TinyGPT.forward", "part", "forward"),
    ("minippo.nn.gpt", "TinyGPT.lm_loss_and_grads", "part", "forward"),
    ("minippo.nn.gpt", "TinyGPT.backward", "part", "backward"),
    ("minippo.nn.optim", "AdamW.step", "part", "optimizer"),
)
PARTS = ("forward", "backward", "optimizer", "prefill", "decode", "sampler", "other")


class Profiler:
    """Exclusive wall and CPU seconds per ``(stage, part)``; see the module docstring."""

    def __init__(self):
        self.wall: dict = defaultdict(float)
        self.cpu: dict = defaultdict(float)
        self.calls: dict = defaultdict(int)
        self.stages: list[str] = ["outside the stages"]
        self.parts: list[str] = ["other"]
        self._last = (time.perf_counter(), time.process_time())

    def _charge(self) -> None:
        now = (time.perf_counter(), time.process_time())
        key = (self.stages[-1], self.parts[-1])
        self.wall[key] += now[0] - self._last[0]
        self.cpu[key] += now[1] - self._last[1]
        self._last = now

    def wrap(self, fn, kind: str, label: str):
        stack = self.stages if kind == "stage" else self.parts

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if kind == "part" and self.parts[-1] == "prefill":   # its forward pass is the prefill
                return fn(*args, **kwargs)
            self._charge()
            stack.append(label)
            self.calls[(kind, label)] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._charge()
                stack.pop()
        timed.__wrapped_by_profiler__ = fn
        return timed

    @contextlib.contextmanager
    def installed(self):
        """Wrap the functions of :data:`WRAPPED` (in their module and wherever they were imported by name)."""
        undo = []
        for module_name, attr, kind, label in WRAPPED:
            module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
            owner, name = (getattr(module, attr.split(".")[0]), attr.split(".")[1]) if "." in attr else (module, attr)
            if not hasattr(owner, name):          # a function renamed or removed: that row stays empty
                continue
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            timed = self.wrap(original, kind, label)
            if isinstance(owner, type) or getattr(original, "__module__", module_name) != module_name:
                holders = [owner]
            else:
                holders = [m for m in list(sys.modules.values())
                           if getattr(m, "__dict__", {}).get(name) is original]
            for holder in holders:
                setattr(holder, name, timed)
                undo.append((holder, name, original))
        self._last = (time.perf_counter(), time.process_time())
        try:
            yield self
        finally:
            self._charge()
            for holder, name, original in reversed(undo):
                setattr(holder, name, original)

    def table(self, title: str) -> str:
        """The table: one row per stage, one column pair (wall, CPU) per part, totals last."""
        stages = list(dict.fromkeys(s for s, _ in self.cpu))
        total_cpu = sum(self.cpu.values()) or 1.0
        head = f"{'stage':<18s}" + "".join(f"{p:>12s}" for p in PARTS) + f"{'total':>12s}{'CPU %':>7s}"
        lines = [title, "seconds as wall / CPU; CPU/wall > 1: BLAS on both cores", head, "-" * len(head)]
        for s in stages + ["total"]:
            cells = []
            for p in PARTS + ("total",):
                keys = [(a, b) for a, b in self.cpu if (s == "total" or a == s) and (p == "total" or b == p)]
                w, c = sum(self.wall[k] for k in keys), sum(self.cpu[k] for k in keys)
                cells.append(f"{w:.1f}/{c:.1f}" if keys and c + w >= 0.05 else "")
            share = sum(c for (a, _), c in self.cpu.items() if s == "total" or a == s) / total_cpu
            lines.append(f"{s:<18s}" + "".join(f"{x:>12s}" for x in cells) + f"{100 * share:6.0f}%")
        return "\n".join(lines)

    def categories(self) -> dict[str, tuple[float, float]]:
        """``{category: (wall, cpu)}`` in the issue's split: SFT steps, RM steps, generation (prefill, decode),
        the PPO update's forward / backward / optimizer, everything else."""
        out: dict = defaultdict(lambda: [0.0, 0.0])
        for (s, p), c in self.cpu.items():
            if p in ("prefill", "decode"):
                name = f"generation: {p}"
            elif s == "SFT steps":
                name = "SFT steps"
            elif s == "RM steps":
                name = "RM steps"
            elif s == "PPO update" and p in ("forward", "backward", "optimizer"):
                name = f"PPO update: {p}"
            else:
                name = "everything else"
            out[name][0] += self.wall[(s, p)]
            out[name][1] += c
        order = ["SFT steps", "RM steps", "generation: prefill", "generation: decode", "PPO update: forward",
                 "PPO update: backward", "PPO update: optimizer", "everything else"]
        return {k: tuple(out[k]) for k in order if k in out}

    def summary(self) -> str:
        cats = self.categories()
        total = sum(c for _, c in cats.values()) or 1.0
        lines = [f"{'category':<24s}{'wall s':>9s}{'CPU s':>9s}{'CPU %':>7s}"]
        lines += [f"{k:<24s}{w:9.1f}{c:9.1f}{100 * c / total:6.0f}%" for k, (w, c) in cats.items()]
        lines.append(f"{'total':<24s}{sum(w for w, _ in cats.values()):9.1f}{total:9.1f}")
        return "\n".join(lines)


def profile_main_job(quick: bool = False, out_dir=None) -> Profiler:
    """Run ``minippo rlhf`` (default size, or ``quick``) into ``out_dir`` (default a temporary folder) under
    the profiler."""
    from minippo.rlhf.run.pipeline import run_pipeline   # lazy: the bench imports its sections on demand
    prof = Profiler()
    with tempfile.TemporaryDirectory() as tmp, prof.installed():
        run_pipeline(out_dir or tmp, quick=quick, progress=False)
    return prof


def bench(report, quick: bool = False) -> None:
    """Bench section "profile": the main job's table (``--quick``: at CI size)."""
    report.note(f"minippo rlhf{' --quick' if quick else ''} into a temporary folder, under the profiler")
    prof = profile_main_job(quick)
    for line in (prof.table("per stage and part") + "\n\n" + prof.summary()).splitlines():
        report.note(line)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minippo.bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the main job at its CI size")
    parser.add_argument("-m", dest="module", default=None, help="profile `python -m MODULE ARGS...` instead")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the module's arguments")
    args = parser.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    if args.module is None:
        prof, what = profile_main_job(args.quick), f"minippo rlhf{' --quick' if args.quick else ''}"
    else:
        prof, what = Profiler(), " ".join(["python -m", args.module] + args.args)
        saved = sys.argv
        sys.argv = [args.module] + args.args
        try:
            with prof.installed():
                runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            if e.code not in (0, None):
                raise
        finally:
            sys.argv = saved
    print()
    print(prof.table(f"profile of `{what}`: {time.perf_counter() - t0:.1f} s wall, "
                     f"{time.process_time() - c0:.1f} s CPU"))
    print()
    print(prof.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
