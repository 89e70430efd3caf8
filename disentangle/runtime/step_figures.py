"""The measured seconds per training step and per evaluation, as ``dry_run=true`` uses them to estimate a job.

Copies of the benchmark tables (``python -m disentangle.bench steps`` and ``metrics``; docs/benchmarks.md and
docs/gpu-check.json), kept in the package because a wheel carries no docs and the estimate must not import torch.
``tests/test_dry_run.py`` checks every figure here against its table (a re-measured figure not copied here fails
there) and every signature against the bench case it names.

A job gets the figure of the bench case whose **signature** it has: the config choices of its model and regularizer
groups (``model=qlae model/arch=tripod model/latent=latent_quantizer``), which fix the networks and the loss terms a
step runs. Value overrides of the model (a discriminator's depth, n_latents) are not in it.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BENCH_BATCH", "BENCH_RESOLUTION", "DISCRETE_LATENTS", "EVALUATION", "SIGNATURES", "STEP_TABLES", "EvaluationFigure",
           "StepTable", "signature"]

BENCH_BATCH = 64  # every bench steps case runs at batch 64 on 64x64 images (bench_model)
BENCH_RESOLUTION = 64


@dataclass(frozen=True)
class StepTable:
    """Seconds per training step of the bench cases, on one device, in one precision, eager or compiled."""

    device: str  # cpu | cuda
    precision: str  # 32-true | bf16-mixed
    compiled: bool
    machine: str  # what it was measured on
    source: str  # the command, where the table is, and when
    seconds: dict[str, float]  # bench step label (bench.steps.STEP_CASES) -> median s/step


@dataclass(frozen=True)
class EvaluationFigure:
    """Seconds of one evaluation's metrics (InfoMEC + depth-tuned DCI) on ``samples`` samples."""

    device: str
    metrics: frozenset[str]
    samples: int
    seconds: dict[bool, float]  # discrete latents? -> seconds
    machine: str
    source: str


