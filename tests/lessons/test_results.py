"""Every number the docs quote is what a lesson computed: the results files are fresh, every marked span of
README.md and docs/*.md is what ``python -m lessons quote`` writes from them, and every key exists.

Standard library and the project only, no lesson is run, except by the last tests: they rerun the lessons the
docs quote at their default size and seed 0 and check each quoted value against its results file (exactly, to
float64 rounding, where the numbers do not depend on the CPU; within the range measured over the BLAS kernels and
seeds where they do). The cheap ones (under ``CHEAP_CPU_S`` seconds of CPU in their file) run in the default
suite, marked ``slow``; the others only with ``python -m pytest -m rerun``.
"""
import json
import math
import shutil

import numpy as np
import pytest

from lessons import quote as qt
from lessons import results as res

CHEAP_CPU_S = 5.0


def quoted_targets() -> list[str]:
    return sorted({x.quote.target for x in qt.quoted_keys()})


# ---------------------------------------------------------------- the committed docs and results files

def test_every_results_file_is_fresh_and_belongs_to_a_target():
    targets = res.all_targets(full=True)                   # the --full files too: their staleness is their hash
    problems = [msg for t in targets if res.results_path(t).is_file() and (msg := res.staleness(t))]
    names = {res.results_path(t).name for t in targets}
    problems += [f"{p.name}: no lesson or job makes it (delete it)" for p in sorted(res.RESULTS_DIR.glob("*.json"))
                 if p.name not in names]
    assert not problems, "\n".join(problems)


def test_every_results_file_quotes_its_reference_runs_own_matmul_reading():
    """The GFLOP/s and load average quoted beside a file's CPU seconds (``@machine``, the times table) are the
    ones measured around that run (its reference run, ``runs[0]``), not another seed's or kernel's."""
    problems = []
    for path in sorted(res.RESULTS_DIR.glob("*.json")):
        d = json.loads(path.read_text(encoding="utf-8"))
        ref = d["runs"][0]
        if ref["seed"] != 0 or ref["kernel"] != d["machine"]["blas_kernel"]:
            problems.append(f"{path.name}: runs[0] is not the reference run (seed 0, the file's kernel)")
        mine = (d["machine"]["matmul_gflops"], d["machine"]["load_average"])
        if mine != (ref["matmul_gflops"], ref["load_average"]):
            problems.append(f"{path.name}: machine reads {mine}, its reference run "
                            f"{(ref['matmul_gflops'], ref['load_average'])}")
    assert not problems, "\n".join(problems)


def test_every_quoted_target_has_a_fresh_results_file():
    targets = quoted_targets()
    assert {"l01", "l08", "main"} <= set(targets), targets
    assert {d for d, _ in marked_docs()} >= {"README.md", "questions.md"}
    problems = [msg for t in targets if (msg := res.staleness(t))]
    assert not problems, "\n".join(problems)


def test_every_quoted_key_exists():
    sources = qt.Sources()
    missing = []
    for where, q, _, _ in qt.quoted_keys():
        try:
            qt.lookup(sources.get(q.target), q.key)
        except (KeyError, res.ResultsError) as exc:
            missing.append(f"{where}: {q.target}:{q.key}: {exc.args[0]}")
    assert len(qt.quoted_keys()) > 100
    assert not missing, "\n".join(missing)


def test_every_marked_span_is_what_the_generator_writes():
    changes, problems = qt.quote(write=False)
    assert not problems, "\n".join(problems)
    assert not changes, ("quoted numbers differ from docs/results (run `python -m lessons quote`):\n"
                         + "\n".join(changes))


# ---------------------------------------------------------------- the check fails on an edited number

def marked_docs() -> list[tuple[str, str]]:
    """``(doc, target)`` for every results file a doc quotes a number from, outside code blocks."""
    out = set()
    for path in qt.doc_files():
        for m in qt.SPAN.finditer(path.read_text(encoding="utf-8")):
            if any(c.isdigit() for c in m["text"]):
                out.add((path.name, m["spec"].split(":", 1)[0]))
    return sorted(out)


@pytest.mark.parametrize("doc,target", marked_docs())
def test_an_edited_number_fails_and_is_named(tmp_path, doc, target):
    """For every doc and every lesson it quotes: one digit of the first number quoted from that lesson, edited,
    is found, named by file and line, and put back by the generator."""
    source = next(p for p in qt.doc_files() if p.name == doc)
    bank = tmp_path / doc
    shutil.copy(source, bank)
    assert qt.quote([bank], write=False) == ([], [])                   # the copy agrees
    text = bank.read_text(encoding="utf-8")
    m = next(m for m in qt.SPAN.finditer(text) if m["spec"].startswith(f"{target}:")
             and any(c.isdigit() for c in m["text"]))
    i = m.start("text") + next(k for k, c in enumerate(m["text"]) if c.isdigit())
    edited = text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]  # one digit of one quoted number
    bank.write_text(edited, encoding="utf-8")
    changes, problems = qt.quote([bank], write=False)
    line = text.count("\n", 0, m.start()) + 1
    assert problems == [] and len(changes) == 1, changes
    assert changes[0].startswith(f"{doc}:{line}: ") and repr(m["text"]) in changes[0], changes[0]
    assert bank.read_text(encoding="utf-8") == edited                  # --check writes nothing
    changes, _ = qt.quote([bank])                                      # the generator puts it back
    assert bank.read_text(encoding="utf-8") == text and len(changes) == 1


def test_an_edited_code_block_fails_and_unmarked_text_is_never_touched(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(qt.doc_files()[0], readme)
    text = readme.read_text(encoding="utf-8")
    block = next(qt.BLOCK.finditer(text))
    i = block.start("body") + next(k for k, c in enumerate(block["body"]) if c.isdigit())
    edited = text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]  # one digit of the block
    assert edited.count("Python 3.10+") == 1
    edited = edited.replace("Python 3.10+", "Python 3.11+")           # and unmarked text: "3.10" -> "3.11"
    readme.write_text(edited, encoding="utf-8")
    changes, problems = qt.quote([readme])
    assert not problems and len(changes) == 1 and "the code block" in changes[0], changes
    assert readme.read_text(encoding="utf-8") == text.replace("Python 3.10+", "Python 3.11+")


