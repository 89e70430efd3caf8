"""A sweep's W&B dashboard: the per-configuration table, the two standard panels drawn as one picture (a metric
against the training step per configuration; the final metric against a hyperparameter) and, online, the same
panels saved as a W&B workspace grouped by ``config_key`` (the wandb-workspaces package, an API key)."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from .aggregate import Group, format_value
from .figures import save_figure
from .runs import read_history
from .tables import Report

# the evaluation metrics the workspace plots against the step, in this order
WORKSPACE_METRICS = ("infom", "infoe", "infoc", "dci_d", "dci_i", "dci_c", "psnr")


def configuration_key(run_path: Path) -> str | None:
    """The run's ``config_key`` (all hyperparameters but the seed;
    :func:`disentangle.runtime.loggers.config_key`): from its W&B record when it has one, else computed from
    its saved config (``.hydra/config.yaml``)."""
    try:
        return str(json.loads((Path(run_path) / "wandb_run.json").read_text())["config"]["config_key"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        from omegaconf import OmegaConf

        from ..runtime.loggers import config_key

        return config_key(OmegaConf.to_container(OmegaConf.load(Path(run_path) / ".hydra" / "config.yaml")))
    except Exception:  # noqa: BLE001 - no saved config: no key
        return None


def _wandb_id(run_path: Path) -> str | None:
    try:
        return str(json.loads((Path(run_path) / "wandb_run.json").read_text())["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def configuration_table(rep: Report) -> tuple[list[str], list[list]]:
    """One row per configuration of the report (its non-aggregated groups): ``config_key`` (what W&B groups the
    runs by), model, data, the hyperparameters that vary, the number of seeds, the seeds, the W&B run ids, and
    each metric's centre (the report's statistic) and spread (min, max over the seeds)."""
    params = [p.key for p in rep.params]
    columns = ["config_key", "model", "data", *params, "n", "seeds", "wandb_runs"]
    for m in rep.metrics:
        columns += [m, f"{m}_min", f"{m}_max"]
    rows = []
    for g in rep.groups:
        if g.over:  # an aggregated row is a mean over datasets, not a configuration
            continue
        keys = sorted({k for k in (configuration_key(r.path) for r in g.runs) if k})
        row = [",".join(keys) or None, g.model, g.data, *(_plain(g.params.get(k)) for k in params), g.n,
               ",".join(str(r.seed) for r in g.runs), ",".join(i for i in (_wandb_id(r.path) for r in g.runs) if i)]
        for m in rep.metrics:
            s = g.stats.get(m)
            values = [v for v in (s.values if s is not None else []) if math.isfinite(v)]
            row += [None if s is None else _finite(s.center(rep.stat)),
                    min(values) if values else None, max(values) if values else None]
        rows.append(row)
    return columns, rows


def _plain(value):
    return format_value(value) if isinstance(value, tuple) else value


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _curves(group: Group, metric: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps and, per step, the mean, min and max of ``metric`` over the group's runs (their periodic and final
    evaluations, ``metrics_history.jsonl``)."""
    by_step: dict[int, list[float]] = {}
    for run in group.runs:
        history, _ = read_history(Path(run.path) / "metrics_history.jsonl")
        for e in history or ():
            if e.step is not None and metric in e.metrics:
                by_step.setdefault(e.step, []).append(e.metrics[metric])
    steps = sorted(by_step)
    return (steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], [min(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])


def numeric_param(rep: Report) -> str | None:
    """The first varying hyperparameter with numeric values: the x axis of the final-metric panel."""
    for p in rep.params:
        values = [g.params.get(p.key) for g in rep.groups if not g.over]
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return p.key
    return None


