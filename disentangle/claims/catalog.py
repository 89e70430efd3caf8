"""The claims as data: ``claims.yaml`` read into :class:`Claim` objects, the runs they need (:class:`RunSpec`,
shared between claims) and the papers' published values beside each (``disentangle/published/results.csv``)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import resources

import yaml

KINDS = ("paired", "threshold", "selection")
# the order of the table and of the runs; "ours": this project's own findings, which no paper claims
PAPERS = ("qlae", "tripod", "factorqvae", "friede", "cliff", "ours")


def override_key(override: str) -> str:
    """The config key an override sets (``+regularizer=cliff`` -> ``regularizer``)."""
    return override.split("=", 1)[0].lstrip("+~")


def merge_overrides(*groups) -> tuple[str, ...]:
    """Overrides in order, a later one replacing an earlier one of the same key (a side's ``experiment=ioss2d``
    replaces its setting's ``experiment=cliff2d``)."""
    merged: dict[str, str] = {}
    for group in groups:
        for o in group:
            merged.pop(override_key(o), None)
            merged[override_key(o)] = o
    return tuple(merged.values())


@dataclass(frozen=True)
class Setting:
    """A paper's laptop-scale protocol: the overrides every run of its claims starts from."""

    name: str
    about: str
    overrides: tuple[str, ...]
    seconds: dict = field(default_factory=dict, hash=False, compare=False)

    def estimate(self, model: str | None, run: str | None = None) -> float:
        """Seconds of one run: ``seconds[run]`` (the run's directory name, for a side with overrides of its own),
        else ``seconds[model]``, else ``seconds["default"]`` (120 when absent)."""
        for key in (run, model):
            if key is not None and key in self.seconds:
                return float(self.seconds[key])
        return float(self.seconds.get("default", 120))


@dataclass(frozen=True)
class RunSpec:
    """One training configuration (run once per seed): its setting, model and the merged overrides."""

    setting: Setting
    model: str
    overrides: tuple[str, ...]  # the whole command line but the seed: the setting's, model=..., the side's

    @property
    def name(self) -> str:
        """The run's name within its setting: ``<model>`` plus a readable slug of its own overrides."""
        own = [o for o in self.overrides if o not in self.setting.overrides and not o.startswith("model=")]
        slug = "-".join(re.sub(r"[^A-Za-z0-9_.=]+", "", o.split(".")[-1]).replace("=", "") for o in own)
        if len(slug) > 48:
            slug = slug[:39] + "-" + hashlib.sha1(" ".join(own).encode()).hexdigest()[:8]
        return self.model + (f"-{slug}" if slug else "")

    @property
    def key(self) -> str:
        """The run's directory under ``runs/``: ``<setting>/<name>``."""
        return f"{self.setting.name}/{self.name}"

    @property
    def seconds(self) -> float:
        return self.setting.estimate(self.model, self.name)


@dataclass(frozen=True)
class Side:
    """One side of a claim: a model configuration (``model``, ``overrides``) or, for a threshold, a ``value``."""

    label: str
    model: str | None = None
    overrides: tuple[str, ...] = ()
    method: str | None = None  # its row name in results.csv (default: label)
    value: float | None = None

    def run(self, setting: Setting) -> RunSpec | None:
        if self.model is None:
            return None
        return RunSpec(setting, self.model, merge_overrides(setting.overrides, [f"model={self.model}"],
                                                             self.overrides))


@dataclass(frozen=True)
class Claim:
    """One headline comparison of a paper (module docstring of :mod:`disentangle.claims`)."""

    name: str
    paper: str
    table: str
    dataset: str
    metric: str
    setting: Setting
    better: Side
    worse: Side
    kind: str = "paired"
    lower_is_better: bool = False
    pool: tuple[Side, ...] = ()
    selection: dict = field(default_factory=dict, hash=False, compare=False)
    published: dict = field(default_factory=dict, hash=False, compare=False)
    why: str = ""
    differs_in: tuple[str, ...] = ()  # what the sides may differ in (disentangle.claims.differences)
    data: str | None = None  # the other dataset it runs on (--data NAME: claims.yaml's `datasets`); None: its own

    def runs(self) -> list[RunSpec]:
        """The configurations this claim trains (each once per seed)."""
        sides = self.pool if self.kind == "selection" else (self.better, self.worse)
        return [r for r in (s.run(self.setting) for s in sides) if r is not None]

    def published_values(self) -> dict:
        """``better``/``worse``: the paper's values of the two sides (None where it printed none), ``source``."""
        out = {"better": None, "worse": None, "source": f"{self.paper} Table {self.table}, {self.dataset}"}
        if self.paper == "ours":
            out["source"] = "this project's own finding: no paper claims it, so there is no published value"
        elif not self.table.startswith("§"):
            from ..published import load_published

            rows = {r["method"]: r["value"] for r in load_published(self.paper, self.table)
                    if r["dataset"] == self.dataset and r["metric"] == self.metric}
            out["better"] = rows.get(self.better.method or self.better.label)
            out["worse"] = rows.get(self.worse.method or self.worse.label)
        out.update({k: v for k, v in self.published.items() if k in ("better", "worse", "source")})
        if self.kind == "threshold":
            out["worse"] = self.worse.value
        return out


def _side(raw: dict, where: str) -> Side:
    unknown = set(raw) - {"label", "model", "overrides", "method", "value"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}")
    if "label" not in raw:
        raise ValueError(f"{where}: a side needs a label")
    return Side(label=str(raw["label"]), model=raw.get("model"), overrides=tuple(raw.get("overrides", ())),
                method=raw.get("method"), value=None if raw.get("value") is None else float(raw["value"]))


def parse_claims(document: dict) -> list[Claim]:
    """Claims from a parsed ``claims.yaml`` (one ValueError line for the first problem found)."""
    settings = {}
    for name, raw in document.get("settings", {}).items():
        settings[name] = Setting(name, " ".join(str(raw.get("about", "")).split()), tuple(raw.get("overrides", ())),
                                 dict(raw.get("seconds", {})))
    claims, names = [], set()
    for raw in document.get("claims", []):
        name = raw.get("name", "?")
        where = f"claim {name}"
        if name in names:
            raise ValueError(f"{where}: the name is used twice")
        names.add(name)
        if raw.get("paper") not in PAPERS:
            raise ValueError(f"{where}: paper must be one of {', '.join(PAPERS)} (got {raw.get('paper')!r})")
        if raw.get("setting") not in settings:
            raise ValueError(f"{where}: setting must be one of {', '.join(settings)} (got {raw.get('setting')!r})")
        kind = raw.get("kind", "paired")
        if kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)} (got {kind!r})")
        better, worse = _side(raw["better"], f"{where}.better"), _side(raw["worse"], f"{where}.worse")
        pool = tuple(_side(s, f"{where}.pool") for s in raw.get("pool", ()))
        if kind == "paired" and (better.model is None or worse.model is None):
            raise ValueError(f"{where}: a paired claim needs a model on both sides")
        if kind == "threshold" and (better.model is None or worse.value is None):
            raise ValueError(f"{where}: a threshold claim needs better.model and worse.value")
        if kind == "selection" and len(pool) < 2:
            raise ValueError(f"{where}: a selection claim needs a pool of at least 2 configurations")
        differs_in = raw.get("differs_in", ())
        if kind != "threshold" and not differs_in:
            raise ValueError(f"{where}: differs_in must say what the sides may differ in (family, or config keys)")
        if isinstance(differs_in, str) or not all(isinstance(k, str) and k for k in differs_in):
            raise ValueError(f"{where}: differs_in must be a list of config keys or 'family' (got {differs_in!r})")
        claims.append(Claim(name=name, paper=raw["paper"], table=str(raw["table"]), dataset=str(raw["dataset"]),
                            metric=str(raw["metric"]), setting=settings[raw["setting"]], better=better, worse=worse,
                            kind=kind, lower_is_better=bool(raw.get("lower_is_better", False)), pool=pool,
                            selection=dict(raw.get("selection", {})), published=dict(raw.get("published", {})),
                            why=str(raw.get("why", "")), differs_in=tuple(differs_in)))
    return sorted(claims, key=lambda c: PAPERS.index(c.paper))