# ---------------------------------------------------------------- the generator's rules, on made-up results

def fake_results(tmp_path):
    runs = [{"kernel": k, "seed": s} for k in ("SkylakeX", "Haswell") for s in (0, 1)]
    common = {"machine": {"cpu": "a CPU", "matmul_gflops": 100.0}, "time": {"cpu": 1.0}, "runs": runs,
              "left_out": {"curve": "array (50,)"}}
    independent = dict(common, target="l04", cpu_dependent=False, ranges={},
                       values={"loss": 0.123456, "n": 3, "none": None, "name with space.x": 2.5})
    dependent = dict(common, target="l08", cpu_dependent=True,
                     values={"gold": 0.25, "steps": 100, "same": 7.0, "time.cpu": 3.0, "label": "a", "mixed": "x"},
                     ranges={"gold": {"min": 0.2, "max": 0.3, "missing": 0},
                             "steps": {"min": 90, "max": 120, "missing": 1},
                             "same": {"min": 7.0, "max": 7.0, "missing": 0},
                             "time.cpu": {"min": 2.0, "max": 4.0, "missing": 0},
                             "label": {"values": ['"a"', '"b"']}, "mixed": {"values": ['"x"', "true"]}})
    for data in (independent, dependent):
        res.results_path(data["target"], tmp_path).write_text(json.dumps(data), encoding="utf-8")
    return qt.Sources(tmp_path, check_fresh=False)


def rendered(sources, spec: str) -> str:
    text = f"x <!-- {spec} -->?<!-- end --> y"
    new, _, problems = qt.rewrite(text, "doc.md", sources)
    assert not problems, problems
    return new[len(f"x <!-- {spec} -->"):-len("<!-- end --> y")]


def problem(sources, text: str) -> str:
    new, _, problems = qt.rewrite(text, "doc.md", sources)
    assert len(problems) == 1 and new == text, (problems, new)
    return problems[0]


def test_spans_are_rendered_with_their_format_and_range(tmp_path):
    s = fake_results(tmp_path)
    assert rendered(s, "l04:loss .3f") == "0.123"
    assert rendered(s, "l04:loss .3f range") == "0.123 (the same over 2 BLAS kernels x 2 seeds)"
    assert rendered(s, "l04:name with space.x +.1f") == "+2.5"
    assert rendered(s, "l04:@machine.cpu s") == "a CPU"
    assert rendered(s, "l08:gold +.3f range=.2f") == "+0.250 (0.20 to 0.30 over 2 BLAS kernels x 2 seeds)"
    assert rendered(s, "l08:steps d range") == "100 (90 to 120 over 2 BLAS kernels x 2 seeds; no value in 1 of 4 runs)"
    assert rendered(s, "l08:same .1f range") == "7.0 (the same over 2 BLAS kernels x 2 seeds)"
    assert rendered(s, "l08:same .0f") == "7"                     # every run prints these digits
    assert rendered(s, "l08:gold .0f") == "0"                     # 0.2 ... 0.3 all print "0"
    assert rendered(s, "l08:time.cpu .1f") == "3.0"               # a measurement: the reference run's
    assert rendered(s, "l08:label s range") == "a (a or b, over 2 BLAS kernels x 2 seeds)"   # words of a verdict


def test_runs_on_another_cpu_widen_the_ranges_and_are_named_in_the_quote(tmp_path, monkeypatch):
    s = fake_results(tmp_path)
    data = json.loads(res.results_path("l08", tmp_path).read_text(encoding="utf-8"))
    new_run = {"kernel": "Haswell", "seed": 0, "time": {"cpu": 5.0, "wall": 6.0}, "verdicts": None,
               "machine": {"cpu": "another CPU", "matmul_gflops": 50.0, "load_average": 1.0},
               "values": {"gold": 0.35, "steps": 80, "same": 7.0, "time.cpu": 9.0, "label": "c"}}
    merged = res.merged_ranges(data, [new_run])
    assert merged["gold"] == {"min": 0.2, "max": 0.35, "missing": 0}          # widened
    assert merged["steps"] == {"min": 80, "max": 120, "missing": 1}
    assert merged["same"] == {"min": 7.0, "max": 7.0, "missing": 0}
    assert merged["label"] == {"values": ['"a"', '"b"', '"c"']}
    data2 = dict(data, values=dict(data["values"], fresh=1.0), ranges={})     # every earlier run printed 1.0
    assert res.merged_ranges(data2, [dict(new_run, values={"fresh": 1.5})])["fresh"] == {
        "min": 1.0, "max": 1.5, "missing": 0}
    data["ranges"], data["runs"] = merged, data["runs"] + [res.run_record(new_run)]
    res.results_path("l08", tmp_path).write_text(json.dumps(data), encoding="utf-8")
    s = qt.Sources(tmp_path, check_fresh=False)
    assert rendered(s, "l08:gold +.3f range=.2f") == "+0.250 (0.20 to 0.35 over 5 runs: 2 CPUs, 2 BLAS kernels, seeds 0, 1)"
    assert [res.run_cpu(data, r) for r in data["runs"]] == ["a CPU"] * 4 + ["another CPU"]
    # the same CPU's name under a kernel it ran seed 0 only with: not a kernel x seed grid, the runs counted
    data["runs"][-1] = dict(data["runs"][-1], cpu="a CPU", kernel="Sandybridge")
    res.results_path("l08", tmp_path).write_text(json.dumps(data), encoding="utf-8")
    s = qt.Sources(tmp_path, check_fresh=False)
    assert rendered(s, "l08:gold +.3f range=.2f") == "+0.250 (0.20 to 0.35 over 5 runs: 3 BLAS kernels, seeds 0, 1)"


