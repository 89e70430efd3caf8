"""The claims' outputs: the terminal table, ``claims.json``, ``claims.md`` (the table docs/claims.md includes) and
``claims.png`` (one panel per paper: each claim's paired difference with its interval)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from .catalog import PAPERS
from .statistics import normalise

PAPER_TITLES = {"qlae": "QLAE (Hsu et al. 2023)", "tripod": "Tripod (Hsu et al. 2024)",
                "factorqvae": "FactorQVAE (Baykal et al.)", "friede": "Friede et al. 2023",
                "cliff": "Cliff (Barin-Pacela et al. 2025)",
                "ours": "Own findings (correlated factors, held-out combinations; no paper)"}
METRIC_LABELS = {"infom": "InfoM", "infoe": "InfoE", "infoc": "InfoC", "dci_d": "D", "dci_i": "I", "dci_c": "C",
                 "mig": "MIG", "mcc": "MCC", "psnr": "PSNR", "ood_psnr": "PSNR (out)",
                 "ood_r2_linear": "R² lin (out)", "ood_r2_mlp": "R² MLP (out)"}
VERDICT_COLOURS = {"holds": "green", "inconclusive": "yellow", "contradicted": "red", "incomplete": "grey"}
LEANS = {"positive": "leans the paper's way", "negative": "leans against", "none": "no lean"}


def verdict_text(row: dict) -> str:
    """The verdict, and for an inconclusive claim the way it leans (a lean, not a verdict)."""
    row = normalise(row)
    if row["verdict"] == "inconclusive" and row.get("lean"):
        lean = LEANS.get(row["lean"], row["lean"])
        if row.get("paper") == "ours":  # no paper: the claim's own statement
            lean = lean.replace("the paper's way", "the stated way")
        return f"inconclusive ({lean})"
    return row["verdict"]


def _p(x) -> str:
    return "–" if x is None else "<0.001" if x < 0.001 else f"{x:.3f}"


def _num(x, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.{digits}f}"


def _finite(obj):
    """JSON has no infinities: an unbounded interval's ends are written as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def comparison(row: dict) -> str:
    return f"{row['better']} > {row['worse']}" if not row.get("lower_is_better") else \
        f"{row['better']} < {row['worse']}"


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    conf = rows[0]["confidence"] if rows else 0.95
    table = Table(title=f"claims: paired difference over seeds, {conf:.0%} t interval")
    for col, justify in (("claim", "left"), ("paper", "left"), ("metric", "left"), ("better", "right"),
                         ("worse", "right"), ("diff", "right"), (f"{conf:.0%} interval", "right"),
                         ("Holm p", "right"), ("d (SD)", "right"), ("seeds", "right"), ("verdict", "left")):
        table.add_column(col, justify=justify)
    for r in map(normalise, rows):
        colour = VERDICT_COLOURS.get(r["verdict"], "white")
        table.add_row(f"{r['name']}\n[dim]{comparison(r)}[/dim]", r["paper"],
                      METRIC_LABELS.get(r["metric"], r["metric"]), _num(r["better_mean"]), _num(r["worse_mean"]),
                      _num(r["diff_mean"]), f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]", _p(r.get("p_holm")),
                      _num(r.get("effect_sd"), 2), str(r["n_seeds"]), f"[{colour}]{verdict_text(r)}[/{colour}]")
    Console(width=160).print(table)
    for r in rows:
        for err in r.get("errors", []):
            print(f"  {r['name']}: {err}")


def _percent(level: float) -> str:
    """0.95 -> '95%', 0.991666 -> '99.17%'."""
    return f"{100 * level:.2f}".rstrip("0").rstrip(".") + "%"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _levels(rows: list[dict], sep: str = " / ") -> str:
    """The rows' interval levels, e.g. '95%' or '95% / 99.17%'."""
    return sep.join(_percent(x) for x in sorted({r.get("confidence") or 0.95 for r in rows}))


