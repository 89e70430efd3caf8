"""Every command the documentation shows runs as printed, or its block says why it does not.

Each fenced ```bash block of README.md and docs/**/*.md is one of:

- illustrative: its first line is ``# illustrative: <reason>`` (shown to readers: a dataset download, a paper-length
  run, a GPU, Slurm, ...); it is not run, but the modules, sweep files and config names it uses must exist;
- run: each command line (``\\`` continuations joined, comment lines skipped, a trailing ``# comment`` dropped) runs
  with ``bash -c`` in one fresh temporary directory per block, in order (a later line may use what an earlier one
  wrote), with the venv's ``bin`` first on PATH; it must exit 0 and print no traceback. A block whose first line is
  ``# from the repository root`` runs in a temporary directory that mirrors the checkout's top level (links to its
  files), so it may name paths such as ``docs/examples`` while its outputs stay out of the checkout. A training
  run must print its final metric table. ``make TARGET`` lines are checked with ``make -n`` in the checkout (the
  target exists), not run: ``make test`` runs this file.

Inline ``python -m disentangle.X`` mentions in the prose are not run, but X must be a module of the package.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import forked_cli
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ILLUSTRATIVE = re.compile(r"^#\s*illustrative:(.*)$")
FROM_ROOT = re.compile(r"^#\s*from the repository root\b")
# what a mirror of the checkout leaves out: run outputs land in the temporary directory, not in the checkout
NOT_MIRRORED = {"outputs", "multirun", "site", ".pytest_cache", ".git"}
TIMEOUT = 300  # seconds per command; the documented runs take seconds


@dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text without the fence's indent)

    @property
    def first(self) -> str:
        return next((text.strip() for _, text in self.lines if text.strip()), "")

    @property
    def illustrative(self) -> str | None:
        """The reason when the block is marked illustrative, else None."""
        match = ILLUSTRATIVE.match(self.first)
        return match.group(1).strip() if match else None

    @property
    def from_root(self) -> bool:
        return bool(FROM_ROOT.match(self.first))

    @property
    def commands(self) -> list[tuple[int, str]]:
        """(line number, command): continuations joined, comments dropped."""
        out, pending, start = [], "", 0
        for number, text in self.lines:
            stripped = text.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                start = number
            if stripped.endswith("\\"):
                pending += stripped[:-1].rstrip() + " "
                continue
            out.append((start, strip_comment(pending + stripped).strip()))
            pending = ""
        if pending:
            out.append((start, strip_comment(pending).strip()))
        return [(n, c) for n, c in out if c]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def strip_comment(command: str) -> str:
    """The command without a trailing ``# comment`` (a ``#`` after whitespace, outside quotes)."""
    quote = None
    for i, char in enumerate(command):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command


_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page whose language is bash (also inside admonitions: the indent is removed)."""
    found, lines, i = [], page.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match.groups()
        block = Block(str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name, i + 1)
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            text = lines[i]
            block.lines.append((i + 1, text[len(indent):] if text.startswith(indent) else text.lstrip()))
            i += 1
        i += 1
        if lang == "bash":
            found.append(block)
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]
RUN_BLOCKS = [block for block in ALL_BLOCKS if block.illustrative is None]


def test_the_pages_have_blocks_of_both_kinds():
    assert len(ALL_BLOCKS) > 20, [str(b) for b in ALL_BLOCKS]
    assert RUN_BLOCKS and len(RUN_BLOCKS) < len(ALL_BLOCKS)
    pages = {block.page for block in RUN_BLOCKS}
    assert {"README.md", "docs/getting-started.md", "docs/extending.md", "docs/sweeps.md"} <= pages, pages


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.illustrative is not None], ids=str)
def test_an_illustrative_block_says_why(block):
    assert block.illustrative, f"{block}: '# illustrative:' needs a reason after the colon"
    assert block.commands, f"{block}: an illustrative block without a command"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "PYTEST_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    env["WANDB_MODE"] = "offline"
    return env


def _mirror_checkout(tmp: Path) -> None:
    for entry in ROOT.iterdir():
        if entry.name not in NOT_MIRRORED:
            (tmp / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=str)
def test_a_documented_command_runs_as_printed(block, tmp_path):
    assert block.commands, f"{block}: a bash block without a command (mark it '# illustrative: <reason>')"
    if block.from_root:
        _mirror_checkout(tmp_path)
    env = _env()
    for number, command in block.commands:
        where = f"{block.page}:{number}: {command}"
        if command.startswith("make ") or command == "make":
            args = ["make", "-n", "-C", str(ROOT), *shlex.split(command)[1:]]
            proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)
        elif _package_module(command):  # python -m disentangle.X ...: forked from a preloaded interpreter
            words = shlex.split(command)
            proc = forked_cli.run(words[2], *words[3:], cwd=tmp_path, environ=env, timeout=TIMEOUT)
        else:
            proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env=env,
                                  timeout=TIMEOUT, check=False)
        output = f"{where}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
        assert proc.returncode == 0, f"exit status {proc.returncode}\n{output}"
        assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, output
        if _trains(command):  # a finished run prints its metric table (the extending guide's once did not)
            assert "final evaluation" in proc.stdout, f"no summary table\n{output}"


def _package_module(command: str) -> bool:
    """A plain ``python -m disentangle.X ARGS`` line: no shell syntax (pipes, redirections, variables, globs, an
    environment prefix), so running it without bash is running it as printed."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return False
    plain = not any(set(t) <= set("();<>|&") for t in tokens) and not re.search(r"[$`*?~]|\\", command)
    return plain and tokens[:2] == ["python", "-m"] and len(tokens) > 2 and tokens[2].startswith("disentangle")