def test_adding_a_machine_refuses_a_cpu_independent_lesson_and_a_run_it_already_has(tmp_path, monkeypatch):
    with pytest.raises(res.ResultsError, match="does not depend on the CPU"):
        res.add_machine("l04", directory=tmp_path)
    target = "l24"
    shutil.copy(res.results_path(target), tmp_path / res.results_path(target).name)
    data = res.load(target, tmp_path)
    ref = data["runs"][0]
    monkeypatch.setattr(res, "cpu_model", lambda: data["machine"]["cpu"])
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr("minippo.blas.blas_core_name", lambda: ref["kernel"])
    monkeypatch.setattr(res, "run_in_subprocess", lambda *a, **k: pytest.fail("must refuse before running"))
    before = res.results_path(target, tmp_path).read_bytes()
    with pytest.raises(res.ResultsError, match=r"already has seed 0 .* nothing added \(nothing is replaced\)"):
        res.add_machine(target, directory=tmp_path)
    assert res.results_path(target, tmp_path).read_bytes() == before


def test_every_rule_is_enforced_with_a_message_naming_the_place(tmp_path):
    s = fake_results(tmp_path)
    assert "no key 'los'" in problem(s, "a\n<!-- l04:los .3f -->1<!-- end -->") and "did you mean loss" in \
        problem(s, "a\n<!-- l04:los .3f -->1<!-- end -->")
    assert problem(s, "a\n<!-- l04:los .3f -->1<!-- end -->").startswith("doc.md:2: ")
    assert "left out of the results file" in problem(s, "<!-- l04:curve .3f -->1<!-- end -->")
    assert "format 'd' does not apply" in problem(s, "<!-- l04:loss d -->1<!-- end -->")
    assert "is None" in problem(s, "<!-- l04:none .1f -->1<!-- end -->")
    assert "prints other digits in other runs" in problem(s, "<!-- l08:gold .3f -->1<!-- end -->")
    assert "(0.200 to 0.300): quote it with `range`" in problem(s, "<!-- l08:gold .3f -->1<!-- end -->")
    assert "prints other digits in other runs" in problem(s, "<!-- l08:label s -->a<!-- end -->")
    assert "no numeric range" in problem(s, "<!-- l08:mixed s range -->x<!-- end -->")
    assert "no results for l05" in problem(s, "<!-- l05:x .1f -->1<!-- end -->")
    assert "is not closed" in problem(s, "<!-- l04:loss .3f -->1 <!-- l04:n d -->3<!-- end -->")
    assert "has no <!-- end -->" in problem(s, "text <!-- l04:loss .3f -->0.123 and more")
    assert "without a marker" in problem(s, "text 0.123<!-- end -->")
    block = "<!-- quote-block\nn = {l08:gold .3f range}\n-->\n```\nn = 1\n```"
    assert "no `range` there" in problem(s, block)


def test_a_block_is_written_from_its_template_and_may_quote_one_run(tmp_path):
    s = fake_results(tmp_path)
    text = "intro\n<!-- quote-block\nloss {l04:loss .2f}, gold {l08:gold +.3f} {not a placeholder}\n-->\n```text\nold\n```\n"
    new, changes, problems = qt.rewrite(text, "doc.md", s)
    assert not problems and len(changes) == 1
    assert new.endswith("```text\nloss 0.12, gold +0.250 {not a placeholder}\n```\n")
    assert qt.rewrite(new, "doc.md", s)[1] == []                       # written once: nothing left to change


def test_the_times_table_has_one_row_per_results_file_and_refuses_a_stale_one(tmp_path):
    for target, cpu in (("l04", 0.61), ("l08", 35.64)):
        data = {"target": target, "date": "2026-12-03", "time": {"cpu": cpu, "wall": 2 * cpu},
                "machine": {"matmul_gflops": 101.4, "load_average": 2.04, "cpu": "a CPU"}}
        res.results_path(target, tmp_path).write_text(json.dumps(data), encoding="utf-8")
    text = "intro\n<!-- quote-times -->\n| old |\n<!-- end-times -->\nafter"
    new, changes, problems = qt.rewrite(text, "doc.md", qt.Sources(tmp_path, check_fresh=False))
    assert not problems and changes == ["doc.md:2: the table under <!-- quote-times -->"]
    assert new == ("intro\n<!-- quote-times -->\n" + qt.TIMES_HEAD + "| 04 | 0.6 | 1.2 | 101 | 2.0 | a CPU | 2026-12-03 |\n"
                   "| 08 | 35.6 | 71.3 | 101 | 2.0 | a CPU | 2026-12-03 |\n<!-- end-times -->\nafter")
    assert qt.rewrite(new, "doc.md", qt.Sources(tmp_path, check_fresh=False))[1] == []
    _, _, problems = qt.rewrite(text, "doc.md", qt.Sources(tmp_path))       # made from another source: stale
    assert len(problems) == 1 and "l04_clip_objective.json is stale" in problems[0]


def test_a_stale_or_missing_results_file_names_the_source_and_the_command(tmp_path):
    target = "l04"
    shutil.copy(res.results_path(target), tmp_path / res.results_path(target).name)
    lesson = tmp_path / "l04_clip_objective.py"
    shutil.copy(res.source_files(target)[0], lesson)
    assert res.staleness(target, tmp_path, [lesson]) is None
    lesson.write_text(lesson.read_text(encoding="utf-8").replace("Exercises:", "Exercises :"), encoding="utf-8")
    msg = res.staleness(target, tmp_path, [lesson])
    assert "l04_clip_objective.json is stale" in msg and "l04_clip_objective.py changed" in msg
    assert "`python -m lessons results 4`" in msg
    (tmp_path / "l04_clip_objective.json").unlink()
    assert "no results for l04" in res.staleness(target, tmp_path) and "python -m lessons results 4" in \
        res.staleness(target, tmp_path)
    assert res.regenerate_command("main") == "python -m lessons results main"


