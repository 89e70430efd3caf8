"""The suite's own order (tests/conftest.py): the files with the longest tests are handed to the workers first."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import LONG_FIRST, long_first

TESTS = Path(__file__).parent


def test_every_file_named_long_first_exists():
    assert sorted(set(LONG_FIRST)) == sorted(LONG_FIRST), "a file named twice"
    missing = [name for name in LONG_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"LONG_FIRST names files that are gone (rename or drop them there): {missing}"


def test_the_long_files_come_first_in_their_order_and_each_file_keeps_its_own_order():
    def item(name, i):
        return SimpleNamespace(path=TESTS / name, i=i)

    items = [item("test_a.py", 0), item(LONG_FIRST[1], 1), item("test_b.py", 2), item(LONG_FIRST[0], 3),
             item(LONG_FIRST[1], 4), item("test_a.py", 5)]
    long_first(items)
    assert [(it.path.name, it.i) for it in items] == [
        (LONG_FIRST[0], 3), (LONG_FIRST[1], 1), (LONG_FIRST[1], 4), ("test_a.py", 0), ("test_b.py", 2),
        ("test_a.py", 5)]
