"""``python -m lessons quote``: the numbers the docs quote, written into the Markdown from ``docs/results/``.

A quoted number is marked with HTML comments (invisible on GitHub and in a static site built from the
Markdown) and written by this generator, never by hand:

    <!-- l07:bias.0.pg .2f -->1.10<!-- end -->
    <!-- l08:summary.defaults.steps_to_475 d range -->90460 (64604 to 106240 over 3 BLAS kernels x 2 seeds)<!-- end -->

``l07`` (``lNN``; ``lNN-full`` for a lesson's ``--full`` results; or a job: ``main`` for ``minippo rlhf``,
``rlvr`` for ``minippo rlvr``) names the results file (``lessons/results.py``); then the key (``python -m lessons
quote --keys 7`` lists them with their values, ``--keys 17 --full`` those of ``l17-full``; ``@machine.cpu``,
``@time.cpu``, ``@date`` name fields of the file itself, ``@runs.1.outcomes.<key>`` a verdict's outcome in the
file's second run); then a Python format spec (``.3f``, ``+.2f``, ``,d``, ``.1%``,
``.2g``, ``s``). ``range`` (or ``range=FORMAT`` for the bounds) follows a CPU-dependent value with the range
measured over the OpenBLAS kernels and seeds of its file; on words that differ between the runs (a verdict's
outcome: ``<!-- l13:verdict.kl_final_better.outcome s range -->``) it names each, the reference run's first:
``holds (holds or not shown at this size, over 1 BLAS kernel x 2 seeds)``.

A fenced code block (a command's output) cannot hide a comment, so it is written whole from a template kept
in the comment just above it, with ``{SOURCE:KEY FORMAT}`` placeholders (one run's output: no range there):

    <!-- quote-block
    held-out loss {main:sft.heldout_loss .3f} nats/token
    -->
    ```
    held-out loss 1.481 nats/token
    ```

``<!-- quote-times -->`` ... ``<!-- end-times -->`` holds the table of how long each lesson took (one row per
results file: CPU and wall seconds of its reference run beside the matmul GFLOP/s measured around it; a
lesson's ``--full`` file is its own row, ``17 --full``). Two more blocks are written from
the file a measuring command saved (:data:`GENERATED`): ``<!-- quote-lesson-times -->`` ... ``<!-- end-lesson-times
-->`` from ``python -m lessons times --repeat 3 --save`` (``docs/lesson_times.json``: every lesson, the shared stages' first
build and the main job; ``lessons/times.py``), ``<!-- quote-bench -->`` ... ``<!-- end-bench -->`` from ``minippo
bench --save docs/bench.json`` (what the bench printed, as a code block under one caption line).

What it refuses (the command lists every problem and writes nothing): a results file that is missing or stale;
an unknown key; a format that does not apply; and, outside a code block, a plain quote of a value whose digits
differ between the runs of its file (times and memory aside: they are the reference run's, quoted beside the
machine's GFLOP/s). A value that prints the same digits in every run is quoted plainly (``range`` then says
"the same over ..."); one that does not, with ``range``. Text outside the markers is never
touched. ``tests/lessons/test_results.py`` fails when a marked span differs from what this writes.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from lessons import results as res
from lessons import times
from lessons._common import REPO_ROOT

SOURCE = r"(?:l\d\d(?:-full)?|" + "|".join(res.JOBS) + ")"     # a lesson's results file (l07; l17-full: its --full
#                                                                 results) or a job's (main, rlvr)
SPAN = re.compile(rf"<!-- (?P<spec>{SOURCE}:[^\n]*?) -->(?P<text>.*?)<!-- end -->", re.S)
OPENER = re.compile(rf"<!-- {SOURCE}:")
BLOCK = re.compile(r"<!-- quote-block\n(?P<template>.*?)\n-->\n(?P<fence>```[^\n]*)\n(?P<body>.*?)\n```",
                   re.S)
PLACEHOLDER = re.compile(rf"\{{(?P<spec>{SOURCE}:[^{{}}\n]+)\}}")
TIMES = re.compile(r"<!-- quote-times -->\n(?P<body>.*?)<!-- end-times -->", re.S)
GENERATED_BLOCK = re.compile(r"<!-- quote-(?P<name>lesson-times|bench) -->\n(?P<body>.*?)<!-- end-(?P=name) -->",
                             re.S)
TIMES_HEAD = ("| lesson | CPU s | wall s | matmul GFLOP/s | load average | CPU | measured |\n"
              "|---|---|---|---|---|---|---|\n")


def bench_block(d: dict) -> str:
    """``minippo bench --save``'s file as one caption line and the lines the bench printed, in a code block."""
    m = d["machine"]
    lines = list(d["lines"])
    while lines and not lines[0].strip():
        lines.pop(0)
    return (f"`{d['command']}` on {d['date']}, on a {m['cores']}-core {m['cpu']} (OpenBLAS {m['blas_kernel']} "
            f"kernel; Python {m['python']}, NumPy {m['numpy']}):\n\n```text\n" + "\n".join(lines) + "\n```\n")