def test_the_marker_grammar():
    q = qt.parse("l08:summary.kl_old_target = 0.005.early_stops d range")
    assert (q.target, q.key, q.fmt, q.range_fmt) == ("l08", "summary.kl_old_target = 0.005.early_stops", "d", "d")
    q = qt.parse("main:eval.ppo.gold_mean +.3f range=+.2f")
    assert (q.target, q.key, q.fmt, q.range_fmt) == ("main", "eval.ppo.gold_mean", "+.3f", "+.2f")
    assert qt.parse("l01:variance.batch mean (leave-one-out) .4f").key == "variance.batch mean (leave-one-out)"
    with pytest.raises(ValueError, match="SOURCE:KEY FORMAT"):
        qt.parse("l01:.3f")


def test_a_full_target_has_its_own_file_command_and_hash_over_its_study_modules(tmp_path):
    assert "l17" in res.FULL and res.all_targets(full=True)[-len(res.FULL):] == [f"{t}-full" for t in res.FULL]
    assert not any(res.is_full(t) for t in res.all_targets())              # only with --full
    assert res.results_path("l17-full").name == "l17_hyperparameters_full.json"
    assert res.results_path("l17").name == "l17_hyperparameters.json"
    assert res.regenerate_command("l17-full") == "python -m lessons results 17 --full"
    files = res.source_files("l17-full")
    assert files[0] == res.source_files("l17")[0] and [str(p.relative_to(res.REPO_ROOT)) for p in files[1:]] == \
        list(res.FULL["l17"])
    assert res.current_hash("l17-full") != res.current_hash("l17")
    copies = []
    for p in files:                                        # edited copies: the lesson and its study module
        copies.append(tmp_path / p.name)
        shutil.copy(p, copies[-1])
    data = {"target": "l17-full", "source_sha256": res.current_hash("l17-full", copies), "values": {}}
    res.results_path("l17-full", tmp_path).write_text(json.dumps(data), encoding="utf-8")
    assert res.staleness("l17-full", tmp_path, copies) is None
    copies[1].write_text(copies[1].read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    msg = res.staleness("l17-full", tmp_path, copies)
    assert "l17_hyperparameters_full.json is stale" in msg and "knob_sweeps.py" in msg
    assert "`python -m lessons results 17 --full`" in msg
    assert res.staleness("l17", tmp_path) is not None          # the default file is another file
    assert res.module_of("l17-full") == res.module_of("l17") == "lessons.l17_hyperparameters"


def test_a_verdict_word_that_differs_between_runs_is_quoted_run_by_run(tmp_path):
    data = {"target": "l04", "runs": [{"kernel": "Haswell", "seed": 0, "verdict_outcomes": ["holds", "holds"]},
                                      {"kernel": "Haswell", "seed": 1,
                                       "verdict_outcomes": ["holds", "not shown at this size"]}],
            "verdicts": [{"key": "a", "outcome": "holds"}, {"key": "b", "outcome": "holds"}],
            "values": {"verdict.a.outcome": "holds", "verdict.b.outcome": "holds"},
            "ranges": {"verdict.b.outcome": {"values": ['"holds"', '"not shown at this size"']}}}
    res.results_path("l04", tmp_path).write_text(json.dumps(data), encoding="utf-8")
    s = qt.Sources(tmp_path, check_fresh=False)
    assert s.get("l04")["runs"][1]["outcomes"] == {"a": "holds", "b": "not shown at this size"}
    text = ("<!-- l04:verdict.a.outcome s -->x<!-- end -->; <!-- l04:@runs.0.outcomes.b s -->x<!-- end --> on seed 0, "
            "<!-- l04:@runs.1.outcomes.b s -->x<!-- end --> on seed 1")
    new, _, problems = qt.rewrite(text, "doc.md", s)
    assert not problems and qt.SPAN.sub(lambda m: m["text"], new) == \
        "holds; holds on seed 0, not shown at this size on seed 1"
    _, _, problems = qt.rewrite("<!-- l04:verdict.b.outcome s -->x<!-- end -->", "doc.md", s)
    assert len(problems) == 1 and "quote it with `range`" in problems[0]       # differs: refused plainly
    _, _, problems = qt.rewrite("<!-- l04:@runs.2.outcomes.b s -->x<!-- end -->", "doc.md", s)
    assert len(problems) == 1 and "no field 'runs.2.outcomes.b'" in problems[0]


def test_full_for_a_lesson_without_a_full_part_is_a_one_line_error(capsys):
    from lessons.__main__ import main
    for argv in (["results", "5", "--full"], ["results", "l05-full"], ["results", "main", "--full"],
                 ["quote", "--keys", "5", "--full"]):
        assert main(argv) == 2, argv              # a command-line mistake: exit 2, one line
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "--full results" in err, (argv, err)
    for argv in (["quote", "--keys", "99"], ["quote", "--keys", "nosuch"]):
        assert main(argv) == 2, argv              # a target that does not exist: named, exit 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, (argv, err)
    with pytest.raises(SystemExit) as exit_:      # the lesson resolver's parser.error: also exit 2
        main(["results", "l99"])
    assert exit_.value.code == 2 and "no lesson matches 'l99'" in capsys.readouterr().err
    with pytest.raises(res.ResultsError, match="l05 has no --full results: lessons with them are "
                       + ", ".join(t[1:] for t in res.FULL)):
        res.name_target("5", True, lambda w: "lessons.l05_penalty_vs_clip")
    assert res.name_target("17", True, lambda w: "lessons.l17_hyperparameters") == "l17-full"
    assert res.name_target("l17-full", False) == "l17-full" and res.name_target("main", False) == "main"


def test_a_full_target_in_markers_blocks_and_the_times_table(tmp_path):
    q = qt.parse("l17-full:extras_mean.base.gold +.2f range")
    assert (q.target, q.key, q.fmt, q.range_fmt) == ("l17-full", "extras_mean.base.gold", "+.2f", "+.2f")
    for target, gold, cpu in (("l17", 0.4, 90.0), ("l17-full", 0.78, 570.0)):
        data = {"target": target, "date": "2026-12-06", "time": {"cpu": cpu, "wall": 2 * cpu},
                "machine": {"cpu": "X", "matmul_gflops": 101.4, "load_average": 2.04},
                "runs": [{"kernel": "Haswell", "seed": 0}, {"kernel": "Haswell", "seed": 1}],
                "values": {"gold": gold}, "ranges": {"gold": {"min": gold - 0.1, "max": gold, "missing": 0}}}
        res.results_path(target, tmp_path).write_text(json.dumps(data), encoding="utf-8")
    text = ("a <!-- l17:gold +.2f range -->x<!-- end -->, b <!-- l17-full:gold +.2f range -->y<!-- end -->\n"
            "<!-- quote-block\ngold {l17-full:gold +.3f}\n-->\n```\nold\n```\n"
            "<!-- quote-times -->\n<!-- end-times -->\n")
    new, changes, problems = qt.rewrite(text, "doc.md", qt.Sources(tmp_path, check_fresh=False))
    assert not problems and len(changes) == 4, (problems, changes)
    assert new.startswith("a <!-- l17:gold +.2f range -->+0.40 (+0.30 to +0.40 over 1 BLAS kernel x 2 seeds)"
                          "<!-- end -->, b <!-- l17-full:gold +.2f range -->+0.78 (+0.68 to +0.78 over 1 BLAS "
                          "kernel x 2 seeds)<!-- end -->\n")
    assert "```\ngold +0.780\n```" in new
    assert ("| 17 | 90.0 | 180.0 | 101 | 2.0 | X | 2026-12-06 |\n"
            "| 17 --full | 570.0 | 1140.0 | 101 | 2.0 | X | 2026-12-06 |") in new
    rest = qt.BLOCK.sub("", qt.SPAN.sub("", new))
    assert not qt.OPENER.search(rest) and "<!-- end -->" not in rest


# ---------------------------------------------------------------- what a results file holds

def test_flatten_keeps_scalars_under_dotted_keys_and_names_what_it_leaves_out():
    import dataclasses

    @dataclasses.dataclass
    class Config:
        iterations: int = 10
        betas: tuple = (0.9, 0.95)

    r = {"a": {0.95: 1.5, 1.0: np.float32(2.0), "n": np.int64(3)}, "rows": [{"x": 1}, {"x": 2}],
         "curve": np.zeros(MAX := res.MAX_LIST + 1), "table": np.zeros((2, 2)), "seeds": np.array([0.5, 0.25]),
         "zero_d": np.array(4.0), "long": list(range(100)), "none": None, "flag": True,
         "pair": (0.1, 0.2), "obj": object(), "config": Config(), "config_class": Config,
         "run": {"records": [{"loss": 1.0}], "final": 0.5}}
    values, left = res.flatten(r)
    assert values == {"a.0.95": 1.5, "a.1": 2.0, "a.n": 3, "rows.0.x": 1, "rows.1.x": 2, "seeds.0": 0.5,
                      "seeds.1": 0.25, "zero_d": 4.0, "none": None, "flag": True, "pair.0": 0.1, "pair.1": 0.2,
                      "config.iterations": 10, "config.betas.0": 0.9, "config.betas.1": 0.95, "run.final": 0.5}
    assert type(values["a.n"]) is int and type(values["a.1"]) is float and type(values["seeds.0"]) is float
    assert left == {"curve": f"array ({MAX},)", "table": "array (2, 2)", "long": "list of 100", "obj": "object",
                    "config_class": "type", "run.records": "per-iteration records"}
    with pytest.raises(res.ResultsError, match="appears twice"):
        res.flatten({"a.b": 1, "a": {"b": 2}})


def test_kernel_runs_must_agree_to_float64_rounding_and_ranges_span_the_runs():
    ref = {"x": 1.0, "n": 3, "time.cpu": 1.0, "gap": 2.3e-16}
    assert res.differences(ref, {"x": 1.0 + 1e-13, "n": 3, "time.cpu": 9.0, "gap": 1.1e-16}) == []
    assert res.differences(ref, {"x": 1.001, "n": 4, "time.cpu": 1.0, "gap": 0.0}) == ["n: 3 vs 4", "x: 1.0 vs 1.001"]
    assert res.differences(ref, {"x": 1.0, "time.cpu": 1.0, "gap": 0.0}) == ["n: 3 vs '(missing)'"]
    runs = [{"values": {"g": 0.5, "s": None, "t": "a"}}, {"values": {"g": 0.7, "s": 10, "t": "b"}},
            {"values": {"g": 0.4, "s": 12, "t": "a"}}]
    assert res.ranges(runs) == {"g": {"min": 0.4, "max": 0.7, "missing": 0}, "s": {"min": 10, "max": 12, "missing": 1},
                                "t": {"values": ['"a"', '"b"']}}
    assert [k for k in ("time.cpu", "summary.defaults.wall_time", "seconds.sft", "peak_rss_mb", "step_s",
                        "method_mean.GRPO.cpu_share_of_ppo", "seed.1.matmul_gflops", "seed.0.load_average")
            if not res.is_measured(k)] == []
    assert not any(res.is_measured(k) for k in ("total_timesteps", "steps_to_475", "epochs_skipped"))


# ---------------------------------------------------------------- rerun the quoted lessons

def check_rerun(target: str) -> None:
    """Rerun ``target`` (seed 0, default size, this machine's kernel) and check every value the docs quote: a
    plain quote must print the same digits; a range quote, and a code block (one run's output), a value within
    the range its results file measured (or, where all its runs agreed, the same digits)."""
    data = res.load(target)
    run = res.run_target(target, 0)
    checked, problems = 0, []
    for where, q, _, in_block in qt.quoted_keys():
        if q.target != target or q.key.startswith("@") or res.is_measured(q.key):
            continue                                   # the file's own fields; times and memory of one run
        key = q.key
        if target in res.ACROSS_RUNS and key.startswith("seed.0."):
            key, in_block = key[len("seed.0."):], True     # seed 0's run: within the range over the runs
        elif target in res.ACROSS_RUNS and key.startswith(("seed.", "across.")):
            continue                                   # another seed's run, a count over the runs: not a rerun's
        checked += 1
        got, want = run["values"].get(key), data["values"][key]
        spread = data["ranges"].get(key)
        if spread and "min" in spread and (q.range_fmt is not None or in_block):
            edges = {qt.fmt(spread[k], q.fmt, q.key) for k in ("min", "max")}
            ok = isinstance(got, (int, float)) and (spread["min"] <= got <= spread["max"]
                                                    or qt.fmt(got, q.fmt, q.key) in edges)
            rule = f"within [{spread['min']!r}, {spread['max']!r}]"
        elif spread and "values" in spread and q.range_fmt is not None:    # words quoted with every run's word
            ok = json.dumps(got) in spread["values"]
            rule = f"one of {', '.join(spread['values'])}"
        else:
            ok = got is not None and want is not None and qt.fmt(got, q.fmt, q.key) == qt.fmt(want, q.fmt, q.key)
            rule = f"the digits of {want!r} ({q.fmt})"
        if not ok:
            problems.append(f"{where}: {target}:{q.key} = {got!r}, expected {rule}")
    assert checked > 0
    here = (run["machine"].get("cpu"), run["machine"].get("blas_kernel"))
    measured = {(res.run_cpu(data, r), r["kernel"]) for r in data["runs"]}
    why = ("" if here in measured or not data["cpu_dependent"] else
           f"; this CPU and kernel ({here[0]}, {here[1]}) are not among its file's runs ({sorted(measured)}): on a "
           f"new CPU a CPU-dependent lesson lands anywhere in the seed noise; add this machine's runs with "
           f"`python -m lessons results {target if target in res.JOBS else target[1:]} --add-machine`")
    assert not problems, (f"a rerun of {target} (seed 0, OpenBLAS kernel {run['machine']['blas_kernel']}) no "
                          f"longer gives the quoted numbers; regenerate with `{res.regenerate_command(target)}` "
                          f"and `python -m lessons quote`{why}:\n" + "\n".join(problems))


def _split_targets():
    """The quoted targets by the CPU seconds of their file; a lesson's --full file is never rerun (too slow): its
    staleness is its hash."""
    cheap, costly = [], []
    for t in quoted_targets():
        if res.is_full(t):
            continue
        path = res.results_path(t)
        cpu = json.loads(path.read_text(encoding="utf-8"))["time"]["cpu"] if path.is_file() else math.inf
        (cheap if cpu < CHEAP_CPU_S else costly).append(t)
    return cheap, costly


CHEAP, COSTLY = _split_targets()


@pytest.mark.slow
@pytest.mark.parametrize("target", CHEAP)
def test_a_rerun_of_a_cheap_lesson_gives_its_quoted_numbers(target):
    check_rerun(target)


@pytest.mark.rerun
@pytest.mark.parametrize("target", COSTLY)
def test_a_rerun_gives_the_quoted_numbers(target):
    check_rerun(target)


def test_no_rerun_selects_a_full_target():
    assert not [t for t in CHEAP + COSTLY if res.is_full(t)]
    assert set(CHEAP + COSTLY) == {t for t in quoted_targets() if not res.is_full(t)}


# ---------------------------------------------------------------- the commands

@pytest.mark.slow
def test_generate_runs_each_kernel_in_a_subprocess_and_checks_the_kernel(tmp_path):
    lines = []
    path = res.generate("l04", kernels=["default"], directory=tmp_path, log=lines.append)
    data = json.loads(path.read_text(encoding="utf-8"))
    committed = res.load("l04")
    assert data["values"] == committed["values"]                       # this machine, seed 0: the same run
    assert data["source_sha256"] == res.current_hash("l04") and data["cpu_dependent"] is False
    assert [r["seed"] for r in data["runs"]] == [0] and data["machine"]["matmul_gflops"] > 0
    assert data["runs"][0]["kernel"] == data["machine"]["blas_kernel"] and "OpenBLAS kernel" in lines[1]
    with pytest.raises(res.ResultsError, match="OPENBLAS_CORETYPE=NoSuchKernel: OpenBLAS selected"):
        res.generate("l04", kernels=["NoSuchKernel"], directory=tmp_path, log=lines.append)
    with pytest.raises(res.ResultsError, match="seed 0 is the reference"):
        res.generate("l08", seeds=[1], directory=tmp_path)


def test_jobs_run_the_seeds_side_by_side_and_keep_their_order(tmp_path, monkeypatch):
    import threading
    import time
    started = []

    def fake(target, seed, kernel, log):
        started.append(seed)
        time.sleep(0.3 if seed == 0 else 0.0)                 # seed 0 finishes last: the file keeps it first
        return {"seed": seed, "kernel": "Haswell", "values": {"gold": 0.5 + seed}, "left_out": {}, "verdicts": None,
                "time": {"cpu": 1.0, "wall": 1.0},
                "machine": {"cpu": "X", "matmul_gflops": 100.0, "load_average": 1.0},
                "thread": threading.get_ident()}

    monkeypatch.setattr(res, "run_in_subprocess", fake)
    data = json.loads(res.generate("l17", seeds=[0, 1], kernels=["default"], directory=tmp_path, log=lambda *a: None,
                                   jobs=2).read_text(encoding="utf-8"))
    assert sorted(started) == [0, 1] and [r["seed"] for r in data["runs"]] == [0, 1]
    assert data["values"] == {"gold": 0.5} and data["ranges"] == {"gold": {"min": 0.5, "max": 1.5, "missing": 0}}
    assert data["size"] == "default" and data["target"] == "l17"
    data = json.loads(res.generate("l17-full", seeds=[0, 1], kernels=["default"], directory=tmp_path,
                                   log=lambda *a: None).read_text(encoding="utf-8"))
    assert data["size"] == "full" and data["command"] == "python -m lessons results 17 --full"
    assert data["source_sha256"] == res.current_hash("l17-full")
    assert (tmp_path / "l17_hyperparameters_full.json").is_file()


def test_the_commands_are_reached_from_python_m_lessons(capsys):
    from lessons.__main__ import main
    assert main(["quote", "--check"]) == 0
    assert "quoted number(s) differ" in capsys.readouterr().out
    assert main(["quote", "--keys", "4"]) == 0
    assert "l04:batch.clipfrac = " in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["results"])
    assert exc.value.code == 2


