"""docs/to_trl.md stays complete: every PPOConfig field and every logged metric has a row (its first cell, in
backticks), so a new knob or metric cannot land without its TRL / OpenRLHF counterpart (or "no counterpart
found")."""
import re
from dataclasses import fields
from pathlib import Path

from minippo.rlhf.metrics import GLOSSARY
from minippo.rlhf.ppo_config import PPOConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "to_trl.md"


def documented(text: str) -> set[str]:
    """The names in the first cell of the Markdown table rows: ``| `name` | ...``."""
    return set(re.findall(r"^\|\s*`([^`]+)`\s*\|", text, flags=re.M))


def missing_from_map(text: str) -> dict[str, list[str]]:
    names = documented(text)
    return {"PPOConfig fields": [f.name for f in fields(PPOConfig) if f.name not in names],
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
