"""The minippo course: one runnable module per step of the PPO / RLHF pipeline.

Run one lesson with ``python -m lessons.l04_clip_objective``; list them with ``python -m lessons``;
run them all with ``python -m lessons all`` (the maintainer's command: it regenerates every committed
figure in ``figures/``; ``--default`` and ``--quick`` run the classroom and the seconds-long sizes, their
figures elsewhere).

Every lesson module has the same shape:

- a docstring: the pipeline step, the seed section and paper equations it covers, what the figure
  shows, and exercises;
- ``run(quick=False, seed=0) -> dict``: the numbers it demonstrates (``quick=True`` finishes in seconds);
- ``plot(results, path)``: the figure;
- ``main()``: runs, prints a short narrative with those numbers, saves ``runs/figures/lNN_<slug>.png``
  (``--figures``: the committed ``figures/lNN_<slug>.png``).
"""
