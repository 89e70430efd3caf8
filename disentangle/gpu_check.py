"""``python -m disentangle.gpu_check`` (``make gpu-check``): one prepared script for a lent GPU, within a time budget
(8 minutes by default), measuring what this project has never measured on CUDA:

1. ``doctor``: every quick family a few steps on the GPU in fp32 and bf16, the same metrics as on the CPU;
2. ``steps``: ``bench steps --compile --precision bf16-mixed`` for one case of every paper network (:data:`CASES`),
   eager and compiled, in fp32 (TF32 as each model's runs set it) and bf16;
3. ``runs_per_gpu``: the doctor's concurrent runs on one GPU (1, 2, 4, 8) and the ``runs_per_gpu`` it recommends;
4. ``claims``: the papers' claims at laptop budget, ``--jobs`` = that recommendation packed on the GPU, for as long
   as the budget lasts (their runs live on the lent machine, so each call starts them anew).

Each stage is a subprocess with its share of the budget (:data:`SHARES`; the claims get what is left) and its own
log; a stage that runs out of time is stopped (its whole process group) and recorded as ``timeout`` with what it
had written, and the next one starts. On a real GPU the whole check takes more than one 8-minute call (on an H200:
86 s of doctor, 30-75 s of cold compile per step case and precision), so a call goes on from the results file of
the calls before it on the same GPU and torch (:func:`stage_plan`): a passed doctor or runs-per-GPU stage is kept,
the step cases already measured are not measured again, and each call is recorded (``--fresh`` starts over). Everything lands in one JSON results file with the device, driver, CUDA and
torch versions, and the values the compile ``auto`` rule takes for CUDA (:func:`proposed_constants`); on CUDA the
results are rendered into ``docs/benchmarks.md`` (between the ``gpu-check`` markers, :func:`render`).

``--device cpu`` is the rehearsal (``make gpu-check DEVICE=cpu``, run by the test suite): the same stages and code
paths with tiny budgets (the small architecture at 16x16, one case, two concurrency levels, seconds of claims), so
the script runs at the first try on a GPU. Its results go to ``outputs/gpu-check/`` and the docs are left alone.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .runtime.paths import checkout_root

# one case per paper network (and the GANs' step, whose critic stays eager): the compile rule's keys on CUDA
CASES = ("qlae", "tripod", "factorqvae", "dvae_friede", "infowgan_gp", "cliff_balls", "additive_decoder_balls")
STAGES = ("doctor", "steps", "runs_per_gpu", "claims")
# each stage's share of the budget (of the stages still to run, rescaled); the claims take what the others left. On
# an H200 the doctor's quick families took 86 s, one step case 30-75 s per precision to compile cold, the four
# concurrency levels more than 72 s: the whole check takes more than one 8-minute call, so a call goes on from the
# results file where the last one stopped (:func:`stage_plan`)
SHARES = {"doctor": 0.20, "steps": 0.45, "runs_per_gpu": 0.20}
BUDGET_S = 480.0  # 8 minutes on one GPU
REHEARSAL_BUDGET_S = 150.0
RESERVE_S = 5.0  # kept back for writing the results
BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
DOCS = Path("docs/benchmarks.md")
RESULTS = Path("docs/gpu-check.json")
SCHEMA = 1


def stage_commands(device: str, work: Path, runs_per_gpu: int | None, claims: list[str], seeds: str,
                   cases: Sequence[str] = CASES) -> dict[str, list[str]]:
    """Each stage's command line: the real check on CUDA (the step ``cases`` still to measure), tiny budgets on a
    CPU (the rehearsal)."""
    py = [sys.executable, "-m"]
    if device == "cuda":
        doctor = ["--quick", "--accelerators", "cuda", "--skip-timing", "--skip-concurrency"]
        steps = ["--only", *cases, "--exact", "--repeats", "10"]
        concurrency = ["--concurrency-device", "cuda", "--concurrency-runs", "1", "2", "4", "8",
                       "--concurrency-steps", "100"]
        claims_extra: list[str] = []
    else:
        doctor = ["--families", "qlae", "--accelerators", "cpu", "--steps", "1", "--skip-timing",
                  "--skip-concurrency"]
        steps = ["--only", "qlae", "--exact", "--repeats", "1", "--batch-size", "4", "--resolution", "16",
                 "--override", "model/arch=small"]
        concurrency = ["--concurrency-device", "cpu", "--concurrency-runs", "1", "2", "--concurrency-steps", "3",
                       "--concurrency-batch-size", "8", "--concurrency-resolution", "16",
                       "--concurrency-override", "model/arch=small"]
        claims_extra = ["--override", "model/arch=small", "--override", "data.resolution=16"]
    return {
        "doctor": [*py, "disentangle.doctor", "--json", str(work / "doctor.json"), *doctor],
        "steps": [*py, "disentangle.bench", "steps", "--device", device, "--compile", "--precision", "bf16-mixed",
                  "--json", str(work / "steps.jsonl"), *steps],
        "runs_per_gpu": [*py, "disentangle.doctor", "--json", str(work / "runs_per_gpu.json"), "--skip-families",
                         "--skip-timing", *concurrency],
        "claims": [*py, "disentangle.claims", *claims, "--seeds", seeds, "--jobs", str(runs_per_gpu or 1),
                   "--out", str(work / "claims"), *claims_extra],
    }


def run_stage(command: list[str], timeout: float, log: Path) -> dict:
    """Run one stage in a process group of its own; stop the group when ``timeout`` runs out. Its status (ok, fail,
    timeout), seconds, exit code and the last lines of its log."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=checkout_root(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            code = proc.wait(timeout=max(1.0, timeout))
            status = "ok" if code == 0 else "fail"
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            code, status = None, "timeout"
    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-8:]
    return {"status": status, "seconds": round(time.perf_counter() - start, 1), "exit_code": code,
            "timeout_s": round(timeout, 1), "command": command[2:], "log_tail": tail}


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the stage's whole process group (its workers and training runs too), SIGKILL 10 s later."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def environment(device: str) -> dict:
    """The device, driver, CUDA, cuDNN, torch and Python versions, the CPU, and the checkout's commit (the versions
    and commit as every metrics.json records them: foundation.provenance)."""
    import torch

    from .foundation.provenance import cpu_info, software_versions

    env = {**software_versions(), "device_type": device, "cpu": cpu_info()[0], "cpu_count": os.cpu_count()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update({"device": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
                    "memory_gib": round(props.total_memory / 2**30, 1), "capability": f"{props.major}.{props.minor}",
                    "driver": _nvidia_smi("driver_version"), "bf16": torch.cuda.is_bf16_supported()})
    else:
        env.update({"device": f"CPU: {env['cpu']}", "driver": None})
    return env


def _nvidia_smi(field: str) -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def collect(stage: str, work: Path) -> dict:
    """What a stage left behind, read as data (whatever its status: a stopped stage keeps its finished part)."""
    if stage == "doctor":
        report = _read_json(work / "doctor.json")
        return {"families": [{k: f.get(k) for k in ("family", "accelerator", "precision", "status", "error",
                                                     "seconds", "metrics")} for f in report.get("families", [])],
                "failures": report.get("failures"), "skipped": report.get("skipped", [])}
    if stage == "steps":
        path = work / "steps.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        return {"rows": rows}
    if stage == "runs_per_gpu":
        return {"concurrency": _read_json(work / "runs_per_gpu.json").get("concurrency", {})}
    claims = work / "claims"
    runs = [_read_json(p) for p in sorted(claims.glob("runs/*/*/seed*/claim_run.json"))]
    finished = sorted(claims.glob("runs/*/*/seed*/metrics.json"))
    # a run's wall time is written when it ends (0 while it runs): the median is of the finished ones
    walls = [_read_json(p.with_name("claim_run.json")).get("wall_s") for p in finished]
    walls = [w for w in walls if w]
    verdicts: dict[str, int] = {}
    assessed = claims / "claims.json"
    for row in json.loads(assessed.read_text()) if assessed.is_file() else []:  # a list: one object per claim
        verdicts[row.get("verdict", "?")] = verdicts.get(row.get("verdict", "?"), 0) + 1
    return {"runs_started": len(runs), "runs_finished": len(finished),
            "median_run_s": round(statistics.median(walls), 1) if walls else None, "verdicts": verdicts}


def proposed_constants(steps_rows: list[dict], device: str) -> dict:
    """What the compile ``auto`` rule would take for ``device`` from these rows (as the CPU's were made): per network
    class (``<model class>:<network>`` where the CPU table keys it so) the smallest fp32 speed-up of the cases that
    compile it, and a compile cost 30% above the largest cold compile of one precision, rounded up to 10 s."""
    from .runtime.compilation import MEASURED_SPEEDUP

    keyed_by_model = {k for k in MEASURED_SPEEDUP.get("cpu", {}) if ":" in k}
    speedup: dict[str, float] = {}
    costs = []
    for row in steps_rows:
        med = row.get("median_s", {})
        eager, compiled = med.get("32-true"), med.get("32-true compiled")
        if not eager or not compiled:
            continue
        for net in row.get("networks", []):
            key = f"{row.get('model_class')}:{net}"
            key = key if key in keyed_by_model else net
            speedup[key] = round(min(speedup.get(key, float("inf")), eager / compiled), 2)
        costs += list(row.get("compile_cold_s_by_precision", {}).values())
    cost = None if not costs else float(10 * -(-1.3 * max(costs) // 10))
    return {"device": device, "MEASURED_SPEEDUP": dict(sorted(speedup.items())), "EXPECTED_cost_s": cost}


def carried_over(previous: dict, env: dict) -> tuple[dict, str | None]:
    """The stages of an earlier call's results (``previous``) that this call goes on from, and why none are when
    they cannot be (another schema, GPU or torch: numbers of two machines are not mixed)."""
    if not previous:
        return {}, None
    if previous.get("schema") != SCHEMA:
        return {}, f"the results file has schema {previous.get('schema')!r}, not {SCHEMA}"
    before = previous.get("environment", {})
    for key in ("device", "torch"):
        if before.get(key) != env.get(key):
            return {}, f"its {key} was {before.get(key)!r}, this one is {env.get(key)!r}"
    return previous.get("stages", {}), None


def stage_plan(before: dict, cases: Sequence[str] = CASES) -> tuple[list[str], list[str]]:
    """What this call runs, given the stages an earlier call left (``before``): the stages still to run (a doctor or
    runs_per_gpu that passed is kept; the claims always run, their runs do not outlive a lent machine) and the step
    cases with no fp32 compiled row yet."""
    measured = {row.get("case") for row in before.get("steps", {}).get("rows", [])
                if "32-true compiled" in row.get("median_s", {})}
    cases_left = [case for case in cases if case not in measured]
    done = {stage for stage in ("doctor", "runs_per_gpu") if before.get(stage, {}).get("status") == "ok"}
    if not cases_left:
        done.add("steps")
    return [stage for stage in STAGES if stage not in done], cases_left


def stage_timeout(stage: str, todo: Sequence[str], left: float, budget: float,
                  claims_seconds: float | None = None) -> float:
    """A stage's time: its share of ``budget`` among the stages still to run (``todo``; the claims' share stays
    theirs), at most what is ``left``; the claims get what is left (at most ``claims_seconds``)."""
    if stage == "claims":
        return min(left, claims_seconds or left)
    claims_share = 1.0 - sum(SHARES.values())
    share = SHARES[stage] / (sum(SHARES[s] for s in todo if s in SHARES) + claims_share)
    return min(left, share * budget)


def check(device: str, budget: float, out: Path, work: Path, claims: list[str], seeds: str,
          claims_seconds: float | None = None, progress=print, resume: bool = True) -> dict:
    """Run the stages still to run (all of them, or with ``resume`` what the results file ``out`` of an earlier call
    on the same GPU and torch left: :func:`stage_plan`) in order within ``budget`` seconds (the claims at most
    ``claims_seconds`` of what is left); returns (and writes to ``out``) the results, this call's and the kept ones
    together, with a record per call."""
    started = time.perf_counter()
    deadline = started + budget
    work.mkdir(parents=True, exist_ok=True)
    env = environment(device)
    previous = _read_json(out) if resume else {}
    before, why_not = carried_over(previous, env)
    if why_not:
        progress(f"gpu-check: starting afresh: {why_not}")
    calls = list(previous.get("calls") or [_call_of(previous)]) if before else []
    call = {"call": len(calls) + 1, "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "commit": env.get("git_commit"), "budget_s": budget, "stages": {}}
    todo, cases_left = stage_plan(before, CASES if device == "cuda" else ("qlae",))
    results: dict = {"schema": SCHEMA, "started": call["started"], "budget_s": budget, "environment": env,
                     "stages": {}}
    runs_per_gpu = before.get("runs_per_gpu", {}).get("concurrency", {}).get("runs_per_gpu")
    for stage in STAGES:
        if stage not in todo:
            results["stages"][stage] = {"call": calls[-1]["call"] if calls else None, **before[stage]}
            call["stages"][stage] = "kept"
            progress(f"gpu-check: {stage} kept from call {results['stages'][stage]['call']}")
            continue
        left = deadline - time.perf_counter() - RESERVE_S
        timeout = stage_timeout(stage, todo, left, budget, claims_seconds)
        commands = stage_commands(device, work, runs_per_gpu, claims, seeds, cases_left)
        if timeout < 1:
            kept = before.get(stage)
            results["stages"][stage] = kept if kept else {"status": "not run", "reason": "no time left in the budget"}
            call["stages"][stage] = "not run"
            continue
        progress(f"gpu-check: {stage} (up to {timeout:.0f} s) ...")
        record = {"call": call["call"], **run_stage(commands[stage], timeout, work / f"{stage}.log")}
        record.update(collect(stage, work))
        call["stages"][stage] = record["status"]
        if stage == "steps":  # the rows of earlier calls, then this call's; ok once every case has one
            record["rows"] = [*before.get("steps", {}).get("rows", []), *record["rows"]]
            _, record["cases_left"] = stage_plan({"steps": record}, CASES if device == "cuda" else ("qlae",))
            record["status"] = "ok" if not record["cases_left"] else record["status"]
        if stage == "runs_per_gpu":
            runs_per_gpu = record["concurrency"].get("runs_per_gpu")
        if stage == "claims":
            record["jobs"] = runs_per_gpu or 1
        results["stages"][stage] = record
        progress(f"gpu-check: {stage} {record['status']} in {record['seconds']:.0f} s")
    results["proposed"] = proposed_constants(results["stages"]["steps"].get("rows", []), device)
    results["wall_s"] = call["wall_s"] = round(time.perf_counter() - started, 1)
    results["calls"] = [*calls, call]
    results["ok"] = all(results["stages"][s].get("status") == "ok" for s in STAGES[:3])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results


def _call_of(results: dict) -> dict:
    """The call record of a results file written before calls were recorded (one call made it)."""
    return {"call": 1, "started": results.get("started"), "commit": results.get("environment", {}).get("git_commit"),
            "budget_s": results.get("budget_s"), "wall_s": results.get("wall_s"),
            "stages": {stage: record.get("status") for stage, record in results.get("stages", {}).items()}}


# ------------------------------------------------------------------------------------------------- rendering
def _f(value, spec: str = ".3f", unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def render(results: dict | None) -> str:
    """The ``docs/benchmarks.md`` section for a results file (None: not yet run on a GPU)."""
    if not results:
        return ("Not run on a GPU yet: no session with a lent GPU has run `make gpu-check` since it was written. "
                "Its CPU rehearsal (`make gpu-check DEVICE=cpu`) runs in the test suite.")
    env, stages = results["environment"], results["stages"]
    calls = results.get("calls") or [_call_of(results)]
    lines = [f"`make gpu-check` on **{env.get('device')}** (driver {env.get('driver')}, CUDA {env.get('cuda')}, "
             f"cuDNN {env.get('cudnn')}, torch {env.get('torch')}, Python {env.get('python')}; CPU "
             f"{env.get('cpu')}), in {len(calls)} call(s):", ""]
    lines += [f"{c.get('call')}. {c.get('started')}, commit {str(c.get('commit'))[:10]}: {_f(c.get('wall_s'), '.0f')} s "
              f"of a {_f(c.get('budget_s'), '.0f')} s budget" + (f"; {c['note']}" if c.get("note") else "") + "."
              for c in calls]
    lines += [""]
    lines += ["| stage | status | seconds | call |", "|---|---|---|---|"]
    lines += [f"| {name} | {s.get('status')} | {_f(s.get('seconds'), '.0f')} | {s.get('call', '–')} |"
              for name, s in stages.items()]
    doctor = stages.get("doctor", {})
    fams = doctor.get("families", [])
    if fams:
        ok = sum(f["status"] == "ok" for f in fams)
        lines += ["", f"**Doctor**: {ok} of {len(fams)} family runs passed"
                  + (f"; failed: {', '.join(doctor.get('failures') or [])}." if ok < len(fams) else ".")]
    rows = stages.get("steps", {}).get("rows", [])
    if rows:
        left = stages["steps"].get("cases_left")
        lines += ["", "**Training steps** (64x64, batch 64, medians; x = eager fp32 / this; TF32 as each model's runs "
                  "set it)" + (f"; not measured yet: {', '.join(left)}" if left else "") + ":", "",
                  "| case | eager fp32 | compiled fp32 | x | eager bf16 | compiled bf16 | x | cold compile s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            m = r["median_s"]
            base = m.get("32-true")
            cells = [m.get(k) for k in ("32-true", "32-true compiled", "bf16-mixed", "bf16-mixed compiled")]
            ratio = [None if not (base and c) else base / c for c in cells]
            lines.append(f"| {r['case']} | {_f(cells[0], '.4f', ' s')} | {_f(cells[1], '.4f', ' s')} | "
                         f"{_f(ratio[1], '.2f')} | {_f(cells[2], '.4f', ' s')} | {_f(cells[3], '.4f', ' s')} | "
                         f"{_f(ratio[3], '.2f')} | {_f(r.get('compile_cold_s'), '.0f')} |")
    conc = stages.get("runs_per_gpu", {}).get("concurrency", {})
    if conc.get("levels"):
        lines += ["", f"**Runs per GPU** ({conc.get('case')}, {conc.get('precision')}): recommended "
                  f"`runs_per_gpu={conc.get('runs_per_gpu')}`.", "", "| runs | total steps/s | vs one run |",
                  "|---|---|---|"]
        lines += [f"| {lv['runs']} | {_f(lv.get('total_steps_per_s'), '.1f')} | {_f(lv.get('vs_one_run'), '.2f')} |"
                  for lv in conc["levels"]]
    claims = stages.get("claims", {})
    if claims.get("status") not in (None, "not run"):
        lines += ["", f"**Claims** at laptop budget, {claims.get('jobs')} run(s) at once on the device: "
                  f"{claims.get('runs_finished')} runs finished of {claims.get('runs_started')} started "
                  f"(median {_f(claims.get('median_run_s'), '.0f', ' s')} per run); {_verdict_words(claims)}."]
    proposed = results.get("proposed", {})
    if proposed.get("MEASURED_SPEEDUP"):
        lines += ["", f"**Compile rule on CUDA** from these rows (`runtime.compilation`): MEASURED_SPEEDUP['cuda'] = "
                  f"`{proposed['MEASURED_SPEEDUP']}`, EXPECTED['cuda'].cost_s = {proposed.get('EXPECTED_cost_s')}."]
    return "\n".join(lines)


def _verdict_words(claims: dict) -> str:
    """``verdicts: 3 holds, 30 incomplete`` from the stage's verdict counts; a claim whose runs did not all finish
    in the budget is ``incomplete``."""
    counts = claims.get("verdicts") or {}
    if not set(counts) - {"incomplete"}:
        return "no claim assessed (its runs did not finish in the budget)"
    return "verdicts: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def render_into(page: Path, results: dict | None) -> None:
    """Replace the text between the gpu-check markers of ``page`` by :func:`render` of ``results``."""
    from .foundation.sections import replace_section

    try:
        text = replace_section(page.read_text(encoding="utf-8"), BEGIN, END, render(results))
    except ValueError as exc:
        raise ValueError(f"{page}: {exc}") from None
    page.write_text(text, encoding="utf-8")


def rendered_section(page: Path) -> str:
    """The text between the markers of ``page`` (what :func:`render_into` wrote)."""
    from .foundation.sections import section

    return section(page.read_text(encoding="utf-8"), BEGIN, END)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m disentangle.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="cuda: the check; cpu: the rehearsal with tiny budgets (auto: cuda when present)")
    parser.add_argument("--budget", type=float, default=None,
                        help=f"seconds for all stages (default {BUDGET_S:.0f} on CUDA, {REHEARSAL_BUDGET_S:.0f} "
                             f"for the CPU rehearsal)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the results file (default {RESULTS} on CUDA, outputs/gpu-check/cpu.json on a CPU)")
    parser.add_argument("--docs", type=Path, default=None,
                        help=f"render the results into this page's gpu-check section (default {DOCS} on CUDA, "
                             f"none on a CPU)")
    parser.add_argument("--workdir", type=Path, default=Path("outputs/gpu-check"),
                        help="the stages' logs and runs (claims resume from here)")
    parser.add_argument("--claims", nargs="*", default=[], help="claims or papers (default: all)")
    parser.add_argument("--seeds", default="0", help="the claims' seeds (default 0)")
    parser.add_argument("--claims-seconds", type=float, default=None,
                        help="at most this long for the claims (default: what the budget has left)")
    parser.add_argument("--fresh", action="store_true",
                        help="start over: ignore what earlier calls left in the results file (by default a call on "
                             "the same GPU and torch keeps the stages they finished and measures the rest)")
    parser.add_argument("--render", type=Path, nargs="?", const=RESULTS, default=None, metavar="RESULTS",
                        help=f"only render RESULTS (default {RESULTS}; the 'not run yet' text when it does not "
                             f"exist) into --docs (default {DOCS}), run nothing")
    args = parser.parse_args(argv)
    root = checkout_root()
    if root is None:
        parser.error("run it from a checkout (make gpu-check): it writes docs/ and runs the doctor and benchmarks")
    if args.render is not None:
        results = root / args.render if not args.render.is_absolute() else args.render
        render_into(args.docs or root / DOCS, json.loads(results.read_text()) if results.is_file() else None)
        return 0
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (torch.cuda.is_available() is False); "
                     "--device cpu rehearses the check")
    budget = args.budget or (BUDGET_S if device == "cuda" else REHEARSAL_BUDGET_S)
    if budget <= RESERVE_S + 1:
        parser.error(f"--budget must exceed {RESERVE_S + 1:.0f} s (got {budget:g})")
    out = (args.out or (root / RESULTS if device == "cuda" else args.workdir / "cpu.json")).resolve()
    docs = args.docs or (root / DOCS if device == "cuda" else None)
    if docs is not None and not docs.is_file():
        parser.error(f"--docs {docs}: no such page")
    work = (args.workdir / device).resolve()
    results = check(device, budget, out, work, args.claims, args.seeds, args.claims_seconds, resume=not args.fresh)
    if docs is not None:
        render_into(docs, results)
    print(f"results: {out}" + (f"; rendered into {docs}" if docs else ""))
    for stage, record in results["stages"].items():
        print(f"  {stage:<13} {record.get('status'):<8} {record.get('seconds', 0):6.0f} s")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
