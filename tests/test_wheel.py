"""The wheel works outside the checkout: built from a copy of the sources, installed into a fresh virtual
environment (the local torch wheel; the locked versions when ``requirements.lock`` exists), then run from an
unrelated directory with the checkout off ``sys.path``: the quickstart trains a few steps, its checkpoint
evaluates, a paper's sweep file composes and runs one tiny job whose report applies the sweep's rule, and
every console script answers ``--help``.

The first tests check the argument rewriting of :mod:`disentangle.runtime.paths` in the checkout (fast).
"""
from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from disentangle.runtime import paths

ROOT = Path(__file__).resolve().parents[1]
# what the build reads (pyproject.toml and setup.py name the rest)
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "requirements.lock", "disentangle",
           "conf", "sweeps")
SCRIPTS = ("train", "evaluate", "prepare", "report", "bench", "doctor", "chaos", "claims")
# a few steps of the small network on 16x16 images, a small evaluation (as tests/conftest.py's FAST)
TINY = ["trainer.max_steps=2", "model/arch=small", "data.resolution=16", "model.batch_size=16",
        "trainer.enable_progress_bar=false", "~callbacks.progress", "trainer.enable_model_summary=false",
        "callbacks.evaluation.n_samples=256", "callbacks.evaluation.every_n_steps=2",
        "callbacks.evaluation.dci.max_depth=4", "callbacks.evaluation.dci.n_estimators=10",
        "callbacks.evaluation.n_interventions=3", "callbacks.evaluation.progress=false",
        "callbacks.checkpoint.every_n_train_steps=2", "print_summary=false"]
EVAL = [o for o in TINY if o.startswith("callbacks.evaluation.") and "every_n_steps" not in o]


# -- paths: the checkout's configs, and `-cd sweeps` / `-cn <sweep>` from any directory ----------------------
def test_a_checkout_reads_its_own_top_level_conf_and_sweeps():
    assert paths.checkout_root() == ROOT
    assert paths.config_dir() == ROOT / "conf" and paths.sweeps_dir() == ROOT / "sweeps"


def test_sweep_arguments_find_the_sweeps_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweeps = str(paths.sweeps_dir())
    assert paths.sweep_arguments(["-m", "-cd", "sweeps", "-cn", "tripod_table1"]) == \
        ["-m", "-cd", sweeps, "-cn", "tripod_table1"]
    assert paths.sweep_arguments(["--config-dir=sweeps/", "-cn", "x"]) == \
        [f"--config-dir={sweeps}", "-cn", "x"]
    assert paths.sweep_arguments(["--config-dir", "sweeps"]) == ["--config-dir", sweeps]
    # a sweep's name alone adds the sweep directory; conf/'s own configs and unknown names stay as they are
    assert paths.sweep_arguments(["-m", "--config-name=tripod_table1", "seed=1"]) == \
        ["-cd", sweeps, "-m", "--config-name=tripod_table1", "seed=1"]
    assert paths.sweep_arguments(["-cn", "train", "model=qlae"]) == ["-cn", "train", "model=qlae"]
    assert paths.sweep_arguments(["-cn", "no_such_sweep"]) == ["-cn", "no_such_sweep"]
    # a `sweeps` directory here, or another directory, is the user's: left alone
    assert paths.sweep_arguments(["-cd", "mine", "-cn", "tripod_table1"]) == \
        ["-cd", "mine", "-cn", "tripod_table1"]
    (tmp_path / "sweeps").mkdir()
    assert paths.sweep_arguments(["-cd", "sweeps", "-cn", "a"]) == ["-cd", "sweeps", "-cn", "a"]


