"""Errors that end a run with one clear line (kept import-light so the CLI can catch them cheaply)."""


class ConfigError(ValueError):
    """A configuration value is invalid; raised before any training work starts."""


class UnsafeCheckpointError(ConfigError):
    """A checkpoint holds something other than data: a pickled object whose loading could run code, or a stored
    config naming a target this project would not build."""


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's prepared file is missing; the message says which file and how to make it."""


class DatasetDamagedError(DatasetNotFoundError):
    """A prepared file differs from the seal ``prepare`` wrote (swapped, truncated, rewritten); the message names it
    and how to make it again. A subclass of :class:`DatasetNotFoundError`, so every command reports it in one line."""


class NonFiniteLossError(RuntimeError):
    """A loss term became NaN or inf; the message names the term and the step."""


class EvaluationError(RuntimeError):
    """A metric computation (possibly in the background worker) failed; ``__cause__`` is the original. Here, not in
    the callbacks, so that the commands catch it without importing torch."""
