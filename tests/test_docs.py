"""The documentation: the MkDocs site builds with --strict, and README.md stays a short, link-correct entry page."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC_PAGES = sorted((ROOT / "docs").rglob("*.md"))

# Markdown links: inline [text](target "title") and reference-style [label]: target.
_INLINE_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)


def _relative_links(text: str) -> list[str]:
    links = _INLINE_LINK.findall(text) + _REFERENCE_LINK.findall(text)
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^//", link, re.IGNORECASE)]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The site, built once with --strict for every test here that reads it. The docs packages come with the dev
    extra (`make install`); a missing one fails the build rather than skipping."""
    site = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return site


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if not {"assets", "search"} & set(p.relative_to(site).parts))


def _prose(page: Path) -> str:
    """A built page's HTML without its code blocks (which show source, or an included file, as it is)."""
    return re.sub(r"<pre[\s\S]*?</pre>", "", page.read_text(encoding="utf-8"))


def test_mkdocs_build_strict(built_site):
    # no Sphinx role shows as raw text on a rendered page (the API pages' docstrings use them: docs/hooks/); code
    # blocks, which show source as it is, are left out
    pages = _pages(built_site)
    assert any("api" in p.parts for p in pages)
    raw = {}
    for page in pages:
        found = re.findall(r":(?:func|class|meth|mod|attr|data|exc|obj):(?:<code>|`)[^<`]*", _prose(page))
        if found:
            raw[str(page.relative_to(built_site))] = found[:3]
    assert not raw, raw
    assert (built_site / "index.html").is_file()


def test_api_pages_show_no_rest_table_rules(built_site):
    """reST simple tables in docstrings (rows between ``====  ====`` rules) render as tables or lists on the API
    pages (docs/hooks/rst_tables.py), not as rows of "=" and run-together text."""
    api = [p for p in _pages(built_site) if "api" in p.relative_to(built_site).parts]
    assert api
    raw = {str(p.relative_to(built_site)): m.group(0) for p in api
           for m in [re.search(r"={6,}", re.sub(r"<[^>]+>", "", _prose(p)))] if m}
    assert not raw, raw
    models = (built_site / "api" / "models" / "index.html").read_text(encoding="utf-8")
    assert "<li><code>method</code>: " in models  # disentangle/models/base.py's member table, as a list


# A citation of the project's internal implementation specs (shared/specs/, not in a clone): "spec §3.3", "QLAE
# spec §4.3", "spec's §3.3", "Spec: qlae.md §12", "(factorqvae.md §8.1)", "spec [REC]", the specs' tags. Pages, config
# comments and docstrings cite the papers, the authors' code or "our choice".
SPEC_FILES = r"(?:qlae|tripod|factorqvae|cliff|categorical_vae)\.md"
SPEC_REFERENCE = re.compile(
    rf"shared/specs|\bspecs/|\b[Ss]pec(?:'s)?:? ?§|\b[Ss]pec(?:'s|:)? {SPEC_FILES}|\b{SPEC_FILES} §|"
    r"\[(?:REC|DECIDE|CODE)\]|spec default|implementation spec")
SHIPPED = [p for folder in ("conf", "sweeps", "disentangle") for p in sorted((ROOT / folder).rglob("*"))
           if p.suffix in (".py", ".yaml", ".md")]


def test_docs_cite_the_papers_not_the_internal_specs(built_site):
    """No page names the internal spec files or their sections: neither the Markdown of docs/ and README.md, nor
    any built page (the API pages made from docstrings and the config files shown in code blocks included), nor
    the files a wheel ships (conf/, sweeps/, the package's docstrings and comments)."""
    found = {str(p.relative_to(ROOT)): m for p in [README, *DOC_PAGES, *SHIPPED]
             if (m := SPEC_REFERENCE.findall(p.read_text(encoding="utf-8")))}
    assert len(SHIPPED) > 250 and not found, found
    pages = _pages(built_site)
    assert len(pages) > 28 and any("api" in p.relative_to(built_site).parts for p in pages)
    built = {str(p.relative_to(built_site)): m for p in pages
             if (m := SPEC_REFERENCE.findall(re.sub(r"<[^>]+>", "", p.read_text(encoding="utf-8"))))}
    assert not built, built