# The signature of each bench case: its choices of the model and regularizer groups, as a composed config of its
# overrides has them (hydra.runtime.choices). `factorqvae, 6-layer disc.` differs from `factorqvae` by a value
# override only, so it has none.
SIGNATURES: dict[str, str] = {
    "qlae": "model=qlae model/arch=qlae model/latent=latent_quantizer",
    "ae": "model=ae model/arch=qlae model/latent=continuous",
    "betavae": "model=betavae model/arch=qlae model/latent=gaussian",
    "betatcvae": "model=betatcvae model/arch=qlae model/latent=gaussian regularizer@model.regularizer=tcvae",
    "bioae": "model=bioae model/arch=qlae model/latent=continuous regularizer@model.regularizer=bio",
    "vqvae": "model=vqvae model/arch=qlae model/latent=vector_quantizer",
    "vqvae_wd": "model=vqvae_wd model/arch=qlae model/latent=vector_quantizer",
    "qlae_no_wd": "model=qlae_no_wd model/arch=qlae model/latent=latent_quantizer",
    "qlae_global_codebook": "model=qlae_global_codebook model/arch=qlae model/latent=latent_quantizer",
    "qlae + klm": "model=qlae model/arch=qlae model/latent=latent_quantizer regularizer=klm",
    "qlae, tripod arch": "model=qlae model/arch=tripod model/latent=latent_quantizer",
    "betatcvae, tripod arch":
        "model=betatcvae model/arch=tripod model/latent=gaussian regularizer@model.regularizer=tcvae",
    "tripod w/o nhp": "model=tripod_no_nhp model/arch=tripod model/latent=fixed_grid",
    "tripod_naive": "model=tripod_naive model/arch=tripod model/latent=latent_quantizer",
    "tripod": "model=tripod model/arch=tripod model/latent=fixed_grid",
    "tripod_no_klm": "model=tripod_no_klm model/arch=tripod model/latent=fixed_grid",
    "tripod_finer": "model=tripod_finer model/arch=tripod model/latent=fixed_grid",
    "ae_fq": "model=ae_fq model/arch=factorqvae model/latent=continuous",
    "betavae_fq": "model=betavae_fq model/arch=factorqvae model/latent=gaussian",
    "bioae_fq": "model=bioae_fq model/arch=factorqvae model/latent=continuous regularizer@model.regularizer=bio",
    "qlae_fq": "model=qlae_fq model/arch=factorqvae model/latent=latent_quantizer",
    "qvae": "model=qvae model/arch=factorqvae model/latent=gumbel_quantizer",
    "dvae": "model=dvae model/arch=factorqvae model/latent=gumbel_quantizer",
    "factorqvae": "model=factorqvae model/arch=factorqvae model/latent=gumbel_quantizer "
                  "regularizer@model.regularizer=tc_discriminator",
    "factordvae": "model=factordvae model/arch=factorqvae model/latent=gumbel_quantizer "
                  "regularizer@model.regularizer=tc_discriminator",
    "factorvae": "model=factorvae model/arch=factorqvae model/latent=gaussian "
                 "regularizer@model.regularizer=tc_discriminator",
    "dvae_friede": "model=dvae_friede model/arch=dlib model/latent=categorical",
    "factordvae_friede": "model=factordvae_friede model/arch=dlib model/latent=categorical "
                         "regularizer@model.regularizer=tc_discriminator_friede",
    "vae_friede": "model=vae_friede model/arch=dlib model/latent=gaussian",
    "factorvae_friede": "model=factorvae_friede model/arch=dlib model/latent=gaussian "
                        "regularizer@model.regularizer=tc_discriminator_friede",
    "dvae_friede_masked + sup":
        "model=dvae_friede_masked model/arch=dlib model/latent=categorical regularizer=supervision",
    "factordvae_friede_masked + sup": "model=factordvae_friede_masked model/arch=dlib model/latent=categorical "
                                      "regularizer=supervision regularizer@model.regularizer=tc_discriminator_friede",
    "betavae_friede": "model=betavae_friede model/arch=dlib model/latent=gaussian",
    "betatcvae_friede": "model=betatcvae_friede model/arch=dlib model/latent=gaussian "
                        "regularizer@model.regularizer=tcvae_locatello",
    "betatcvae_friede_chen": "model=betatcvae_friede_chen model/arch=dlib model/latent=gaussian "
                             "regularizer@model.regularizer=tcvae",
    "dip_vae_i_friede": "model=dip_vae_i_friede model/arch=dlib model/latent=gaussian "
                        "regularizer@model.regularizer=dip_vae",
    "dip_vae_ii_friede": "model=dip_vae_ii_friede model/arch=dlib model/latent=gaussian "
                         "regularizer@model.regularizer=dip_vae",
    "annealed_vae_friede": "model=annealed_vae_friede model/arch=dlib model/latent=gaussian "
                           "regularizer@model.regularizer=annealed_capacity",
    "betavae + cliff": "model=betavae model/arch=qlae model/latent=gaussian regularizer=cliff",
    "betavae + hfs": "model=betavae model/arch=qlae model/latent=gaussian regularizer=hfs",
    "ae + ioss": "model=ae model/arch=qlae model/latent=continuous regularizer=ioss",
    "cliff_shapes3d": "model=vae_friede model/arch=dlib model/latent=gaussian "
                      "regularizer@model.regularizers.cliff=cliff",
    "cliff_balls": "model=cliff_balls model/arch=balls model/latent=continuous "
                   "regularizer@model.regularizers.cliff=cliff",
    "ioss_balls": "model=ioss_balls model/arch=balls model/latent=continuous "
                  "regularizer@model.regularizers.cliff=cliff regularizer@model.regularizers.ioss=ioss",
    "additive_decoder_balls": "model=additive_decoder_balls model/arch=balls_additive model/latent=continuous "
                              "regularizer@model.regularizers.cliff=cliff",
    "infowgan_gp": "model=infowgan_gp model/arch=qlae model/latent=continuous",
    "qlinfowgan_gp": "model=qlinfowgan_gp model/arch=qlae model/latent=latent_quantizer",
    "qlinfowgan_gp_no_wd": "model=qlinfowgan_gp_no_wd model/arch=qlae model/latent=latent_quantizer",
    "wgan_gp": "model=wgan_gp model/arch=qlae model/latent=continuous",
}

