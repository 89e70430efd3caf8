"""Check an accelerator: ``python -m disentangle.doctor [--quick] [--families NAME ...] [--skip-timing] [--json PATH]``.

What it does, in order, with a progress bar (one module per check; the command in :mod:`~disentangle.doctor.command`):

1. **devices** (:mod:`~disentangle.doctor.devices`): the CPU (cores, oneDNN, whether bf16 is native:
   ``avx512_bf16``/``amx_bf16``) and every CUDA device (name, compute capability, memory, bf16, TF32), and which
   ``trainer.precision`` each can run;
2. **families** (:mod:`~disentangle.doctor.families`): every model family
   (:data:`disentangle.runtime.families.FAMILIES`) trains a few steps through the real config path
   (:func:`disentangle.runtime.run.train` on a composed config, small networks, 16x16 images) on each accelerator
   (the CPU, and CUDA when present) in ``32-true`` and ``bf16-mixed``; every logged loss term must be finite. On a
   GPU, the checkpoint is then evaluated on the GPU and on the CPU, which must give the same InfoMEC, DCI, PSNR (and
   MCC) within :data:`TOLERANCES`;
3. **timing** (:mod:`~disentangle.doctor.timing`): seconds per training step of the paper configurations
   (:func:`disentangle.bench.time_steps`, batch 64 at 64x64) in each precision. On a CPU only a few cheap ones by
   default (:data:`CPU_TIMING_CASES`; the others take several to tens of seconds per step there);
   ``--timing-cases all`` times every one;
4. **concurrency** (CUDA; :mod:`~disentangle.doctor.concurrency`): k = 1, 2, 4, 8 processes
   (:mod:`disentangle.doctor.worker`) train the QLAE paper step on one GPU at once; total steps/s for each k and the
   recommended ``runs_per_gpu`` (:func:`recommend_runs_per_gpu`) for ``hydra/launcher=gpu_node``;
5. **ddp** (two or more GPUs; :mod:`~disentangle.doctor.ddp`): a 2-process DDP run through
   ``python -m disentangle.train trainer=ddp`` must finish with finite losses.

It prints tables (:mod:`~disentangle.doctor.tables`) and writes everything to JSON (``--json``, default
``outputs/doctor.json``); what it could not run here (no GPU, one GPU, a precision the device lacks, families or
timing cases not selected) is named in the table ``skipped`` and under ``"skipped"`` in the JSON. Exit status 0 when
every check that ran passed, 1 otherwise, 2 for bad options (one line).
"""
from .command import QUICK_FAMILIES, main
from .common import read_losses
from .concurrency import measure_concurrency, recommend_runs_per_gpu
from .ddp import run_ddp_check
from .devices import describe_devices
from .families import TOLERANCES, compare_evaluations, family_name, run_family
from .tables import print_report
from .timing import CPU_TIMING_CASES, time_cases

__all__ = [
    "CPU_TIMING_CASES",
    "QUICK_FAMILIES",
    "TOLERANCES",
    "compare_evaluations",
    "describe_devices",
    "family_name",
    "main",
    "measure_concurrency",
    "print_report",
    "read_losses",
    "recommend_runs_per_gpu",
    "run_ddp_check",
    "run_family",
    "time_cases",
]
