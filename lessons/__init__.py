"""The minippo course: one runnable module per step of the PPO / RLHF pipeline.

Run one lesson with ``python -m lessons.l04_clip_objective``; list them with ``python -m lessons``;
run them all (and regenerate every figure) with ``python -m lessons all [--quick]``.

Every lesson module has the same shape:

- a docstring: the pipeline step, the seed section and paper equations it covers, what the figure
  shows, and exercises;
- ``run(quick=False, seed=0) -> dict``: the numbers it demonstrates (``quick=True`` finishes in seconds);
- ``plot(results, path)``: the figure;
- ``main()``: runs, prints a short narrative with those numbers, saves ``figures/lNN_<slug>.png``.
"""