def test_an_empty_local_sweeps_folder_that_hides_the_projects_is_named(tmp_path, monkeypatch):
    """An empty ``sweeps/`` where the command runs shadows the installed sweeps: one line naming that folder and
    the project's, exit 2, before Hydra starts (issue 45)."""
    monkeypatch.chdir(tmp_path)
    assert paths.shadowed_sweep(["-m", "-cd", "sweeps", "-cn", "tripod_table1"]) is None  # no folder here
    (tmp_path / "sweeps").mkdir()
    problem = paths.shadowed_sweep(["-m", "-cd", "sweeps", "-cn", "tripod_table1"])
    assert problem and str(tmp_path / "sweeps") in problem and str(paths.sweeps_dir()) in problem
    assert paths.shadowed_sweep(["-m", "--config-dir=sweeps", "--config-name=tripod_table1.yaml"]) == problem
    assert paths.shadowed_sweep(["-cd", "sweeps", "-cn", "no_such_sweep"]) is None  # Hydra's own error says it
    (tmp_path / "sweeps" / "tripod_table1.yaml").write_text("# the user's own\n")
    assert paths.shadowed_sweep(["-cd", "sweeps", "-cn", "tripod_table1"]) is None  # theirs, used as it is
    (tmp_path / "sweeps" / "tripod_table1.yaml").unlink()
    done = subprocess.run([sys.executable, "-m", "disentangle.train", "-m", "-cd", "sweeps", "-cn", "tripod_table1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and done.stderr.strip() == f"error: {problem}", done.stderr[-2000:]


def test_each_console_script_runs_what_its_python_m_form_runs():
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert sorted(scripts) == sorted(f"disentangle-{s}" for s in SCRIPTS)
    for name, target in scripts.items():
        module, function = target.split(":")
        path = ROOT / module.replace(".", "/")  # a module, or a package whose __main__ runs it
        tree = ast.parse((path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__main__.py")
                         .read_text())
        main_block = next(node for node in tree.body if isinstance(node, ast.If)
                          and "__main__" in ast.unparse(node.test))
        called = {n.func.id for n in ast.walk(main_block)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert function in called, f"{name} runs {target}; `python -m {module}` runs {sorted(called)}"


# -- the wheel -----------------------------------------------------------------------------------------------
def _run(cmd, *, cwd=None, env=None, timeout=600):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _check(res, what):
    assert res.returncode == 0, \
        f"{what} failed (exit {res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A copy of what the build reads: setuptools builds in the source tree, and a stale ``build/lib`` there
    would carry files deleted since into the wheel."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        (shutil.copytree(ROOT / name, src / name, ignore=ignore) if (ROOT / name).is_dir()
         else shutil.copy2(ROOT / name, src / name))
    return src


@pytest.fixture(scope="module")
def wheel(sources, tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _check(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                 "-w", dist, sources]), "building the wheel")
    (built,) = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh virtual environment with this machine's torch build (the same version: the local CPU wheel
    where pip's find-links has it) and the wheel with its dependencies, pinned by requirements.lock if any."""
    env_dir = tmp_path_factory.mktemp("venv")
    _check(_run([sys.executable, "-m", "venv", "--without-pip", env_dir]), "creating the venv")
    python = env_dir / "bin" / "python"
    torch_version = importlib.metadata.version("torch")
    lock = ROOT / "requirements.lock"
    this_python = f"# python: {sys.version_info.major}.{sys.version_info.minor}\n"
    pins = ["-c", lock] if lock.is_file() and this_python in lock.read_text() else []  # as the Makefile does
    # this pip installs into the new environment (--python): no pip bootstrap there, pip's cache shared;
    # --no-compile: only what runs gets byte-compiled (installing took 90 s on a 2-core machine, 20 s without)
    install = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-compile",
               "--disable-pip-version-check", f"torch=={torch_version}", wheel, *pins]
    res = _run(install, timeout=1200)
    if res.returncode != 0 and "+cpu" in torch_version:  # no local wheel: the CPU index, as the Makefile does
        res = _run([*install, "--extra-index-url", "https://download.pytorch.org/whl/cpu"], timeout=1200)
    _check(res, "installing the wheel")
    yield env_dir
    # 1.5 GB in 40k files (pytest keeps its last three temp trees); rm is several times faster than rmtree
    if subprocess.run(["rm", "-rf", str(env_dir)], check=False).returncode != 0:
        shutil.rmtree(env_dir, ignore_errors=True)


def _clean_env(tmp: Path) -> dict:
    """The environment of a user's shell: no PYTHONPATH, no user site, outputs and caches under ``tmp``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "PYTHONNOUSERSITE": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(tmp),
            "DISENTANGLE_DATA": str(tmp / "data"), "HYDRA_FULL_ERROR": "0"}


def test_the_wheel_carries_the_configs_the_sweeps_the_license_and_the_published_numbers(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    yaml_in = {d: sorted(p.relative_to(ROOT / d).as_posix() for p in (ROOT / d).rglob("*.yaml"))
               for d in ("conf", "sweeps")}
    for d, files in yaml_in.items():
        carried = sorted(n.removeprefix(f"disentangle/{d}/") for n in names
                         if n.startswith(f"disentangle/{d}/") and n.endswith(".yaml"))
        assert carried == files, f"{d}/ in the wheel differs from the checkout's"
    assert "disentangle/published/results.csv" in names and "disentangle/runtime/paths.py" in names
    assert "disentangle/claims/claims.yaml" in names
    assert "disentangle/data/sources.yaml" in names  # disentangle.data.sources.load_sources reads it
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert dist_info.startswith("disentangle_quantized-")
    assert f"{dist_info}/licenses/LICENSE" in names
    # every package of the checkout is in the wheel (setup.py discovers them)
    packages = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "disentangle").rglob("__init__.py")}
    assert packages <= {Path(n).parent.as_posix() for n in names}
    scripts = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert all(f"disentangle-{s} = disentangle.{s}:" in scripts for s in SCRIPTS)


def test_the_package_description_has_no_relative_link(wheel):
    """The long description (README.md) is shown on a package index, where a relative link resolves nowhere: each
    docs/ page link goes to the docs site (pyproject's Documentation URL), any other file to the repository."""
    import re

    names = zipfile.ZipFile(wheel).namelist()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    description = metadata.split("\n\n", 1)[1]
    assert "Content-Type: text/markdown" in metadata and "make demo" in description
    links = re.findall(r"\]\(([^)\s]+)\)", description)
    readme_links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert len(links) == len(readme_links) > 20
    assert [link for link in links if not re.match(r"^https?://|^#", link)] == []
    assert "https://disentangle-quantized.github.io/disentangle/install/" in links  # docs/install.md
    assert "https://disentangle-quantized.github.io/disentangle/getting-started/#where-results-land" in links


def test_the_sdist_carries_the_configs_the_sweeps_and_the_license(sources, tmp_path):
    build = f"from setuptools import build_meta; build_meta.build_sdist({str(tmp_path)!r})"
    _check(_run([sys.executable, "-c", build], cwd=sources), "building the sdist")
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    expected = {p.relative_to(ROOT).as_posix() for d in ("conf", "sweeps")
                for p in (ROOT / d).rglob("*.yaml")}
    assert expected <= names and {"LICENSE", "setup.py", "pyproject.toml", "disentangle/runtime/paths.py"} <= names
    assert {"README.md", "requirements.lock"} <= names  # the description's source; the suite's versions


@pytest.mark.timeout(900)  # builds and installs a wheel into a fresh venv: minutes on a loaded 2-core machine
def test_the_installed_wheel_trains_evaluates_and_runs_a_sweep_from_any_directory(venv, tmp_path):
    torch = pytest.importorskip("torch")
    bin_dir = venv / "bin"
    python = bin_dir / "python"
    here = tmp_path / "elsewhere"  # not the checkout, which is not on sys.path either
    here.mkdir()
    env = _clean_env(tmp_path)

    def run(*cmd, what, timeout=600):
        return _check(_run(cmd, cwd=here, env=env, timeout=timeout), what)

    listed = _check(_run([sys.executable, "-m", "pip", "--python", python, "list", "--format=json"]),
                    "pip list")
    packages = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}
    if torch.version.cuda is None:  # a CPU machine: no CUDA wheels pulled in by a dependency
        assert not [p for p in packages if p.startswith("nvidia-")], sorted(packages)
    assert "hydra-optuna-sweeper" not in packages and "optuna" not in packages  # an extra, not the core

    res = run(python, "-c", "import sys, disentangle; print(disentangle.__version__); "
              "print(disentangle.__file__); print('torch' in sys.modules)", what="import disentangle")
    version, location, torch_loaded = res.stdout.split()
    assert version == packages["disentangle-quantized"]
    assert Path(location).is_relative_to(venv) and torch_loaded == "False"

    # the quickstart, a few steps, then its checkpoint evaluated
    run_dir = tmp_path / "quickstart"
    run(bin_dir / "disentangle-train", "experiment=quickstart", *TINY, f"hydra.run.dir={run_dir}",
        what="training")
    assert (run_dir / "metrics.json").is_file()
    sources = (run_dir / ".hydra" / "hydra.yaml").read_text()
    assert f"{venv}" in sources and str(ROOT / "conf") not in sources
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    run(python, "-m", "disentangle.evaluate", f"ckpt={ckpt}", *EVAL, what="evaluation")
    assert (ckpt.parent / "metrics.json").is_file()

    # a paper's sweep file: composed, then as the documented one-line form with one tiny job, then its report
    # (which finds the sweep's `# Report:` rule in the installed sweeps/)
    res = run(python, "-m", "disentangle.train", "-cd", "sweeps", "-cn", "tripod_table1",
              "hydra/launcher=slurm", "--cfg", "hydra", what="composing tripod_table1")
    assert "tripod_no_nhp" in res.stdout and "submitit" in res.stdout
    sweep_dir = tmp_path / "sweep"
    run(bin_dir / "disentangle-train", "-m", "-cd", "sweeps", "-cn", "tripod_table1", "model=qlae",
        "data=shapes2d", "seed=0", *TINY, f"hydra.sweep.dir={sweep_dir}", what="tripod_table1, one job")
    assert json.loads((sweep_dir / "summary.json").read_text())["succeeded"] == 1
    res = run(bin_dir / "disentangle-report", sweep_dir, what="the sweep's report")
    assert "psnr-min tripod" in res.stdout + res.stderr  # the rule of sweeps/tripod_table1.yaml

    for script in SCRIPTS:
        res = run(bin_dir / f"disentangle-{script}", "--help", what=f"disentangle-{script} --help")
        assert "Traceback" not in res.stdout + res.stderr and res.stdout.strip()
    assert not list(here.iterdir()), "a run wrote into the working directory"
