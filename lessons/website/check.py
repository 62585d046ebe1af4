"""``python -m lessons.website.check DIR``: open every page of a built site in headless Chromium and check it.

Each page is opened from ``file://`` (the harder case: a site on a USB stick, no server), after MathJax has
finished (``MathJax.startup.promise``), and must have:

- no console error (Chromium's log at level SEVERE);
- every equation typeset: each ``.math`` element holds a MathJax container, no MathJax error node
  (``mjx-merror``: a TeX error), and no raw ``$$``, ``\\(`` or ``\\[`` left in the text outside code;
- no HTML comment shown as text (a Markdown comment whose ``--`` the renderer turned into a dash);
- every image loaded (``complete`` and a natural width > 0, after scrolling it into view);
- every internal link resolving: the file exists and, for ``page.html#id``, the page has that id;
- nothing fetched from the network: every request Chromium made is ``file:``, ``data:`` or ``blob:``.

The search page is also asked a query and must list results. ``--screenshots LOG`` saves the index, the
question bank (at its first entry) and one lesson page at a desktop (1366 x 900) and a phone width
(390 x 844; the lesson also scrolled to its figure). Chromium is Debian's (``/usr/bin/chromium`` with ``/usr/bin/chromedriver``), driven
by Selenium (the ``docs`` extra); nothing is downloaded. Exit 1 if any page fails.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]
DESKTOP, PHONE = (1366, 900), (390, 844)
SCREENSHOTS = {"index": "index.html", "questions": "questions.html", "lesson": "lessons/l04_clip_objective.html"}

# run in the page: what the checks need, read from the rendered DOM
PAGE_FACTS = r"""
const done = arguments[arguments.length - 1];
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const imgs = Array.from(document.images);
  for (const im of imgs) { if (!im.complete) { im.scrollIntoView(); } }
  await Promise.all(imgs.map(im => im.complete ? null : new Promise(r => { im.onload = im.onerror = r; setTimeout(r, 5000); })));
  const raw = [], comments = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {acceptNode: n =>
      n.parentElement.closest('pre, code, script, style, textarea, mjx-container, .highlight')
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  while (walker.nextNode()) {
    const t = walker.currentNode.nodeValue;
    for (const d of ['$$', '\\(', '\\[']) { if (t.includes(d)) { raw.push(t.trim().slice(0, 80)); break; } }
    if (/<!(--|\u2013)/.test(t)) { comments.push(t.trim().slice(0, 80)); }
  }
  const maths = Array.from(document.querySelectorAll('.math'));
  done({
    mathjax: !!(window.MathJax && MathJax.startup),
    equations: maths.length,
    untypeset: maths.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.trim().slice(0, 80)),
    errors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]')).map(
        e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 80)),
    raw: raw,
    comments: comments,
    images: imgs.map(im => ({src: im.currentSrc || im.src, ok: im.complete && im.naturalWidth > 0})),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  });
})();
"""


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(v for k, v in attrs if k in ("id", "name") and v)


def page_ids(path: Path, cache: dict) -> set[str]:
    if path not in cache:
        parser = _Ids()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = parser.ids
    return cache[path]


def link_problem(href: str, site: Path, cache: dict) -> str | None:
    """Why an internal link does not resolve (None: it does, or it leaves the site: not checked)."""
    parts = urlsplit(href)
    if parts.scheme != "file":
        return None
    target = Path(unquote(parts.path))
    if not target.exists():
        return f"link to a missing file: {target.relative_to(site) if target.is_relative_to(site) else target}"
    if target.is_dir():
        target = target / "index.html"
        if not target.is_file():
            return f"link to a folder without index.html: {href}"
    frag = unquote(parts.fragment)
    if frag and target.suffix == ".html" and frag not in page_ids(target, cache):
        return f"link to a missing anchor: {target.relative_to(site)}#{frag}"
    return None


def driver(width: int, height: int):
    """Debian's Chromium, headless, with a fresh profile; console and network logs on."""
    from selenium import webdriver      # lazy: the `docs` extra
    from selenium.webdriver.chrome.service import Service
    chromium, chromedriver = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver")
    if chromedriver is None:
        raise FileNotFoundError("chromedriver is not installed: apt-get install -y chromium chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="minippo_chromium_")
    for flag in FLAGS + [f"--user-data-dir={profile}", f"--window-size={width},{height}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    drv.set_script_timeout(60)
    drv.profile_dir = profile
    return drv


def fetched(drv) -> list[str]:
    """URLs the page requested that are not local (file:, data:, blob:) since the last call."""
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if not url.startswith(("file:", "data:", "blob:", "about:", "chrome:", "devtools:")):
                urls.append(url)
    return urls


def check_page(drv, path: Path, site: Path, cache: dict) -> tuple[list[str], dict]:
    """The problems of one page (empty: none) and what was counted on it."""
    drv.get_log("browser"), fetched(drv)                       # drop what earlier pages left
    drv.get(path.resolve().as_uri())
    facts = drv.execute_async_script(PAGE_FACTS)
    problems = [f"console error: {e['message'][:200]}" for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    problems += [f"fetched from the network: {u}" for u in fetched(drv)]
    if facts["equations"] and not facts["mathjax"]:
        problems.append(f"{facts['equations']} equations but MathJax did not load")
    problems += [f"equation not typeset: {t!r}" for t in facts["untypeset"]]
    problems += [f"MathJax error: {t!r}" for t in facts["errors"]]
    problems += [f"raw TeX delimiters in the rendered text: {t!r}" for t in facts["raw"]]
    problems += [f"an HTML comment shown as text: {t!r}" for t in facts["comments"]]
    problems += [f"image not loaded: {im['src']}" for im in facts["images"] if not im["ok"]]
    problems += sorted({p for href in facts["links"] if (p := link_problem(href, site, cache))})
    problems = list(dict.fromkeys(problems))                 # MathJax marks one error twice
    counts = {"equations": facts["equations"], "images": len(facts["images"]), "links": len(facts["links"])}
    return problems, counts


def check_search(drv, site: Path, query: str = "clip") -> list[str]:
    """The search page, from file://, must list results for ``query``."""
    drv.get((site / "search.html").resolve().as_uri() + f"?q={query}")
    for _ in range(100):
        found = drv.execute_script("return document.querySelectorAll('#search-results li').length")
        if found:
            return []
        time.sleep(0.1)
    return [f"search for {query!r} listed no result"]


def screenshots(site: Path, log: Path) -> list[Path]:
    """The index, the question bank and a lesson at a desktop and a phone width (and the lesson's figure)."""
    log.mkdir(parents=True, exist_ok=True)
    saved = []
    for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
        drv = driver(*size)
        try:
            for name, rel in SCREENSHOTS.items():
                if not (site / rel).is_file():
                    continue
                drv.get((site / rel).resolve().as_uri())
                drv.execute_async_script(PAGE_FACTS)
                if name == "questions":       # the first entry, its title with the Chinese terms
                    drv.execute_script("const q = document.getElementById('q1'); if (q) {"
                                       "  window.scrollTo({top: q.getBoundingClientRect().top + window.scrollY - 60,"
                                       "                   behavior: 'instant'}); }")
                saved.append(log / f"{name}-{label}.png")
                drv.save_screenshot(str(saved[-1]))
                if name == "lesson":          # the figure with the text above it
                    drv.execute_script("const f = document.querySelector('.cell_output img'); if (f) {"
                                       "  const y = f.getBoundingClientRect().top + window.scrollY - 160;"
                                       "  window.scrollTo({top: y, behavior: 'instant'}); }")   # not smooth
                    saved.append(log / f"{name}-figure-{label}.png")
                    drv.save_screenshot(str(saved[-1]))
        finally:
            drv.quit()
            shutil.rmtree(drv.profile_dir, ignore_errors=True)
    return saved


def check_site(site: Path, log=print) -> dict[str, list[str]]:
    """``{page: problems}`` for every HTML page of ``site`` (and the search), printing a line per page."""
    site = site.resolve()
    pages = sorted(p for p in site.rglob("*.html") if not p.relative_to(site).parts[0].startswith("_"))
    if not pages:
        raise FileNotFoundError(f"{site}: no HTML pages (build the site first: python -m lessons site --out DIR)")
    results, cache = {}, {}
    drv = driver(*DESKTOP)
    try:
        for path in pages:
            rel = str(path.relative_to(site))
            problems, counts = check_page(drv, path, site, cache)
            results[rel] = problems
            log(f"{'ok  ' if not problems else 'FAIL'} {rel}  ({counts['equations']} equations, "
                f"{counts['images']} images, {counts['links']} links)")
            for p in problems:
                log(f"     {p}")
        if (site / "search.html").is_file():
            results["search.html?q=clip"] = check_search(drv, site)
            log(f"{'ok  ' if not results['search.html?q=clip'] else 'FAIL'} search.html?q=clip (results listed)")
    finally:
        drv.quit()
        shutil.rmtree(drv.profile_dir, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons.website.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("site", help="the folder `python -m lessons site --out DIR` wrote")
    parser.add_argument("--screenshots", metavar="LOG", help="save screenshots of three pages into this folder")
    args = parser.parse_args(argv)
    t = time.perf_counter()
    results = check_site(Path(args.site))
    failed = sorted(p for p, probs in results.items() if probs)
    if args.screenshots:
        for path in screenshots(Path(args.site).resolve(), Path(args.screenshots)):
            print(f"screenshot {path}")
    print(f"site check: {len(results) - len(failed)} pages ok, {len(failed)} failing "
          f"({time.perf_counter() - t:.0f} s)" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