def lesson_times_block(d: dict) -> str:
    """``python -m lessons times --repeat 3 --save``'s file as its caption and table."""
    return times.caption(d) + "\n\n" + times.table(d)


#: quote-<name> -> (the file, the command that measures it, its rendering)
GENERATED = {"lesson-times": (times.TIMES_FILE, "python -m lessons times --repeat 3 --save",
                              lesson_times_block),
             "bench": (REPO_ROOT / "docs" / "bench.json", "minippo bench --save docs/bench.json",
                       bench_block)}


def doc_files(root: Path = REPO_ROOT) -> list[Path]:
    """The Markdown the generator fills: ``README.md`` and ``docs/*.md``."""
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


@dataclass
class Quote:
    """One parsed marker: the results file (``target``), the key, the format, and the range format (None: plain)."""
    target: str
    key: str
    fmt: str
    range_fmt: str | None


def parse(spec: str) -> Quote:
    """``l08:summary.defaults.steps_to_475 d range`` -> Quote (the key may contain spaces: the format and
    ``range`` are the last words)."""
    head, _, last = spec.strip().rpartition(" ")
    range_fmt = None
    if last == "range" or last.startswith("range="):
        head, _, fmt = head.rpartition(" ")
        range_fmt = last.partition("=")[2] or fmt
    else:
        fmt = last
    target, _, key = head.partition(":")
    if not key or not fmt:
        raise ValueError(f"a marker is `SOURCE:KEY FORMAT [range]`, got {spec!r}")
    return Quote(target, key, fmt, range_fmt)


class Sources:
    """The results files, each loaded once; a missing or stale file is a ``ResultsError``."""

    def __init__(self, directory: Path | None = None, check_fresh: bool = True, files: dict | None = None):
        self.directory, self.check_fresh, self.cache = directory, check_fresh, {}
        self.files = {name: Path(g[0]) for name, g in GENERATED.items()} | {k: Path(v) for k, v in (files or {}).items()}

    def generated(self, name: str) -> str:
        """The text of the ``quote-<name>`` block from its measured file (a ``ResultsError`` when missing)."""
        path, command, render = self.files[name], GENERATED[name][1], GENERATED[name][2]
        if not path.is_file():
            raise res.ResultsError(f"{path.name} is missing: `{command}` measures it")
        return render(json.loads(path.read_text(encoding="utf-8")))

    def get(self, target: str) -> dict:
        if target not in self.cache:
            try:
                stale = res.staleness(target, self.directory) if self.check_fresh else None
                self.cache[target] = res.ResultsError(stale) if stale else res.load(target, self.directory)
            except res.ResultsError as exc:
                self.cache[target] = exc
        got = self.cache[target]
        if isinstance(got, Exception):
            raise got
        return got


