"""Rendering the aggregated groups: markdown and LaTeX (one paper-style table per dataset, best per column in bold)
and CSV (one flat row per group, every statistic in every mode).

Bolding follows the QLAE paper (App. E): within a dataset's table, an entry is bold when its interval overlaps the
interval with the highest upper end in its column (lowest lower end for lower-is-better metrics such as MSE). The
interval is the one printed: mean ± 95% CI, mean ± SE, or [25%, 75%] quartiles; a single run is a point.

A report over several datasets ends with an ``aggregated`` table (CSV rows with ``data=aggregated``): the mean over
the datasets, :func:`.aggregate.aggregate_across_data`; the lines about what it leaves out follow it.
"""
from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .aggregate import AGGREGATED, STATS, Group, Param, Stats, format_value, higher_is_better, short_names
from .compare import Comparison, Published
from .runs import Run

# the metric labels of disentangle.metrics.suite.SCALAR_LABELS (not imported here: that module pulls in torch)
_IN_LABELS = {
    "infom": "InfoM", "infoe": "InfoE", "infoc": "InfoC", "dci_d": "D", "dci_i": "I", "dci_c": "C",
    "mig": "MIG", "sap": "SAP", "modularity": "Mod", "explicitness": "Expl", "mcc": "MCC", "rotation": "Rot (deg)",
    "factorvae": "FactorVAE", "betavae": "BetaVAE", "psnr": "PSNR (dB)", "mse": "MSE",
    "r2_linear": "R² lin", "r2_mlp": "R² MLP",
    "delta_st": "Δ_ST", "delta_st_loss": "Δ_ST (loss)", "delta_st_elbo": "Δ_ST (ELBO)",
}
# a data.split run's held-out scores (metrics.json's ood section) sit right after their in-distribution column
_OUT_OF_DISTRIBUTION = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "mig", "sap", "modularity",
                        "explicitness", "mcc", "psnr", "mse", "r2_linear", "r2_mlp")
LABELS = {}
for _key, _label in _IN_LABELS.items():
    LABELS[_key] = _label
    if _key in _OUT_OF_DISTRIBUTION:
        LABELS[f"ood_{_key}"] = f"{_label} (out)"
METRIC_ORDER = tuple(LABELS)
STAT_TITLES = {
    "ci95": "mean ± 95% confidence interval (Student's t) over seeds",
    "se": "mean ± standard error over seeds",
    "quartiles": "median [25%, 75%] over seeds",
}
AGGREGATE_TITLES = {
    "ci95": "mean over datasets of the per-dataset means ± sqrt(sum of the squared per-dataset 95% half-widths) / k",
    "se": "mean over datasets of the per-dataset means ± sqrt(sum of the squared per-dataset standard errors) / k",
    "quartiles": "mean over datasets of the per-dataset medians [mean 25%, mean 75%]",
}


