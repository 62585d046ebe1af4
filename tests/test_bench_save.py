"""``minippo bench --save FILE``: the run written as JSON (what the README's "Measured numbers" quote), and a bad
``--save`` path refused in one line, exit 2, before anything is measured."""
import json

from lessons import quote as qt
from minippo import cli


def test_save_writes_the_command_the_machine_every_line_and_the_targets(capsys, tmp_path):
    f = tmp_path / "bench.json"
    assert cli.main(["bench", "--only", "matmul", "--quick", "--save", str(f)]) == 0
    out = capsys.readouterr().out
    d = json.loads(f.read_text(encoding="utf-8"))
    assert d["command"] == f"minippo bench --only matmul --quick --save {f}"
    assert set(d["machine"]) == {"cpu", "cores", "blas_kernel", "python", "numpy"} and d["targets"] == []
    assert d["lines"][:2] == ["", "== matmul =="] and d["lines"][2].lstrip().startswith("float32 matmul peak")
    assert "\n".join(d["lines"]) + f"\nwritten: {f}\n" == out       # every printed line, in order
    assert not list(tmp_path.glob("*.tmp"))


def test_a_bad_save_path_is_refused_before_anything_runs(capsys, tmp_path):
    assert cli.main(["bench", "--only", "matmul", "--save", str(tmp_path / "no" / "b.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"minippo bench: error: --save {tmp_path / 'no' / 'b.json'}: the folder "
                                 f"{tmp_path / 'no'} does not exist\n")
    assert cli.main(["bench", "--only", "matmul", "--save", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"minippo bench: error: --save {tmp_path}: a folder; expected a file name\n"
    other = tmp_path / "metrics.json"                 # a file the bench did not write is never overwritten
    other.write_text('{"loss": 1.5}\n')
    assert cli.main(["bench", "--only", "matmul", "--save", str(other)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (f"minippo bench: error: --save {other}: exists and is not a file `minippo bench "
                                 "--save` wrote; it is left as it is (choose another name)\n")
    assert other.read_text() == '{"loss": 1.5}\n'


def test_save_replaces_its_own_earlier_record(capsys, tmp_path):
    f = tmp_path / "bench.json"
    assert cli.main(["bench", "--only", "matmul", "--quick", "--save", str(f)]) == 0
    first = json.loads(f.read_text(encoding="utf-8"))
    assert cli.main(["bench", "--only", "matmul", "--quick", "--save", str(f)]) == 0
    capsys.readouterr()
    second = json.loads(f.read_text(encoding="utf-8"))
    assert second["command"] == first["command"] and len(second["lines"]) == len(first["lines"])


def test_the_readme_block_is_the_caption_and_the_printed_lines(tmp_path):
    d = {"command": "minippo bench --skip cartpole --save docs/bench.json", "date": "2026-12-06",
         "machine": {"cpu": "AMD EPYC", "cores": 2, "blas_kernel": "Haswell", "python": "3.11.2", "numpy": "2.3.5"},
         "lines": ["", "== matmul ==", "   float32 matmul peak  169.3 GFLOP/s"], "targets": []}
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(d), encoding="utf-8")
    text = "a\n<!-- quote-bench -->\nold\n<!-- end-bench -->\nb"
    new, changes, problems = qt.rewrite(text, "R.md", qt.Sources(tmp_path, check_fresh=False, files={"bench": f}))
    assert not problems and changes == ["R.md:2: the block under <!-- quote-bench -->"]
    assert new == ("a\n<!-- quote-bench -->\n`minippo bench --skip cartpole --save docs/bench.json` on 2026-12-06, "
                   "on a 2-core AMD EPYC (OpenBLAS Haswell kernel; Python 3.11.2, NumPy 2.3.5):\n\n```text\n"
                   "== matmul ==\n   float32 matmul peak  169.3 GFLOP/s\n```\n<!-- end-bench -->\nb")
    missing = qt.Sources(tmp_path, check_fresh=False, files={"bench": tmp_path / "none.json"})
    assert qt.rewrite(text, "R.md", missing)[2] == [
        "R.md:2: <!-- quote-bench -->: none.json is missing: `minippo bench --save docs/bench.json` measures it"]


def test_a_section_given_to_only_and_skip_is_refused(capsys):
    """``--only gae --skip gae`` ran gae and ignored --skip."""
    assert cli.main(["bench", "--only", "gae", "matmul", "--skip", "gae"]) == 2
    assert capsys.readouterr().err == ("minippo bench: error: --only and --skip both name gae: give it to one of "
                                       "them\n")
