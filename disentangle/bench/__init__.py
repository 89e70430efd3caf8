"""Benchmarks (not timed tests): ``python -m disentangle.bench steps|terms|data|metrics|precision|tf32|errors``.

One module per benchmark, the command line in :mod:`~disentangle.bench.command`:

* ``steps`` (:mod:`~disentangle.bench.steps`): one full training step of every paper configuration
  (:data:`STEP_CASES`) at 64x64 with batch 64, medians and ratios against QLAE measured in the same process (the
  Tripod paper's App. D profiling table); ``--precision bf16-mixed`` times fp32 and bf16 alternately. Its
  :class:`StepTimer` is the project's one timed training step (also the doctor's);
* ``terms`` (:mod:`~disentangle.bench.terms`): Cliff, IOSS and HFS alone against the Cliff paper's Shapes3D step;
* ``data`` (:mod:`~disentangle.bench.batches`): batch assembly from prepared and procedural data, images/s;
* ``metrics`` (:mod:`~disentangle.bench.evaluation`): InfoMEC + depth-tuned DCI against a straightforward
  scikit-learn implementation, and whether the values agree;
* ``precision`` (:mod:`~disentangle.bench.seeds`): the quickstarts over three seeds in fp32 and bf16-mixed;
* ``tf32`` (:mod:`~disentangle.bench.tf32`, CUDA): each paper model's first-step terms and gradient under the TF32
  settings against float32;
* ``errors`` (:mod:`~disentangle.bench.latency`): seconds from a command line to a mistake's one-line error, and to
  each command's ``--help``.
"""
import importlib

# Imported on first use (PEP 562): `python -m disentangle.bench --help` and the `errors` benchmark run without torch
_LAZY = {
    "bench_data": ".batches", "main": ".command", "bench_metrics": ".evaluation", "bench_terms": ".terms",
    **dict.fromkeys(("CONF", "DATASET_SIZE", "STEP_CASES", "StepTimer", "bench_compiled", "bench_model",
                     "bench_steps", "sync", "time_alternating", "time_steps"), ".steps"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CONF",
    "DATASET_SIZE",
    "STEP_CASES",
    "StepTimer",
    "bench_compiled",
    "bench_data",
    "bench_metrics",
    "bench_model",
    "bench_steps",
    "bench_terms",
    "main",
    "sync",
    "time_alternating",
    "time_steps",
]