def _document() -> dict:
    return yaml.safe_load(resources.files(__package__).joinpath("claims.yaml").read_text(encoding="utf-8"))


def load_claims() -> list[Claim]:
    """Every claim of the package's ``claims.yaml``, paper by paper."""
    return parse_claims(_document())


@dataclass(frozen=True)
class DataVariant:
    """Another dataset some claims also run on (``--data NAME``; claims.yaml's ``datasets``): overrides added to
    each claim's setting, the claims that run there, and its measured seconds per run."""

    name: str
    about: str
    overrides: tuple[str, ...]
    claims: tuple[str, ...]
    seconds: dict = field(default_factory=dict, hash=False, compare=False)


def parse_datasets(document: dict, claims: list[Claim]) -> dict[str, DataVariant]:
    """claims.yaml's ``datasets`` (one ValueError line for the first problem found)."""
    known = {c.name for c in claims}
    out = {}
    for name, raw in (document.get("datasets") or {}).items():
        listed = tuple(raw.get("claims", ()))
        unknown = [c for c in listed if c not in known]
        if not listed or unknown:
            raise ValueError(f"datasets.{name}: claims must name catalogue claims (unknown: {unknown or 'none listed'})")
        if not any(o.startswith("data=") for o in raw.get("overrides", ())):
            raise ValueError(f"datasets.{name}: overrides must choose the dataset (data=...)")
        out[name] = DataVariant(name, " ".join(str(raw.get("about", "")).split()), tuple(raw["overrides"]), listed,
                                dict(raw.get("seconds", {})))
    return out