def lookup(data: dict, key: str):
    """The value of ``key`` in a results file (``@a.b``: the file's own field ``data[a][b]``; a number indexes a
    list: ``@runs.1.outcomes.<verdict key>``, the verdict's outcome in the file's second run)."""
    if key.startswith("@"):
        node = data
        for part in key[1:].split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise KeyError(f"{key}: the results file has no field {key[1:]!r}")
        return node
    if key in data["values"]:
        return data["values"][key]
    if key in data.get("left_out", {}):
        raise KeyError(f"{key} is an {data['left_out'][key]}, left out of the results file: quote a scalar "
                       "(a lesson adds one through run() or derived(results))")
    near = difflib.get_close_matches(key, data["values"], n=3)
    raise KeyError(f"no key {key!r}" + (f" (did you mean {', '.join(near)}?)" if near else ""))


def fmt(value, spec: str, key: str) -> str:
    if value is None:
        raise ValueError(f"{key} is None in the results (nothing to quote)")
    try:
        return format(value, spec)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"format {spec!r} does not apply to {key} = {value!r} ({exc})") from None


def render(q: Quote, sources: Sources, in_block: bool = False) -> str:
    """The text a marker stands for; ValueError / KeyError / ResultsError say why it cannot be written."""
    data = sources.get(q.target)
    value = lookup(data, q.key)
    text = fmt(value, q.fmt, q.key)
    spread = data.get("ranges", {}).get(q.key)
    if q.range_fmt is None:
        if spread and not in_block and not res.is_measured(q.key) and not q.key.startswith("@"):
            lo_hi = (" or ".join(spread["values"]) if "values" in spread else
                     f"{fmt(spread['min'], q.fmt, q.key)} to {fmt(spread['max'], q.fmt, q.key)}")
            if "values" in spread or lo_hi != f"{text} to {text}":
                raise ValueError(f"{q.target}:{q.key} prints other digits in other runs of its results ({lo_hi}): "
                                 "quote it with `range`")
        return text
    if in_block:
        raise ValueError("a code block shows one run's output: no `range` there")
    over = runs_text(data)
    if spread is not None and "values" in spread:       # words that differ between runs (a verdict's outcome)
        words = [json.loads(v) for v in spread["values"]]
        if not all(isinstance(w, str) for w in words):
            raise ValueError(f"{q.target}:{q.key} has no numeric range in its results")
        ordered = [text] + [w for w in words if w != text]
        return f"{text} ({' or '.join(ordered)}, {over})"
    lo, hi = (fmt(spread[k], q.range_fmt, q.key) for k in ("min", "max")) if spread else (text, text)
    inner = f"the same {over}" if lo == hi else f"{lo} to {hi} {over}"
    if spread and spread["missing"]:
        inner += f"; no value in {spread['missing']} of {len(data['runs'])} runs"
    return f"{text} ({inner})"