def test_code_blocks_wrap_and_every_page_links_the_stylesheet(built_site):
    """Long lines in code blocks wrap instead of being clipped: docs/stylesheets/extra.css (mkdocs.yml's extra_css)
    sets pre-wrap on code blocks, every built page links it, and every block carries its language's class, which
    the stylesheet's exemption for plain-text blocks (program output, the package layout) reads. Those keep their
    columns and scroll, so their lines must fit the content column at 1280 px: 80 characters."""
    css = (built_site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert re.search(r"\.md-typeset pre > code\s*\{[^}]*white-space:\s*pre-wrap", css), css
    unlinked, untyped = [], []
    for page in _pages(built_site):
        html = page.read_text(encoding="utf-8")
        hrefs = re.findall(r'<link rel="stylesheet" href="([^"]*stylesheets/extra\.css)"', html)
        targets = [(built_site / h.lstrip("/")) if h.startswith("/") else (page.parent / h) for h in hrefs]
        if not any(t.resolve() == (built_site / "stylesheets" / "extra.css").resolve() for t in targets):
            unlinked.append(str(page.relative_to(built_site)))
        if re.search(r'<div class="highlight"><pre', html):
            untyped.append(str(page.relative_to(built_site)))
    assert not unlinked, f"pages without docs/stylesheets/extra.css: {unlinked}"
    assert not untyped, f"code blocks without a language class (pygments_lang_class): {untyped}"
    long_plain = [(page.name, line) for page in [README, *DOC_PAGES]
                  for info, lines in _fenced_blocks(page.read_text(encoding="utf-8")) if info in ("", "text")
                  for line in lines if len(line.rstrip()) > 80]
    assert not long_plain, long_plain


def _fenced_blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """(info string, lines) of each fenced code block."""
    blocks, current = [], None
    for line in markdown.splitlines():
        fence = re.match(r"^ *```(\S*)", line)
        if fence and current is None:
            current = (fence.group(1), [])
        elif fence:
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
    return blocks


# Material gives every table cell at least 5rem (100 px); the content column at 1280 px with both sidebars is
# 688 px (measured in Chromium). A model column whose longest unbreakable name is 30 characters of code (about
# 245 px with its padding) and four metric columns (400 px) fit; the eight columns the table once had did not
# (~945 px: model names broke mid-word and the PSNR column was cut off).
MAX_COLUMNS, MAX_HEADER, MAX_NAME = 5, 10, 30


def _tables(markdown: str) -> list[list[list[str]]]:
    tables, rows = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", line.strip()):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def test_the_quickstart_comparison_fits_the_page():
    """docs/getting-started.md's quickstart comparison is tables of at most 5 columns with headers of at most 10
    characters and model names (the first cell's longest word) of at most 30; together they still give every
    model all seven metrics."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    section = page.split("## The quickstart comparison\n", 1)[1].split("\n## ", 1)[0]
    tables = _tables(section)
    assert tables
    for table in tables:
        header, rows = table[0], table[1:]
        assert len(header) <= MAX_COLUMNS, header
        assert all(len(cell) <= MAX_HEADER for cell in header), header
        too_long = [row[0] for row in rows if max(len(w.strip("`")) for w in row[0].split()) > MAX_NAME]
        assert not too_long, too_long
    models = [[row[0] for row in table[1:]] for table in tables]
    assert all(m == models[0] for m in models), "the tables list different models"
    metrics = [cell for table in tables for cell in table[0][1:]]
    assert sorted(metrics) == sorted(["InfoM", "InfoE", "InfoC", "D", "I", "C", "PSNR"]), metrics
    assert all(re.fullmatch(r"\d+\.\d+", cell) for table in tables for row in table[1:] for cell in row[1:])
    assert len(models[0]) >= 40


def test_readme_relative_links_exist():
    links = _relative_links(README.read_text(encoding="utf-8"))
    assert links, "README.md links to no file: expected links into docs/"
    missing = [link for link in links if not (ROOT / link.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_readme_is_short_and_has_the_two_commands():
    text = README.read_text(encoding="utf-8")
    n_lines = len(text.splitlines())
    assert n_lines <= 200, f"README.md has {n_lines} lines; keep it to one or two screens (move detail into docs/)"
    assert "make demo" in text and "make test" in text


def test_the_documented_run_folders_are_the_ones_hydra_makes():
    """README and docs name a run's and a sweep's folders as conf/hydra/default.yaml makes them: a date and a time
    (``<date>_<time>``), not a date alone."""
    import yaml

    hydra = yaml.safe_load((ROOT / "conf" / "hydra" / "default.yaml").read_text())
    assert hydra["sweep"]["dir"] == "multirun/${now:%Y-%m-%d_%H-%M-%S}"
    assert hydra["run"]["dir"].endswith("/${now:%Y-%m-%d_%H-%M-%S}")
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    named = [(page.name, m.group(0)) for page in pages
             for m in re.finditer(r"(multirun|outputs/<model>/<data>)/<[^>`]*>[^/`\s]*", page.read_text())]
    assert named, "no page names the run folders"
    wrong = [(page, folder) for page, folder in named if not folder.endswith("/<date>_<time>")]
    assert not wrong, wrong


def test_install_md_lists_every_console_script_and_extra_of_pyproject():
    """The install page's console-script table is pyproject's [project.scripts], each the `python -m` form of the
    function it runs; its extras table is pyproject's optional dependencies."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    page = (ROOT / "docs" / "install.md").read_text()
    scripts = dict(re.findall(r"^\| `(disentangle-[a-z_]+)` \| `python -m (disentangle\.[a-z_.]+)` \|$", page, re.M))
    assert scripts.keys() == project["scripts"].keys()
    for script, module in scripts.items():
        assert project["scripts"][script].split(":")[0] == module, script
    extras = re.findall(r"^\| `([a-z]+)` \| [^|]+ \| [^|]+ \|$", page, re.M)
    assert sorted(extras) == sorted(project["optional-dependencies"]), extras
    dev = " ".join(project["optional-dependencies"]["dev"])
    dev_row = next(line for line in page.splitlines() if line.startswith("| `dev` |"))
    for extra in re.search(r"\[(.*)\]", dev).group(1).split(","):  # the extras dev pulls in are named in its row
        assert f"`{extra}`" in dev_row, extra


def test_the_install_page_says_the_package_is_not_on_pypi_and_gives_the_working_route():
    page = (ROOT / "docs" / "install.md").read_text()
    assert "**It is not on PyPI yet.**" in page
    first_block = page.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip() and
                not line.lstrip().startswith("#")]
    assert "pip install ." in commands  # the route that works today, from a clone
    assert "pip install disentangle-quantized" not in commands  # only as a comment, "once released"
    assert "# once released on PyPI: pip install disentangle-quantized" in first_block


