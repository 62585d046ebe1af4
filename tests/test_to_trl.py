"""docs/to_trl.md stays complete: every field of PPOConfig, of the knobs' KnobsConfig and of GRPOConfig, every run
option of `minippo ppo`, and every logged metric has a row (its first cell, in
backticks), so a new knob or metric cannot land without its TRL / OpenRLHF counterpart (or "no counterpart
found")."""
import ast
import re
from dataclasses import MISSING, fields
from pathlib import Path

from minippo.rlhf.metrics import GLOSSARY
from minippo.rlhf.grpo import GRPOConfig
from minippo.rlhf.ppo_knobs import KnobsConfig
from minippo.rlhf.run.configs import RUN_OPTIONS

DOC = Path(__file__).resolve().parents[1] / "docs" / "to_trl.md"


def documented(text: str) -> set[str]:
    """The names in the first cell of the Markdown table rows: ``| `name` | ...``."""
    return set(re.findall(r"^\|\s*`([^`]+)`\s*\|", text, flags=re.M))


def missing_from_map(text: str) -> dict[str, list[str]]:
    names = documented(text)
    knobs = [f.name for cls in (KnobsConfig, GRPOConfig) for f in fields(cls)] + list(RUN_OPTIONS)
    return {"PPOConfig fields": sorted({k for k in knobs if k not in names}),
            "metrics": [m for m in GLOSSARY if m not in names]}


def test_every_field_and_metric_is_mapped():
    assert missing_from_map(DOC.read_text(encoding="utf-8")) == {"PPOConfig fields": [], "metrics": []}


def test_the_check_fails_when_a_row_is_missing():
    text = DOC.read_text(encoding="utf-8")
    without = "\n".join(line for line in text.splitlines()
                        if not line.startswith(("| `lam` |", "| `val/ratio` |")))
    assert missing_from_map(without) == {"PPOConfig fields": ["lam"], "metrics": ["val/ratio"]}
    # a name mentioned in a sentence is not a row
    assert "update_epochs" not in documented("Set `update_epochs` to 4.\n| x | `update_epochs` |")


def test_every_row_names_a_counterpart_or_says_none_was_found():
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\|\s*`", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert all(cells[1:5]), f"an empty cell in: {line}"


def config_default(name: str):
    """The default of field ``name``: KnobsConfig's (canonical PPO's fields and the knobs), else GRPOConfig's."""
    for cls in (KnobsConfig, GRPOConfig):
        for f in fields(cls):
            if f.name == name:
                return f.default if f.default is not MISSING else f.default_factory()
    raise KeyError(name)


def wrong_defaults(text: str) -> list[str]:
    """Rows of the fields table whose "minippo default" (the cell's leading literal) is not the code's."""
    table = text.split("## Every logged metric")[0]
    problems = []
    for name, cell in re.findall(r"^\|\s*`([^`]+)`\s*\|([^|]*)\|", table, flags=re.M):
        try:
            want = config_default(name)
        except KeyError:
            continue                                        # a run option: not a config field
        lead = re.match(r'^(\([^)]*\)|"[^"]*"|\S+)', cell.strip()).group(1)
        got = ast.literal_eval(lead)
        if (tuple(got) if isinstance(want, tuple) else got) != want:
            problems.append(f"{name}: the doc says {cell.strip()!r}, the code's default is {want!r}")
    return problems


def test_every_default_in_the_fields_table_is_the_codes():
    assert wrong_defaults(DOC.read_text(encoding="utf-8")) == []


def test_a_stale_default_is_named():
    text = DOC.read_text(encoding="utf-8").replace("| `lam` | 0.95 |", "| `lam` | 0.9 |")
    assert wrong_defaults(text) == ["lam: the doc says '0.9', the code's default is 0.95"]
