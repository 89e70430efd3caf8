"""Config helpers: OmegaConf resolvers used by conf/, turning construction errors into one line, and the one-line
report of a command-line mistake (an unknown config name or key, a plugin not installed) in place of Hydra's."""
from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from omegaconf import OmegaConf

from ..errors import ConfigError
from ..foundation.devices import concurrent_jobs
from .config_files import cache_parsed_configs


def _register() -> None:
    resolvers = {
        "mul": lambda a, b: a * b,  # n_latents: ${mul:2,${len:${data.factor_sizes}}}
        "len": lambda seq: len(seq),
        "gpu_node_jobs": concurrent_jobs,  # hydra/launcher=gpu_node: max(1, GPUs) x ${runs_per_gpu} jobs at once
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


_register()
cache_parsed_configs()  # each config file parsed once per process (runtime.config_files)


def one_line(exc: BaseException) -> str:
    """The innermost meaningful message of a (possibly Hydra-wrapped) exception, on one line."""
    from hydra.errors import InstantiationException

    key = None
    while isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        text = str(exc)
        if "full_key:" in text:
            key = text.rsplit("full_key:", 1)[1].strip().splitlines()[0]
        exc = exc.__cause__
    message = " ".join(str(exc).split())
    return f"{key}: {message}" if key and key not in message else message


def progress_enabled(value, key: str = "enable_progress_bar") -> bool:
    """A progress-bar switch: ``auto`` is on only when stdout and stderr are both terminals (a bar redrawn into a log
    file or a pipe, e.g. Slurm, CI or ``| tee``, turns into thousands of lines); true / false force it."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if str(value).lower() == "auto":
        return all(_isatty(stream) for stream in (sys.stdout, sys.stderr))
    raise ConfigError(f"{key}={value!r}: choose auto, true or false")


def progress_setting(callback_cfg, key: str = "callbacks.evaluation.progress") -> dict:
    """A callback config's own ``progress: auto`` (the evaluation's encoding bar) settled for this terminal, as the
    keyword to instantiate it with; empty when it has no such switch or it is already a bool."""
    value = callback_cfg.get("progress") if OmegaConf.is_dict(callback_cfg) else None
    return {"progress": progress_enabled(value, key)} if isinstance(value, str) else {}


def override_key(override: str) -> str:
    """The key or group an override sets: ``+model/latent@x=gaussian`` -> ``model/latent``."""
    return override.lstrip("+~").split("=", 1)[0].split("@", 1)[0]


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


# ---- command-line mistakes: one line instead of Hydra's report -------------------------------------------------

DISTRIBUTION = "disentangle-quantized"  # what `pip install` calls this project (pyproject.toml)
# Options of Hydra's groups that a plugin provides: (the plugin's distribution, the extra of this project that
# installs it; None where the core install has it)
PLUGINS = {
    "hydra/sweeper/optuna": ("hydra-optuna-sweeper", "optuna"),
    "hydra/launcher/ray": ("hydra-ray-launcher", "ray"),
    "hydra/launcher/ray_aws": ("hydra-ray-launcher", "ray"),
    "hydra/launcher/joblib": ("hydra-joblib-launcher", None),
    "hydra/launcher/submitit_slurm": ("hydra-submitit-launcher", None),
    "hydra/launcher/submitit_local": ("hydra-submitit-launcher", None),
}
_PLUGIN_MODULES = {"optuna": "hydra/sweeper/optuna", "hydra_optuna_sweeper": "hydra/sweeper/optuna",
                   "ray": "hydra/launcher/ray", "hydra_ray_launcher": "hydra/launcher/ray",
                   "joblib": "hydra/launcher/joblib", "hydra_joblib_launcher": "hydra/launcher/joblib",
                   "submitit": "hydra/launcher/submitit_slurm",
                   "hydra_submitit_launcher": "hydra/launcher/submitit_slurm"}


def install_hint(choice: str) -> str | None:
    """What to install for a plugin's option ``group/name`` (e.g. ``hydra/sweeper/optuna``); None for any other."""
    plugin = PLUGINS.get(choice)
    if plugin is None:
        return None
    dist, extra = plugin
    if extra:
        # not on PyPI yet (docs/install.md): a clone's route first, the released name after it
        return (f"needs the {extra} extra: pip install '.[{extra}]' in the project's clone (once released: "
                f"pip install '{DISTRIBUTION}[{extra}]')")
    return f"needs {dist}: pip install {dist}"


