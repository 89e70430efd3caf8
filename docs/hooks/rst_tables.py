"""A griffe extension (mkdocs.yml, mkdocstrings' ``extensions:``): a few of the package's docstrings hold reST simple
tables (rows between ``====  ====`` rules), which Markdown would show as rules of ``=`` and run-together text. On the
API pages each becomes a Markdown table; a table without a header row (two rules, not three) becomes a list, one
item per row ("first cell: the others"). The docstrings themselves are left as they are."""
from __future__ import annotations

import re

import griffe

RULE = re.compile(r"^(?P<indent> *)=+(?: +=+)+ *$")


def _columns(rule: str) -> list[int]:
    return [m.start() for m in re.finditer(r"=+", rule)]


def _cells(line: str, starts: list[int]) -> list[str]:
    ends = starts[1:] + [None]
    return [line[a:b].strip() if b else line[a:].strip() for a, b in zip(starts, ends)]


def _rows(lines: list[str], starts: list[int]) -> list[list[str]]:
    """The table's rows; a line whose first cell is blank continues the row above."""
    rows: list[list[str]] = []
    for line in lines:
        if not line.strip():
            continue
        cells = _cells(line, starts)
        if rows and not cells[0]:
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells)]
        else:
            rows.append(cells)
    return rows


def _markdown(indent: str, header: list[str] | None, rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    if header is None:
        return [f"{indent}- {r[0]}: {' '.join(c for c in r[1:] if c)}" for r in rows]
    out = [indent + "| " + " | ".join(cell(c) for c in header) + " |", indent + "|" + "---|" * len(header)]
    out += [indent + "| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def convert(text: str) -> str:
    """``text`` with each reST simple table replaced by its Markdown; text without one comes back unchanged."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = RULE.match(lines[i])
        closing = [j for j in range(i + 1, len(lines)) if lines[j] == lines[i]] if match else []
        if not closing:
            out.append(lines[i])
            i += 1
            continue
        starts = _columns(lines[i])
        indent = match.group("indent")
        # a header table: rule, one header line, rule, rows, rule; else rows between two rules
        if len(closing) >= 2 and closing[0] == i + 2 and all(x.strip() for x in lines[closing[0] + 1:closing[1]]):
            header = _cells(lines[i + 1], starts)
            body, end = lines[closing[0] + 1:closing[1]], closing[1]
        else:
            header, body, end = None, lines[i + 1:closing[0]], closing[0]
        if out and out[-1].strip():
            out.append("")
        out += _markdown(indent, header, _rows(body, starts))
        i = end + 1
        if i < len(lines) and lines[i].strip():
            out.append("")
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


class RstSimpleTables(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and "==" in obj.docstring.value:
            obj.docstring.value = convert(obj.docstring.value)
