"""Config helpers: OmegaConf resolvers used by conf/, and turning construction errors into one line."""
from __future__ import annotations

from omegaconf import OmegaConf

from .devices import concurrent_jobs


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