def test_the_rerun_check_fails_when_a_quoted_value_moved(monkeypatch):
    committed = res.load("l08")
    moved = dict(committed["values"])
    moved["summary.defaults.steps_to_475"] = committed["ranges"]["summary.defaults.steps_to_475"]["max"] + 1
    moved["summary.kl_old_target = 0.005.updates"] += 1                # a plain quote: its digits must stay
    fake = {"values": moved, "machine": {"blas_kernel": "X"}}
    monkeypatch.setattr(res, "run_target", lambda target, seed: fake)
    with pytest.raises(AssertionError) as exc:
        check_rerun("l08")
    msg = str(exc.value)
    assert "l08:summary.defaults.steps_to_475" in msg and "expected within [" in msg
    assert "l08:summary.kl_old_target = 0.005.updates" in msg and "python -m lessons results 8" in msg
    monkeypatch.setattr(res, "run_target", lambda target, seed: dict(fake, values=committed["values"]))
    check_rerun("l08")                                                   # the committed values pass


def test_the_rerun_check_accepts_any_word_of_a_ranged_verdict_and_no_other(monkeypatch):
    # a quoted verdict whose two committed runs print different words (the first the docs quote)
    ranged = [(q.target, q.key) for _, q, _, _ in qt.quoted_keys()
              if q.key.startswith("verdict.") and q.key.endswith(".outcome")
              and len(res.load(q.target)["ranges"].get(q.key, {}).get("values", [])) == 2]
    assert ranged, "no quoted verdict's committed runs print two different words"
    target, key = ranged[0]
    committed = res.load(target)
    words = [json.loads(w) for w in committed["ranges"][key]["values"]]
    for word in words:                                   # either run's word passes
        fake = {"values": dict(committed["values"], **{key: word}), "machine": {"blas_kernel": "X"}}
        monkeypatch.setattr(res, "run_target", lambda target, seed: fake)
        check_rerun(target)
    other = ({"holds", "does not hold", "not shown at this size"} - set(words)).pop()
    fake = {"values": dict(committed["values"], **{key: other}), "machine": {"blas_kernel": "X"}}
    monkeypatch.setattr(res, "run_target", lambda target, seed: fake)
    with pytest.raises(AssertionError, match=f"{target}:{key} = '{other}', expected one of"):
        check_rerun(target)