def dashboard_figure(rep: Report, path: Path | str, metric: str = "infom") -> Path | None:
    """The two standard panels of a sweep's dashboard, per dataset: ``metric`` against the training step, one line
    per configuration (mean over seeds, the band from min to max), and the final ``metric`` of each configuration
    against the first numeric hyperparameter that varies (or per configuration when none does), its seeds as dots.
    None when no run has the metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in rep.groups if not g.over and metric in g.stats]
    if not groups:
        return None
    datasets = list(dict.fromkeys(g.data for g in groups))
    x_key = numeric_param(rep)
    fig, axes = plt.subplots(len(datasets), 2, squeeze=False, figsize=(11, 3.6 * len(datasets)))
    for row, data in enumerate(datasets):
        mine = [g for g in groups if g.data == data]
        curve_ax, final_ax = axes[row]
        for k, g in enumerate(mine):
            steps, mean, low, high = _curves(g, metric)
            if not steps:
                continue
            label = g.model + _param_text(g, rep, skip=())
            curve_ax.plot(steps, mean, marker="o", ms=3, color=f"C{k % 10}", label=label)
            curve_ax.fill_between(steps, low, high, color=f"C{k % 10}", alpha=0.2)
        curve_ax.set(title=f"{data}: eval/{metric} vs step (mean, min-max over seeds)", xlabel="trainer/global_step",
                     ylabel=metric)
        curve_ax.legend(fontsize=7, loc="best")
        _final_panel(final_ax, mine, rep, metric, x_key, data)
    return save_figure(fig, path)


def _short(rep: Report) -> dict[str, str]:
    """Each varying hyperparameter's key -> its short name in the report's tables (``lr``)."""
    return {p.key: rep.names.get(p, p.key) for p in rep.params}


def _param_text(g: Group, rep: Report, skip: Sequence[str]) -> str:
    short = _short(rep)
    hp = ", ".join(f"{short.get(k, k)}={format_value(v)}" for k, v in g.params.items() if k not in skip)
    return f" ({hp})" if hp else ""


def _final_panel(ax, groups: list[Group], rep: Report, metric: str, x_key: str | None, data: str) -> None:
    if x_key is None:  # one position per configuration
        for x, g in enumerate(groups):
            s = g.stats[metric]
            ax.scatter([x] * len(s.values), s.values, s=14, color="C0", alpha=0.5)
            ax.plot([x - 0.25, x + 0.25], [s.center(rep.stat)] * 2, color="C0")
        ax.set_xticks(range(len(groups)), [g.model + _param_text(g, rep, ()) for g in groups], rotation=20,
                      fontsize=7, ha="right")
        ax.set(title=f"{data}: final {metric} per configuration (seeds as dots)", ylabel=metric)
        return
    models = list(dict.fromkeys(g.model for g in groups))
    for k, model in enumerate(models):
        mine = sorted((g for g in groups if g.model == model), key=lambda g: g.params[x_key])
        xs = [g.params[x_key] for g in mine]
        ax.plot(xs, [g.stats[metric].center(rep.stat) for g in mine], color=f"C{k % 10}", marker="o", label=model)
        for g in mine:
            ax.scatter([g.params[x_key]] * len(g.stats[metric].values), g.stats[metric].values, s=10,
                       color=f"C{k % 10}", alpha=0.4)
    if all(g.params[x_key] > 0 for g in groups) and max(g.params[x_key] for g in groups) / min(
            g.params[x_key] for g in groups) >= 100:
        ax.set_xscale("log")
    ax.set(title=f"{data}: final {metric} vs {_short(rep).get(x_key, x_key)} (seeds as dots)",
           xlabel=x_key, ylabel=metric)
    ax.legend(fontsize=7, loc="best")


def workspace(project: str, group: str, *, entity: str | None = None, x_param: str | None = None,
              metrics: Sequence[str] = WORKSPACE_METRICS, name: str | None = None):
    """The sweep's W&B workspace, built with W&B's wandb-workspaces package: the runs of ``group`` grouped by
    ``config_key`` (mean and spread over seeds per configuration), a section of ``eval/<metric>`` against
    ``trainer/global_step`` and, with ``x_param``, a scatter of the final InfoM against that hyperparameter.
    Returned unsaved; :func:`save_workspace` saves it (online: an API key)."""
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    except ImportError:
        raise RuntimeError("saving a W&B workspace needs the wandb-workspaces package: "
                           "pip install '.[dashboard]' in the project's clone (once released: "
                           "pip install 'disentangle-quantized[dashboard]')") from None
    lines = [wr.LinePlot(title=f"eval/{m} vs step", x="trainer/global_step", y=[f"eval/{m}"]) for m in metrics]
    sections = [ws.Section(name="Evaluation vs training step", panels=lines, is_open=True)]
    if x_param:
        sections.append(ws.Section(name=f"Final InfoM vs {x_param}", is_open=True, panels=[
            wr.ScatterPlot(title=f"final InfoM vs {x_param}", x=wr.Config(x_param), y=wr.SummaryMetric("infom"))]))
    return ws.Workspace(
        entity=entity or "", project=project, name=name or f"{group} dashboard", sections=sections,
        runset_settings=ws.RunsetSettings(filters=[ws.Metric("Group") == group],
                                          groupby=[ws.Config("config_key")]),
    )


def save_workspace(view) -> str:
    """Save a :func:`workspace` to W&B (needs the network and an API key); returns its URL."""
    from ..runtime.loggers import has_api_key

    if not has_api_key():
        raise RuntimeError("saving a W&B workspace needs an API key (WANDB_API_KEY or `wandb login`) and the "
                           "network; the tables and pictures were logged without it")
    saved = view.save()
    return str(getattr(saved, "url", "") or "")
