"""disentangle/data/sources.yaml, the registry of where each raw file comes from: it loads, covers every file the
downloader knows, cites every source, and docs/data.md shows exactly what it holds."""
from __future__ import annotations

import copy
import datetime
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from disentangle.data.formats import OFFICIAL
from disentangle.data.preparation import dataset_files
from disentangle.data.sources import (
    CITATION,
    SourcesError,
    load_sources,
    parse_sources,
    render_into,
    section_of,
    sources_markdown,
)

ROOT = Path(__file__).resolve().parents[1]
DATA_PAGE = ROOT / "docs" / "data.md"


@pytest.fixture(scope="module")
def registry():
    return load_sources()


@pytest.fixture()
def document():
    """The parsed YAML of the package's registry, to break in one place."""
    return yaml.safe_load(resources.files("disentangle.data").joinpath("sources.yaml").read_text(encoding="utf-8"))


def test_the_registry_has_an_entry_for_every_file_prepare_needs_under_the_converters_names(registry):
    """Every raw file of every prepared dataset (each variant, each SmallNORB file) is an entry whose filename is what
    the converter looks for, and the registry holds nothing else."""
    needed = set()
    for name, official in OFFICIAL.items():
        for variant in official.files:
            for entry in dataset_files(name, variant, registry):
                needed.add(entry.key)
                names = {official.file(variant), *(official.companions or ())}
                names |= {n + ".gz" for n in names} if official.gzip else set()
                if official.archive:
                    names.add(official.archive)
                assert entry.filename in names, (name, variant, entry.filename)
                assert entry.dataset == name and isinstance(entry.checked, datetime.date)
    assert needed == set(registry), "sources.yaml holds entries no dataset uses, or misses some"


def test_no_source_is_also_rejected(registry):
    for key, entry in registry.items():
        assert not {s.url for s in entry.sources} & {s.url for s in entry.rejected_sources}, key


def test_mpi3d_toy_realistic_and_real_list_the_owners_hugging_face_location_first(registry):
    for key in ("mpi3d_toy", "mpi3d_realistic", "mpi3d_real"):
        first = registry[key].sources[0]
        assert (first.kind, first.repo_id, first.repo_type) == ("hf", "waleedgondal/mpi3d", "dataset"), key
        assert first.hf_filename == registry[key].filename
        assert first.url.startswith("https://huggingface.co/datasets/waleedgondal/mpi3d/resolve/")
        assert any("rr-learning/disentanglement_dataset@" in c for c in first.cited_by), key


def test_every_source_is_cited_and_every_checksum_well_formed(registry):
    for key, entry in registry.items():
        for source in entry.sources + entry.rejected_sources:
            assert source.cited_by and all(CITATION.fullmatch(c) for c in source.cited_by), (key, source.url)
        for value, cited, digits in ((entry.sha256, entry.sha256_cited_by, 64), (entry.md5, entry.md5_cited_by, 32),
                                     (entry.git_blob_sha1, entry.git_blob_sha1_cited_by, 40)):
            if value is not None:
                assert re.fullmatch(rf"[0-9a-f]{{{digits}}}", value) and CITATION.fullmatch(cited), key
        if entry.size is not None:
            assert entry.size > 0 and CITATION.fullmatch(entry.size_cited_by), key
    # the facts tensorflow-datasets publishes are there (Shapes3D and the six SmallNORB files)
    published = sorted(k for k, e in registry.items() if e.sha256 is not None)
    assert published == sorted(["shapes3d", *(k for k in registry if k.startswith("smallnorb_"))])


def _break(document, key, edit):
    edit(document["files"][key])
    return document


