"""docs/questions.md tells the truth: every ``Q<n>`` cited in the code, the lessons and the docs is an entry
of the question bank; the entries are numbered 1..N without gaps, each has a bilingual title, a
"Measured:" line, and names a lesson and a test that exist (``tests/<file>.py::test_name``: the file
and the function). The last tests feed the checks broken pages to show that they fail."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BANK = ROOT / "docs" / "questions.md"
CITING = ("minippo", "lessons", "docs")                 # folders whose files may cite Q<n>, plus the README
SUFFIXES = (".py", ".md")

HEADING = re.compile(r"^### Q(\d+)\. (.+)$", re.M)
CITATION = re.compile(r"(?<![\w{])Q(\d+)\b")
LESSON = re.compile(r"lessons/l\d\d_\w+\.py")
TEST = re.compile(r"tests/[\w/]+\.py(?:::\w+)?")
PENDING = re.compile(r"^Measured: pending \(lesson (\d\d)\)$")
CJK = re.compile(r"[\u4e00-\u9fff]")


def entries(doc: str) -> list[tuple[int, str, str]]:
    """(number, title, body) of every ``### Q<n>. title`` heading, the body up to the next heading."""
    heads = list(HEADING.finditer(doc))
    out = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        body = doc[m.end():end].split("\n## ", 1)[0]           # a section heading ends the last entry too
        out.append((int(m.group(1)), m.group(2), body))
    return out


def final_parentheses(title: str) -> str:
    """The text of the parenthesised group that ends ``title`` (nested parentheses kept), or ''."""
    if not title.endswith(")"):
        return ""
    depth = 0
    for i in range(len(title) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(title[i], 0)
        if depth == 0:
            return title[i + 1:-1]
    return ""


def test_exists(ref: str, root: Path = ROOT) -> bool:
    """``tests/x.py`` exists, and for ``tests/x.py::test_name`` the file defines that function."""
    path, _, name = ref.partition("::")
    f = root / path
    if not f.is_file():
        return False
    return not name or re.search(rf"^def {re.escape(name)}\(", f.read_text(encoding="utf-8"), re.M) is not None


test_exists.__test__ = False                                   # a helper, not a pytest test


def bank_problems(doc: str, root: Path = ROOT) -> list[str]:
    """Everything wrong with a question bank's text (empty when it is right)."""
    found = entries(doc)
    problems = []
    numbers = [n for n, _, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"entries must be numbered Q1..Q{len(numbers)} in order, found {numbers}")
    for n, title, body in found:
        where = f"Q{n}"
        if not CJK.search(final_parentheses(title)):
            problems.append(f"{where}: the title must end with the Chinese term in parentheses: {title!r}")
        measured = [line for line in body.splitlines() if line.startswith("Measured:")]
        if len(measured) != 1:
            problems.append(f"{where}: needs exactly one line starting with 'Measured:', found {len(measured)}")
        for line in measured:
            if "pending" in line.split(":", 1)[1][:12]:          # every entry carries a number now (issue 19)
                m = PENDING.match(line.strip())
                problems.append(f"{where}: the measurement is pending" + (f" on lesson {m.group(1)}" if m else "")
                                + ": the lesson must make it and the entry quote its number")
        lesson_lines = [line for line in body.splitlines() if line.startswith("Lesson:")]
        test_lines = [line for line in body.splitlines() if line.startswith("Test:")]
        if len(lesson_lines) != 1 or not LESSON.search(lesson_lines[0]):
            problems.append(f"{where}: needs one 'Lesson:' line naming lessons/lNN_<slug>.py")
        if len(test_lines) != 1 or not TEST.search(test_lines[0]):
            problems.append(f"{where}: needs one 'Test:' line naming tests/<file>.py[::test_name]")
        for ref in LESSON.findall(body):
            if not (root / ref).is_file():
                problems.append(f"{where}: {ref} does not exist")
        for ref in TEST.findall(body):
            if not test_exists(ref, root):
                problems.append(f"{where}: {ref} does not exist")
    return problems


def citing_files(root: Path = ROOT):
    yield root / "README.md"
    for folder in CITING:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and ".ipynb_checkpoints" not in path.parts:
                yield path


def missing_citations(texts: dict[str, str], numbers: set[int]) -> list[str]:
    """``file:line: Q<n>`` for every citation of a question the bank does not have."""
    out = []
    for name, text in texts.items():
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in CITATION.finditer(line):
                if int(m.group(1)) not in numbers:
                    out.append(f"{name}:{lineno}: Q{m.group(1)}")
    return out


def test_the_bank_is_numbered_and_every_entry_is_backed():
    doc = BANK.read_text(encoding="utf-8")
    assert len(entries(doc)) >= 50, "the bank lost entries"
    problems = bank_problems(doc)
    assert not problems, "docs/questions.md:\n" + "\n".join(problems)


def test_no_title_holds_an_angle_bracket():
    """The site links a question as {ref}`Q<n>. title <q<n>>`: a '<' or '>' in the title ends the role's text
    early and the site's build fails (it did for "gamma < 1")."""
    bad = [f"Q{n}: {title}" for n, title, _ in entries(BANK.read_text(encoding="utf-8")) if set(title) & set("<>")]
    assert not bad, "titles with '<' or '>' (write 'below', 'above'):\n" + "\n".join(bad)


def test_every_cited_question_exists():
    numbers = {n for n, _, _ in entries(BANK.read_text(encoding="utf-8"))}
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in citing_files()}
    assert len(texts) > 50 and "lessons/l09_text_as_mdp.py" in texts
    missing = missing_citations(texts, numbers)
    assert not missing, "citations of questions docs/questions.md does not have:\n" + "\n".join(missing)


