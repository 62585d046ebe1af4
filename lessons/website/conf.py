"""Sphinx configuration of the course's site (``python -m lessons site``; the ``docs`` extra installs it all).

Why Sphinx with MyST-NB (and not MkDocs Material): a lesson's page is its executed notebook, and MyST-NB
renders notebooks (markdown cells with their $...$ math, the printed narrative, the figure) without
executing them again; Sphinx and the Executable Books projects are actively released, while MkDocs has had
no release since 1.6.1 (2024) and Material for MkDocs was put into maintenance. Sphinx's own search loads
its index as a script (``searchindex.js``), so it works offline and from ``file://`` with no server;
MathJax 3 comes from the ``sphinx-mathjax-offline`` package (copied into ``_static/mathjax``), and the
Furo theme uses the system's fonts: the built site fetches nothing from the network.
"""
project = "minippo"
author = "minippo contributors"
html_title = "minippo: PPO for language models, from scratch"

extensions = [
    "myst_nb",                  # MyST Markdown pages and notebooks (includes myst_parser)
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",   # MathJax 3.2.2 bundled: mathjax_path -> _static/mathjax/ (set below)
]

myst_enable_extensions = ["dollarmath", "attrs_inline"]   # $...$ / $$ math; ![](x.png){w=160px}
myst_heading_anchors = 4        # GitHub-style anchors (readme.md#metric-glossary), as the repository's links
nb_execution_mode = "off"       # the committed notebooks are already executed: their outputs are shown
nb_ipywidgets_js = {}           # no require.js / widget manager from a CDN (the notebooks hold no widgets)
nb_merge_streams = True

exclude_patterns = ["_code", "_build"]
html_theme = "furo"
html_copy_source = False        # no _sources/ copies of the pages
html_show_sourcelink = False
html_last_updated_fmt = None
suppress_warnings = ["myst.header"]   # the docs start at "##" under a page title in places


def setup(app):
    """MathJax's SVG output: one script and no web fonts (the CommonHTML output that sphinx-mathjax-offline
    selects loads font files, which a browser may refuse from ``file://`` in another folder). Set here: this
    runs after the extensions' own setup."""
    app.config.mathjax_path = "mathjax/tex-svg.js"