def run_app(app: Callable[[], object], args: Sequence[str] | None = None) -> None:
    """Run a ``@hydra.main`` app so that a mistake on its command line (an unknown config name or key, a bad override,
    a plugin that is not installed) ends in one ``error:`` line on stderr and exit status 2, where Hydra would print
    a report of many lines (or a traceback). What the job itself raises is the app's to report. A user's own
    ``HYDRA_FULL_ERROR=1`` keeps Hydra's full traceback."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        app()
        return
    args = list(sys.argv[1:] if args is None else args)
    line = misspelt_addition(args) or misspelt_sweep_value(args)
    if line:
        _fail(line)
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises what it would print: the line is made here
    try:
        with _one_repository_for_help(args):
            app()
    except Exception as exc:
        line = None if _raised_by_job(exc, app) else mistake_line(exc, args)
        if line is None:
            raise
        _fail(line)
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)


@contextlib.contextmanager
def _one_repository_for_help(args: Sequence[str]) -> Iterator[None]:
    """For ``--help``: Hydra lists the config groups building a fresh config repository per group (about 100, each a
    deep copy of the search path: 1.5 of the 2 seconds). The listing only reads, so one repository per (config,
    overrides) serves every group."""
    if not any(a in ("--help", "-h") for a in args):
        yield
        return
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    original = ConfigLoaderImpl._parse_overrides_and_create_caching_repo
    made: dict = {}

    def once(self, config_name, overrides):
        key = (id(self), config_name, tuple(overrides))
        if key not in made:
            made[key] = original(self, config_name, overrides)
        return made[key]

    ConfigLoaderImpl._parse_overrides_and_create_caching_repo = once
    try:
        yield
    finally:
        ConfigLoaderImpl._parse_overrides_and_create_caching_repo = original


def _fail(line: str) -> None:
    sys.stdout.flush()
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)


def _raised_by_job(exc: BaseException, app) -> bool:
    """Whether ``exc`` came out of the app's task function (the job) rather than Hydra's composition."""
    task = getattr(app, "__wrapped__", None)  # hydra.main wraps the task function with functools.wraps
    code = getattr(task, "__code__", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def mistake_line(exc: BaseException, args: Sequence[str]) -> str | None:
    """The one line (without ``error: ``) for an exception that Hydra raised while composing the config from the
    command line ``args``; None when ``exc`` is not such a mistake."""
    from hydra.errors import (
        ConfigCompositionException,
        HydraException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import OmegaConfBaseException

    line = _missing_plugin(exc, args)
    if line:
        return line
    if isinstance(exc, OverrideParseException):
        return f"{exc.override}: not an override ({_message(exc)}): KEY=VALUE, GROUP=NAME, +KEY=VALUE or ~KEY"
    if isinstance(exc, MissingConfigException):
        return _missing_config(exc, args)
    if isinstance(exc, ConfigCompositionException):
        line = _bad_override(exc, args)
        if line:
            return line
    if isinstance(exc, (HydraException, OmegaConfBaseException, ConfigError)):
        return _message(exc)
    if isinstance(exc, ValueError) and _raised_by_hydra(exc):  # flags that do not go together (-m with --cfg)
        return _message(exc)
    return None


def _raised_by_hydra(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_globals.get("__name__", "").startswith("hydra.")


def misspelt_addition(args: Sequence[str]) -> str | None:
    """``+regularizr=klm``: Hydra adds a key ``regularizr`` and the run goes on without the regularizer; a ``+key``
    that is no group but is close to one whose options hold the value is taken for a typo."""
    additions = [a for a in args if a.startswith("+") and "=" in a and not a.startswith("++")]
    if not additions:
        return None
    groups = known_groups(args)
    for arg in additions:
        key, _, value = arg[1:].partition("=")
        key = key.split("@", 1)[0]
        if "." in key or key in groups:
            continue
        for group in difflib.get_close_matches(key, groups, n=3, cutoff=0.75):
            if value.split(",", 1)[0] in group_options(group, args):
                return f"{arg}: no config group {key}; did you mean +{group}={value}?"
    return None


def misspelt_sweep_value(args: Sequence[str]) -> str | None:
    """``-m model=qlae,tripd``: Hydra composes each job's config only when the job starts, so the typo would stop
    the sweep after the jobs before it have trained; every name of a plain list is checked first."""
    if "-m" not in args and "--multirun" not in args:
        return None
    for arg in args:
        key, eq, value = arg.lstrip("+").partition("=")
        key = key.split("@", 1)[0]
        if not eq or "," not in value or "." in key or not re.fullmatch(r"[\w/,-]+", value):
            continue
        dirs = [d for d in _search_dirs(args) if (d / key).is_dir()]
        if not dirs:  # not a group of ours (hydra/launcher's options come from plugins)
            continue
        options = group_options(key, args)
        for name in value.split(","):
            if name not in options:
                return _no_such(f"{key}={name}", name, options, key)
    return None


def _missing_config(exc, args: Sequence[str]) -> str:
    missing = exc.missing_cfg_file or ""
    if "/" not in missing:  # the primary config: -cn NAME
        names = primary_configs(args)
        return _no_such(f"-cn {missing}", missing, names, "configs")
    group, name = missing.rsplit("/", 1)
    typed = _typed_override(args, group)
    typed_names = typed.partition("=")[2].split(",") if typed else []
    hint = install_hint(missing)
    if hint:  # e.g. hydra/launcher=slurm needs the submitit launcher's submitit_slurm
        head = typed.lstrip("+") if typed and "," not in typed else f"{group}={name}"
        return f"{head} {hint}"
    head = f"{group}={name}"
    if name not in typed_names:  # a config's defaults list names it, not the command line
        where = re.match(r"In '([^']+)'", str(exc))
        head = f"in {where.group(1)}: {head}" if where else head
    options = list(exc.options) if exc.options is not None else None
    if options is None:
        close = difflib.get_close_matches(group, known_groups(args), n=3, cutoff=0.6)
        return f"{head}: no config group {group}" + (f"; did you mean {' or '.join(close)}?" if close else "")
    return _no_such(head, name, options, group)


def _no_such(head: str, name: str, options: Sequence[str], group: str) -> str:
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.6)
    mean = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"{head}: no such config{mean} (choose from {group}: {', '.join(sorted(options))})"


def _bad_override(exc, args: Sequence[str]) -> str | None:
    text = str(exc)
    m = re.match(r"Could not override '([^']+)'\.\s*No match in the defaults list", text)
    if m:  # a group that the defaults list does not hold (regularizer=klm): Hydra's `+` is the fix
        group = m.group(1)
        typed = (_typed_override(args, group) or group).lstrip("+")
        name = typed.partition("=")[2].split(",")[0]
        options = group_options(group, args)
        if options and name not in options:
            return _no_such(typed, name, options, group)
        return f"{typed}: {group} is not in the defaults list; add it with +{typed}"
    m = re.match(r"Could not append to config\. An item is already at '([^']+)'", text)
    if m:
        typed = _typed_override(args, m.group(1)) or f"+{m.group(1)}=..."
        return f"{typed}: {m.group(1)} is in the config already; set it without the +: {typed.lstrip('+')}"
    m = re.match(r"Could not override '([^']+)'\.\s*To append to your config use \+(.*)", text, re.DOTALL)
    if not m:
        return None
    key, typed = m.group(1), m.group(2).strip()
    if "/" in key:  # a config group that does not exist (modle/latent=...)
        close = difflib.get_close_matches(key, known_groups(args), n=3, cutoff=0.6)
        return f"{typed}: no config group {key}" + (f"; did you mean {' or '.join(close)}?" if close else "")
    parent = getattr(exc.__cause__, "parent_node", None)
    root = parent._get_root() if parent is not None else None
    close = close_keys(root, key) if root is not None else []
    if close:
        return f"{typed}: no such key; did you mean {' or '.join(close)}?"
    where, keys = _deepest(root, key) if root is not None else ("", [])
    known = f"; {where or 'the config'} has {', '.join(keys)}" if keys else ""
    return f"{typed}: no such key{known} (a new key takes a leading +: +{typed})"


def close_keys(root, key: str, n: int = 3) -> list[str]:
    """Dotted keys of ``root`` closest to ``key`` (``trainer.max_step`` -> ``trainer.max_steps``), part by part."""
    paths = [("", root)]
    for part in key.split("."):
        found = []
        for prefix, node in paths:
            keys = _keys(node)
            names = [part] if part in keys else difflib.get_close_matches(part, keys, n=n, cutoff=0.6)
            found += [(f"{prefix}.{k}" if prefix else k, _child(node, k)) for k in names]
        paths = found[:n]
    return [path for path, _ in paths if path != key]


def _deepest(root, key: str) -> tuple[str, list[str]]:
    """The longest existing prefix of ``key`` and its keys (what the user can choose from)."""
    prefix, node = "", root
    for part in key.split(".")[:-1]:
        if part not in _keys(node):
            break
        prefix, node = f"{prefix}.{part}" if prefix else part, _child(node, part)
    return prefix, _keys(node)


def _keys(node) -> list[str]:
    return [str(k) for k in node] if OmegaConf.is_dict(node) else []


def _child(node, key: str):
    try:
        return node._get_node(key)  # the node itself: no interpolation is resolved
    except Exception:  # noqa: BLE001
        return None


def _missing_plugin(exc: BaseException, args: Sequence[str]) -> str | None:
    """An import of a plugin (or what it needs) that failed: name the extra that installs it."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            parts = exc.name.split(".")
            choice = _PLUGIN_MODULES.get(parts[1] if parts[0] == "hydra_plugins" and len(parts) > 1 else parts[0])
            if choice:
                group, name = choice.rsplit("/", 1)
                typed = _typed_override(args, group)
                head = typed.lstrip("+") if typed else f"{group}={name}"
                return f"{head} {install_hint(choice)}"
        exc = exc.__cause__ or exc.__context__
    return None


