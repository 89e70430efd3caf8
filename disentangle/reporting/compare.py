"""Published numbers next to ours: which printed row a group is, the difference, and whether it falls in the interval.

The published numbers are rows of the schema ``paper,table,method,dataset,metric,value,uncertainty,low,high,
n_seeds,note`` (:func:`disentangle.published.load_published`, or a CSV file of the same columns). A group's model
is looked up under the paper's printed method name (:data:`METHOD_NAMES`; names compare without case, spaces,
hyphens, "(ours)" and footnote marks, and β = beta).

"Inside" means our estimate (the mean, or the median with ``--stat quartiles``) lies in the published interval
``[low, high]``. Where the paper prints no interval (Tripod, FactorQVAE tables), the check is the other way round:
whether the published value lies in our interval; ``basis`` says which.
"""
from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .aggregate import Group, Stats

COLUMNS = ("paper", "table", "method", "dataset", "metric", "value", "uncertainty", "low", "high", "n_seeds", "note")
PAPERS = ("qlae", "tripod", "factorqvae", "friede", "cliff")

# project model name -> the printed method name(s) in the papers' result tables (first = the usual one);
# a model not listed is looked up under its own name
METHOD_NAMES: dict[str, tuple[str, ...]] = {
    # QLAE paper (Tables 1, 2, 12–15)
    "ae": ("AE",),
    "betavae": ("β-VAE",),
    "betatcvae": ("β-TCVAE",),
    "bioae": ("BioAE",),
    "vqvae": ("VQ-VAE",),
    "vqvae_wd": ("VQ-VAE w/ weight decay",),
    "qlae": ("QLAE",),
    "qlae_global_codebook": ("QLAE w/ global codebook",),
    "qlae_no_wd": ("QLAE w/o weight decay",),
    "infowgan_gp": ("InfoWGAN-GP",),
    "qlinfowgan_gp": ("QLInfoWGAN-GP",),
    "qlinfowgan_gp_no_wd": ("QLInfoWGAN-GP w/o w.d.", "QLInfoWGAN-GP w/o weight decay"),
    # Tripod paper (Table 1)
    "tripod": ("Tripod",),
    "tripod_naive": ("Tripod (naive)",),
    "tripod_no_nhp": ("Tripod w/o NHP",),
    "tripod_no_klm": ("Tripod w/o KLM",),
    "tripod_finer": ("Tripod w/ finer quantization",),
    # FactorQVAE paper (Tables 1, 2): its own versions of the baselines
    "ae_fq": ("AE",),
    "betavae_fq": ("β-VAE", "beta-VAE"),
    "bioae_fq": ("BioAE",),
    "qlae_fq": ("QLAE",),
    "factorvae": ("FactorVAE",),
    "dvae": ("dVAE",),
    "qvae": ("QVAE",),
    "factordvae": ("FactordVAE",),
    "factorqvae": ("FactorQVAE",),
    # Friede et al. (Tables 1, 5–7); Table 7 abbreviates FactorDVAE as F-DVAE, (M) = masked attention
    "vae_friede": ("VAE",),
    "dvae_friede": ("D-VAE",),
    "factorvae_friede": ("FactorVAE",),
    "factordvae_friede": ("FactorDVAE", "F-DVAE"),
    "dvae_friede_masked": ("D-VAE (M)",),
    "factordvae_friede_masked": ("FactorDVAE (M)", "F-DVAE (M)"),
    # the rows Friede et al. copy from Locatello et al. (starred), rerun on the same protocol
    "betavae_friede": ("β-VAE",),
    "betatcvae_friede": ("β-TCVAE",),
    "betatcvae_friede_chen": ("β-TCVAE",),
    "dip_vae_i_friede": ("DIP-VAE-I",),
    "dip_vae_ii_friede": ("DIP-VAE-II",),
    "annealed_vae_friede": ("AnnealedVAE",),
}
SELECTION_NAME = "Selection"  # Friede Table 1's row for the Δ_ST-selected model
# the datasets the papers' "aggregated" rows (QLAE Tables 1-2, Tripod Table 1) are the mean over
PAPER_AGGREGATE_DATA = ("shapes3d", "mpi3d", "falcor3d", "isaac3d")


def normalize(name: str) -> str:
    """A printed method name in comparable form: "β-VAE" = "beta-VAE" = "betavae", "QLAE (ours)" = "qlae"."""
    text = str(name).lower().replace("β", "beta").replace("∗", "").replace("*", "")
    text = re.sub(r"\(ours\)|\[\d+\]", "", text)
    return re.sub(r"[^a-z0-9()/]+", "", text).replace("()", "")


def method_names(model: str, config: dict | None = None) -> tuple[str, ...]:
    """The printed names a model may go by, most specific first; ``config`` (a run's flat config) names the
    FactorQVAE paper's Table 2 rows by their codebook, ``FactorQVAE (M = 64x1)`` / ``FactorVQVAE (M = 64x8)``."""
    if model.startswith("selection:"):
        return (SELECTION_NAME,)
    names = METHOD_NAMES.get(model, ()) + (model,)
    size, dim = ((config or {}).get(f"model.latent.{k}") for k in ("codebook_size", "code_dim"))
    if model == "factorqvae" and size is not None and dim is not None:
        names = (f"{'FactorQVAE' if dim == 1 else 'FactorVQVAE'} (M = {size}x{dim})", *names)
    return names


