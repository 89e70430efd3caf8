"""The documentation: the MkDocs site builds with --strict, and README.md stays a short, link-correct entry page."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Markdown links: inline [text](target "title") and reference-style [label]: target.
_INLINE_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)


def _relative_links(text: str) -> list[str]:
    links = _INLINE_LINK.findall(text) + _REFERENCE_LINK.findall(text)
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^//", link, re.IGNORECASE)]


def test_mkdocs_build_strict(tmp_path):
    """The docs packages come with the dev extra (`make install`); a missing one fails here rather than skipping."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    # no Sphinx role shows as raw text on a rendered page (the API pages' docstrings use them: docs/hooks/); code
    # blocks, which show source as it is, are left out
    pages = sorted((tmp_path / "site").rglob("*.html"))
    assert any("api" in p.parts for p in pages)
    raw = {}
    for page in pages:
        prose = re.sub(r"<pre[\s\S]*?</pre>", "", page.read_text(encoding="utf-8"))
        found = re.findall(r":(?:func|class|meth|mod|attr|data|exc|obj):(?:<code>|`)[^<`]*", prose)
        if found:
            raw[str(page.relative_to(tmp_path / "site"))] = found[:3]
    assert not raw, raw
    assert (tmp_path / "site" / "index.html").is_file()


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
