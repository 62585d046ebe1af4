"""``python -m lessons restamp TARGET... --since REV``: keep a results file through a change of its source that
moves no number.

A results file is stale once its source changes (:func:`lessons.results.staleness`), and regenerating it reruns
every kernel and seed on this machine: a file whose runs were measured on another CPU would lose them. When the
change should move no number (a function moved to another file, a docstring edited), this shows it here instead:

1. the file must have been made from the source at ``REV``: the hash of the file's source at that commit is its
   ``source_sha256`` (else it is refused);
2. seed 0 runs under this machine's own OpenBLAS kernel twice, from a checkout of ``REV`` (a temporary git
   worktree, removed afterwards) and from the current source;
3. every value of the two runs (the runs' own measurements aside: :func:`lessons.results.is_measured`), every key
   left out and every verdict must be the same, bit for bit. One number that moved refuses it, naming the
   number, and the file is not touched: regenerate it then. A verdict's claim may be worded anew (words, not
   numbers): the file's record takes the new claim, when it held REV's as this machine printed it. A verdict
   on a measurement of the run itself (its numbers' keys are measured: CPU seconds) must keep its outcome;
   its seconds, and the ``because`` that prints them, are not compared (:func:`comparable`).

The file then keeps its values, runs and ranges; ``source_sha256`` becomes the current source's hash, and
``restamps`` records how that was shown: both hashes, REV's commit, the CPU and kernel, both runs' CPU seconds,
the date. A whole run that agrees bit for bit is strong evidence that the two sources do the same arithmetic, so
the runs the file lists from other CPUs hold for the new source too; it is not a proof (two different computations
could agree here by chance, which thousands of float32 training steps make implausible).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from lessons import results as res
from lessons._common import REPO_ROOT


class NumbersMoved(res.ResultsError):
    """The two runs differ: the change moved a number."""


def git(*args: str) -> str:
    """The output of ``git -C REPO_ROOT args`` (a ``ResultsError`` with git's message when it fails)."""
    proc = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
    if proc.returncode:
        raise res.ResultsError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout


def commit_of(rev: str) -> str:
    """The full commit hash ``rev`` names."""
    try:
        return git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except res.ResultsError:
        raise res.ResultsError(f"--since {rev}: not a commit of this repository") from None


def source_hash_at(target: str, commit: str) -> str:
    """The hash :func:`lessons.results.current_hash` gives ``target``'s source files as they are at ``commit``."""
    texts = [git("show", f"{commit}:{p.relative_to(REPO_ROOT).as_posix()}") for p in res.source_files(target)]
    return res.source_hash("\n".join(texts), "")


@contextlib.contextmanager
def checkout(commit: str):
    """A temporary git worktree of ``commit`` (detached), removed when the block ends."""
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "tree"
        git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        try:
            yield tree
        finally:
            git("worktree", "remove", "--force", str(tree))


def check_imports(tree: Path) -> None:
    """A run from ``tree`` imports that checkout's ``lessons`` and ``minippo``, not this one's."""
    code = "import lessons, minippo; print(lessons.__file__); print(minippo.__file__)"
    proc = subprocess.run([sys.executable, "-c", code], env=res.tree_env(tree), cwd=tree, capture_output=True,
                          text=True)
    paths = [Path(line).resolve() for line in proc.stdout.split()]
    if proc.returncode or len(paths) != 2 or not all(p.is_relative_to(tree.resolve()) for p in paths):
        raise res.ResultsError(f"a run from the checkout {tree} does not import its own lessons and minippo "
                               f"({proc.stdout.strip() or proc.stderr.strip()})")


def same_bits(a, b) -> bool:
    """Two values of a run's JSON record are the same: equal and of one type (NaN equals NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def comparable(record: dict) -> dict:
    """A verdict's record as two runs must agree on it: without its claim's wording (:func:`reworded`) and,
    for a verdict on a measurement of the run itself (its numbers' keys ``verdict.<key>.<name>`` are measured,
    :func:`lessons.results.is_measured`: CPU seconds), without those numbers and the ``because`` that prints
    them; its outcome still must be the same."""
    r = {k: v for k, v in record.items() if k != "claim"}
    numbers = r.get("numbers") or {}
    measured = {n for n in numbers if res.is_measured(f"verdict.{r.get('key')}.{n}")}
    if measured:
        r["numbers"] = {n: v for n, v in numbers.items() if n not in measured}
        r.pop("because", None)
    return r


def differences(old: dict, new: dict) -> list[str]:
    """What differs between two runs' records, bit for bit: values (the runs' measurements aside:
    :func:`lessons.results.differences`), keys left out, verdicts (:func:`comparable`)."""
    out = res.differences(old["values"], new["values"], equal=same_bits)
    if old["left_out"] != new["left_out"]:
        out.append(f"left_out: {old['left_out']!r} -> {new['left_out']!r}")
    records = [[comparable(r) for r in run["verdicts"] or []] for run in (old, new)]
    if json.dumps(records[0]) != json.dumps(records[1]):
        out.append("verdicts: their records differ")
    return out


def reworded(data: dict, old: dict, new: dict) -> dict:
    """``{key: new claim}`` for each verdict whose claim (words, not a number) the new source words differently.
    The file's record of the verdict must hold REV's claim as this run printed it (a claim that quotes a number
    of the run could differ between kernels; then the file is not restamped: ``ResultsError``)."""
    stored = {r["key"]: r.get("claim") for r in data.get("verdicts") or []}
    out = {}
    for a, b in zip(old["verdicts"] or [], new["verdicts"] or []):
        if a.get("claim") != b.get("claim"):
            if stored.get(a["key"]) != a.get("claim"):
                raise res.ResultsError(f"verdict {a['key']!r}: its claim in the file is not the one REV printed "
                                       f"here, so its new wording cannot be carried over; regenerate the file")
            out[a["key"]] = b.get("claim")
    return out


def restamp(target: str, rev: str, directory: Path | None = None, log=print, jobs: int = 1) -> Path:
    """Steps 1-3 of the module docstring for ``target``; returns the file's path (rewritten with the current
    source's hash), or raises a ``ResultsError`` (:class:`NumbersMoved` when a number moved) with the file
    untouched."""
    path = res.results_path(target, directory)
    res.load(target, directory)                                   # a missing file: named, with its command
    data = json.loads(path.read_text(encoding="utf-8"))
    current = res.current_hash(target)
    if data.get("source_sha256") == current:
        raise res.ResultsError(f"{path.name} is fresh (made from the current source): nothing to restamp")
    commit = commit_of(rev)
    if source_hash_at(target, commit) != data.get("source_sha256"):
        raise res.ResultsError(f"{path.name} was not made from the source at {rev} ({commit[:12]}): its hash "
                               "differs; name the commit the file was made from")
    log(f"{target}: seed 0 from {rev} ({commit[:12]}) and from the current source, this CPU's own kernel")
    with checkout(commit) as tree:
        check_imports(tree)
        run = lambda source: res.run_in_subprocess(target, 0, "default", log, tree=source)   # noqa: E731
        if jobs > 1:                                        # REV's run and this source's, side by side
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(2) as pool:
                old, new = pool.map(run, (tree, REPO_ROOT))
        else:
            old, new = run(tree), run(REPO_ROOT)
    moved = differences(old, new)
    if moved:
        raise NumbersMoved(f"{target}: {len(moved)} number(s) moved between {rev} and the current source, so "
                           f"{path.name} is not restamped; regenerate it with `{res.regenerate_command(target)}`:\n"
                           + "\n".join(f"  {m}" for m in moved[:20]))
    claims = reworded(data, old, new)
    for record in data.get("verdicts") or []:
        record["claim"] = claims.get(record["key"], record.get("claim"))
    data.setdefault("restamps", []).append({
        "from_source_sha256": data["source_sha256"], "to_source_sha256": current, "from_commit": commit,
        "cpu": new["machine"]["cpu"], "kernel": new["kernel"], "seed": 0,
        "cpu_s": [round(old["time"]["cpu"], 2), round(new["time"]["cpu"], 2)],
        "date": datetime.date.today().isoformat(), "values_compared": len(new["values"]),
        **({"claims_reworded": sorted(claims)} if claims else {})})
    data["source_sha256"] = current
    res.write(target, data, directory)
    log(f"  -> {path.name}: the same {len(new['values'])} values bit for bit; its source hash is the current one")
    return path


def main(argv: list[str], resolve=None) -> int:
    """``python -m lessons restamp WHICH... --since REV [--jobs 2] [--full]``: exit 0 when every file named is
    restamped, 1 when a number moved (that file is left as it was), 2 when the command line names something wrong
    or a file cannot be restamped (fresh, or not made from REV)."""
    parser = argparse.ArgumentParser(prog="python -m lessons restamp", description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="+", help="lesson numbers or slugs, 'main', 'rlvr', or 'stale' (every stale "
                        "file)")
    parser.add_argument("--since", required=True, metavar="REV",
                        help="the commit the files were made from (their source hash is that commit's)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="2: the two runs of a target side by side (default 1)")
    parser.add_argument("--full", action="store_true", help="the lessons' --full results files")
    args = parser.parse_args(argv)
    try:
        targets = ([t for t in res.all_targets(args.full) if res.staleness(t) is not None] if "stale" in args.which
                   else [res.name_target(w, args.full, resolve) for w in args.which])
        for target in targets:
            restamp(target, args.since, jobs=args.jobs)
    except NumbersMoved as exc:                  # measured, and refused: 1, as a failed generation
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except res.ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