_XEON = "a 2-core Intel Xeon (AVX-512 BF16, 2 threads)"
_XEON_SOURCE = "bench steps --compile, docs/benchmarks.md 'Compiled steps' (d7f9eeb, 2026-11-26)"
_H200 = "an NVIDIA H200 (torch 2.11, TF32 as each model's runs set it)"
_H200_SOURCE = "make gpu-check, docs/gpu-check.json (2026-11-27)"

STEP_TABLES: tuple[StepTable, ...] = (
    StepTable("cpu", "32-true", False, _XEON, _XEON_SOURCE, {
        "qlae": 1.485, "ae": 1.396, "betavae": 1.611, "betatcvae": 1.581, "bioae": 1.616, "vqvae": 1.508,
        "vqvae_wd": 1.460, "qlae_no_wd": 1.756, "qlae_global_codebook": 1.615, "qlae + klm": 1.757,
        "qlae, tripod arch": 4.254, "betatcvae, tripod arch": 4.142, "tripod w/o nhp": 4.331,
        "tripod_naive": 13.208, "tripod": 25.784, "tripod_no_klm": 27.844, "tripod_finer": 27.491,
        "ae_fq": 17.318, "betavae_fq": 17.922, "bioae_fq": 17.996, "qlae_fq": 18.058, "qvae": 17.578,
        "dvae": 17.910, "factorqvae": 19.180, "factorqvae, 6-layer disc.": 17.968, "factordvae": 17.309,
        "factorvae": 18.265, "dvae_friede": 0.069, "factordvae_friede": 0.152, "vae_friede": 0.092,
        "factorvae_friede": 0.145, "dvae_friede_masked + sup": 0.126, "factordvae_friede_masked + sup": 0.208,
        "betavae_friede": 0.067, "betatcvae_friede": 0.075, "betatcvae_friede_chen": 0.080,
        "dip_vae_i_friede": 0.068, "dip_vae_ii_friede": 0.098, "annealed_vae_friede": 0.083,
        "betavae + cliff": 1.244, "betavae + hfs": 1.135, "ae + ioss": 1.171, "cliff_shapes3d": 0.096,
        "cliff_balls": 0.514, "ioss_balls": 0.532, "additive_decoder_balls": 0.633, "infowgan_gp": 5.091,
        "qlinfowgan_gp": 4.959, "qlinfowgan_gp_no_wd": 5.151, "wgan_gp": 4.566,
    }),
    StepTable("cpu", "32-true", True, _XEON, _XEON_SOURCE, {
        "qlae": 0.984, "ae": 0.986, "betavae": 1.181, "betatcvae": 1.122, "bioae": 1.077, "vqvae": 1.034,
        "vqvae_wd": 1.022, "qlae_no_wd": 1.134, "qlae_global_codebook": 1.095, "qlae + klm": 1.131,
        "qlae, tripod arch": 3.843, "betatcvae, tripod arch": 3.729, "tripod w/o nhp": 3.493,
        "tripod_naive": 11.631, "tripod": 19.021, "tripod_no_klm": 19.049, "tripod_finer": 19.478,
        "ae_fq": 10.193, "betavae_fq": 10.248, "bioae_fq": 10.356, "qlae_fq": 10.284, "qvae": 10.029,
        "dvae": 10.430, "factorqvae": 11.448, "factorqvae, 6-layer disc.": 10.134, "factordvae": 9.139,
        "factorvae": 10.063, "dvae_friede": 0.071, "factordvae_friede": 0.158, "vae_friede": 0.078,
        "factorvae_friede": 0.152, "dvae_friede_masked + sup": 0.113, "factordvae_friede_masked + sup": 0.205,
        "betavae_friede": 0.061, "betatcvae_friede": 0.074, "betatcvae_friede_chen": 0.079,
        "dip_vae_i_friede": 0.065, "dip_vae_ii_friede": 0.089, "annealed_vae_friede": 0.077,
        "betavae + cliff": 0.990, "betavae + hfs": 0.990, "ae + ioss": 0.863, "cliff_shapes3d": 0.095,
        "cliff_balls": 0.621, "ioss_balls": 0.568, "additive_decoder_balls": 0.735, "infowgan_gp": 4.877,
        "qlinfowgan_gp": 4.847, "qlinfowgan_gp_no_wd": 4.741, "wgan_gp": 4.715,
    }),
    StepTable("cpu", "bf16-mixed", False, "an idle 2-core AMD EPYC (AVX-512 BF16, 2 threads)",
              "bench steps --precision bf16-mixed, docs/benchmarks.md 'Mixed precision' (3d3d58e, 2026-11-25)", {
        "qlae": 0.676, "ae": 0.672, "betavae": 0.675, "betatcvae": 0.698, "bioae": 0.632, "vqvae": 0.679,
        "qlae + klm": 0.627, "qlae, tripod arch": 1.991, "betatcvae, tripod arch": 1.946,
        "tripod w/o nhp": 1.906, "tripod_naive": 11.413, "tripod": 20.343, "ae_fq": 7.171, "qvae": 6.939,
        "dvae": 7.193, "factorqvae": 8.704, "factorvae": 8.490, "dvae_friede": 0.050, "factordvae_friede": 0.093,
        "vae_friede": 0.049, "factorvae_friede": 0.093, "dvae_friede_masked + sup": 0.068,
        "betavae_friede": 0.065, "betatcvae_friede": 0.056, "dip_vae_i_friede": 0.051, "dip_vae_ii_friede": 0.055,
        "annealed_vae_friede": 0.061, "betavae + cliff": 0.677, "betavae + hfs": 0.640, "ae + ioss": 0.646,
        "cliff_shapes3d": 0.076, "cliff_balls": 0.270, "ioss_balls": 0.296, "additive_decoder_balls": 0.302,
        "infowgan_gp": 2.765, "qlinfowgan_gp": 2.676, "wgan_gp": 2.710,
    }),
    StepTable("cuda", "32-true", False, _H200, _H200_SOURCE, {
        "qlae": 0.0198, "tripod": 0.1168, "factorqvae": 0.0429, "infowgan_gp": 0.0618, "dvae_friede": 0.0066,
        "cliff_balls": 0.0169, "additive_decoder_balls": 0.0190,
    }),
    StepTable("cuda", "32-true", True, _H200, _H200_SOURCE, {
        "qlae": 0.0180, "tripod": 0.1163, "factorqvae": 0.0433, "infowgan_gp": 0.0577, "dvae_friede": 0.0082,
        "cliff_balls": 0.0175, "additive_decoder_balls": 0.0193,
    }),
    StepTable("cuda", "bf16-mixed", False, _H200, _H200_SOURCE,
              {"qlae": 0.0238, "cliff_balls": 0.0195, "additive_decoder_balls": 0.0214}),
    StepTable("cuda", "bf16-mixed", True, _H200, _H200_SOURCE,
              {"qlae": 0.0196, "cliff_balls": 0.0188, "additive_decoder_balls": 0.0200}),
)

# `bench metrics`: 10,000 samples x 9 sources x 18 latents, the metrics alone (encoding the evaluation set not counted)
EVALUATION = EvaluationFigure(
    device="cpu", metrics=frozenset({"infomec", "dci"}), samples=10_000, seconds={True: 5.5, False: 10.8},
    machine="the project's 2-core CPU",
    source="bench metrics, docs/benchmarks.md 'Metrics' (5d3d786, 2026-11-23)",
)
# latent modules whose codes the metrics take as discrete (their class attribute `discrete`)
DISCRETE_LATENTS = frozenset({"LatentQuantizer", "FixedGridQuantizer", "VectorQuantizer", "GumbelQuantizer"})


def signature(choices) -> str:
    """A job's signature from its ``hydra.runtime.choices``: the model and regularizer groups' choices, sorted."""
    return " ".join(f"{group}={choice}" for group, choice in sorted(choices.items())
                    if choice is not None and str(group).startswith(("model", "regularizer")))
