"""``python -m lessons restamp N --since REV`` (lessons/restamp.py): a results file takes the current
source's hash only when a run from REV and a run from the current source give every number bit for bit; a number
that moved, a file not made from REV, a fresh file or an unknown commit is refused and the file is not touched."""
import contextlib
import json
import math
import shutil

import pytest

from lessons import restamp as rs
from lessons import results as res

TARGET = "l04"


def run_record(values, cpu=1.0):
    return {"seed": 0, "kernel": "Haswell", "values": dict(values), "left_out": {}, "verdicts": None,
            "time": {"cpu": cpu, "wall": cpu}, "machine": {"cpu": "X", "matmul_gflops": 100.0, "load_average": 1.0}}


@pytest.fixture
def stale_copy(tmp_path, monkeypatch):
    """A copy of l04's file in ``tmp_path`` whose source hash is that of 'the old source' (not the current one),
    with the checkout, the import check and REV's hash replaced by stand-ins; returns ``(path, runs)``, where
    ``runs`` lists the trees the runs came from."""
    path = res.results_path(TARGET, tmp_path)
    shutil.copy(res.results_path(TARGET), path)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["source_sha256"] = "old"
    path.write_text(json.dumps(data), encoding="utf-8")
    runs = []

    @contextlib.contextmanager
    def checkout(commit):
        yield tmp_path / "tree-of-" / commit

    monkeypatch.setattr(rs, "checkout", checkout)
    monkeypatch.setattr(rs, "check_imports", lambda tree: None)
    monkeypatch.setattr(rs, "source_hash_at", lambda target, commit: "old")
    monkeypatch.setattr(rs, "commit_of", lambda rev: "c0ffee" * 6 + "c0ff")
    return path, runs


def fake_runs(monkeypatch, runs, old_values, new_values):
    def run(target, seed, kernel, log, tree=res.REPO_ROOT):
        runs.append(tree)
        return run_record(new_values if tree == res.REPO_ROOT else old_values, cpu=len(runs))
    monkeypatch.setattr(res, "run_in_subprocess", run)


def test_the_same_numbers_give_the_file_the_current_hash_and_keep_everything_else(stale_copy, monkeypatch):
    path, runs = stale_copy
    before = json.loads(path.read_text(encoding="utf-8"))
    values = {"a": 0.1, "b": [1, 2], "c": float("nan"), "time.cpu": 3.0}
    fake_runs(monkeypatch, runs, values, dict(values, **{"time.cpu": 9.0}))     # a measurement may differ
    tmp_dir = path.parent
    rs.restamp(TARGET, "HEAD~1", tmp_dir, log=lambda *a: None)
    after = json.loads(path.read_text(encoding="utf-8"))
    assert runs[0] != res.REPO_ROOT and runs[1] == res.REPO_ROOT          # one run from REV's tree, one from here
    assert after["source_sha256"] == res.current_hash(TARGET)
    assert {k: v for k, v in after.items() if k not in ("source_sha256", "restamps")} == \
        {k: v for k, v in before.items() if k != "source_sha256"}
    (stamp,) = after["restamps"]
    assert stamp["from_source_sha256"] == "old" and stamp["to_source_sha256"] == res.current_hash(TARGET)
    assert stamp["cpu_s"] == [1.0, 2.0] and stamp["values_compared"] == 4 and stamp["kernel"] == "Haswell"
    assert res.staleness(TARGET, tmp_dir) is None


@pytest.mark.parametrize("old, new, named", [
    ({"a": 0.1}, {"a": math.nextafter(0.1, 1.0)}, f"a: 0.1 vs {math.nextafter(0.1, 1.0)!r}"),   # one ulp
    ({"a": 1}, {"a": 1.0}, "a: 1 vs 1.0"),                                            # another type
    ({"a": 1.0}, {"a": 1.0, "b": 2.0}, "b: '(missing)' vs 2.0"),                      # a new key
])
def test_a_number_that_moved_refuses_and_leaves_the_file_untouched(stale_copy, monkeypatch, old, new, named):
    path, runs = stale_copy
    before = path.read_bytes()
    fake_runs(monkeypatch, runs, old, new)
    with pytest.raises(rs.NumbersMoved, match="regenerate it with") as exc:
        rs.restamp(TARGET, "HEAD~1", path.parent, log=lambda *a: None)
    assert named in str(exc.value)
    assert path.read_bytes() == before


def test_a_file_not_made_from_rev_or_fresh_is_refused(stale_copy, monkeypatch):
    path, runs = stale_copy
    before = path.read_bytes()
    monkeypatch.setattr(rs, "source_hash_at", lambda target, commit: "another")
    with pytest.raises(res.ResultsError, match="was not made from the source at HEAD~3"):
        rs.restamp(TARGET, "HEAD~3", path.parent, log=lambda *a: None)
    assert path.read_bytes() == before and runs == []
    with pytest.raises(res.ResultsError, match="is fresh .* nothing to restamp"):
        rs.restamp(TARGET, "HEAD")                                     # the committed file, made from this source


