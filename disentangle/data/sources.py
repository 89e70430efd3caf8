"""Where the real datasets' raw files come from, with the evidence for each fact: the package's ``sources.yaml``
read into :class:`DatasetFile` records (one per file), each with its :class:`Source` list in order of preference.

Nothing here downloads anything or imports torch. :func:`load_sources` validates every field and stops at the first
problem with one line naming the entry and the field; :func:`sources_markdown` renders the registry for
docs/data.md, whose section ``python -m disentangle.data.sources --render docs/data.md`` rewrites.
"""
from __future__ import annotations

import argparse
import datetime
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

__all__ = ["DatasetFile", "Source", "SourcesError", "load_sources", "load_sources_file", "parse_sources", "render_into",
           "section_of", "sources_markdown"]

KINDS = ("http", "gdrive", "hf")
#: ``owner/repo@<commit>:<path>``: a file at a looked-up commit of a public GitHub repository
CITATION = re.compile(r"(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+)@(?P<commit>[0-9a-f]{7,40}):(?P<path>\S+)")
START, END = "<!-- sources:start -->", "<!-- sources:end -->"

_SOURCE_FIELDS = {"kind", "url", "cited_by", "status", "note"}
_KIND_FIELDS = {"http": {"path"}, "gdrive": {"id"}, "hf": {"repo_id", "repo_type", "filename", "revision"}}
_FILE_FIELDS = {"dataset", "variant", "filename", "sources", "rejected_sources", "size", "size_cited_by",
                "size_stated", "sha256", "sha256_cited_by", "md5", "md5_cited_by", "md5_enforced", "git_blob_sha1",
                "git_blob_sha1_cited_by", "checked", "note"}
_KIND_LABEL = {"http": "HTTP", "gdrive": "Google Drive", "hf": "Hugging Face"}


class SourcesError(ValueError):
    """The registry is malformed; the message is one line naming the entry and the field."""


@dataclass(frozen=True)
class Source:
    """One place a file can be downloaded from, and the files that name it (``owner/repo@commit:path``)."""

    kind: str  # http | gdrive | hf
    url: str
    cited_by: tuple[str, ...]
    status: str | None = None  # what is publicly reported about it (dead, superseded, corrupt)
    note: str | None = None
    path: str | None = None  # http: the served path where its name differs from the saved file name
    gdrive_id: str | None = None  # gdrive: the Drive file id
    repo_id: str | None = None  # hf: the Hub repository, its type, the file in it and the commit (None: not verified)
    repo_type: str | None = None
    hf_filename: str | None = None
    revision: str | None = None
    reason: str | None = None  # rejected sources only: why it must never be used


@dataclass(frozen=True)
class DatasetFile:
    """One raw file of a dataset (a key of ``sources.yaml``) and the evidence about it."""

    key: str
    dataset: str
    variant: str | None
    filename: str
    sources: tuple[Source, ...]
    rejected_sources: tuple[Source, ...]
    size: int | None
    size_cited_by: str | None
    size_stated: str | None
    sha256: str | None
    sha256_cited_by: str | None
    md5: str | None
    md5_cited_by: str | None
    md5_enforced: bool  # the md5 is the owners' for the first source's file: prepare checks it
    git_blob_sha1: str | None
    git_blob_sha1_cited_by: str | None
    checked: datetime.date
    note: str | None


def _fail(where: str, message: str):
    raise SourcesError(f"sources.yaml: {where}: {' '.join(message.split())}")