@pytest.mark.parametrize(("key", "edit", "field", "words"), [
    ("shapes3d", lambda e: e.update(sha256="0a0f6ed9"), "files.shapes3d.sha256", "64 lowercase hex"),
    ("shapes3d", lambda e: e.update(sha256=e["sha256"].upper()), "files.shapes3d.sha256", "64 lowercase hex"),
    ("shapes3d", lambda e: e.update(sha256_cited_by=None), "files.shapes3d.sha256_cited_by", "missing"),
    ("shapes3d", lambda e: e["sources"][0].pop("cited_by"), "files.shapes3d.sources[0].cited_by", "missing"),
    ("mpi3d_toy", lambda e: e["sources"][1].update(cited_by=[]), "files.mpi3d_toy.sources[1].cited_by", "missing"),
    ("mpi3d_real", lambda e: e["rejected_sources"][0].update(cited_by=["rr-learning/disentanglement_dataset:README"]),
     "files.mpi3d_real.rejected_sources[0].cited_by[0]", "owner/repo@"),
    ("mpi3d_real", lambda e: e["rejected_sources"][0].pop("reason"), "files.mpi3d_real.rejected_sources[0].reason",
     "missing"),
    ("cars3d", lambda e: e["sources"][0].update(kind="ftp"), "files.cars3d.sources[0].kind", "http, gdrive, hf"),
    ("cars3d", lambda e: e.update(size="1 GB"), "files.cars3d.size", "whole number of bytes"),
    ("cars3d", lambda e: e.update(checked="last week"), "files.cars3d.checked", "date"),
    ("falcor3d", lambda e: e["sources"][0].update(id="not-the-id-in-the-url-at-all"), "files.falcor3d.sources[0].id",
     "Drive file id"),
    ("mpi3d_toy", lambda e: e["sources"][0].update(filename="mpi3d_real.npz"), "files.mpi3d_toy.sources[0].url",
     "resolve URL"),
    ("dsprites", lambda e: e.update(sha265=None), "files.dsprites.sha265", "unknown field"),
])
def test_a_broken_entry_is_refused_in_one_line_naming_the_field(document, key, edit, field, words):
    with pytest.raises(SourcesError) as info:
        parse_sources(_break(document, key, edit))
    message = str(info.value)
    assert "\n" not in message and f" {field}: " in message and words in message, message


def test_the_registry_as_committed_parses_and_a_copy_of_it_too(document):
    assert parse_sources(copy.deepcopy(document)) == load_sources()


def test_docs_data_md_shows_the_rendered_registry(registry):
    page = DATA_PAGE.read_text(encoding="utf-8")
    markdown = sources_markdown(registry)
    assert section_of(page) == markdown, "run: python -m disentangle.data.sources --render docs/data.md"
    assert render_into(page, markdown) == page
    section = page.split("## Where the files come from", 1)[1].split("\n## ", 1)[0]
    assert "disentangle/data/sources.yaml" in section and "python -m disentangle.data.sources --render" in section
    # every file, every source and every rejected one is on the page, each citation as a link to its commit
    for entry in registry.values():
        assert f"**`{entry.filename}`**" in markdown
        assert entry.sha256 is None or f'title="{entry.sha256}"' in markdown
        for source in entry.sources + entry.rejected_sources:
            assert source.url in markdown
            for c in source.cited_by:
                m = CITATION.fullmatch(c)
                assert f"https://github.com/{m['repo']}/blob/{m['commit']}/{m['path']}" in markdown
    assert markdown.count("SHA-256: not published") == sum(e.sha256 is None for e in registry.values())
    assert markdown.count("Rejected, never to be used:") == sum(bool(e.rejected_sources) for e in registry.values())
    assert not re.search(r"^\|", markdown, re.MULTILINE), "the section is lists, not a table too wide for the page"


def test_the_cli_checks_the_page_and_imports_no_torch(tmp_path):
    check = subprocess.run([sys.executable, "-m", "disentangle.data.sources", "--check", str(DATA_PAGE)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stderr
    stale = tmp_path / "data.md"
    stale.write_text("# Data\n\n<!-- sources:start -->\nold\n<!-- sources:end -->\n\n## Next\n", encoding="utf-8")
    assert subprocess.run([sys.executable, "-m", "disentangle.data.sources", "--check", str(stale)],
                          capture_output=True, timeout=120, check=False).returncode == 1
    code = ("import sys, runpy; sys.argv = ['x', '--render', sys.argv[1]]\n"
            "try:\n    runpy.run_module('disentangle.data.sources', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning')]")
    done = subprocess.run([sys.executable, "-c", code, str(stale)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    text = stale.read_text(encoding="utf-8")
    assert section_of(text) == sources_markdown() and text.startswith("# Data\n") and text.endswith("## Next\n")
