"""``python -m disentangle.bench tf32``: what TF32 does to each paper model's loss terms and gradients on a CUDA GPU.

For each case one model, one batch and one seed; the first training step's terms and the gradient of the weighted
loss are computed under each TF32 setting and compared with full float32 (TF32 off everywhere):

* ``tf32``: TF32 matrix products and convolutions outside the fp32 islands (``tf32=true``; the islands switch it
  off, :mod:`disentangle.foundation.precision`);
* ``tf32, islands too``: TF32 everywhere, islands included -- what JAX's default precision does on an Ampere or
  newer GPU, i.e. the QLAE, Tripod and Friede et al. authors' runs;
* ``conv``: TF32 convolutions only (``tf32=conv``; PyTorch's defaults, the FactorQVAE authors' code).

It prints each term's relative difference, the gradient's relative difference ||g - g32|| / ||g32|| and the median
step time of each setting (steps interleaved). Evidence for the paper sweeps' ``tf32`` pins (docs/sweeps.md).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from ..checks import TF32_NEEDS_CUDA
from ..foundation.precision import tf32_flags

CASES = [
    ("qlae", ["model=qlae"]),
    ("tripod", ["model=tripod"]),
    ("tripod w/o nhp", ["model=tripod_no_nhp"]),
    ("factorqvae", ["model=factorqvae"]),
    ("dvae_friede", ["model=dvae_friede"]),
    ("factordvae_friede", ["model=factordvae_friede"]),
]
# setting -> (matmul TF32, cuDNN TF32, the islands switch TF32 off)
SETTINGS = {"fp32": (False, False, True), "tf32": (True, True, True), "tf32, islands too": (True, True, False),
            "conv": (False, True, True)}


def tf32_setting(name: str):
    """The TF32 flags of setting ``name`` (:data:`SETTINGS`) inside the returned context, restored after."""
    return tf32_flags(*SETTINGS[name])


def terms_and_gradient(model, x: torch.Tensor, seed: int) -> tuple[dict[str, float], torch.Tensor]:
    """The first step's unweighted terms and the gradient of the weighted loss over the model's own parameters
    (the discriminator's excluded), the step's random draws fixed by ``seed``."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    if model.split_batch:
        x = x.chunk(2)[0]
    terms, weights, _ = model.step_terms(x)
    model.weighted_total(terms, weights, 0).backward()
    own = [p for name, p in model.named_parameters() if not name.startswith("regularizers.") and p.grad is not None]
    return {k: float(v.detach()) for k, v in terms.items()}, torch.cat([p.grad.flatten() for p in own])


def bench_tf32(build: Callable, sync: Callable, device: str = "cuda", batch_size: int = 64, repeats: int = 5,
               only: list[str] | None = None, seed: int = 0) -> list[dict]:
    """Compare every case's terms and gradients under :data:`SETTINGS`; prints a table and returns its rows.
    ``build(overrides, batch_size)`` makes a case's model and ``sync(device)`` waits for the device
    (``disentangle.bench``'s)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        raise SystemExit(TF32_NEEDS_CUDA)
    rows = []
    print(f"TF32 against float32 on {torch.cuda.get_device_name(dev)}: first step's terms and gradient, batch "
          f"{batch_size}, 64x64; step times median of {repeats}, settings interleaved")
    for label, overrides in CASES:
        if only and not any(o in label for o in only):
            continue
        torch.manual_seed(seed)
        model = build(overrides, batch_size).to(dev)
        x = torch.rand(batch_size * (2 if model.split_batch else 1), 3, 64, 64, device=dev,
                       generator=torch.Generator(dev).manual_seed(seed))
        results = {}
        for name in SETTINGS:
            with tf32_setting(name):
                results[name] = terms_and_gradient(model, x, seed)
        ref_terms, ref_grad = results["fp32"]
        times = {name: [] for name in SETTINGS}
        for _ in range(repeats + 1):
            for name in SETTINGS:
                with tf32_setting(name):
                    sync(dev)
                    start = time.perf_counter()
                    terms_and_gradient(model, x, seed)
                    sync(dev)
                    times[name].append(time.perf_counter() - start)
        print(f"  {label}: float32 step {statistics.median(times['fp32'][1:]) * 1e3:.1f} ms")
        for name in list(SETTINGS)[1:]:
            terms, grad = results[name]
            term_err = {k: abs(terms[k] - ref_terms[k]) / max(abs(ref_terms[k]), 1e-30) for k in ref_terms}
            grad_err = float((grad - ref_grad).norm() / ref_grad.norm())
            step = statistics.median(times[name][1:])
            worst = max(term_err, key=term_err.get)
            rows.append({"case": label, "setting": name, "grad_rel": grad_err, "terms_rel": term_err,
                         "step_s": step, "fp32_step_s": statistics.median(times["fp32"][1:])})
            print(f"    {name:<18} gradient {grad_err:9.2e}   worst term {worst} {term_err[worst]:9.2e}   "
                  f"step x{statistics.median(times['fp32'][1:]) / step:4.2f}   "
                  + "  ".join(f"{k} {v:.1e}" for k, v in term_err.items()), flush=True)
    return rows
