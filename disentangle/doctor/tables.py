"""The doctor's report as tables on the terminal."""
from __future__ import annotations

import statistics
from collections.abc import Mapping


def _short_kind(fields: Mapping) -> str:
    parts = [fields["latent"]] if fields["model_class"] == "Autoencoder" else [fields["model_class"], fields["latent"]]
    parts += [flag for flag, on in (("2 updates", fields["several_updates"]), ("labels", fields["labelled_stream"]),
                                    ("no decoder", fields["encoder_only"])) if on]
    return ", ".join(parts)


def _cell(record: dict) -> str:
    if record["status"] == "ok":
        loss = record["losses"].get("train/loss")
        text = f"[green]ok[/green] {loss:.3g}" if loss is not None else "[green]ok[/green]"
        check = record.get("cpu_check")
        if check and check.get("max_diff") is not None:
            text += f"\nCPU eval Δ {check['max_diff']:.1e}"
        return text + f" ({record['seconds']:.1f} s)"
    check = record.get("cpu_check") or {}
    return f"[red]FAIL[/red] {(record['error'] or check.get('error') or '')[:80]}"


def print_report(report: dict, console) -> None:
    """The report as tables: devices, families x (accelerator, precision), timing, concurrency, DDP, skipped."""
    from rich.table import Table

    table = Table(title="devices")
    for column in ("device", "name", "memory", "precisions", "notes"):
        table.add_column(column)
    for d in report["devices"]:
        label = "cpu" if d["kind"] == "cpu" else f"cuda:{d['index']}"
        runs = ", ".join(p for p, ok in d["precisions"].items() if ok)
        detail = f"{d['cores']} cores, {d['torch_threads']} torch threads, bf16 {d['bf16']}" if d["kind"] == "cpu" \
            else f"sm {d['capability']}, bf16 {d['bf16']}, TF32 {'yes' if d['tf32_available'] else 'no'}"
        memory = f"{d['memory_gib']:.0f} GiB" if d.get("memory_gib") else "?"
        table.add_row(label, d["name"], memory, runs, "; ".join(x for x in (detail, d.get("note")) if x))
    console.print(table)

    if report["families"]:
        columns = list(dict.fromkeys((r["accelerator"], r["precision"]) for r in report["families"]))
        table = Table(title=f"families: {report['families'][0]['steps']} training steps each (last train/loss)")
        table.add_column("family")
        table.add_column("kind")
        for accelerator, precision in columns:
            table.add_column(f"{accelerator} {precision}")
        rows: dict[str, dict] = {}
        for r in report["families"]:
            rows.setdefault(r["family"], {"kind": _short_kind(r["family_fields"])})[(r["accelerator"],
                                                                                     r["precision"])] = r
        for name, row in rows.items():
            table.add_row(name, row["kind"], *(_cell(row[c]) if c in row else "-" for c in columns))
        console.print(table)

    timing = report.get("timing", {})
    if timing.get("cases"):
        precisions = list(dict.fromkeys(p for c in timing["cases"] for p in (*c["seconds"], *c["errors"])
                                        if not p.endswith(" compiled")))
        table = Table(title=f"training step on {timing['device']}: batch {timing['batch_size']} at "
                            f"{timing['resolution']}x{timing['resolution']}, median of {timing['repeats']}")
        table.add_column("case")
        for p in precisions:
            table.add_column(f"{p} s/step", justify="right")
            table.add_column("x qlae", justify="right")
        table.add_column("bf16 speed-up", justify="right")
        for c in timing["cases"]:
            cells = []
            for p in precisions:
                if p in c["seconds"]:
                    cells += [f"{c['seconds'][p]:.4g}", f"{c['vs_qlae'].get(p, float('nan')):.2f}"]
                else:
                    cells += [f"[red]{c['errors'].get(p, '-')[:40]}[/red]", ""]
            speedup = f"{c['bf16_speedup']:.2f}" if c.get("bf16_speedup") else "-"
            table.add_row(c["case"], *cells, speedup)
        console.print(table)
        compiled = [c for c in timing["cases"] if c.get("compile_s")]
        if compiled:
            table = Table(title="compiled (trainer.compile=true): speed-up over eager and the one-time compile cost")
            for column in ("case", "precision", "eager s/step", "compiled s/step", "speed-up", "compile s"):
                table.add_column(column, justify="left" if column in ("case", "precision") else "right")
            for c in compiled:
                for p, cost in c["compile_s"].items():
                    table.add_row(c["case"], p, f"{c['seconds'][p]:.4g}", f"{c['seconds'][p + ' compiled']:.4g}",
                                  f"{c['compile_speedup'][p]:.2f}", f"{cost:.1f}")
            console.print(table)

    concurrency = report.get("concurrency", {})
    if concurrency.get("levels"):
        table = Table(title=f"concurrent {concurrency['case']} runs on one {concurrency['device']} device "
                            f"({concurrency['precision']}, batch {concurrency['batch_size']})")
        for column in ("runs", "total steps/s", "per run", "x one run"):
            table.add_column(column, justify="right")
        for lv in concurrency["levels"]:
            if lv["error"]:
                table.add_row(str(lv["runs"]), f"[red]{lv['error'][:60]}[/red]", "", "")
                continue
            per_run = statistics.mean(lv["per_run_steps_per_s"])
            ratio = f"{lv['vs_one_run']:.2f}" if lv.get("vs_one_run") else "-"
            table.add_row(str(lv["runs"]), f"{lv['total_steps_per_s']:.1f}", f"{per_run:.1f}", ratio)
        console.print(table)
        if concurrency.get("runs_per_gpu"):
            console.print(f"recommended: runs_per_gpu={concurrency['runs_per_gpu']} "
                          f"(python -m disentangle.train -m hydra/launcher=gpu_node "
                          f"runs_per_gpu={concurrency['runs_per_gpu']} ...)")
    ddp = report.get("ddp", {})
    if ddp.get("status") in ("ok", "fail"):
        console.print(f"2-process DDP: {'[green]ok[/green]' if ddp['status'] == 'ok' else '[red]FAIL[/red]'}"
                      f"{'' if ddp['status'] == 'ok' else ' ' + str(ddp['error'])} ({ddp['seconds']:.0f} s)")

    if report["skipped"]:
        table = Table(title="skipped")
        table.add_column("check")
        table.add_column("why")
        for s in report["skipped"]:
            table.add_row(s["check"], s["reason"])
        console.print(table)
    verdict = "[green]all checks passed[/green]" if report["ok"] else \
        f"[red]{len(report['failures'])} failed:[/red] {', '.join(report['failures'])}"
    console.print(verdict)