def _text(raw: dict, key: str, where: str, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None:
        if required:
            _fail(f"{where}.{key}", "missing (a non-empty string is required)")
        return None
    if not isinstance(value, str) or not value.strip():
        _fail(f"{where}.{key}", f"must be a non-empty string or null (got {value!r})")
    return " ".join(value.split())


def _citation(value, where: str) -> str:
    if not isinstance(value, str) or not CITATION.fullmatch(value):
        _fail(where, f"must be a citation owner/repo@<7-40 hex commit>:path (got {value!r})")
    return value


def _hex(raw: dict, key: str, digits: int, where: str) -> str | None:
    value = raw.get(key)
    if value is None:
        if raw.get(f"{key}_cited_by") is not None:
            _fail(f"{where}.{key}_cited_by", f"cites a {key} that is null")
        return None
    if not isinstance(value, str) or not re.fullmatch(rf"[0-9a-f]{{{digits}}}", value):
        _fail(f"{where}.{key}", f"must be {digits} lowercase hex digits or null (got {value!r})")
    if raw.get(f"{key}_cited_by") is None:
        _fail(f"{where}.{key}_cited_by", f"missing: a {key} needs the citation of where it is published")
    _citation(raw[f"{key}_cited_by"], f"{where}.{key}_cited_by")
    return value


def _enforced(raw: dict, where: str) -> bool:
    value = raw.get("md5_enforced", False)
    if not isinstance(value, bool):
        _fail(f"{where}.md5_enforced", f"must be true or false (got {value!r})")
    if value and raw.get("md5") is None:
        _fail(f"{where}.md5_enforced", "enforces an md5 that is null")
    return value


def _source(raw, where: str, *, rejected: bool) -> Source:
    if not isinstance(raw, dict):
        _fail(where, f"must be a mapping (got {type(raw).__name__})")
    kind = raw.get("kind")
    if kind not in KINDS:
        _fail(f"{where}.kind", f"must be one of {', '.join(KINDS)} (got {kind!r})")
    allowed = _SOURCE_FIELDS | _KIND_FIELDS[kind] | ({"reason"} if rejected else set())
    unknown = sorted(set(raw) - allowed)
    if unknown:
        _fail(f"{where}.{unknown[0]}", f"unknown field for a {kind} source{' (rejected)' if rejected else ''}")
    url = _text(raw, "url", where, required=True)
    if not re.fullmatch(r"https?://\S+", url):
        _fail(f"{where}.url", f"must be an http(s) URL (got {url!r})")
    cited = raw.get("cited_by")
    if not isinstance(cited, list) or not cited:
        _fail(f"{where}.cited_by", "missing: every source needs at least one citation owner/repo@commit:path")
    cited_by = tuple(_citation(c, f"{where}.cited_by[{i}]") for i, c in enumerate(cited))
    reason = _text(raw, "reason", where, required=rejected)
    fields = {}
    if kind == "gdrive":
        fields["gdrive_id"] = _text(raw, "id", where, required=True)
        if not re.fullmatch(r"[A-Za-z0-9_-]{20,}", fields["gdrive_id"]) or fields["gdrive_id"] not in url:
            _fail(f"{where}.id", f"must be a Drive file id that the url contains (got {fields['gdrive_id']!r})")
    elif kind == "hf":
        fields.update(repo_id=_text(raw, "repo_id", where, required=True),
                      repo_type=_text(raw, "repo_type", where, required=True),
                      hf_filename=_text(raw, "filename", where, required=True),
                      revision=_text(raw, "revision", where))
        if fields["repo_type"] not in ("dataset", "model", "space"):
            _fail(f"{where}.repo_type", f"must be dataset, model or space (got {fields['repo_type']!r})")
        if fields["revision"] is not None and not re.fullmatch(r"[0-9a-f]{40}", fields["revision"]):
            _fail(f"{where}.revision", f"must be a 40-hex commit of the Hub repository or null "
                                       f"(got {fields['revision']!r})")
        prefix = {"dataset": "datasets/", "space": "spaces/", "model": ""}[fields["repo_type"]]
        resolve = (f"https://huggingface.co/{prefix}{fields['repo_id']}/resolve/"
                   f"{fields['revision'] or 'main'}/{fields['hf_filename']}")
        if url != resolve:
            _fail(f"{where}.url", f"must be the resolve URL of repo_id, revision and filename, {resolve}")
    else:
        fields["path"] = _text(raw, "path", where)
        if fields["path"] is not None and not url.endswith("/" + fields["path"]):
            _fail(f"{where}.path", f"must be the end of the url (got {fields['path']!r})")
    return Source(kind=kind, url=url, cited_by=cited_by, status=_text(raw, "status", where),
                  note=_text(raw, "note", where), reason=reason, **fields)


def _file(key: str, raw, where: str) -> DatasetFile:
    if not isinstance(raw, dict):
        _fail(where, f"must be a mapping (got {type(raw).__name__})")
    unknown = sorted(set(raw) - _FILE_FIELDS)
    if unknown:
        _fail(f"{where}.{unknown[0]}", "unknown field")
    filename = _text(raw, "filename", where, required=True)
    if "/" in filename or filename in (".", ".."):
        _fail(f"{where}.filename", f"must be a bare file name (got {filename!r})")
    listed = raw.get("sources")
    if not isinstance(listed, list) or not listed:
        _fail(f"{where}.sources", "must be a non-empty list (the owners' current location first)")
    sources = tuple(_source(s, f"{where}.sources[{i}]", rejected=False) for i, s in enumerate(listed))
    refused = raw.get("rejected_sources") or []
    if not isinstance(refused, list):
        _fail(f"{where}.rejected_sources", "must be a list or absent")
    rejected = tuple(_source(s, f"{where}.rejected_sources[{i}]", rejected=True) for i, s in enumerate(refused))
    urls = [s.url for s in sources + rejected]
    if len(set(urls)) != len(urls):
        _fail(f"{where}.sources", "lists the same url twice")
    size = raw.get("size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            _fail(f"{where}.size", f"must be a whole number of bytes or null (got {size!r})")
        if raw.get("size_cited_by") is None:
            _fail(f"{where}.size_cited_by", "missing: a size needs the citation of where it is published")
        _citation(raw["size_cited_by"], f"{where}.size_cited_by")
    elif raw.get("size_cited_by") is not None:
        _fail(f"{where}.size_cited_by", "cites a size that is null")
    checked = raw.get("checked")
    if not isinstance(checked, datetime.date) or isinstance(checked, datetime.datetime):
        _fail(f"{where}.checked", f"must be a date YYYY-MM-DD (got {checked!r})")
    return DatasetFile(
        key=key, dataset=_text(raw, "dataset", where, required=True), variant=_text(raw, "variant", where),
        filename=filename, sources=sources, rejected_sources=rejected, size=size,
        size_cited_by=raw.get("size_cited_by"), size_stated=_text(raw, "size_stated", where),
        sha256=_hex(raw, "sha256", 64, where), sha256_cited_by=raw.get("sha256_cited_by"),
        md5=_hex(raw, "md5", 32, where), md5_cited_by=raw.get("md5_cited_by"),
        md5_enforced=_enforced(raw, where),
        git_blob_sha1=_hex(raw, "git_blob_sha1", 40, where), git_blob_sha1_cited_by=raw.get("git_blob_sha1_cited_by"),
        checked=checked, note=_text(raw, "note", where))


def parse_sources(document) -> dict[str, DatasetFile]:
    """The files of a parsed ``sources.yaml``, by key (raises :class:`SourcesError` on the first problem)."""
    if not isinstance(document, dict):
        _fail("top level", "must be a mapping with schema_version and files")
    if document.get("schema_version") != 1:
        _fail("schema_version", f"must be 1 (got {document.get('schema_version')!r})")
    unknown = sorted(set(document) - {"schema_version", "files"})
    if unknown:
        _fail(unknown[0], "unknown top-level field")
    files = document.get("files")
    if not isinstance(files, dict) or not files:
        _fail("files", "must be a non-empty mapping of keys to entries")
    parsed = {key: _file(key, raw, f"files.{key}") for key, raw in files.items()}
    seen: dict[str, str] = {}
    for key, entry in parsed.items():
        if entry.filename in seen:
            _fail(f"files.{key}.filename", f"{entry.filename!r} is also the filename of {seen[entry.filename]}")
        seen[entry.filename] = key
    return parsed


def load_sources() -> dict[str, DatasetFile]:
    """Every file of the package's ``sources.yaml``, by key."""
    text = resources.files(__package__).joinpath("sources.yaml").read_text(encoding="utf-8")
    return parse_sources(yaml.safe_load(text))


def load_sources_file(path) -> dict[str, DatasetFile]:
    """The files of another registry in the same format (``prepare sources=PATH``: a private mirror, a test server)."""
    path = Path(path).expanduser()
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SourcesError(f"{path}: unreadable as a sources registry ({' '.join(str(exc).split())})") from exc
    try:
        return parse_sources(document)
    except SourcesError as exc:
        raise SourcesError(str(exc).replace("sources.yaml:", f"{path}:", 1)) from None


# -- the docs section --------------------------------------------------------------------------------------------------
def _github(citation: str) -> str:
    m = CITATION.fullmatch(citation)
    return f"https://github.com/{m['repo']}/blob/{m['commit']}/{m['path']}"


def _cite(citation: str) -> str:
    m = CITATION.fullmatch(citation)
    return f"[{m['repo']}@{m['commit'][:7]}:{m['path']}]({_github(citation)})"


def _cites(citations) -> str:
    return "cited by " + ", ".join(_cite(c) for c in citations)


def _prose(text: str) -> str:
    """Registry text as Markdown: bare URLs become links; nothing else is markup."""
    text = re.sub(r"([|*\[\]])", r"\\\1", text)
    return re.sub(r"(?<!<)(https?://[^\s<>(),]+[^\s<>(),.;:])", r"<\1>", text)


def _where(source: Source) -> str:
    if source.kind == "hf":
        return f"{_KIND_LABEL['hf']} [`{source.repo_id}` `{source.hf_filename}`]({source.url})"
    if source.kind == "gdrive":
        return f"{_KIND_LABEL['gdrive']} [file `{source.gdrive_id}`]({source.url})"
    return f"{_KIND_LABEL['http']} <{source.url}>"


def _digest(value: str) -> str:
    return f'<code title="{value}">{value[:12]}…{value[-8:]}</code>'


def _entry(f: DatasetFile) -> list[str]:
    data = f"`data={f.dataset}`" + (f" `data.variant={f.variant}`" if f.variant else "")
    lines = [f"**`{f.filename}`** ({data}; key `{f.key}`)", ""]
    lines.append("- Sources, in order:")
    for i, s in enumerate(f.sources, 1):
        status = f" Status: {_prose(s.status)}" if s.status else ""
        lines.append(f"    {i}. {_where(s)} — {_cites(s.cited_by)}.{status}")
    if f.size is not None:
        lines.append(f"- Size: {f.size} bytes — {_cites([f.size_cited_by])}")
    else:
        stated = f"; stated: {_prose(f.size_stated)}" if f.size_stated else ""
        lines.append(f"- Size: not published{stated}")
    if f.sha256 is not None:
        lines.append(f"- SHA-256: {_digest(f.sha256)} — {_cites([f.sha256_cited_by])}")
    else:
        lines.append("- SHA-256: not published")
    if f.md5 is not None:
        checked = " (the owners' checksum of this file: prepare checks it)" if f.md5_enforced else ""
        lines.append(f"- MD5: {_digest(f.md5)}{checked} — {_cites([f.md5_cited_by])}")
    if f.git_blob_sha1 is not None:
        lines.append(f"- Git blob id: {_digest(f.git_blob_sha1)} — {_cites([f.git_blob_sha1_cited_by])}")
    lines.append(f"- Checked: {f.checked.isoformat()}")
    if f.rejected_sources:
        lines.append("- Rejected, never to be used:")
        for s in f.rejected_sources:
            status = f" Status: {_prose(s.status)}" if s.status else ""
            lines.append(f"    - {_where(s)} — {_cites(s.cited_by)}. Why: {_prose(s.reason)}{status}")
    return lines + [""]


def sources_markdown(files: dict[str, DatasetFile] | None = None) -> str:
    """The registry as the Markdown of docs/data.md's section: per dataset a heading, per file its sources in order
    (each with its citations), size, SHA-256, other checksums, the date checked and the rejected sources."""
    files = load_sources() if files is None else files
    by_dataset: dict[str, list[DatasetFile]] = {}
    for f in files.values():
        by_dataset.setdefault(f.dataset, []).append(f)
    lines = []
    for dataset, entries in by_dataset.items():
        lines += [f"### {dataset}", ""]
        for f in entries:
            lines += _entry(f)
    return "\n".join(lines).rstrip("\n") + "\n"


def render_into(page: str, markdown: str) -> str:
    """``page`` with the text between its ``<!-- sources:start -->`` and ``<!-- sources:end -->`` lines replaced."""
    head, _, tail = _split(page)
    return f"{head}{markdown}{tail}"


def _split(page: str) -> tuple[str, str, str]:
    from ..foundation.sections import split_section

    try:
        return split_section(page, START, END)
    except ValueError:
        raise SourcesError(f"the page needs one {START} line and one {END} line after it") from None


def section_of(page: str) -> str:
    """The text between the page's markers (what :func:`render_into` wrote)."""
    return _split(page)[1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m disentangle.data.sources",
                                description="Validate sources.yaml and print or render its docs section.")
    p.add_argument("--render", metavar="PAGE", type=Path, help="rewrite PAGE's section between the markers")
    p.add_argument("--check", metavar="PAGE", type=Path, help="exit 1 if PAGE's section is not the rendered one")
    args = p.parse_args(argv)
    try:
        markdown = sources_markdown()
        if args.render is not None:
            page = args.render.read_text(encoding="utf-8")
            args.render.write_text(render_into(page, markdown), encoding="utf-8")
        elif args.check is not None:
            if section_of(args.check.read_text(encoding="utf-8")) != markdown:
                print(f"{args.check}: the sources section is stale; run python -m disentangle.data.sources "
                      f"--render {args.check}", file=sys.stderr)
                return 1
        else:
            sys.stdout.write(markdown)
    except (SourcesError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
