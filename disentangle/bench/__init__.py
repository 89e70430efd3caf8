"""Benchmarks (not timed tests): ``python -m disentangle.bench steps|terms|data|metrics|precision|tf32``.

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
  settings against float32.
"""
from .batches import bench_data
from .command import main
from .evaluation import bench_metrics
from .steps import (
    CONF,
    DATASET_SIZE,
    STEP_CASES,
    StepTimer,
    bench_compiled,
    bench_model,
    bench_steps,
    sync,
    time_alternating,
    time_steps,
)
from .terms import bench_terms

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
