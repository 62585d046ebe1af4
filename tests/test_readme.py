"""The README tells the truth: its two commands are the ones CI runs, every lesson and figure is
indexed, and every logged metric is in the glossary."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def first_code_block() -> list[str]:
    block = README.split("```", 2)[1]
    return [line.split("#")[0].strip() for line in block.splitlines()[1:] if line.strip()]


def test_first_screen_has_exactly_the_two_commands_and_ci_runs_the_second():
    commands = first_code_block()
    assert len(commands) == 2
    install_and_run, install_and_test = commands
    assert "pip install" in install_and_run and install_and_run.endswith("minippo rlhf")
    assert "[test]" in install_and_test and "pytest" in install_and_test
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert install_and_test in ci, "the README's test command must be the one .ci/run runs"
    assert README.index("```") < 1500, "the commands must be on the first screen"


def test_every_lesson_is_indexed_with_its_figure():
    for path in sorted((ROOT / "lessons").glob("l[0-9][0-9]_*.py")):
        slug = path.stem
        assert f"(lessons/{slug}.py)" in README, f"README lacks a link to lessons/{slug}.py"
        assert f"figures/{slug}.png" in README, f"README lacks the figure of {slug}"
        assert (ROOT / "figures" / f"{slug}.png").is_file(), f"figures/{slug}.png is not committed"
    linked = set(re.findall(r"figures/(l\d\d_\w+)\.png", README))
    assert linked == {p.stem for p in (ROOT / "figures").glob("l*.png")}


def test_every_metric_is_in_the_glossary():
    from minippo.classic.ppo import METRICS
    from minippo.rlhf.grpo import DAPO_GLOSSARY
    from minippo.rlhf.metrics import DPO_GLOSSARY, GLOSSARY
    from minippo.rlvr.trainer import GLOSSARY as RLVR_GLOSSARY
    for name in list(GLOSSARY) + list(DPO_GLOSSARY) + list(RLVR_GLOSSARY) + list(DAPO_GLOSSARY) + [
            m for m in METRICS if not m.startswith("losses/grad_norm_")]:
        assert f"`{name}`" in README, f"metric {name} is missing from the README glossary"
