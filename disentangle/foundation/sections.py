"""A page's generated section: the lines between a begin marker and an end marker, each on a line of its own.

Generated tables (the claims, the GPU check, the dataset sources) live in hand-written pages between two HTML
comments; :func:`split_section` finds them, and refuses a page where either marker is missing, repeated, out of
order or not alone on its line (a marker quoted inside prose is not a section's edge).
"""
from __future__ import annotations

__all__ = ["replace_section", "section", "split_section"]


def _line_of(lines: list[str], marker: str, what: str) -> int:
    """The index of the one line that is exactly ``marker`` (surrounding spaces aside)."""
    found = [i for i, line in enumerate(lines) if line.strip() == marker]
    if len(found) != 1:
        raise ValueError(f"the page needs exactly one line '{marker}' ({what} marker); found {len(found)}")
    return found[0]


def split_section(text: str, begin: str, end: str) -> tuple[str, str, str]:
    """``(head, body, tail)``: ``head`` up to and including the begin line's newline, ``body`` the lines between,
    ``tail`` from the end line on. A ValueError (one line) when the markers are not each alone on one line, in
    order."""
    lines = text.splitlines(keepends=True)
    b, e = _line_of(lines, begin, "begin"), _line_of(lines, end, "end")
    if e < b:
        raise ValueError(f"the page's '{end}' line comes before its '{begin}' line")
    return "".join(lines[:b + 1]), "".join(lines[b + 1:e]), "".join(lines[e:])


def section(text: str, begin: str, end: str) -> str:
    """The body between the markers, without its surrounding blank lines."""
    return split_section(text, begin, end)[1].strip("\n")


def replace_section(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with the body between the markers replaced by ``body`` (one newline before the end line)."""
    head, _, tail = split_section(text, begin, end)
    return f"{head}{body.strip(chr(10))}\n{tail}"