def _trains(command: str) -> bool:
    """A single training run (not a composition, a sweep, a dry run or a help text)."""
    words = shlex.split(command)
    if "disentangle.train" not in words:
        return False
    options = set(words[words.index("disentangle.train") + 1:])
    return not {"--cfg", "-c", "--help", "-h", "--info", "-i", "-m", "--multirun", "dry_run=true"} & options


# ------------------------------------------------------------------------------------- names that must exist
_MODULE = re.compile(r"python -m disentangle\.(\w+(?:\.\w+)*)")  # disentangle.train, disentangle.doctor.worker
_INLINE = re.compile(r"`([^`\n]+)`")
# config groups a command chooses from, and where their options live (the extending guide's examples add theirs)
_GROUPS = ("model", "data", "experiment", "regularizer", "trainer", "logger")
_CHOICE = re.compile(r"(?:^|\s)\+?(model|data|experiment|regularizer|trainer|logger)=(\S+)")
_SWEEP = re.compile(r"-cd sweeps -cn (\S+)")


def _modules_named(text: str) -> set[str]:
    return set(_MODULE.findall(text))


def _module_exists(name: str) -> bool:
    path = ROOT / "disentangle" / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def _choices(command: str) -> list[tuple[str, str]]:
    """(group, option) pairs a training command chooses; lists and brackets split, placeholders left out."""
    if "disentangle.train" not in command:
        return []
    pairs = []
    for group, value in _CHOICE.findall(command):
        for option in value.strip("[]").split(","):
            if option and not re.search(r"[<>$.{}*…]|^null$", option):
                pairs.append((group, option))
    return pairs


def _option_exists(group: str, option: str) -> bool:
    return any((conf / group / f"{option}.yaml").is_file() for conf in (ROOT / "conf", ROOT / "docs/examples/conf"))


def test_every_module_named_in_the_docs_exists():
    """Commands in blocks and inline mentions in the prose name real entry points."""
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for name in sorted(_modules_named(text)):
            if not _module_exists(name):
                missing.append(f"{page.relative_to(ROOT)}: python -m disentangle.{name}")
    assert not missing, missing


def test_every_config_and_sweep_a_command_names_exists():
    """Illustrative commands are not run, so their names are checked: each sweep file, model, dataset, experiment,
    regularizer, trainer and logger a documented command (block or inline) chooses is in conf/ or sweeps/."""
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        commands = [c for b in blocks(page) for _, c in b.commands]
        commands += [span for span in _INLINE.findall(text) if "disentangle.train" in span]
        for command in commands:
            for sweep in _SWEEP.findall(command):
                if not re.search(r"[<>…]|\.\.\.", sweep) and not (ROOT / "sweeps" / f"{sweep}.yaml").is_file():
                    missing.append(f"{page.relative_to(ROOT)}: sweeps/{sweep}.yaml ({command})")
            for group, option in _choices(command):
                if not _option_exists(group, option):
                    missing.append(f"{page.relative_to(ROOT)}: {group}={option} ({command})")
    assert not missing, "\n".join(missing)


def test_the_parser_reads_continuations_comments_and_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```bash\n# illustrative: needs a GPU\npython -m disentangle.train a=1 \\\n"
                    "    b=2   # comment\n```\n\n    ```bash\n    # from the repository root\n"
                    "    make chaos CHAOS_ARGS=\"--kills 8 # not a comment\"\n    ```\n\n```yaml\nx: 1\n```\n")
    first, second = blocks(page)
    assert first.illustrative == "needs a GPU" and first.commands == [(5, "python -m disentangle.train a=1 b=2")]
    assert second.illustrative is None and second.from_root
    assert second.commands == [(11, 'make chaos CHAOS_ARGS="--kills 8 # not a comment"')]
    assert Block("p", 1, [(2, "#illustrative:")]).illustrative == ""
    assert _trains("PYTHONPATH=x python -m disentangle.train model=ae") and not _trains("python -m disentangle.report x")
    assert not _trains("python -m disentangle.train -cd sweeps -cn x --cfg job")
    assert not _trains("python -m disentangle.train -m model=ae,qlae")
    assert not _trains("python -m disentangle.train model=ae dry_run=true")
    assert _package_module("python -m disentangle.train model=ae 'data.correlation=[{factors: [a, b], sigma: 0.1}]'")
    for shell in ("python -m disentangle.report x | head", "PYTHONPATH=. python -m disentangle.train",
                  "python -m disentangle.train > log", "python -m disentangle.report $DIR", "make demo",
                  "python -c 'import disentangle'", "python -m disentangle.report outputs/*"):
        assert not _package_module(shell), shell

