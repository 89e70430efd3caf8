"""The five papers' published results as data: ``results.csv``, one row per printed table cell.

Sources (every number transcribed from the papers' printed tables):

- ``qlae``: Hsu et al. 2023, "Disentanglement via Latent Quantization" -- Table 1 (main results), Table 2
  (ablations), Tables 12-15 (full results per dataset, mean ± 95% CI over 7 seeds; App. E); seeds and
  selection in §5.
- ``tripod``: Hsu et al. 2024, "Tripod: Three Complementary Inductive Biases for Disentangled Representation
  Learning" -- Table 1 (3 seeds, no intervals); seeds and selection in §4.
- ``factorqvae``: Baykal, Kandemir, Unal, "Disentanglement with Factor Quantized Variational Autoencoders" --
  Table 1 (three datasets) and Table 2 (codebook design, Shapes3D); no seeds or intervals given.
- ``friede``: Friede et al. 2023, "Learning Disentangled Discrete Representations" -- Table 1 (median MIG), Table 5
  (its [25%, 75%] quartiles), Table 6 (unregularized D-VAE, every metric), Table 7 (semi-supervised discrete
  models); protocol in §5.
- ``cliff``: Barin-Pacela et al. 2025, "Quantized Disentanglement: A Practical Approach" (Cliff) -- Table 2 (balls,
  Spearman MCC) and Table 3 (Shapes3D), mean ± standard error over 10 seeds (App. E, F.3, F.4).

Columns: ``paper, table, method, dataset, metric, value, uncertainty, low, high, n_seeds, note``.

- ``table`` is the number as printed (a string: ``"1"``, ``"12"``). ``method`` is the paper's row name as printed,
  without citation brackets (``"β-VAE [16]"`` -> ``β-VAE``, an ASCII ``beta-VAE`` -> ``β-VAE``)
  and with the ``(ours)`` marker moved to ``note``; FactorQVAE Table 2's rows are named by their codebook,
  ``FactorQVAE (M = 32x1)`` ... ``FactorVQVAE (M = 64x16)``. ``dataset`` is the project's ``data=`` name
  (``shapes3d``, ``mpi3d``, ``falcor3d``, ``isaac3d``, ``dsprites``, ``colour_dsprites``, ``smallnorb``,
  ``cars3d``, ``balls``) or ``aggregated`` (QLAE/Tripod's mean over the four datasets). ``metric`` is the
  project's metric key (``infom``, ``infoe``, ``infoc``, ``dci_d``, ``dci_i``, ``dci_c``, ``mig``, ``sap``,
  ``modularity``, ``factorvae``, ``betavae``, ``mcc``, ``psnr``, ``mse``; Friede et al.'s "DCI" is ``dci_d``).
- **Scale convention**: values are on the scale the project's ``metrics.json`` uses. Scores lie in [0, 1]: the
  percentages of Friede et al. and Cliff (MIG %, "×100") are divided by 100. PSNR is in dB as printed. MSE is the
  per-element MSE: FactorQVAE prints "MSE × 10^4", so its values are multiplied by 1e-4.
- ``uncertainty``: ``ci95`` (QLAE Tables 12-15: ± the 95% t half-width), ``se`` (Cliff: ± the standard error),
  ``quartiles`` (Friede Tables 5-7: ``low``/``high`` = the 25% / 75% quantiles), or ``none``. ``low``/``high`` are
  on the value's scale: value ∓ the half-width for ``ci95``/``se`` (as printed, not clipped to [0, 1]), the
  quartiles for ``quartiles``, empty for ``none``. Friede Table 5 prints only the quartiles; its ``value`` is the
  matching median of Table 1 (said in ``note``).
- ``n_seeds``: seeds per configuration where known (QLAE 7, Tripod 3, Cliff 10; Friede et al.: 300 for D-VAE,
  50 per γ for FactorVAE/FactorDVAE, whose 6 γ × 50 runs are pooled: disentanglement_lib's protocol, which
  their §5 adopts, as the counts are missing from the paper's text); empty where unknown.
- ``note``: ``ours``, ``* from Locatello et al. [25]`` (copied, not re-run by Friede et al.), ``median``, ...

Cells that are not rows: the 20 ``n.a.`` cells of Friede et al. (Table 1: 10, Table 5: 10: the five Locatello
baselines on Shapes3D and MPI3D), and FactorQVAE Table 1's FactorQVAE/Shapes3D MSE, missing in the source text
(Table 2's identical 64x1 row gives 0.6e-4). Not tables, so not here: Cliff's synthetic result (its §3.1),
Tripod's runtime profile, QLAE's Spearman correlations.
"""
from __future__ import annotations

import csv
from importlib import resources

__all__ = ["COLUMNS", "PUBLISHED_TABLES", "load_published"]

COLUMNS = ("paper", "table", "method", "dataset", "metric", "value", "uncertainty", "low", "high", "n_seeds", "note")

# Every (paper, table) with rows in results.csv, in the papers' order; sweeps/ has a sweep for each.
PUBLISHED_TABLES: list[tuple[str, str]] = [
    ("qlae", "1"), ("qlae", "2"), ("qlae", "12"), ("qlae", "13"), ("qlae", "14"), ("qlae", "15"),
    ("tripod", "1"),
    ("factorqvae", "1"), ("factorqvae", "2"),
    ("friede", "1"), ("friede", "5"), ("friede", "6"), ("friede", "7"),
    ("cliff", "2"), ("cliff", "3"),
]

_FLOATS = ("value", "low", "high")


def _parse(row: dict[str, str]) -> dict:
    out: dict = dict(row)
    for key in _FLOATS:
        out[key] = float(row[key]) if row[key] != "" else None
    out["n_seeds"] = int(row["n_seeds"]) if row["n_seeds"] != "" else None
    return out


def load_published(paper: str | None = None, table: str | int | None = None) -> list[dict]:
    """The published cells, optionally of one paper and/or one table (``table`` as printed: ``"12"`` or ``12``).

    Each row is a dict with the CSV's columns: ``value``/``low``/``high`` as floats and ``n_seeds`` as an int,
    None where the cell is empty; the others as strings.
    """
    text = resources.files(__package__).joinpath("results.csv").read_text(encoding="utf-8")
    table = None if table is None else str(table)
    return [_parse(row) for row in csv.DictReader(text.splitlines())
            if (paper is None or row["paper"] == paper) and (table is None or row["table"] == table)]
