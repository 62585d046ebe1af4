"""``python -m lessons verdicts``: the table of every lesson's verdicts, and its JSON records."""
import json

import pytest

from lessons.__main__ import main
from lessons import l04_clip_objective


def test_the_table_lists_each_claim_with_its_outcome_per_seed(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["verdicts", "4", "--seeds", "0", "1", "--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    vs = l04_clip_objective.verdicts(l04_clip_objective.run(quick=True, seed=0))
    rows = [ln for ln in printed.splitlines() if ln.startswith("| 04 |")]
    assert len(rows) == len(vs) and all(ln.endswith("| holds | holds |") for ln in rows)     # identities
    data = json.loads(out.read_text())
    assert data["seeds"] == [0, 1] and data["quick"] is True
    assert {(d["seed"], d["key"]) for d in data["verdicts"]} == {(s, v.key) for s in (0, 1) for v in vs}
    assert all(d["kind"] == "identity" and d["outcome"] == "holds" for d in data["verdicts"])


def test_it_refuses_to_overwrite_and_bad_seeds(tmp_path, capsys):
    out = tmp_path / "v.json"
    out.write_text("mine")
    with pytest.raises(SystemExit) as e:
        main(["verdicts", "4", "--quick", "--json", str(out)])
    assert e.value.code == 2 and out.read_text() == "mine" and "--force" in capsys.readouterr().err
    for bad in (["--seeds", "-1"], ["--seeds", "0", "0"]):
        with pytest.raises(SystemExit) as e:
            main(["verdicts", "4", "--quick", *bad])
        assert e.value.code == 2 and "--seeds" in capsys.readouterr().err
