"""The browser check of the website (``lessons/website/check.py``) passes a good page and fails each broken one.

A tiny fixture site is built with the site's own Sphinx configuration (``lessons/website/conf.py``): one good
page (inline and display math, an image, a link with an anchor) and one page per defect the check must catch:
an equation with a brace left open (MathJax cannot find its end and leaves it raw), a TeX error (MathJax
typesets an error message), a raw ``\\(`` MathJax never typeset, a missing image, a link to a missing page,
a link to a missing anchor, a console error, a quoted-number marker shown as text. Needs the ``docs`` extra and Debian's chromium + chromedriver;
without them the tests skip, and ``MINIPPO_REQUIRE_SITE=1`` (set by .ci/run) turns that skip into a failure.
"""
import base64
import importlib.util
import os
import shutil

import pytest

MISSING = [m for m in ("sphinx", "myst_nb", "selenium") if importlib.util.find_spec(m) is None]
MISSING += [b for b in ("chromium", "chromedriver") if shutil.which(b) is None]
if MISSING and os.environ.get("MINIPPO_REQUIRE_SITE") == "1":
    raise pytest.UsageError(f"MINIPPO_REQUIRE_SITE=1 but {', '.join(MISSING)} is missing: pip install -e '.[docs]' "
                            f"and apt-get install -y chromium chromium-driver")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (the docs extra and Debian's "
                                                      f"chromium + chromium-driver)")

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
PAGES = {
    "good": "# Good\n\nInline $r_t = \\exp(\\log\\pi_\\theta - \\log\\pi_{old})$ and\n\n$$\nL = \\min(rA, "
            "\\mathrm{clip}(r)A)\n$$\n\n![a dot](dot.png)\n\n[the bad equation](bad_equation.md#bad-equation)\n",
    "bad_equation": "# Bad equation\n\n$$\n\\frac{1}{2\n$$\n",             # a brace left open
    "tex_error": "# TeX error\n\n$$\nr_t^2^3\n$$\n",                        # a double exponent
    "raw_delimiters": "# Raw delimiters\n\nText with \\\\(x\\\\) that no one typesets.\n",
    "missing_image": '# Missing image\n\n<img src="nowhere.png" alt="missing">\n',
    "missing_page": '# Missing page\n\n<a href="nowhere.html">a page that does not exist</a>\n',
    "missing_anchor": '# Missing anchor\n\n<a href="good.html#no-such-heading">no such heading</a>\n',
    "console_error": "# Console error\n\n<script>console.error('boom from the fixture');</script>\n",
    # a quoted-number marker of lessons/quote.py escaped into text (as the site's sources escape any other
    # <word>): the page shows it, its -- typeset as a dash
    "shown_comment": "# Shown comment\n\nA value of &lt;!-- l01:variance_ratio .0f --&gt;6&lt;!-- end --&gt;x.\n",
}
EXPECTED = {"bad_equation": "equation not typeset", "tex_error": "MathJax error",
            "raw_delimiters": "raw TeX delimiters", "missing_image": "image not loaded", "missing_page": "link to a missing file", "missing_anchor": "link to a missing anchor",
            "console_error": "console error", "shown_comment": "an HTML comment shown as text"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from sphinx.cmd.build import build_main
    from lessons.website import CONF_DIR
    from lessons.website.check import check_site
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("site")
    (src / "dot.png").write_bytes(PNG)
    toc = "\n".join(PAGES)
    (src / "index.md").write_text(f"# Fixture\n\n```{{toctree}}\n{toc}\n```\n", encoding="utf-8")
    for name, text in PAGES.items():
        (src / f"{name}.md").write_text(text, encoding="utf-8")
    assert build_main(["-b", "html", "-q", "-c", str(CONF_DIR), str(src), str(out)]) == 0
    return check_site(out)


def test_a_good_page_passes(results):
    assert results["good.html"] == [] and results["index.html"] == []


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_each_defect_fails_its_page_and_is_named(results, page):
    problems = results[f"{page}.html"]
    print(page, problems)
    assert problems, f"{page}.html passed the check"
    assert any(p.startswith(EXPECTED[page]) for p in problems), problems