def _on_data(rows: list[dict]) -> str:
    """' on NAME' for rows of --data NAME ('' for the catalogue's own datasets)."""
    return "".join(sorted({f" on {r['data']}" for r in rows if r.get("data")}))


def summary(rows: list[dict]) -> str:
    """The headline in the verdicts' own words: how many claims hold, are inconclusive (and which way they lean)
    and are contradicted, the seeds behind them and the interval level."""
    rows = [normalise(r) for r in rows]
    count = {v: sum(r["verdict"] == v for r in rows) for v in ("holds", "inconclusive", "contradicted", "incomplete")}
    leaning = sum(r["verdict"] == "inconclusive" and r.get("lean") == "positive" for r in rows)
    def are(n):
        return "is" if n == 1 else "are"

    parts = [f"{count['holds']} {'holds' if count['holds'] == 1 else 'hold'}",
             f"{count['inconclusive']} {are(count['inconclusive'])} inconclusive ({leaning} of them leaning the "
             f"stated way)", f"{count['contradicted']} {are(count['contradicted'])} contradicted"]
    if count["incomplete"]:
        parts.append(f"{count['incomplete']} {are(count['incomplete'])} incomplete")
    seeds = sorted({r["n_seeds"] for r in rows if r.get("n_seeds")})
    text = f"Of {_count(len(rows), 'claim', 'claims')}, " + ", ".join(parts[:-1]) + " and " + parts[-1] + "."
    if seeds:
        text += f" Seeds per claim: {seeds[0]}" + (f" to {seeds[-1]}" if seeds[-1] != seeds[0] else "") + "."
    if rows:
        text += " Intervals: paired t, " + _levels(rows, " and ")
        if any(r.get("sequential") for r in rows):
            text += (" (--seeds auto: every look at the Bonferroni level over its "
                     f"{max((r.get('sequential') or {}).get('max_looks', 1) for r in rows)} possible looks)")
        text += "; p-values Holm-adjusted within each paper."
    return text


def digest(rows: list[dict]) -> str:
    """A short fingerprint of what a rendering shows (each claim's per-seed differences and verdict), stored in the
    figure's metadata: a test can tell whether a committed figure was drawn from committed results."""
    import hashlib

    shown = sorted((r["name"], normalise(r)["verdict"], [round(d, 9) for d in r.get("differences") or []])
                   for r in rows)
    return hashlib.sha256(json.dumps(shown).encode()).hexdigest()[:16]


