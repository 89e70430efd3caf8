"""InfoMEC: information-based modularity (InfoM), explicitness (InfoE) and compactness (InfoC).

Hsu et al. 2023, "Disentanglement via Latent Quantization", §4.1–4.2 (eqs. 7–9, 13–14); details the
paper leaves open follow the authors' code (``kylehkhsu/latent_quantization``), and the variants of their
standalone metric code (``kylehkhsu/tripod``: IQR active rule, one-hot InfoE features) are options.

Everything here is a pure function of arrays: numpy in, floats/arrays out (torch tensors are accepted and
converted). Mutual information and entropies are in nats. The input, encoding and entropy helpers live in
``common.py``; the ones imported here stay importable from this module under their old names.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import mutual_info_classif
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from disentangle.checks import check_choice
from disentangle.metrics.common import (
    as_2d,
    as_numpy,
    bin_columns,
    check_inputs,
    entropy_discrete,
    label_encode,
    label_encode_columns,
    mutual_info_discrete,
    standardize,
    unpenalised_logistic_kwargs,
    warn_skipped,
)

__all__ = [
    "ACTIVE_RULES",
    "INFOE_FEATURES",
    "INFOE_MAX_ITER",
    "SUPPRESS_CONVERGENCE_WARNINGS",
    "active_latents",
    "as_numpy",
    "bin_columns",
    "entropy_discrete",
    "infoe",
    "infom_infoc",
    "infomec",
    "label_encode",
    "label_encode_columns",
    "nmi_matrix",
]

ACTIVE_RULES = ("range", "iqr")
INFOE_FEATURES = ("standardize", "onehot")

# The authors' LogisticRegression setting (their code; the paper says only "no regularization"). It can stop
# before convergence on hard sources; we keep it for fidelity and silence the warning by default. Flip either
# constant to change that globally.
INFOE_MAX_ITER = 100
SUPPRESS_CONVERGENCE_WARNINGS = True

# Probabilities are clipped here before taking logs so a confidently wrong prediction costs a finite amount.
_PROB_EPS = 1e-15


def _auto_device(device: Any) -> Any:
    """``"auto"`` → ``"cuda"`` if torch is installed and sees a GPU, else None (numpy); anything else unchanged."""
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return None
    return "cuda" if torch.cuda.is_available() else None


# ----------------------------------------------------------------------------------------------------------------
# NMI matrix (QLAE paper §4.1, eq. 7)
# ----------------------------------------------------------------------------------------------------------------
# Joint tables bigger than this many cells are built one source at a time instead of all at once.
_MAX_JOINT_CELLS = 50_000_000


def _mutual_info_all_pairs(
    s_codes: np.ndarray, s_card: np.ndarray, z_codes: np.ndarray, z_card: np.ndarray, device: Any = None
) -> np.ndarray:
    """Plug-in MI (nats) of every (source, latent) pair, shape (n_sources, n_latents), from one bincount.

    Every pair's contingency table sits in its own block of one flat count array (offset by pair index), so a single
    bincount over n_samples × n_latents codes builds all tables of a source. ``device`` (a torch device) runs it
    with torch there (e.g. on the GPU); None uses numpy.
    """
    n, n_z = z_codes.shape
    kz = int(z_card.max())
    out = np.zeros((s_codes.shape[1], n_z))
    if device is not None:
        import torch

        zt = torch.as_tensor(z_codes, device=device)
        offsets = torch.arange(n_z, device=device) * kz
    for i in range(s_codes.shape[1]):
        ks = int(s_card[i])
        cells = n_z * ks * kz
        if cells > _MAX_JOINT_CELLS:  # very many distinct latent values: pair by pair keeps memory bounded
            out[i] = [mutual_info_discrete(s_codes[:, i], ks, z_codes[:, j], z_card[j]) for j in range(n_z)]
            continue
        if device is None:
            flat = (np.arange(n_z) * kz)[None, :] + s_codes[:, i : i + 1] * (n_z * kz) + z_codes
            joint = np.bincount(flat.ravel(), minlength=cells).reshape(ks, n_z, kz) / n
        else:
            st = torch.as_tensor(s_codes[:, i], device=device)
            flat = offsets[None, :] + st[:, None] * (n_z * kz) + zt
            joint = (torch.bincount(flat.reshape(-1), minlength=cells).reshape(ks, n_z, kz).double() / n)
            joint = joint.cpu().numpy()
        ps = joint.sum(axis=(1, 2)) / n_z  # each latent's table holds all n samples
        pz = joint.sum(axis=0)  # (n_z, kz)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = joint * (np.log(joint) - np.log(ps[:, None, None] * pz[None, :, :]))
        out[i] = np.maximum(np.nansum(np.where(joint > 0, terms, 0.0), axis=(0, 2)), 0.0)
    return out


# below this many samples the KSG estimates run in this process (joblib's workers cost more to start than they save)
SEQUENTIAL_BELOW = 1000


def nmi_matrix(
    sources: Any, latents: Any, *, discrete_latents: bool, ksg_k: int = 3, seed: int = 0, device: Any = None
) -> np.ndarray:
    """Normalised mutual information NMI[i, j] = I(s_i; z_j) / H(s_i), shape (n_sources, n_latents).

    Hsu et al. 2023 §4.1, eq. 7. Discrete latents: label-encoded, plug-in MI of the contingency
    table (all pairs at once; on ``device`` with torch if given). Continuous latents: the Ross (2014)
    discrete–continuous k-NN estimator (sklearn's ``mutual_info_classif``, k = ``ksg_k``, ``random_state=seed``)
    on per-column standardised latents, latent columns in parallel (from :data:`SEQUENTIAL_BELOW` samples).
    NaN → 0, result clipped to [0, 1]. Single-valued sources give a zero row (with a warning); constant
    continuous latents get a zero column (rather than the estimator's jitter-driven small positive values).
    """
    s, z = check_inputs(sources, latents)
    s_codes, s_card = label_encode_columns(s)
    usable = warn_skipped(s_card)
    nmi = np.zeros((s.shape[1], z.shape[1]))
    entropy = np.array([entropy_discrete(s_codes[:, i]) for i in range(s.shape[1])])
    if discrete_latents:
        z_codes, z_card = label_encode_columns(z)
        mi = _mutual_info_all_pairs(s_codes[:, usable], s_card[usable], z_codes, z_card, device)
        nmi[usable] = mi / entropy[usable, None]
    else:
        if s.shape[0] <= ksg_k:
            raise ValueError(f"the KSG estimator needs more than ksg_k={ksg_k} samples, got {s.shape[0]}")
        z_std = standardize(z)
        # A constant column carries no information, but KSG on sklearn's tiny jitter reports small positive MI.
        varies = z.std(axis=0) > 0
        # One call per source covers all latent columns, on joblib's worker processes from SEQUENTIAL_BELOW samples
        # on: starting them costs about 2.3 s per process, more than a small estimate takes in this one (256
        # samples x 12 latents: 0.07 s per source). The numbers are the same either way (each call seeds its own
        # jitter). Not threads: sklearn's Parallel resets the process-wide warning filters in each call.
        n_jobs = 1 if s.shape[0] < SEQUENTIAL_BELOW else -1
        for i in np.flatnonzero(usable):
            mi = mutual_info_classif(
                z_std, s_codes[:, i], discrete_features=False, n_neighbors=ksg_k, random_state=seed, n_jobs=n_jobs
            )
            nmi[i] = mi * varies / entropy[i]
    return np.clip(np.nan_to_num(nmi, nan=0.0), 0.0, 1.0)


# ----------------------------------------------------------------------------------------------------------------
# Active latents (QLAE paper §4.1; IQR variant from the authors' code, kylehkhsu/tripod)
# ----------------------------------------------------------------------------------------------------------------
def active_latents(latents: Any, *, discrete_latents: bool, active_rule: str = "range") -> np.ndarray:
    """Boolean mask (n_latents,) of active latents, computed on the raw latents.

    ``"range"`` (QLAE paper §4.1): discrete ⇒ range_j > 0; continuous ⇒ range_j / max_j' range_j' > 1/20.
    ``"iqr"`` (the authors' code, ``kylehkhsu/tripod``): discrete ⇒ IQR_j > 0.1; continuous ⇒
    IQR_j > max_j' IQR_j' / 10. If every latent is constant, none is active.
    """
    check_choice("active_rule", active_rule, ACTIVE_RULES)
    z = as_2d(latents, "latents").astype(np.float64)
    if active_rule == "range":
        spread = z.max(axis=0) - z.min(axis=0)
        if discrete_latents:
            return spread > 0
        top = spread.max()
        return spread / top > 1 / 20 if top > 0 else np.zeros(z.shape[1], dtype=bool)
    q75, q25 = np.percentile(z, [75, 25], axis=0)
    spread = q75 - q25
    if discrete_latents:
        return spread > 0.1
    # Strict inequality: when every IQR is 0 nothing is active (rather than everything).
    return spread > spread.max() / 10


# ----------------------------------------------------------------------------------------------------------------
# InfoM and InfoC (QLAE paper §4.1, eqs. 8–9)
# ----------------------------------------------------------------------------------------------------------------
def _concentration(nmi: np.ndarray, axis: int) -> np.ndarray:
    """max / sum along ``axis`` for each slice whose sum is positive (zero-sum slices are dropped, not NaN)."""
    total = nmi.sum(axis=axis)
    keep = total > 0
    return nmi.max(axis=axis)[keep] / total[keep]


def infom_infoc(
    nmi: np.ndarray, active: np.ndarray, usable_sources: np.ndarray | None = None
) -> tuple[float, float]:
    """InfoM and InfoC from an NMI matrix (Hsu et al. 2023 §4.1, eqs. 8–9).

    Only active latent columns (and usable, i.e. non-constant, source rows) enter. Choices for degenerate cases:
    - a latent column (for InfoM) or a source row (for InfoC) whose NMI sum is 0 is dropped from the mean
      (the QLAE training logger drops such NaN columns for InfoM; dropping source rows for InfoC is this
      project's choice, where the authors' code lets the NaN through); if nothing remains the score is 0;
    - no active latents ⇒ InfoM = InfoC = 0;
    - exactly one usable source ⇒ InfoM = 1 (its normalisation 1 − 1/n_s is 0, and every column is trivially
      modular);
    - exactly one active latent ⇒ InfoC = 1.0 (its normalisation 1 − 1/n_a is 0, and every source is trivially
      captured by a single latent), provided some source has non-zero NMI with it.
    Results are clipped to [0, 1].
    """
    nmi = np.asarray(nmi, dtype=np.float64)
    active = np.asarray(active, dtype=bool)
    if usable_sources is not None:
        nmi = nmi[np.asarray(usable_sources, dtype=bool)]
    sub = nmi[:, active]
    n_s, n_a = sub.shape
    if n_a == 0 or n_s == 0:
        return 0.0, 0.0

    col_ratio = _concentration(sub, axis=0)  # per latent: how much of it goes to its best source
    if col_ratio.size == 0:
        infom = 0.0
    elif n_s == 1:
        infom = 1.0
    else:
        infom = (col_ratio.mean() - 1 / n_s) / (1 - 1 / n_s)

    row_ratio = _concentration(sub, axis=1)  # per source: how much of it sits in its best latent
    if row_ratio.size == 0:
        infoc = 0.0
    elif n_a == 1:
        infoc = 1.0
    else:
        infoc = (row_ratio.mean() - 1 / n_a) / (1 - 1 / n_a)
    return float(np.clip(infom, 0.0, 1.0)), float(np.clip(infoc, 0.0, 1.0))


# ----------------------------------------------------------------------------------------------------------------
# InfoE (QLAE paper §4.2, eqs. 10–14)
# ----------------------------------------------------------------------------------------------------------------
def _onehot(z: np.ndarray) -> np.ndarray:
    """Concatenated one-hot encodings of every column's unique values (the standalone-code InfoE features)."""
    blocks = []
    for j in range(z.shape[1]):
        codes, k = label_encode(z[:, j])
        block = np.zeros((z.shape[0], k))
        block[np.arange(z.shape[0]), codes] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def _fit_log_loss(features: np.ndarray, y: np.ndarray) -> float:
    """In-sample, unweighted mean cross-entropy (nats) of an unregularised multinomial logistic regression.

    Settings are the authors' code's (the paper, §4.2, says only "no regularization"): lbfgs, max_iter=100,
    tol=1e-4, intercept, class_weight='balanced'; the loss is scored without class weights.
    """
    model = LogisticRegression(
        **unpenalised_logistic_kwargs(),
        solver="lbfgs",
        max_iter=INFOE_MAX_ITER,
        tol=1e-4,
        fit_intercept=True,
        class_weight="balanced",
    )
    model.fit(features, y)
    proba = model.predict_proba(features)
    # Labels are 0..K-1 and all present, so classes_ == arange(K) and the column index is the label.
    p_true = proba[np.arange(y.size), np.searchsorted(model.classes_, y)]
    return float(-np.log(np.clip(p_true, _PROB_EPS, 1.0)).mean())


def _fit_log_loss_torch(features: np.ndarray, y: np.ndarray, device: Any) -> float:
    """:func:`_fit_log_loss` with torch on ``device`` (e.g. the GPU): the same objective (class-balanced mean
    cross-entropy, no penalty, intercept, zero start) minimised by L-BFGS (history 10, strong-Wolfe line search,
    stop at max |gradient| ≤ 1e-4 or 100 iterations, as sklearn's lbfgs), in float64, scored unweighted."""
    import torch

    x = torch.as_tensor(features, dtype=torch.float64, device=device)
    target = torch.as_tensor(y, device=device)
    k = int(y.max()) + 1
    counts = torch.bincount(target, minlength=k).double()
    weight = (y.size / (k * counts))[target]
    weight = weight / weight.sum()
    coef = torch.zeros(x.shape[1], k, dtype=torch.float64, device=device, requires_grad=True)
    bias = torch.zeros(k, dtype=torch.float64, device=device, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [coef, bias], lr=1, max_iter=INFOE_MAX_ITER, history_size=10, tolerance_grad=1e-4,
        tolerance_change=1e-12, line_search_fn="strong_wolfe",
    )

    def closure():
        optimizer.zero_grad()
        nll = torch.nn.functional.cross_entropy(x @ coef + bias, target, reduction="none")
        loss = (weight * nll).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        log_p = torch.log_softmax(x @ coef + bias, dim=1).gather(1, target[:, None])
        return float(-log_p.clamp(min=np.log(_PROB_EPS)).mean())


def _r2(features: np.ndarray, y: np.ndarray) -> float:
    """In-sample R² of least squares with intercept (QLAE paper §4.2: NMI_V = R² for continuous sources)."""
    design = np.column_stack([features, np.ones(y.size)])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = ((y - design @ coef) ** 2).sum()
    return float(1.0 - residual / ((y - y.mean()) ** 2).sum())


def infoe(
    sources: Any,
    latents: Any,
    *,
    discrete_latents: bool,
    infoe_features: str = "standardize",
    continuous_sources: bool = False,
    device: Any = None,
) -> tuple[float, np.ndarray]:
    """InfoE and the per-source NMI_V (Hsu et al. 2023 §4.2, eqs. 13–14).

    For every source, NMI_V = (H0 − H) / H0, where H is the in-sample log-loss of an unregularised multinomial
    logistic regression from the latent features and H0 that of the same fit on all-zero features, which is ln K
    (see below); each is clipped to [0, 1] and InfoE is their mean over usable sources. All latents are used (no
    active-latent pruning). ``continuous_sources=True``: NMI_V is the in-sample R² of least squares with intercept
    on the standardised source instead (QLAE paper §4.2).

    ``infoe_features``: ``"standardize"`` (default; per-column standardised latents, constant columns → 0) or
    ``"onehot"`` (one-hot of every latent's unique values, the authors' standalone code). As in that code,
    one-hot applies to discrete latents only; continuous latents are always standardised.
    ``device``: None fits with sklearn on the CPU (sources in parallel); a torch device (e.g. ``"cuda"``) fits the
    same objective with torch L-BFGS there (:func:`_fit_log_loss_torch`; agrees with sklearn to ~1e-3 in NMI_V).
    Returns (InfoE, per-source NMI_V array with 0 for skipped single-valued sources).
    """
    check_choice("infoe_features", infoe_features, INFOE_FEATURES)
    s, z = check_inputs(sources, latents)
    s_codes, s_card = label_encode_columns(s)
    usable = warn_skipped(s_card)
    features = _onehot(z) if (discrete_latents and infoe_features == "onehot") else standardize(z)

    def nmi_v(i: int) -> float:
        if continuous_sources:
            return float(np.clip(_r2(features, standardize(s[:, i : i + 1].astype(np.float64))[:, 0]), 0, 1))
        # H_V(s|∅): with class_weight='balanced' the intercept-only model's weighted optimum is the uniform
        # distribution, whose unweighted in-sample cross-entropy is exactly ln K (K = classes present). Fitting it,
        # as the reference code does, only adds the optimiser's tolerance to this value.
        h_null = float(np.log(s_card[i]))
        if device is None:
            h_model = _fit_log_loss(features, s_codes[:, i])
        else:
            h_model = _fit_log_loss_torch(features, s_codes[:, i], device)
        return float(np.clip((h_null - h_model) / h_null, 0.0, 1.0))

    per_source = np.zeros(s.shape[1])
    order = np.flatnonzero(usable)
    # One fit per source, overlapping on a small thread pool (lbfgs spends its time in numpy). The matrices are
    # thin (n × tens), so multi-threaded BLAS buys nothing inside a fit, and on a busy machine its spinning threads
    # made each fit ~10x slower in our measurements: one BLAS thread per fit. Both context managers are
    # process-wide, so they wrap the pool rather than each fit.
    workers = max(1, min(len(order), os.cpu_count() or 1)) if device is None else 1
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        if SUPPRESS_CONVERGENCE_WARNINGS:
            warnings.simplefilter("ignore", ConvergenceWarning)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            per_source[order] = list(pool.map(nmi_v, order))
    score = float(per_source[usable].mean()) if usable.any() else 0.0
    return score, per_source


# ----------------------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------------------
def infomec(
    sources: Any,
    latents: Any,
    *,
    discrete_latents: bool,
    ksg_k: int = 3,
    active_rule: str = "range",
    infoe_features: str = "standardize",
    seed: int = 0,
    continuous_sources: bool = False,
    source_bins: int = 20,
    device: Any = None,
) -> dict[str, Any]:
    """InfoMEC = (InfoM, InfoE, InfoC) of latents with respect to discrete (or, by option, continuous) sources.

    Hsu et al. 2023 §4.1–4.2, eqs. 7–9, 13–14 (the defaults); the authors' standalone metric code
    (``kylehkhsu/tripod``) gives the options ``active_rule="iqr"``, ``infoe_features="onehot"``, ``ksg_k=10``.

    Args:
        sources: (n_samples, n_sources) labels; each column is label-encoded by its sorted unique values.
            A single-valued column is skipped with a warning (zero NMI row, excluded from all three scores).
        latents: (n_samples, n_latents) floats (numpy or torch).
        discrete_latents: plug-in MI on label-encoded latents if True, KSG (Ross 2014) if False.
        ksg_k: neighbours for the KSG estimator (paper 3; standalone code 10).
        active_rule: ``"range"`` (paper) or ``"iqr"`` (standalone code); see :func:`active_latents`.
        infoe_features: ``"standardize"`` or ``"onehot"``; see :func:`infoe`.
        seed: ``random_state`` of the KSG jitter.
        continuous_sources: InfoE from least-squares R² (QLAE paper §4.2); for the NMI matrix, which papers
            define for discrete sources only, each source is cut into ``source_bins`` equal-width bins [our choice].
        device: a torch device (e.g. ``"cuda"``) for the discrete MI tables and the InfoE regressions; None = CPU
            with numpy/sklearn; ``"auto"`` = ``"cuda"`` when torch sees a GPU, else None. The KSG estimator
            always runs on the CPU.

    Returns:
        dict: ``{"infom", "infoe", "infoc"}`` floats in [0, 1], ``"nmi"`` (n_sources, n_latents) and ``"active"``
            (n_latents,) bool. Degenerate cases (see :func:`infom_infoc`): no active latent ⇒ InfoM = InfoC = 0
            (InfoE is still computed from all latents, as QLAE paper §4.2 says; with the range rule "no active
            latent" means every latent is constant, so InfoE is 0 too); exactly one active latent ⇒ InfoC = 1.0.
    """
    check_choice("active_rule", active_rule, ACTIVE_RULES)
    check_choice("infoe_features", infoe_features, INFOE_FEATURES)
    device = _auto_device(device)
    s, z = check_inputs(sources, latents)
    usable = label_encode_columns(s)[1] > 1
    binned = bin_columns(s, source_bins) if continuous_sources else s
    # The single-value warning is raised once, by nmi_matrix; infoe would repeat it.
    nmi = nmi_matrix(binned, z, discrete_latents=discrete_latents, ksg_k=ksg_k, seed=seed, device=device)
    active = active_latents(z, discrete_latents=discrete_latents, active_rule=active_rule)
    infom, infoc = infom_infoc(nmi, active, usable)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"source \d+ has a single value", category=RuntimeWarning)
        infoe_score, _ = infoe(
            s, z, discrete_latents=discrete_latents, infoe_features=infoe_features,
            continuous_sources=continuous_sources, device=device,
        )
    return {"infom": infom, "infoe": infoe_score, "infoc": infoc, "nmi": nmi, "active": active}