def runs_text(data: dict) -> str:
    """``over 3 BLAS kernels x 2 seeds`` (one CPU, every seed under every kernel); else the runs counted,
    ``over 6 runs: 2 CPUs, 2 BLAS kernels, seeds 0, 1`` or ``over 3 runs: 2 BLAS kernels, seeds 0, 1``
    (runs added by ``python -m lessons results N --add-machine``: another CPU, or seed 0 only under its
    kernel; a CPU is told apart by its model name)."""
    runs = data["runs"]
    kernels = len({r["kernel"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    cpus = len({res.run_cpu(data, r) for r in runs})
    k_text = f"{kernels} BLAS kernel{'s' * (kernels != 1)}"
    if cpus == 1 and len(runs) == kernels * len(seeds):
        return f"over {k_text} x {len(seeds)} seed{'s' * (len(seeds) != 1)}"
    s_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"
    return f"over {len(runs)} runs: " + ", ".join([f"{cpus} CPUs"] * (cpus > 1) + [k_text, s_text])


def times_table(sources: Sources) -> str:
    """The table of every lesson's results file: its reference run's CPU and wall seconds, the matmul GFLOP/s
    and load average measured around it, the CPU it ran on, the date (lessons without a results file have no row; a lesson's
    ``--full`` file, its own row under the lesson's)."""
    rows = []
    for target in sorted(res.all_targets(full=True), key=lambda t: (res.lesson_of(t), res.is_full(t))):
        if target in res.JOBS or not res.results_path(target, sources.directory).is_file():
            continue
        d = sources.get(target)
        name = res.lesson_of(target)[1:] + (" --full" if res.is_full(target) else "")
        rows.append(f"| {name} | {d['time']['cpu']:.1f} | {d['time']['wall']:.1f} | "
                    f"{d['machine']['matmul_gflops']:.0f} | {d['machine']['load_average']:.1f} | "
                    f"{d['machine'].get('cpu', '?')} | {d['date']} |\n")
    return TIMES_HEAD + "".join(rows)


def rewrite(text: str, name: str, sources: Sources) -> tuple[str, list[str], list[str]]:
    """``(new_text, changes, problems)`` for one file: every marked span and block written from the results;
    ``changes`` and ``problems`` are ``name:line: ...`` lines."""
    changes, problems = [], []
    current = [text]                     # the text whose positions the matches refer to

    def line(pos: int) -> int:
        return current[0].count("\n", 0, pos) + 1

    def one(spec: str, pos: int, in_block: bool) -> str | None:
        try:
            return render(parse(spec), sources, in_block)
        except (ValueError, KeyError, res.ResultsError) as exc:
            msg = exc.args[0] if exc.args else str(exc)
            problems.append(f"{name}:{line(pos)}: <!-- {spec} -->: {msg}")
            return None

    def span(m: re.Match) -> str:
        if "<!--" in m["text"]:
            problems.append(f"{name}:{line(m.start())}: <!-- {m['spec']} --> is not closed by <!-- end --> "
                            "before the next marker")
            return m[0]
        new = one(m["spec"], m.start(), False)
        if new is None:
            return m[0]
        if new != m["text"]:
            changes.append(f"{name}:{line(m.start())}: {m['text']!r} -> {new!r}")
        return f"<!-- {m['spec']} -->{new}<!-- end -->"

    def block(m: re.Match) -> str:
        before = len(problems)
        body = PLACEHOLDER.sub(lambda p: one(p["spec"], m.start(), True) or p[0], m["template"])
        if len(problems) > before:
            return m[0]
        if body != m["body"]:
            changes.append(f"{name}:{line(m.start('body'))}: the code block under the quote-block template")
        return f"<!-- quote-block\n{m['template']}\n-->\n{m['fence']}\n{body}\n```"

    def times_(m: re.Match) -> str:
        try:
            body = times_table(sources)
        except (KeyError, res.ResultsError) as exc:
            problems.append(f"{name}:{line(m.start())}: <!-- quote-times -->: {exc.args[0] if exc.args else exc}")
            return m[0]
        if body != m["body"]:
            changes.append(f"{name}:{line(m.start())}: the table under <!-- quote-times -->")
        return f"<!-- quote-times -->\n{body}<!-- end-times -->"

    def generated(m: re.Match) -> str:
        marker = f"<!-- quote-{m['name']} -->"
        try:
            body = sources.generated(m["name"])
        except (KeyError, ValueError, res.ResultsError) as exc:
            problems.append(f"{name}:{line(m.start())}: {marker}: {exc.args[0] if exc.args else exc}")
            return m[0]
        if body != m["body"]:
            changes.append(f"{name}:{line(m.start())}: the block under {marker}")
        return f"{marker}\n{body}<!-- end-{m['name']} -->"

    out = TIMES.sub(times_, text)
    current[0] = out
    out = GENERATED_BLOCK.sub(generated, out)
    current[0] = out
    out = BLOCK.sub(block, out)
    current[0] = out
    out = SPAN.sub(span, out)
    # markers the two patterns did not consume: an opener without its end, or an end without an opener
    rest = BLOCK.sub("", SPAN.sub("", out))
    for m in OPENER.finditer(rest):
        problems.append(f"{name}: {rest[m.start():m.start() + 60]!r}... has no <!-- end -->")
    if rest.count("<!-- end -->"):
        problems.append(f"{name}: {rest.count('<!-- end -->')} <!-- end --> without a marker before it")
    if "<!-- quote-block" in rest:
        problems.append(f"{name}: a <!-- quote-block template not followed directly by a ``` code block")
    return out, changes, problems


def quote(paths: list[Path] | None = None, directory: Path | None = None, write: bool = True,
          check_fresh: bool = True) -> tuple[list[str], list[str]]:
    """Rewrite every marked span of ``paths`` (default :func:`doc_files`) from the results files in
    ``directory``; returns ``(changes, problems)``. With any problem, or ``write=False``, nothing is written."""
    sources = Sources(directory, check_fresh)
    new_texts, changes, problems = {}, [], []
    for path in paths or doc_files():
        old = path.read_text(encoding="utf-8")
        name = str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else path.name
        new, c, p = rewrite(old, name, sources)
        changes += c
        problems += p
        if new != old:
            new_texts[path] = new
    if write and not problems:
        for path, text in new_texts.items():
            path.write_text(text, encoding="utf-8")
    return changes, problems


class Quoted(NamedTuple):
    where: str           # file:line
    quote: Quote
    text: str            # what the doc shows (a block's placeholders: the block's whole body)
    in_block: bool


def quoted_keys(paths: list[Path] | None = None) -> list[Quoted]:
    """Every marker of ``paths`` (default :func:`doc_files`), block placeholders included."""
    found = []
    for path in paths or doc_files():
        text = path.read_text(encoding="utf-8")
        where = lambda pos: f"{path.name}:{text.count(chr(10), 0, pos) + 1}"     # noqa: E731
        for m in BLOCK.finditer(text):
            found += [Quoted(where(m.start()), parse(p["spec"]), m["body"], True)
                      for p in PLACEHOLDER.finditer(m["template"])]
        found += [Quoted(where(m.start()), parse(m["spec"]), m["text"], False) for m in SPAN.finditer(text)]
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons quote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list what would change (exit 1 if "
                        "anything would, or any marker has a problem)")
    parser.add_argument("--keys", metavar="N", help="list the keys of one results file (a lesson number, "
                        "'main', 'rlvr', or lNN-full) with their values and ranges")
    parser.add_argument("--full", action="store_true", help="with --keys N: the lesson's --full results file")
    args = parser.parse_args(argv)
    if args.full and args.keys is None:
        parser.error("--full goes with --keys N (the markers name their file: <!-- l17-full:KEY FORMAT -->)")
    if args.keys is not None:
        try:
            if args.keys in res.JOBS or res.is_full(args.keys):
                target = res.name_target(args.keys, args.full)
            elif args.keys.lstrip("lL").isdigit():
                target = res.name_target(f"l{int(args.keys.lstrip('lL')):02d}", args.full)
            else:
                raise res.ResultsError(f"--keys {args.keys}: expected a lesson number, a job ('main', 'rlvr') or "
                                       "lNN-full")
        except res.ResultsError as exc:          # the command line names no target: 2
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            data = res.load(target)
        except res.ResultsError as exc:          # the target's file is missing: 1
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for key, value in data["values"].items():
            r = data["ranges"].get(key)
            extra = (f"   [{r['min']!r} .. {r['max']!r}]" if r and "min" in r and r["min"] != r["max"] else "")
            print(f"{target}:{key} = {value!r}{extra}")
        print(f"left out: {', '.join(f'{k} ({v})' for k, v in data['left_out'].items()) or 'nothing'}")
        return 0
    changes, problems = quote(write=not args.check)
    for line in changes:
        print(("would change " if args.check or problems else "") + line)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s): nothing written", file=sys.stderr)
        return 1
    print(f"{len(changes)} quoted number(s) {'differ' if args.check else 'rewritten'}")
    return 1 if args.check and changes else 0
