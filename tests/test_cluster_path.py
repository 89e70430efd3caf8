"""The cluster path, exercised for real without a cluster (issue 30, item 8).

* Slurm is reached through hydra-submitit-launcher; ``hydra/launcher=submitit_local`` runs the same machinery
  (the launcher pickles itself as the job, submitit's job process installs its signal handler, on the preemption
  signal calls the launcher's ``checkpoint()`` and requeues the job) on this machine. A 2-job sweep of one config
  twice: job 0 gets submitit's preemption signal mid-run, is requeued by its controller, resumes from its
  ``last.ckpt`` (``auto_resume=true``) and ends equal to job 1, its uninterrupted twin.
* A 2-node DDP run on one machine: two launches with ``trainer.num_nodes=2``, node ranks 0 and 1, over the loopback
  address, with the variables Lightning's cluster environment reads (``LightningEnvironment``: ``MASTER_ADDR``,
  ``MASTER_PORT``, ``NODE_RANK``, ``LOCAL_RANK``), ends with identical weights on both nodes.
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import FAST, ROOT
from process_cleanup import descendants, kill_descendants

# short runs of a tiny network: 16 steps, a checkpoint every 4, one periodic evaluation (InfoMEC only)
SHORT = [o for o in FAST if not o.startswith(("trainer.max_steps", "callbacks.checkpoint", "callbacks.evaluation.every",
                                              "callbacks.evaluation.dci", "trainer.log_every_n_steps"))]
SHORT += ["trainer.max_steps=16", "callbacks.checkpoint.every_n_train_steps=4", "callbacks.evaluation.every_n_steps=8",
          "trainer.log_every_n_steps=2", "+trainer.deterministic=true", "callbacks.evaluation.metrics=[infomec]",
          "callbacks.evaluation.figures=false", "callbacks.evaluation.n_samples=128", "model=ae", "data=shapes2d"]
DEADLINE = 240  # seconds for one test's processes (pytest-timeout stops the test at 300)


def _env(**extra: str) -> dict[str, str]:
    """This environment without a scheduler's or a launcher's variables (a test run inside a Slurm job or under
    torchrun must not hand them on), plus ``extra``."""
    drop = ("SLURM_", "SUBMITIT_", "TORCHELASTIC_")
    named = {"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in named}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``python -m disentangle.train ARGS`` in its own session (so a failing test can stop all it started)."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "disentangle.train", *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(*procs: subprocess.Popen) -> None:
    """Kill whatever is left of ``procs`` and everything below them (submitit's controllers and job processes)."""
    for proc in procs:
        kill_descendants(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait(timeout=30)


def _wait(proc: subprocess.Popen, deadline: float) -> int:
    return proc.wait(timeout=max(1.0, deadline - time.monotonic()))


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


# -- a preempted job of a submitit sweep --------------------------------------------------------------------------
def _job_process(controller: int) -> int:
    """The job process (``python -m submitit.core._submit``) that submitit's local controller ``controller`` runs."""
    for pid in descendants(controller):
        try:
            if b"submitit.core._submit" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no submitit job process under controller {controller}")


def _logged(job: Path, key: str) -> list[tuple[int, float]]:
    with (job / "csv" / "metrics.csv").open(newline="") as f:
        return [(int(float(r["step"])), float(r[key])) for r in csv.DictReader(f) if r.get(key)]


def _history(job: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (job / "metrics_history.jsonl").read_text().splitlines()]


@pytest.mark.timeout(2 * DEADLINE)  # ~1 min on 2 idle cores, 2.5 min on 2 busy ones
def test_a_preempted_submitit_job_is_requeued_and_resumes_to_its_uninterrupted_twin(tmp_path):
    sweep = tmp_path / "sweep"
    # the same job twice (seed=0,0): job 1 is job 0's uninterrupted twin, run by the same launcher at the same time
    args = ["-m", "hydra/launcher=submitit_local", *SHORT, "auto_resume=true", "seed=0,0", f"hydra.sweep.dir={sweep}"]
    start = time.monotonic()
    deadline = start + 2 * DEADLINE - 60
    proc = _start(args, _env(OMP_NUM_THREADS="1"), tmp_path / "sweep.log")
    preempted, twin = sweep / "0_ae_shapes2d", sweep / "1_ae_shapes2d"
    try:
        last = preempted / "checkpoints" / "last.ckpt"
        while not last.exists():  # job 0's first checkpoint (step 4): it is mid-run
            assert proc.poll() is None, (tmp_path / "sweep.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "job 0 wrote no checkpoint in time"
            time.sleep(0.01)
        # submitit's job id of a local job is its controller's pid; the launcher records it as hydra.job.id
        controller = int(yaml.safe_load((preempted / ".hydra" / "hydra.yaml").read_text())["hydra"]["job"]["id"])
        job_process = _job_process(controller)
        at_least = int(torch.load(last, weights_only=True)["global_step"])
        # submitit's preemption signal (SUBMITIT_PREEMPT_SIGNAL, unset here: USR2), sent to the job process as
        # submitit's local controller sends it before a job's time limit (Controller._forward_signal) and as Slurm
        # does on preemption or at #SBATCH --signal=USR2@<s>. (LocalJob._interrupt() of submitit 1.5 sends it to
        # the controller instead, which has no handler for it and dies, leaving the job running unsignalled.)
        os.kill(job_process, signal.SIGUSR2)
        code = _wait(proc, deadline)
        output = (tmp_path / "sweep.log").read_text()
        assert code == 0, output[-3000:]
        wall = time.monotonic() - start
    finally:
        _stop(proc)
    assert f"sweep {sweep}: 2 of 2 jobs succeeded, 0 failed" in output

    # submitit: the signal reached the job, the launcher's checkpoint() was called, the same job was started again
    log = next((sweep / ".submitit" / str(controller)).glob("*_0_log.out")).read_text()
    assert "Caught signal SIGUSR2" in log and "this job is preempted" in log, log[-3000:]
    assert "Calling checkpoint method." in log and re.search(rf"Requeued job {controller} \(\d+ remaining", log)
    assert log.count("Starting with JobEnvironment") == 2, log[-3000:]
    twin_logs = [p.read_text() for p in (sweep / ".submitit").glob("*/*_0_log.out") if p.parent.name != str(controller)]
    assert len(twin_logs) == 1 and "Requeued" not in twin_logs[0] and twin_logs[0].count("Starting with") == 1

    # the requeued job resumed from its own last.ckpt (auto_resume=true), after the step the signal found
    train_log = (preempted / "train.log").read_text()
    resumed = re.findall(r"resuming from (\S+) \(step (\d+)\)", train_log)
    assert len(resumed) == 1, train_log[-3000:]
    assert Path(resumed[0][0]).resolve() == last.resolve()
    resumed_at = int(resumed[0][1])
    assert at_least <= resumed_at < 16 and resumed_at % 4 == 0

    # ...and ended where its uninterrupted twin did: weights, final metrics, evaluation history, logged steps
    a, b = json.loads((twin / "metrics.json").read_text()), json.loads((preempted / "metrics.json").read_text())
    assert a["step"] == b["step"] == 16
    floats = [k for k, v in a.items() if isinstance(v, float) and not k.endswith("_seconds")]
    assert floats and all(b[k] == pytest.approx(a[k], abs=1e-6) for k in floats), floats
    diff = _max_diff(_weights(twin / "checkpoints" / "last.ckpt"), _weights(last))
    assert diff <= 1e-6, diff
    assert _history(preempted) == _history(twin) == [8, 16]
    for key in ("train/loss", "eval/infom"):  # every step logged once, none missing, the same values
        rows, twin_rows = _logged(preempted, key), _logged(twin, key)
        assert [s for s, _ in rows] == [s for s, _ in twin_rows] and rows, key
        assert [v for _, v in rows] == pytest.approx([v for _, v in twin_rows], abs=1e-6), key
    print(f"\npreempted at step {resumed_at} (checkpoint seen: {at_least}), requeued by submitit, resumed from "
          f"{last.relative_to(tmp_path)}; vs the twin: max |dw| = {diff:.1e}, {len(floats)} final metrics equal "
          f"(infom {b['infom']:.4f} / {a['infom']:.4f}); sweep wall {wall:.0f} s")


# -- two nodes on one machine ---------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_two_node_ddp_run_ends_with_identical_weights_on_both_nodes(tmp_path):
    dump = tmp_path / "ranks"
    args = [*SHORT, "trainer.max_steps=8", "trainer=ddp", "trainer.num_nodes=2", "trainer.devices=1",
            "+callbacks.rank_dump._target_=ddp_probe.RankStateDump", f"+callbacks.rank_dump.path={dump}"]
    port = str(_free_port())
    start = time.monotonic()
    deadline = start + DEADLINE
    procs = []
    try:
        for node in (0, 1):  # what a scheduler starts on each node; every process of a node has its LOCAL_RANK
            env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NODE_RANK=str(node), LOCAL_RANK="0",
                       WORLD_SIZE="2", OMP_NUM_THREADS="1")
            procs.append(_start([*args, f"hydra.run.dir={tmp_path / f'node{node}'}"], env, tmp_path / f"node{node}.log"))
        codes = [_wait(p, deadline) for p in procs]
        outputs = [(tmp_path / f"node{n}.log").read_text() for n in (0, 1)]
        assert codes == [0, 0], "\n".join(o[-2000:] for o in outputs)
        wall = time.monotonic() - start
    finally:
        _stop(*procs)
    # one process group of two: node 1's process is global rank 1 of 2
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in outputs[0] and "GLOBAL_RANK: 1, MEMBER: 2/2" in outputs[1]
    ranks = [torch.load(dump / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 8
    diff = _max_diff(ranks[0]["state_dict"], ranks[1]["state_dict"])
    assert diff == 0.0, diff
    for x, y in zip(ranks[0]["optimizers"], ranks[1]["optimizers"]):
        for p, state in x["state"].items():
            for key, value in state.items():
                assert torch.equal(torch.as_tensor(value), torch.as_tensor(y["state"][p][key])), (p, key)
    # node 0 (global rank 0) keeps the run: its checkpoint holds the same weights, its evaluation the final metrics
    assert _max_diff(_weights(tmp_path / "node0" / "checkpoints" / "last.ckpt"), ranks[1]["state_dict"]) == 0.0
    assert json.loads((tmp_path / "node0" / "metrics.json").read_text())["step"] == 8
    assert not (tmp_path / "node1" / "checkpoints" / "last.ckpt").exists()
    print(f"\n2 nodes x 1 process, gloo over 127.0.0.1:{port}: {ranks[0]['global_step']} steps, "
          f"max |w_node0 - w_node1| = {diff:.1e}, wall {wall:.0f} s")