def test_each_verdicts_outcome_and_numbers_become_quotable_keys():
    values, left = {"gold": 0.5}, {}
    res.add_verdict_values(values, left, [{"key": "whiten", "outcome": "not shown at this size",
                                           "numbers": {"diff": 0.2, "se": 0.09, "cases": [3, 4]}},
                                          {"key": "lr0", "outcome": "holds", "numbers": {}}])
    assert values == {"gold": 0.5, "verdict.whiten.outcome": "not shown at this size", "verdict.whiten.diff": 0.2,
                      "verdict.whiten.se": 0.09, "verdict.whiten.cases.0": 3, "verdict.whiten.cases.1": 4,
                      "verdict.lr0.outcome": "holds"} and left == {}
    with pytest.raises(res.ResultsError, match="repeat keys of run"):
        res.add_verdict_values({"verdict.lr0.outcome": "x"}, {}, [{"key": "lr0", "outcome": "holds", "numbers": {}}])


def test_verdicts_are_stored_as_json_whatever_their_type():
    import dataclasses
    from collections import namedtuple

    @dataclasses.dataclass(frozen=True)
    class V:
        key: str
        outcome: str
        numbers: dict

    v = V("clip_constant", "holds", {"max |grad|": np.float64(0.0), "cases": np.array([3, 4])})
    assert res.verdict_record(v) == {"key": "clip_constant", "outcome": "holds",
                                     "numbers": {"max |grad|": 0.0, "cases": [3, 4]}}
    assert res.verdict_record(namedtuple("N", "claim outcome")("c", "not shown at this size")) == \
        {"claim": "c", "outcome": "not shown at this size"}
    assert res.verdict_record({"claim": "c", "outcome": "does not hold"})["outcome"] == "does not hold"


