"""The Burst-Gap model of the X-Stage from Python (docs/model.md): predictions, fitting, and the
shipped H200 preset. No GPU and no PyTorch needed; the arithmetic is the C++ model's
(include/xstage/model.hpp, fitter.hpp), reached through the extension with JSON as the
interchange format, so Python and the ``xstage`` CLI always agree.

    >>> from xstage import model
    >>> p = model.predict(132, 16384, 2.0)          # K producers, B bytes each, gap G in us
    >>> p.issue_us, p.regime
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from . import _ext

PathLike = Union[str, "os.PathLike[str]"]

SCHEMA = "xstage.params.v2"
PRESETS = ("h200-nvlink",)


def _C():
    return _ext.load()


def _read_text(path: PathLike) -> tuple[str, str]:
    """(path as str, the file's text); ValueError naming the file when it cannot be read."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            return path, f.read()
    except OSError as e:
        raise ValueError(f"xstage.model: {path}: cannot read ({e.strerror})") from None


@dataclass(frozen=True)
class Params:
    """Fitted model parameters (``xstage.params.v2``): T0(B), R(K), R_agg, delta(K), Q(K),
    Q_cold(K), the SM count and a source line. ``data`` is the checked, sorted JSON object."""

    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Params":
        """Checks the fields (ValueError naming the first problem) and sorts the tables."""
        if not isinstance(data, Mapping):
            raise TypeError(f"xstage.model: params must be a mapping (xstage.params.v2), not {type(data).__name__}")
        return cls(json.loads(_C().model_normalize_params(json.dumps(dict(data)))))

    @classmethod
    def from_json(cls, text: str) -> "Params":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"xstage.model: params are not valid JSON: {e}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: PathLike) -> "Params":
        path, text = _read_text(path)
        try:
            return cls.from_json(text)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def to_dict(self) -> dict:
        return json.loads(json.dumps(self.data))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent, sort_keys=True)

    def save(self, path: PathLike) -> None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(self.to_json() + "\n")

    @property
    def sm_count(self) -> int:
        return int(self.data.get("sm_count", 0))

    @property
    def source(self) -> str:
        return str(self.data.get("source", ""))

    def format(self) -> str:
        """The fixed-width tables ``xstage fit`` prints."""
        return _C().model_format_params(json.dumps(dict(self.data)))

    def predict(self, producers: int, burst_bytes: int, gap_us: float, **kw) -> "Prediction":
        return predict(producers, burst_bytes, gap_us, params=self, **kw)


@dataclass(frozen=True)
class Prediction:
    """One schedule's prediction (times in us, sizes in bytes, rates in GB/s); the fields of the
    C++ ``model::Prediction``."""

    issue_us: float
    period_us: float
    backpressure_us: float
    recovery_gap_us: float
    cold_issue_us: float
    cold_issue_base_us: float
    backpressure_free: bool
    regime: str  # "issue_bound" | "drain_bound" | "fill_bound"
    t0_us: float
    drain_term_us: float
    fill_term_us: float
    cold_fill_term_us: float
    r_gbps: float
    r_agg_gbps: float
    delta_us: float
    q_bytes: float
    q_lower_bound: bool
    q_cold_bytes: float
    volume_bytes: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Prediction":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FitResult:
    params: Params
    fit: dict          # diagnostics: tables with point counts and spreads, notes
    validation: dict   # held-out ("validate") points: predicted vs measured


def _preset_path(name: str) -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "presets"),                                  # installed wheel
              os.path.join(os.path.dirname(os.path.dirname(here)), "presets")):  # source checkout
        f = os.path.join(d, name + ".json")
        if os.path.isfile(f):
            return f
    raise FileNotFoundError(f"xstage.model: preset '{name}' not found (looked in the package and the source tree)")


_preset_cache: dict[str, Params] = {}


def preset(name: str = "h200-nvlink") -> Params:
    """The shipped parameters measured on H200 NVLink (``presets/h200-nvlink.json``)."""
    if name not in PRESETS:
        raise ValueError(f"xstage.model: unknown preset '{name}' (shipped: {', '.join(PRESETS)})")
    if name not in _preset_cache:
        _preset_cache[name] = Params.load(_preset_path(name))
    return _preset_cache[name]


def load_params(path: PathLike) -> Params:
    return Params.load(path)


def _as_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise TypeError(f"xstage.model: {name} must be an integer, got {v!r}")
    return v


def predict(producers: int, burst_bytes: int, gap_us: float, params: Params | Mapping | None = None, *,
            max_producers: int | None = None) -> Prediction:
    """Predict a store schedule: ``producers`` CTAs (K) each storing ``burst_bytes`` (B, a
    multiple of 16) per burst, ``gap_us`` (G) between bursts. ``params``: a :class:`Params`, a
    params mapping, or None for the H200 preset. ``max_producers``: the largest K accepted
    (None: the params' SM count; 0: no limit). Bad inputs raise ValueError with one line."""
    producers = _as_int("producers", producers)
    burst_bytes = _as_int("burst_bytes", burst_bytes)
    if isinstance(gap_us, bool) or not isinstance(gap_us, (int, float)):
        raise TypeError(f"xstage.model: gap_us must be a number, got {gap_us!r}")
    if params is None:
        params = preset()
    elif not isinstance(params, Params):
        params = Params.from_dict(params)
    mp = -1 if max_producers is None else _as_int("max_producers", max_producers)
    if not (-2**31 < producers < 2**31):
        raise ValueError(f"xstage.model: producers {producers} is out of range")
    text = _C().model_predict(json.dumps(dict(params.data)), producers, burst_bytes, float(gap_us), mp)
    return Prediction.from_dict(json.loads(text))


def fit(probe: Mapping | PathLike, **options: Any) -> FitResult:
    """Fit the model to a probe run (an ``xstage.probe.v1`` mapping or file, e.g. from
    ``xstage probe --json``) and validate on its held-out points. ``options``: the C++
    FitOptions (zero_gap_max_us, zero_gap_min_bursts, isolated_min_gap_us, knee_margin,
    max_iterations, and the point filter role/dest/store/addr/gap_kind)."""
    if isinstance(probe, Mapping):
        text = json.dumps(dict(probe))
    else:
        text = _read_text(probe)[1]
    for k, v in options.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"xstage.model: fit option {k} = {v} must be finite")
    out = json.loads(_C().model_fit(text, json.dumps(options)))
    return FitResult(params=Params(out["params"]), fit=out["fit"], validation=out["validation"])


__all__ = ["Params", "Prediction", "FitResult", "preset", "load_params", "predict", "fit", "SCHEMA", "PRESETS"]