def markdown(rows: list[dict], timing: dict | None = None) -> str:
    """The :func:`summary`, then per paper: the claim, the published values, the measured means, the difference
    with its interval, its Holm-adjusted p-value within the paper and its size in SDs of the seeds' differences,
    the seeds, the verdict and the CPU time of its runs."""
    rows = [normalise(r) for r in rows]
    out = [summary(rows), ""] if rows else []
    for paper in PAPERS:
        mine = [r for r in rows if r["paper"] == paper]
        if not mine:
            continue
        head = f"### {PAPER_TITLES[paper]}{_on_data(mine)}"
        if timing and paper in timing:
            head += f" — {timing[paper]['elapsed_s'] / 60:.0f} min"
        out += [head, "", f"| claim | metric | published | measured | difference [{_levels(mine)} CI] | Holm p "
                "| d (SD) | seeds | verdict | CPU time |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in mine:
            pub = f"{_num(r['published_better'], 2)} vs {_num(r['published_worse'], 2)}"
            meas = f"{_num(r['better_mean'])} vs {_num(r['worse_mean'])}"
            diff = f"{_num(r['diff_mean'])} [{_num(r['ci_low'])}, {_num(r['ci_high'])}]"
            out.append(f"| `{r['name']}`: {comparison(r)} | {METRIC_LABELS.get(r['metric'], r['metric'])} "
                       f"({r['table']}) | {pub} | {meas} | {diff} | {_p(r.get('p_holm'))} | "
                       f"{_num(r.get('effect_sd'), 2)} | {r['n_seeds']} | **{verdict_text(r)}** | "
                       f"{r['wall_s'] / 60:.0f} min |")
        out.append("")
    return "\n".join(out)


def figure(rows: list[dict], path: Path) -> Path | None:
    """One panel per paper; per claim the mean difference and its interval, 0 dashed, coloured by verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    papers = [p for p in PAPERS if any(r["paper"] == p and r["diff_mean"] is not None for r in rows)]
    if not papers:
        return None
    heights = [sum(r["paper"] == p for r in rows) for p in papers]
    fig, axes = plt.subplots(len(papers), 1, figsize=(8, 0.35 * sum(heights) + 1.2 * len(papers)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    rows = [normalise(r) for r in rows]
    colours = {"holds": "tab:green", "inconclusive": "goldenrod", "contradicted": "tab:red", "incomplete": "grey"}
    for ax, paper in zip(axes[:, 0], papers):
        mine = [r for r in rows if r["paper"] == paper][::-1]
        for y, r in enumerate(mine):
            if r["diff_mean"] is None:
                continue
            c = colours[r["verdict"]]
            lo = r["ci_low"] if r["ci_low"] is not None and math.isfinite(r["ci_low"]) else r["diff_mean"]
            hi = r["ci_high"] if r["ci_high"] is not None and math.isfinite(r["ci_high"]) else r["diff_mean"]
            ax.plot([lo, hi], [y, y], color=c, lw=2)
            ax.plot(r["diff_mean"], y, "o", color=c)
            for d in r.get("differences", []):
                ax.plot(d, y, "|", color=c, alpha=0.5, ms=8)
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.set_yticks(range(len(mine)))
        ax.set_yticklabels([f"{comparison(r)} ({METRIC_LABELS.get(r['metric'], r['metric'])})" for r in mine],
                           fontsize=8)
        ax.set_title(PAPER_TITLES[paper] + _on_data(mine), fontsize=10, loc="left")
    present = [v for v in colours if any(r["verdict"] == v for r in rows)]
    axes[0, 0].legend(handles=[plt.Line2D([], [], color=colours[v], marker="o", lw=2, label=v) for v in present],
                      fontsize=7, loc="best", title="verdict", title_fontsize=7)
    axes[-1, 0].set_xlabel(f"difference better − worse (same seed): mean and {_levels(rows)} interval\n"
                           "ticks: the seeds' differences")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, metadata={"Description": f"{summary(rows)} Rows digest: {digest(rows)}"})
    plt.close(fig)
    return path


RESULTS_FORMAT = 1  # results.json's layout (a reader checks it)


def run_provenance(results: dict) -> list[dict]:
    """Where the runs behind the rows came from, read off each run's ``metrics.json``: one entry per distinct
    (commit, dirty, CPU, vector ISA, torch) with its number of runs. A resumed run set trained across sessions
    shows every machine and commit it was trained on."""
    groups: dict[tuple, int] = {}
    for result in results.values():
        m = result.metrics
        if not m:
            continue
        versions, where = m.get("versions") or {}, m.get("machine") or {}
        key = (versions.get("git_commit"), versions.get("git_dirty"), where.get("cpu"), where.get("vector_isa"),
               versions.get("torch"))
        groups[key] = groups.get(key, 0) + 1
    return [{"commit": c, "dirty": d, "cpu": cpu, "vector_isa": isa, "torch": t, "runs": n}
            for (c, d, cpu, isa, t), n in sorted(groups.items(), key=lambda kv: -kv[1])]


def results_record(rows: list[dict], timing: dict | None, settings: dict, runs: list[dict] | None = None) -> dict:
    """``results.json``: every claim's row (its per-seed values of both sides included) with what produced them: the
    commit, the machine (CPU model, cores, instruction set), the software versions, the command's settings (seeds,
    jobs, evaluation samples, overrides), each paper's elapsed time and where the runs themselves were trained
    (:func:`run_provenance`). ``--render`` redraws the tables from it."""
    from ..foundation.provenance import machine, software_versions

    versions = software_versions()
    return {"format": RESULTS_FORMAT, "commit": versions.get("git_commit"), "dirty": versions.get("git_dirty"),
            "machine": machine(), "versions": versions, "settings": settings, "timing": timing or {},
            "runs": runs or [], "claims": _finite(rows)}


BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


def markers(rows: list[dict]) -> tuple[str, str]:
    """The page markers the rows' tables go between: ``claims:begin``/``claims:end``, or
    ``claims NAME:begin``/``claims NAME:end`` for rows of ``--data NAME``."""
    data = sorted({r.get("data") for r in rows if r.get("data")})
    if not data:
        return BEGIN, END
    name = "+".join(data)
    return f"<!-- claims {name}:begin -->", f"<!-- claims {name}:end -->"


def render_into_page(rows: list[dict], page: Path, timing: dict | None = None) -> Path:
    """Replace the tables between ``page``'s :func:`markers` lines by :func:`markdown` of the rows (the prose
    around them stays as written)."""
    from ..foundation.sections import replace_section

    begin, end = markers(rows)
    page = Path(page)
    try:
        text = replace_section(page.read_text(encoding="utf-8"), begin, end, markdown(rows, timing))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--page {page}: {exc}") from None
    page.write_text(text, encoding="utf-8")
    return page


def render(rows: list[dict], out: Path, timing: dict | None = None) -> dict[str, Path]:
    """claims.md and claims.png in ``out`` from claim rows (no training)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / "claims.md"}
    paths["md"].write_text(markdown(rows, timing))
    png = figure(rows, out / "claims.png")
    if png is not None:
        paths["png"] = png
    return paths


