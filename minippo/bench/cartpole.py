"""Bench section "cartpole": classic PPO must reach a mean return of 475 (last 20 episodes) within
200k environment steps for seeds 0, 1, 2; prints the steps it took and the wall time.

CleanRL's ``ppo.py`` reports 490 +/- 6 on CartPole-v1 after 500k steps. The full run also trains
on Gymnasium's CartPole-v1 when ``gymnasium`` is installed (same dynamics: the numbers should
match exactly) and with CleanRL's learning rate 2.5e-4 for comparison. ``--quick``: seed 0 only.
Wall time depends on what else the machine runs; the CPU time of the process is printed beside it.
"""
from __future__ import annotations

import time

from minippo.bench.report import Report
from minippo.classic.cartpole import CartPoleEnv
from minippo.classic.ppo import last_mean, steps_to_reach, train_ppo

TOTAL = 200_000
GOAL = 475.0


def _runs(report: Report, label: str, make_env, seeds, **hyper) -> int:
    """Train each seed, print one line per seed; return how many reached the goal at the end."""

    met = 0
    for seed in seeds:
        cpu = time.process_time()
        res = train_ppo(make_env, TOTAL, seed, **hyper)
        cpu = time.process_time() - cpu
        reached, final = steps_to_reach(res, GOAL), last_mean(res)
        met += final >= GOAL
        when = "475 not reached            " if reached is None else f"475 reached at {reached:>6d} steps"
        report.note(f"{label:<28s} seed {seed}: {when}; last-20 mean at "
                    f"{TOTAL // 1000}k {final:5.1f}; wall {res['wall_time']:5.1f} s "
                    f"({TOTAL / res['wall_time']:5.0f} steps/s), CPU {cpu:5.1f} s")
    return met


def bench(report: Report, quick: bool = False) -> None:

    seeds = (0,) if quick else (0, 1, 2)
    met = _runs(report, "minippo CartPole, defaults", CartPoleEnv, seeds)
    report.ratio(f"seeds with last-20 mean >= {GOAL:g}", met, target=len(seeds), unit="")
    if quick:
        return
    try:
        import gymnasium  # lazy: optional, not a dependency (the parity run only)
    except ImportError:
        report.note("gymnasium not installed: parity run skipped (pip install gymnasium to add it)")
    else:
        met = _runs(report, f"gymnasium {gymnasium.__version__}, defaults",
                    lambda: gymnasium.make("CartPole-v1"), seeds)
        report.ratio(f"gymnasium seeds with mean >= {GOAL:g}", met, target=len(seeds), unit="")
    # CleanRL's own learning rate, for comparison with the project's default of 1e-3
    met = _runs(report, "minippo CartPole, lr 2.5e-4", CartPoleEnv, seeds, lr=2.5e-4)
    report.value("seeds >= 475 with CleanRL's lr 2.5e-4", met)
