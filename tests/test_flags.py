"""minippo.flags: the flags of a config dataclass are read from the class itself (types, choices, docs, sections), so
they follow its fields; a value of the wrong type is refused while the command line is read (issue 26 item 2)."""
from dataclasses import dataclass

import pytest

from minippo.checks import UsageError, check_choice, check_range
from minippo.cli import Parser
from minippo.flags import (add_config_flags, config_from_args, field_choices, field_docs, field_flag, field_sections,
                           first_sentence, replace_fields)


@dataclass
class Toy:
    """A config with one field of each kind."""

    # ---- length ------------------------------------------------------------------------------
    steps: int = 10
    """Optimizer steps; >= 1. More text here."""
    warmup: int = 2
    """Warm-up steps, in [0, steps)."""

    # ---- numbers -----------------------------------------------------------------------------
    lr: float = 0.1
    """Learning rate, > 0."""
    clip: float | None = None
    """Clip, > 0; None = off."""
    betas: tuple = (0.9, 0.95)
    """Adam's betas."""
    on: bool = True
    """A switch."""
    mode: str = "a"
    """One of a, b."""
    name: str = "x"
    """Any text."""

    def __post_init__(self):
        check_range("steps", self.steps, 1, None, integer=True)
        check_range("warmup", self.warmup, 0, self.steps, integer=True, hi_open=True)
        check_range("lr", self.lr, 0, None, lo_open=True)
        check_choice("mode", self.mode, ("a", "b"))


def parse(*argv, **kw):
    parser = Parser(prog="toy")
    add_config_flags(parser, Toy, **kw)
    return parser, parser.parse_args(list(argv))


def test_types_metavars_choices_docs_and_sections_come_from_the_class():
    assert {n: field_flag(Toy, n)["metavar"] for n in Toy.__dataclass_fields__} == {
        "steps": "N", "warmup": "N", "lr": "FLOAT", "clip": "FLOAT|none", "betas": "FLOAT,FLOAT",
        "on": "{true,false}", "mode": "{a,b}", "name": "TEXT"}
    assert field_choices(Toy, "mode") == ("a", "b") and field_choices(Toy, "name") is None
    assert field_docs(Toy)["steps"] == "Optimizer steps; >= 1. More text here."
    assert first_sentence(field_docs(Toy)["steps"]) == "Optimizer steps; >= 1."
    assert field_sections(Toy) == {"steps": "length", "warmup": "length", "lr": "numbers", "clip": "numbers",
                                   "betas": "numbers", "on": "numbers", "mode": "numbers", "name": "numbers"}
    parser, _ = parse()
    text = parser.format_help()
    assert "Toy: length:" in text and "Toy: numbers:" in text and "--steps N" in text and "[10]" in text
    assert text.index("Toy: length:") < text.index("--warmup N") < text.index("Toy: numbers:")
    assert "More text here" not in text                                  # the first sentence only


def test_values_are_read_as_the_fields_type_and_only_given_flags_change_the_config():
    _, args = parse("--steps", "5", "--clip", "none", "--betas", "0.8,0.9", "--on", "false", "--mode", "b")
    cfg = config_from_args(args, Toy())
    assert cfg == Toy(steps=5, clip=None, betas=(0.8, 0.9), on=False, mode="b")
    _, args = parse("--clip", "0.5")
    assert config_from_args(args, Toy(lr=0.3)) == Toy(lr=0.3, clip=0.5)


@pytest.mark.parametrize("argv, message", [
    (["--steps", "abc"], "toy: error: --steps: expected an integer (N), got 'abc'\n"),
    (["--lr", "fast"], "toy: error: --lr: expected a number (FLOAT), got 'fast'\n"),
    (["--on", "yes"], "toy: error: --on: expected true or false, got 'yes'\n"),
    (["--betas", "0.9"], "toy: error: --betas: expected 2 comma-separated numbers, got '0.9'\n"),
    (["--steps"], "toy: error: --steps: expected one argument\n"),
    (["--stepz", "3"], "toy: error: unrecognized arguments: --stepz 3 (toy --help lists the flags)\n"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_flag_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2 and capsys.readouterr().err == message


def test_a_range_error_names_the_field_and_one_on_a_field_not_given_names_the_flags_given():
    _, args = parse("--mode", "c")
    with pytest.raises(ValueError, match=r"^`mode` must be one of 'a', 'b'; got 'c'$"):
        config_from_args(args, Toy())
    _, args = parse("--steps", "2")                                       # warmup (default 2) must be < steps
    with pytest.raises(UsageError, match=r"^--steps 2: `warmup` must be in \[0, 2\), got 2$"):
        config_from_args(args, Toy())
    assert replace_fields(Toy(), {}) == Toy()


def test_only_some_fields_in_one_group_and_renamed_flags():
    parser, args = parse("--old", "7", only=("steps", "lr"), title="the knobs", renamed={"old": "steps"})
    assert "the knobs:" in parser.format_help() and "--warmup" not in parser.format_help()
    assert "--old" not in parser.format_help()                           # hidden: one release of the old name
    assert config_from_args(args, Toy(), renamed={"old": "steps"}).steps == 7
    _, args = parse("--old", "7", "--steps", "8", only=("steps",), renamed={"old": "steps"})
    with pytest.raises(UsageError, match="--old and --steps name the same field"):
        config_from_args(args, Toy(), renamed={"old": "steps"})


def test_every_config_of_the_commands_has_typed_flags():
    """Every field of the configs the commands expose gets a metavar that says what its value is (no `X`)."""
    from minippo.classic.config import PPOConfig as ClassicConfig
    from minippo.rlhf.dpo_config import DPOConfig
    from minippo.rlhf.ppo_config import PPOConfig
    from minippo.rlhf.rm_train import RMConfig
    from minippo.rlhf.sft import SFTConfig
    for cls in (PPOConfig, DPOConfig, SFTConfig, RMConfig, ClassicConfig):
        for name in cls.__dataclass_fields__:
            spec = field_flag(cls, name)
            assert spec["metavar"].split("|")[0] in ("N", "FLOAT", "{true,false}", "FLOAT,FLOAT", "TEXT") or \
                spec["metavar"].startswith("{"), (cls.__name__, name, spec["metavar"])


def test_the_help_is_the_first_sentence_and_an_abbreviation_ends_none():
    from minippo.flags import first_sentence
    assert first_sentence("Responses per prompt (Dr. GRPO: 4). More.") == "Responses per prompt (Dr. GRPO: 4)."
    assert first_sentence("As Ziegler et al. 2019, e.g. Pythia. Then.") == "As Ziegler et al. 2019, e.g. Pythia."
    assert first_sentence("One. Two.") == "One." and first_sentence("no full stop") == "no full stop"
    assert first_sentence("Optional. Normal. X") == "Optional."     # a word that merely ends in "al."
    from minippo.rlhf.grpo import GRPOConfig
    from minippo.flags import field_docs
    docs = field_docs(GRPOConfig)
    assert all(not first_sentence(docs[k]).endswith("Dr.") for k in docs)       # grpo --help was cut there