def load_datasets() -> dict[str, DataVariant]:
    """The other datasets of the package's ``claims.yaml`` by name."""
    document = _document()
    return parse_datasets(document, parse_claims(document))


def on_data(claims: list[Claim], variant: DataVariant) -> list[Claim]:
    """``variant``'s claims among ``claims``, moved onto its dataset: each setting becomes ``<setting>-<NAME>``
    with the variant's overrides after its own (so its runs live apart from the claim's own dataset's)."""
    import dataclasses

    moved = []
    for claim in claims:
        if claim.name not in variant.claims:
            continue
        setting = Setting(f"{claim.setting.name}-{variant.name}", f"{claim.setting.about}; on {variant.name}: "
                          f"{variant.about}", merge_overrides(claim.setting.overrides, variant.overrides),
                          dict(variant.seconds))
        moved.append(dataclasses.replace(claim, setting=setting, data=variant.name, dataset=variant.name))
    return moved


def select_claims(claims: list[Claim], names) -> list[Claim]:
    """The claims named (a claim's name or a paper's: all of its claims); all of them for no names."""
    if not names:
        return list(claims)
    known = {c.name for c in claims}
    unknown = [n for n in names if n not in known and n not in PAPERS]
    if unknown:
        raise ValueError(f"unknown claim or paper {', '.join(map(repr, unknown))}; papers: {', '.join(PAPERS)}; "
                         f"claims: python -m disentangle.claims --list")
    return [c for c in claims if c.name in names or c.paper in names]


def unique_runs(claims) -> list[RunSpec]:
    """The configurations the claims need, each once, in the claims' order."""
    seen: dict[str, RunSpec] = {}
    for claim in claims:
        for run in claim.runs():
            if run.key in seen and seen[run.key].overrides != run.overrides:
                raise ValueError(f"two configurations share the run directory {run.key}: "
                                 f"{' '.join(seen[run.key].overrides)} / {' '.join(run.overrides)}")
            seen.setdefault(run.key, run)
    return list(seen.values())