def _message(exc: BaseException) -> str:
    """Hydra's or OmegaConf's message on one line, without its pointers to docs and stack traces."""
    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    drop = ("full_key:", "object_type=", "reference_type=", "See https://hydra.cc", "Set the environment variable",
            "Config search path", "provider=")
    lines = [line.strip() for line in str(exc).splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith(drop))
    cause = exc.__cause__
    if isinstance(exc, CompactHydraException) and isinstance(cause, OmegaConfBaseException):
        text = f"{text}: {_message(cause)}"  # Hydra prints both
    key = getattr(exc, "full_key", None)
    return f"{key}: {text}" if key and key not in text else text


def _typed_override(args: Sequence[str], key: str) -> str | None:
    """The command-line override of ``key`` (a group or a dotted key), as typed."""
    for arg in args:
        if "=" in arg and not arg.startswith("-") and override_key(arg) == key:
            return arg
    return None


def _search_dirs(args: Sequence[str]) -> list[Path]:
    """The config directories of this command line: ``-cd DIR`` first, then the app's own (conf/)."""
    from .paths import config_dir

    dirs = []
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in ("-cd", "--config-dir"):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value:
                dirs.append(Path(value).expanduser())
    return [*dirs, config_dir()]


def primary_configs(args: Sequence[str]) -> list[str]:
    """Names ``-cn`` can take: the top-level configs of the config directories and the sweep files."""
    from .paths import sweeps_dir

    names = {p.stem for d in [*_search_dirs(args), sweeps_dir()] for p in d.glob("*.yaml")}
    return sorted(names)