def test_the_home_page_lists_every_page_of_the_nav():
    """docs/index.md's table of pages links every page of mkdocs.yml's nav (the methods' and API's sections through
    at least one of their pages each) and nothing that is not in it."""
    import yaml

    class _Loader(yaml.SafeLoader):  # mkdocs.yml's own tags (!relative, !!python/...): read as nothing
        pass

    _Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)["nav"]

    def pages(entries):
        for entry in entries:
            for value in entry.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    in_nav = set(pages(nav)) - {"index.md"}
    table = [line for line in (ROOT / "docs" / "index.md").read_text().splitlines() if line.startswith("| [")
             or line.startswith("| API |")]
    linked = {link.split("#")[0] for line in table for link in re.findall(r"\]\(([^)]+)\)", line)}
    sections = {"methods/": "Methods", "api/": "API"}
    missing = {p for p in in_nav - linked
               if not any(p.startswith(s) and any(x.startswith(s) for x in linked) for s in sections)}
    assert not missing, f"pages in the nav but not on the home page's table: {sorted(missing)}"
    assert linked <= in_nav, sorted(linked - in_nav)


DEMO_REFERENCE = ROOT / "docs" / "reference" / "demo-metrics.json"


def _block_after(page: str, marker: str) -> list[str]:
    """The lines of the first fenced block after ``marker`` on ``page``."""
    rest = page[page.index(marker):]
    start = rest.index("```\n") + 4
    return rest[start:rest.index("```", start)].rstrip("\n").splitlines()


def test_the_demo_output_on_the_page_is_the_committed_reference(capsys):
    """getting-started.md's demo table is what `make demo` printed for docs/reference/demo-metrics.json (its
    metrics.json, committed), and the page names the machine that file records; the file is a quickstart run."""
    import json

    from conftest import compose_config

    from disentangle.runtime.run import print_summary

    reference = json.loads(DEMO_REFERENCE.read_text())
    print_summary(f"{reference['method']} on {reference['data']}: final evaluation", reference, {})
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    shown = [line.rstrip() for line in _block_after(page, "## What the demo shows")]
    assert shown == printed[:len(shown)] and len(shown) >= 5, (shown, printed)
    machine = reference["machine"]
    assert f"{machine['cpu']}" in page and machine["vector_isa"].upper().replace("_", " ") in page.upper()
    assert reference["versions"]["git_commit"][:7] in page
    quickstart = compose_config(["experiment=quickstart"])
    assert (reference["method"], reference["data"]) == (quickstart.model.name, quickstart.data.name)
    assert reference["step"] == quickstart.trainer.max_steps
    assert reference["n_samples"] == (quickstart.callbacks.evaluation.n_samples or quickstart.data.eval_size)
    assert reference["precision"] == "32-true" and reference["runtime"]["torch_threads"] == 2