# ---------------------------------------------------------------- the rlvr job: one row per seed

def test_the_rlvr_job_is_a_target_with_its_file_and_the_modules_it_runs():
    assert "rlvr" in res.all_targets() and res.target_of("rlvr") == "rlvr" and "rlvr" in res.CPU_DEPENDENT
    assert res.results_path("rlvr") == res.RESULTS_DIR / "rlvr_methods.json"
    assert res.regenerate_command("rlvr") == "python -m lessons results rlvr"
    files = [p.relative_to(res.REPO_ROOT).as_posix() for p in res.source_files("rlvr")]
    assert {f"minippo/rlvr/{m}.py" for m in ("run", "task", "tokenizer", "verifier", "evaluate", "trainer")} | \
        {"minippo/rlhf/grpo.py", "minippo/rlhf/ppo.py"} <= set(files)
    assert all(p.is_file() for p in res.source_files("rlvr"))
    assert res.RLVR_METHODS == ("grpo", "dr_grpo", "rloo", "ppo")            # `minippo rlvr --method`'s choices
    from minippo.rlvr.run import METHODS
    assert set(res.RLVR_METHODS) == set(METHODS)


def test_an_rlvr_module_edited_makes_its_file_stale(tmp_path):
    shutil.copy(res.results_path("rlvr"), tmp_path / "rlvr_methods.json")
    copies = []
    for p in res.source_files("rlvr"):
        copies.append(tmp_path / p.relative_to(res.REPO_ROOT).as_posix().replace("/", "_"))
        shutil.copy(p, copies[-1])
    assert res.staleness("rlvr", tmp_path, copies) is None
    run = next(p for p in copies if p.name == "minippo_rlvr_run.py")
    run.write_text(run.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    msg = res.staleness("rlvr", tmp_path, copies)
    assert "rlvr_methods.json is stale" in msg and "`python -m lessons results rlvr`" in msg


def test_the_rlvr_file_holds_each_seeds_run_and_its_markers_resolve():
    data = res.load("rlvr")
    ref = data["runs"][0]                         # the counts are over the reference CPU and kernel's runs
    seeds = sorted(r["seed"] for r in data["runs"]
                   if (res.run_cpu(data, r), r["kernel"]) == (res.run_cpu(data, ref), ref["kernel"]))
    assert seeds == [0, 1] and data["values"]["across.seeds"] == 2 and data["values"]["across.runs"] == 8
    for k, v in data["values"].items():                        # seed 0's row is the reference run's values
        if k.startswith("seed.0.") and not res.is_measured(k):
            assert data["values"][k[len("seed.0."):]] == v, k
    assert not any(k.startswith(("seed.", "across.")) for k in data["ranges"])   # one run's number, or all runs'
    s = qt.Sources()
    assert rendered(s, "rlvr:seed.1.ppo.pass1 .3f") == f"{data['values']['seed.1.ppo.pass1']:.3f}"
    assert rendered(s, "rlvr:across.pass64_falls_runs d") == str(data["values"]["across.pass64_falls_runs"])
    assert rendered(s, "rlvr:seed.1.grpo.cpu_s .0f") == f"{data['values']['seed.1.grpo.cpu_s']:.0f}"
    if "ppo.pass1" in data["ranges"]:                          # the reference value alone: with its range only
        assert "quote it with `range`" in problem(s, "<!-- rlvr:ppo.pass1 .3f -->?<!-- end -->")
        assert qt.runs_text(data) in rendered(s, "rlvr:ppo.pass1 .3f range")


def fake_rlvr_run(seed: int, change: dict, sft64: float, rl64: dict) -> dict:
    values = {"teacher_accuracy": 0.6, "sft.pass64": sft64, "grpo_high_lr.pass1": 0.5}
    for m in res.RLVR_METHODS:
        values.update({f"{m}.pass1": 0.4 + change[m], f"{m}.pass1_change": change[m], f"{m}.pass1_change_se": 0.02,
                       f"{m}.pass64": rl64[m]})
    values["config.ppo.lr"] = 3e-4
    return {"seed": seed, "values": values, "machine": {"matmul_gflops": 100.0 + seed, "load_average": 2.0}}


def test_the_rlvr_counts_are_taken_over_every_method_and_seed():
    runs = [fake_rlvr_run(0, {"grpo": 0.25, "dr_grpo": 0.21, "rloo": 0.03, "ppo": 0.3}, 0.99,
                          {"grpo": 0.97, "dr_grpo": 0.99, "rloo": 0.98, "ppo": 0.92}),
            fake_rlvr_run(1, {"grpo": 0.05, "dr_grpo": 0.35, "rloo": 0.22, "ppo": 0.3}, 0.95,
                          {"grpo": 0.96, "dr_grpo": 0.94, "rloo": 0.95, "ppo": 0.93})]
    a = res.rlvr_across_runs(runs)
    assert a["seed.1.dr_grpo.pass1_change"] == 0.35 and a["seed.1.matmul_gflops"] == 101.0
    assert not any(k.startswith("seed.0.config.") for k in a)
    got = {k[len("across."):]: v for k, v in a.items() if k.startswith("across.")}
    assert got["runs"] == 8 and got["seeds"] == 2 and got["pass1_rises_runs"] == 8
    assert got["pass1_rises_2se_runs"] == 7                           # rloo seed 0: +0.03 < 2 x 0.02
    assert got["pass1_above_teacher_runs"] == 6                       # 0.4 + change > 0.6: change > 0.2
    assert got["pass64_falls_runs"] == 5 and got["pass64_rises_runs"] == 1
    assert (got["pass64_drop_max_method"], got["pass64_drop_max_seed"]) == ("ppo", 0)
    assert got["pass64_drop_max"] == pytest.approx(0.07) and got["pass64_drop_max_rl"] == 0.92
    assert (got["ppo_change_min"], got["ppo_change_max"], got["group_change_min"], got["group_change_max"]) == \
        (0.3, 0.3, 0.03, 0.35)
    assert got["ppo_most_seeds"] == 1                                 # seed 1: Dr. GRPO's +0.35 beats +0.3
    assert (got["ppo_lead_min"], got["ppo_lead_max"]) == pytest.approx((-0.05, 0.05))
    assert got["change_se_min"] == got["change_se_max"] == 0.02
    assert got["high_lr_lower_seeds"] == 1                            # 0.5 at 3e-4: below 0.65, above 0.45


def test_a_rerun_of_the_rlvr_job_checks_seed_0s_row_within_its_range(monkeypatch):
    committed = res.load("rlvr")
    quoted = [x.quote.key for x in qt.quoted_keys() if x.quote.target == "rlvr"]
    assert any(k.startswith("seed.1.") for k in quoted) and any(k.startswith("across.") for k in quoted)
    ref = {k: v for k, v in committed["values"].items() if not k.startswith(("seed.", "across."))}
    fake = {"values": ref, "machine": {"blas_kernel": "X"}}
    monkeypatch.setattr(res, "run_target", lambda target, seed: fake)
    check_rerun("rlvr")                                                 # the reference run's values pass
    key = next(k[len("seed.0."):] for k in quoted if k.startswith("seed.0.") and not res.is_measured(k)
               and k[len("seed.0."):] in committed["ranges"])
    moved = dict(ref, **{key: committed["ranges"][key]["max"] + 0.1})
    monkeypatch.setattr(res, "run_target", lambda target, seed: dict(fake, values=moved))
    with pytest.raises(AssertionError, match=f"rlvr:seed.0.{key} = .*expected within"):
        check_rerun("rlvr")


def test_runs_added_on_another_machine_leave_the_rlvr_jobs_per_seed_keys_as_they_are():
    data = res.load("rlvr")
    ref = {k: v for k, v in data["values"].items() if not k.startswith(("seed.", "across."))}
    new_run = {"values": dict(ref, **{"ppo.pass1": 0.99})}
    merged = res.merged_ranges(data, [new_run])
    assert merged["ppo.pass1"]["max"] == 0.99                         # the reference run's key widens
    assert not any(k.startswith(("seed.", "across.")) for k in merged)  # one run's number, or all runs': no range