def known_groups(args: Sequence[str] = ()) -> list[str]:
    """Every config group: the folders of conf/ (and ``-cd``), Hydra's own and those its plugins registered."""
    import hydra
    from hydra.core.config_store import ConfigStore

    groups = set()
    for root in [*_search_dirs(args), Path(hydra.__file__).parent / "conf"]:
        groups |= {str(p.parent.relative_to(root)) for p in root.rglob("*.yaml") if p.parent != root}
    stack = [("", ConfigStore.instance().repo)]
    while stack:
        prefix, node = stack.pop()
        for name, child in node.items():
            if isinstance(child, dict):
                path = f"{prefix}/{name}" if prefix else name
                groups.add(path)
                stack.append((path, child))
    for group in list(groups):  # hydra/launcher holds configs only through its parent hydra/
        while "/" in group:
            group = group.rsplit("/", 1)[0]
            groups.add(group)
    return sorted(g.replace(os.sep, "/") for g in groups)


def group_options(group: str, args: Sequence[str] = ()) -> list[str]:
    """The config names of ``group`` (``model/latent``) in the config directories and Hydra's config store."""
    import hydra
    from hydra.core.config_store import ConfigStore

    names = {p.stem for root in [*_search_dirs(args), Path(hydra.__file__).parent / "conf"]
             for p in (root / group).glob("*.yaml")}
    try:
        names |= {n.removesuffix(".yaml") for n in ConfigStore.instance().list(group) if n.endswith(".yaml")}
    except OSError:  # not a group of the store
        pass
    return sorted(names)
