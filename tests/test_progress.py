"""Progress in a log file (issue 20 item 4): a plain line at every 10 % instead of thousands of \\r redraws."""
import io

from tqdm.auto import tqdm

from minippo.cli import main
from minippo.progress import LogProgress, progress_bar


def test_a_line_at_every_ten_percent_and_the_postfix():
    buf = io.StringIO()
    bar = progress_bar(range(50), total=50, desc="sft", file=buf)
    assert isinstance(bar, LogProgress)                       # a StringIO is not a terminal
    for i in bar:
        bar.set_postfix(loss=f"{1 / (i + 1):.2f}")
    bar.close()
    lines = buf.getvalue().splitlines()
    assert "\r" not in buf.getvalue() and len(lines) == 10
    assert [line.split()[1] for line in lines] == [f"{n}/50" for n in range(5, 55, 5)]
    assert lines[-1].startswith("sft: 50/50 (100%) ") and lines[-1].endswith("  loss=0.02")


def test_a_resumed_bar_counts_from_where_it_was_and_update_works():
    buf = io.StringIO()
    bar = progress_bar(range(23, 100), initial=23, total=100, desc="ppo", file=buf)
    for _ in bar:
        pass
    assert [line.split()[1] for line in buf.getvalue().splitlines()] == [f"{n}/100" for n in range(30, 110, 10)]
    buf = io.StringIO()
    bar = progress_bar(total=7, desc="classic", file=buf)                 # 7 updates: a line at each one
    for _ in range(7):
        bar.update(1)
    assert len(buf.getvalue().splitlines()) == 7


def test_the_style_follows_the_stream_or_the_environment(monkeypatch):
    monkeypatch.setenv("MINIPPO_PROGRESS", "tty")
    bar = progress_bar(range(3), total=3, file=io.StringIO())
    assert isinstance(bar, tqdm)
    bar.close()
    monkeypatch.setenv("MINIPPO_PROGRESS", "log")
    assert isinstance(progress_bar(range(3), total=3), LogProgress)
    assert list(progress_bar(range(3), disable=True)) == [0, 1, 2]


def test_an_sft_run_logged_to_a_file_has_no_carriage_returns(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MINIPPO_PROGRESS", raising=False)
    assert main(["sft", "--quick", "--steps", "40", "--corpus-size", "600", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err                                          # captured: not a terminal
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("sft: ")]
    assert [line.split()[1] for line in lines] == [f"{n}/40" for n in range(4, 44, 4)]