def paper_name(model: str) -> str:
    return method_names(model)[0]


# -- the published rows ----------------------------------------------------------------------------------------------
def parse_tables(specs: Iterable[str]) -> list[tuple[str, str | None]]:
    """``["qlae:12", "qlae:13,friede:1", "tripod"]`` -> ``[("qlae", "12"), ("qlae", "13"), ("friede", "1"),
    ("tripod", None)]`` (no table = every table of that paper)."""
    out = []
    for spec in specs:
        for item in filter(None, (s.strip() for s in str(spec).split(","))):
            paper, _, table = item.partition(":")
            paper = paper.strip().lower()
            if paper not in PAPERS:
                raise ValueError(f"--compare-paper: unknown paper {paper!r} in {item!r}; choose from "
                                 f"{', '.join(PAPERS)} (as PAPER:TABLE, e.g. qlae:12)")
            out.append((paper, table.strip() or None))
    return out


def read_published_csv(path: Path | str) -> list[dict]:
    """Rows of a published-numbers CSV (the package file's columns), numbers parsed (empty = None)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("paper", "table", "method", "dataset", "metric", "value") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a published-numbers CSV (no column {', '.join(missing)})")
        return [_typed(row) for row in reader]


def _typed(row: dict) -> dict:
    out = dict(row)
    for key in ("value", "low", "high"):
        out[key] = _number(row.get(key))
    n = _number(row.get("n_seeds"))
    out["n_seeds"] = int(n) if n is not None else None
    out["table"] = str(row.get("table", "")).strip()
    out["uncertainty"] = (row.get("uncertainty") or "none").strip() or "none"
    return out


def _number(value) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def load_rows(tables: Sequence[tuple[str, str | None]], path: Path | str | None = None) -> list[dict]:
    """The published rows of ``tables``: from ``path`` (a CSV of the same columns) or from the package's data via
    :func:`disentangle.published.load_published`. ValueError (one line) for a table with no rows."""
    if path is not None:
        every = read_published_csv(path)

        def fetch(paper, table):
            return [r for r in every if r["paper"] == paper and (table is None or r["table"] == table)]
    else:
        try:
            from disentangle.published import load_published
        except ImportError as exc:
            raise ValueError(f"--compare-paper: the published numbers are not available ({exc}); "
                             f"pass a CSV with --published FILE") from None

        def fetch(paper, table):
            return [_typed(r) for r in load_published(paper=paper, table=table)]
    rows = []
    for paper, table in tables:
        found = fetch(paper, table)
        if not found:
            known = sorted({f"{r['paper']}:{r['table']}" for r in (every if path is not None else _all_tables())
                            if r["paper"] == paper}, key=_table_order)
            raise ValueError(f"--compare-paper: no published numbers for {paper}:{table}; "
                             f"tables of {paper}: {', '.join(known) or 'none'}")
        rows += found
    return rows


def _all_tables() -> list[dict]:
    from disentangle.published import load_published

    return load_published()


def _table_order(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class Comparison:
    published: float
    low: float | None
    high: float | None
    uncertainty: str
    ours: float
    diff: float                 # ours - published
    inside: bool | None         # None: no interval on either side
    basis: str                  # "published": ours in the paper's interval; "ours": the paper's value in ours
    source: str                 # "qlae:12 QLAE"

    def flag(self) -> str:
        if self.inside is None:
            return "n/a"
        word = "in" if self.inside else "out"
        return word if self.basis == "published" else f"{word} (ours)"


class Published:
    """The published rows indexed by (method, dataset, metric); the first table given wins, and a row with an
    interval wins over one without."""

    def __init__(self, rows: Sequence[dict]):
        self.rows = list(rows)
        self.index: dict[tuple[str, str, str], dict] = {}
        for r in self.rows:
            key = (normalize(r["method"]), str(r["dataset"]).lower(), str(r["metric"]))
            old = self.index.get(key)
            if old is None or (not _has_interval(old) and _has_interval(r)):
                self.index[key] = r

    def lookup(self, model: str, data: str, metric: str, config: dict | None = None) -> dict | None:
        for name in method_names(model, config):
            row = self.index.get((normalize(name), data.lower(), metric))
            if row is not None:
                return row
        return None

    def compare(self, group: Group, metric: str, stat: str) -> Comparison | None:
        row = self.lookup(group.model, group.data, metric, group.runs[0].params if group.runs else None)
        s = group.stats.get(metric)
        if row is None or s is None or row.get("value") is None:
            return None
        return compare_value(s, row, stat)


def _has_interval(row: dict) -> bool:
    return row.get("low") is not None and row.get("high") is not None


def compare_value(stats: Stats, row: dict, stat: str) -> Comparison:
    """Our ``stats`` (centre and interval for ``stat``) against one published row."""
    ours = stats.center(stat)
    published = float(row["value"])
    low, high = row.get("low"), row.get("high")
    if low is not None and high is not None:
        inside, basis = bool(min(low, high) <= ours <= max(low, high)), "published"
    else:
        lo, hi = stats.interval(stat)
        defined = stats.n > 1 and lo < hi
        inside, basis = (bool(lo <= published <= hi) if defined else None), "ours"
    source = f"{row.get('paper', '?')}:{row.get('table', '?')} {row.get('method', '?')}"
    return Comparison(published, low, high, str(row.get("uncertainty") or "none"), ours, ours - published,
                      inside, basis, source)