def test_the_lessons_cite_their_questions():
    # lessons 01-20 (lesson 22, still being written, answers Q38 and gets its line when it is finished)
    for path in sorted((ROOT / "lessons").glob("l[0-9][0-9]_*.py")):
        if int(path.name[1:3]) > 20:
            continue
        head = path.read_text(encoding="utf-8").split('"""', 2)[1]           # the module docstring
        assert re.search(r"^Questions: Q\d+(, Q\d+)*\.?$", head, re.M), f"{path.name}: no 'Questions: Q..' line"


# ---- the checks can fail ------------------------------------------------------------------------------


ENTRY = """### Q{n}. Why? (为什么)

Answer: because.

Measured: 1.0 (lesson 09).

Lesson: `lessons/l09_text_as_mdp.py`

Test: `tests/rlhf/test_rollout.py::test_padding_never_enters_a_metric`
"""


def test_a_citation_of_a_missing_question_is_caught():
    assert missing_citations({"a.py": "see Q1 and Q2"}, {1, 2}) == []
    assert missing_citations({"a.py": "ok Q1\nsee Q3 (and Q(s, a), q3, Q{key})"}, {1, 2}) == ["a.py:2: Q3"]


def test_a_broken_bank_is_caught():
    good = ENTRY.format(n=1) + "\n" + ENTRY.format(n=2)
    assert bank_problems(good) == []
    gap = ENTRY.format(n=1) + "\n" + ENTRY.format(n=3)
    assert any("numbered" in p for p in bank_problems(gap))
    no_measure = ENTRY.format(n=1).replace("Measured: 1.0 (lesson 09).", "")
    assert any("Measured" in p for p in bank_problems(no_measure))
    pending = ENTRY.format(n=1).replace("1.0 (lesson 09).", "pending (lesson 09)")
    assert any("pending on lesson 09" in p for p in bank_problems(pending))
    assert any("pending" in p for p in bank_problems(pending.replace("(lesson 09)", "lesson 9")))
    no_test = ENTRY.format(n=1).replace("::test_padding_never_enters_a_metric", "::test_that_does_not_exist")
    assert any("does not exist" in p for p in bank_problems(no_test))
    no_lesson = ENTRY.format(n=1).replace("l09_text_as_mdp", "l09_gone")
    assert any("does not exist" in p for p in bank_problems(no_lesson))
    english_only = ENTRY.format(n=1).replace(" (为什么)", "")
    assert any("Chinese" in p for p in bank_problems(english_only))
    assert final_parentheses("Clamp to a range (say [-1, 1])? (裁剪 / clamp(v, -1, 1))") == "裁剪 / clamp(v, -1, 1)"
    assert final_parentheses("Why (really)? (why)") == "why" and final_parentheses("Why?") == ""