@dataclass
class Report:
    """Everything a rendering needs."""

    groups: list[Group]
    params: list[Param]
    metrics: list[str]
    stat: str = "ci95"
    published: Published | None = None
    left_out: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # selection lines
    warnings: list[str] = field(default_factory=list)
    title: str = "Report"
    figure: str | None = None
    pooled: list[Param] = field(default_factory=list)
    aggregation: list[str] = field(default_factory=list)  # lines about the aggregated rows (what is left out)
    rules: list[str] = field(default_factory=list)        # the per-run and per-configuration rules, their source

    def __post_init__(self):
        self.names = short_names(self.params)
        self.comparisons: dict[tuple[int, str], Comparison] = {}
        if self.published is not None:
            for i, g in enumerate(self.groups):
                for m in self.metrics:
                    c = self.published.compare(g, m, self.stat)
                    if c is not None:
                        self.comparisons[(i, m)] = c

    def by_data(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, g in enumerate(self.groups):
            out.setdefault(g.data, []).append(i)
        return out

    def aggregate_title(self) -> str:
        """What the ``aggregated`` table holds: over which datasets, and its statistics."""
        over = next((g.over for g in self.groups if g.over), ())
        return (f"{AGGREGATED} over {len(over)} datasets ({', '.join(over)}): {AGGREGATE_TITLES[self.stat]}; "
                f"n counts the runs on all of them")

    def columns_for(self, indices: Sequence[int]) -> list[str]:
        return [m for m in self.metrics if any(m in self.groups[i].stats for i in indices)]

    def bold(self, indices: Sequence[int], metric: str) -> set[int]:
        """Which of ``indices`` are bold in ``metric``'s column (needs at least two entries)."""
        entries = [(i, self.groups[i].stats[metric].interval(self.stat)) for i in indices
                   if metric in self.groups[i].stats and math.isfinite(self.groups[i].stats[metric].mean)]
        if len(entries) < 2:
            return set()
        if higher_is_better(metric):
            best_low = max(entries, key=lambda e: e[1][1])[1][0]
            return {i for i, (_, hi) in entries if hi >= best_low}
        best_high = min(entries, key=lambda e: e[1][0])[1][1]
        return {i for i, (lo, _) in entries if lo <= best_high}


# -- numbers -----------------------------------------------------------------------------------------------------------
def fmt(metric: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if metric == "mse":
        return f"{value:.2e}"
    if metric.startswith("delta_st"):
        return f"{value:.3g}"
    if metric in ("psnr", "rotation"):
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell_text(metric: str, s: Stats, stat: str, n_group: int, pm: str = "±") -> tuple[str, str]:
    """(centre, spread) texts of one cell: ("0.95", "± 0.02") or ("0.95", "[0.93, 0.97]")."""
    centre = fmt(metric, s.center(stat))
    if stat == "quartiles":
        spread = f"[{fmt(metric, s.q25)}, {fmt(metric, s.q75)}]" if s.n > 1 else ""
    else:
        half = s.ci95 if stat == "ci95" else s.se
        spread = f"{pm} {fmt(metric, half)}" if math.isfinite(half) else ""
    if s.n != n_group:
        spread = (spread + f" (n={s.n})").strip()
    return centre, spread


def published_text(metric: str, c: Comparison, pm: str = "±", delta: str = "Δ") -> str:
    if c.low is not None and c.high is not None:
        if c.uncertainty in ("quartiles",) or not math.isclose(c.published - c.low, c.high - c.published,
                                                               rel_tol=1e-6, abs_tol=1e-9):
            spread = f" [{fmt(metric, c.low)}, {fmt(metric, c.high)}]"
        else:
            spread = f" {pm} {fmt(metric, (c.high - c.low) / 2)}"
    else:
        spread = ""
    sign = "+" if c.diff >= 0 else "−"
    return f"paper {fmt(metric, c.published)}{spread}; {delta} {sign}{fmt(metric, abs(c.diff))}, {c.flag()}"


def header(metric: str, arrows: tuple[str, str] = ("↑", "↓")) -> str:
    return f"{LABELS.get(metric, metric)} {arrows[0] if higher_is_better(metric) else arrows[1]}"


# -- markdown ----------------------------------------------------------------------------------------------------------
def to_markdown(rep: Report) -> str:
    lines = [f"# {rep.title}", ""]
    own = [g for g in rep.groups if not g.over]
    n_runs = sum(g.n for g in own)
    summary = (f"{n_runs} run{'s' * (n_runs != 1)} in {len(own)} group{'s' * (len(own) != 1)}; "
               f"{STAT_TITLES[rep.stat]}.")
    if rep.pooled:
        summary += f" Pooled with the seeds: {', '.join(p.key for p in rep.pooled)}."
    if rep.published is not None:
        summary += (" Published values from " + ", ".join(sorted({f"{r['paper']}:{r['table']}"
                                                                    for r in rep.published.rows})) +
                    "; Δ = ours − paper; in/out: ours inside/outside the paper's interval "
                    "((ours): the paper's value inside/outside our interval, where it prints none).")
    lines += [summary, "", "Bold: the interval overlaps the best one in its column (QLAE App. E).", ""]
    if rep.rules:
        lines += [*(f"- {line[0].upper()}{line[1:]}" for line in rep.rules), ""]
    for data, indices in rep.by_data().items():
        metrics = rep.columns_for(indices)
        bold = {m: rep.bold(indices, m) for m in metrics}
        head = ["model", *(rep.names[p] for p in rep.params), "n", *(header(m) for m in metrics)]
        lines += [f"## {data}", ""]
        if rep.groups[indices[0]].over:
            lines += [rep.aggregate_title()[0].upper() + rep.aggregate_title()[1:] + ".", ""]
        lines += ["| " + " | ".join(head) + " |",
                  "|" + "---|" * (1 + len(rep.params)) + "---:|" + "---:|" * len(metrics)]
        for i in indices:
            g = rep.groups[i]
            cells = [g.model, *(format_value(g.params.get(p.key)) for p in rep.params), str(g.n)]
            for m in metrics:
                s = g.stats.get(m)
                if s is None:
                    cells.append("–")
                    continue
                centre, spread = cell_text(m, s, rep.stat, g.n)
                text = f"{centre} {spread}".strip()
                if i in bold[m]:
                    text = f"**{text}**"
                c = rep.comparisons.get((i, m))
                if c is not None:
                    text += f" ({published_text(m, c)})"
                cells.append(text)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        notes = [f"- {g.model}: {g.note}" for g in (rep.groups[i] for i in indices) if g.note]
        if rep.groups[indices[0]].over:
            notes += [f"- {line}" for line in rep.aggregation]
        lines += ["", *notes, ""] if notes else [""]
    if rep.aggregation and not any(g.over for g in rep.groups):
        lines += [f"## {AGGREGATED}", "", "No group is on every dataset.", "",
                  *(f"- {line}" for line in rep.aggregation), ""]
    if rep.figure:
        lines += [f"Figure: `{rep.figure}`", ""]
    if rep.notes:
        lines += ["## Selection", "", *(f"- {n}" for n in rep.notes), ""]
    if rep.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in rep.warnings), ""]
    if rep.left_out:
        lines += ["## Runs left out", "", *(f"- `{r.path}`: {r.error}" for r in rep.left_out), ""]
    return "\n".join(lines).rstrip() + "\n"