def write(rows: list[dict], out: Path, timing: dict | None = None, settings: dict | None = None,
          runs: list[dict] | None = None) -> dict[str, Path]:
    """claims.json (a list: one object per claim), results.json (:func:`results_record`), timing.json (each paper's
    elapsed time), claims.md, claims.png."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "claims.json", "results": out / "results.json", "timing": out / "timing.json"}
    paths["json"].write_text(json.dumps(_finite(rows), indent=2, ensure_ascii=False))
    paths["results"].write_text(json.dumps(results_record(rows, timing, settings or {}, runs), indent=2,
                                           ensure_ascii=False, default=str))
    paths["timing"].write_text(json.dumps(timing or {}, indent=2))
    paths.update(render(rows, out, timing))
    return paths


def load_results(path: Path) -> tuple[list[dict], dict]:
    """The claim rows and timing of a ``results.json`` (or of an older ``claims.json`` list), their intervals,
    verdicts and Holm p-values recomputed from the stored per-seed differences."""
    from .assess import adjust_within_papers, with_interval
    from .sequential import correct_for_looks

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--render {path}: not a readable results file ({' '.join(str(exc).split())})") from None
    if isinstance(data, list):
        rows, timing = data, {}
    elif isinstance(data, dict) and isinstance(data.get("claims"), list):
        if data.get("format", RESULTS_FORMAT) > RESULTS_FORMAT:
            raise ValueError(f"--render {path}: results format {data['format']} is newer than this package reads "
                             f"({RESULTS_FORMAT})")
        rows, timing = data["claims"], data.get("timing") or {}
    else:
        raise ValueError(f"--render {path}: expected results.json (an object with 'claims') or claims.json (a list)")
    # recomputed as the run computed them: a --seeds auto row's p-value corrected for its looks again
    rows = [correct_for_looks(with_interval(normalise(dict(r)), r.get("confidence") or 0.95)) for r in rows]
    return adjust_within_papers(rows), timing
