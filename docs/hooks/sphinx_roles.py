"""A MkDocs hook (mkdocs.yml ``hooks:``): the package's docstrings cross-reference in Sphinx roles
(``:func:`name```, ``:class:`~pkg.Name```), which mkdocstrings leaves as text before a code span. On the rendered
API pages each becomes a plain code span: ``~pkg.mod.Name`` shows ``Name`` (Sphinx's rule), a leading ``.``
(a sibling module) is dropped. Code blocks are left alone (their ``:class:`` text is inside spans, not before
``<code>``)."""
from __future__ import annotations

import re

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):<code>([^<]*)</code>")


def _shown(target: str) -> str:
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(lambda m: f"<code>{_shown(m.group(1))}</code>", html)