def test_the_command_refuses_in_one_line_with_exit_2(capsys, monkeypatch):
    from lessons.__main__ import main
    assert main(["restamp", "4", "--since", "HEAD"]) == 2                 # the committed file is fresh
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: l04_clip_objective.json is fresh (made from the current source): nothing to restamp"]
    monkeypatch.setattr(res, "current_hash", lambda target, files=None: "new")       # as if l04 had changed
    assert main(["restamp", "4", "--since", "no-such-commit"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --since no-such-commit: not a commit of this repository"]


def test_a_checkout_of_head_runs_its_own_code_and_hashes_as_the_committed_source():
    """The real worktree: a run from it imports its own lessons and minippo, and REV's hash of a lesson's source
    is read from git (HEAD: the committed text, which a clean checkout has on disk)."""
    commit = rs.commit_of("HEAD")
    with rs.checkout(commit) as tree:
        rs.check_imports(tree)
        assert (tree / "lessons" / "l04_clip_objective.py").is_file()
    assert not tree.exists()
    committed = rs.git("show", f"{commit}:lessons/l04_clip_objective.py")
    assert rs.source_hash_at(TARGET, commit) == res.source_hash(committed, "")


def test_a_claim_worded_anew_is_carried_into_the_file_and_nothing_else_of_a_verdict_may_change(stale_copy,
                                                                                               monkeypatch):
    """A verdict's claim is words: restamping keeps the numbers and takes the new wording (what lesson 24's
    'no correction has a smaller error' -> 'the uncorrected gradient has ...' needed), but only when the file
    holds REV's claim as this machine printed it; an outcome that changed is a moved number."""
    path, runs = stale_copy
    data = json.loads(path.read_text(encoding="utf-8"))
    record = data["verdicts"][0]
    values = {"a": 0.1}

    def runs_with(old_record, new_record):
        def run(target, seed, kernel, log, tree=res.REPO_ROOT):
            runs.append(tree)
            rec = run_record(values)
            rec["verdicts"] = [dict(new_record if tree == res.REPO_ROOT else old_record)]
            return rec
        monkeypatch.setattr(res, "run_in_subprocess", run)

    before = path.read_bytes()
    runs_with(record, dict(record, outcome="does not hold"))                    # an outcome moved: refused
    with pytest.raises(rs.NumbersMoved, match="verdicts: their records differ"):
        rs.restamp(TARGET, "HEAD~1", path.parent, log=lambda *a: None)
    runs_with(dict(record, claim="as printed elsewhere"), dict(record, claim="new words"))
    with pytest.raises(res.ResultsError, match=f"verdict {record['key']!r}: its claim in the file is not the one"):
        rs.restamp(TARGET, "HEAD~1", path.parent, log=lambda *a: None)
    assert path.read_bytes() == before
    runs_with(record, dict(record, claim="new words"))
    rs.restamp(TARGET, "HEAD~1", path.parent, log=lambda *a: None)
    after = json.loads(path.read_text(encoding="utf-8"))
    assert after["verdicts"][0] == dict(record, claim="new words") and after["verdicts"][1:] == data["verdicts"][1:]
    assert after["values"] == data["values"] and after["restamps"][0]["claims_reworded"] == [record["key"]]


def test_a_verdict_on_the_runs_own_cpu_seconds_must_keep_its_outcome_not_its_seconds():
    """Lesson 20's critic_free_saves_cpu compares CPU seconds: two runs of the same code never measure the same
    seconds, so its numbers and ``because`` are not compared; its outcome is."""
    def verdict(key, outcome, ppo, because):
        return {"key": key, "claim": "c", "kind": "comparison", "rule": "r", "outcome": outcome,
                "numbers": {"PPO": ppo, "diff": ppo - 0.2}, "because": because}

    def runs(*verdicts):
        return [dict(run_record({}), verdicts=[v]) for v in verdicts]

    a, b = runs(verdict("critic_free_saves_cpu", "holds", 0.33, "0.33 vs 0.21"),
                verdict("critic_free_saves_cpu", "holds", 0.35, "0.35 vs 0.21"))
    assert rs.differences(a, b) == []
    a, b = runs(verdict("critic_free_saves_cpu", "holds", 0.33, "x"),
                verdict("critic_free_saves_cpu", "not shown at this size", 0.33, "x"))
    assert rs.differences(a, b) == ["verdicts: their records differ"]
    a, b = runs(verdict("gold_rises", "holds", 0.33, "0.33"), verdict("gold_rises", "holds", 0.35, "0.35"))
    assert rs.differences(a, b) == ["verdicts: their records differ"]          # a result, not a measurement