# -- LaTeX -------------------------------------------------------------------------------------------------------------
_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "Δ": r"$\Delta$", "β": r"$\beta$",
        "–": "--", "−": "$-$", "±": r"$\pm$"}


def tex(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def to_latex(rep: Report) -> str:
    out = [f"% {tex(rep.title)}: {STAT_TITLES[rep.stat]} (generated by python -m disentangle.report)",
           "% needs \\usepackage{booktabs}", *(f"% {line}" for line in rep.rules)]
    for data, indices in rep.by_data().items():
        metrics = rep.columns_for(indices)
        bold = {m: rep.bold(indices, m) for m in metrics}
        spec = "l" * (1 + len(rep.params)) + "r" + "c" * len(metrics)
        head = ["model", *(tex(rep.names[p]) for p in rep.params), "$n$",
                *(tex(LABELS.get(m, m)) + (r" $\uparrow$" if higher_is_better(m) else r" $\downarrow$")
                  for m in metrics)]
        caption = rep.aggregate_title() if rep.groups[indices[0]].over else f"{data}: {STAT_TITLES[rep.stat]}"
        out += ["", r"\begin{table}[t]", r"\centering", rf"\caption{{{tex(caption)}.}}",
                rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(head) + r" \\", r"\midrule"]
        for i in indices:
            g = rep.groups[i]
            cells = [tex(g.model), *(tex(format_value(g.params.get(p.key))) for p in rep.params), str(g.n)]
            for m in metrics:
                s = g.stats.get(m)
                if s is None:
                    cells.append("--")
                    continue
                centre, spread = cell_text(m, s, rep.stat, g.n)
                text = tex(f"{centre} {spread}".strip())
                if i in bold[m]:
                    text = rf"\textbf{{{text}}}"
                c = rep.comparisons.get((i, m))
                if c is not None:
                    text += " {\\footnotesize(" + tex(published_text(m, c)) + ")}"
                cells.append(text)
            out.append(" & ".join(cells) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    for line in [*rep.notes, *rep.aggregation, *rep.warnings]:
        out.append(f"% {line}")
    for r in rep.left_out:
        out.append(f"% left out: {r.path}: {r.error}")
    return "\n".join(out) + "\n"


# -- CSV ---------------------------------------------------------------------------------------------------------------
def csv_columns(rep: Report) -> list[str]:
    cols = ["model", "data", *(p.key for p in rep.params), "n"]
    for m in rep.metrics:
        cols += [f"{m}_{s}" for s in STATS]
        if rep.published is not None:
            cols += [f"{m}_paper", f"{m}_paper_low", f"{m}_paper_high", f"{m}_diff", f"{m}_inside"]
    return cols


def csv_rows(rep: Report) -> list[list]:
    """One row per group in :func:`csv_columns` order; undefined numbers are None."""
    rows = []
    for i, g in enumerate(rep.groups):
        row = [g.model, g.data, *(_plain(g.params.get(p.key)) for p in rep.params), g.n]
        for m in rep.metrics:
            s = g.stats.get(m)
            row += [_num(getattr(s, k)) if s is not None else None for k in STATS]
            if rep.published is not None:
                c = rep.comparisons.get((i, m))
                row += ([c.published, c.low, c.high, c.diff, None if c.inside is None else int(c.inside)]
                        if c is not None else [None] * 5)
        rows.append(row)
    return rows


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _plain(value):
    return format_value(value) if isinstance(value, tuple) else value


def to_csv(rep: Report) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(csv_columns(rep))
    for row in csv_rows(rep):
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


RENDERERS = {"md": to_markdown, "csv": to_csv, "latex": to_latex}
