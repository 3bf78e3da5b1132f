"""Online detector for operational series of any kind, richer than the fleet-scale core.

`score-csv` scores an operator's own series (a coolant loop, an optic's receive power, a job's step
time, a request rate): series it was never tuned on. The fleet-scale core (`detectors.univariate`,
13 numbers per series, run over millions of series at once) was tuned on the NAB subset and scores
far lower on NAB series it has not seen. This detector holds more per series (about 1.3 KiB) and
spends it on what generalises across kinds of series. Three parts, each switchable so that
`aiops bench nab` can show what it adds:

1. **deviations**, as in the fleet core: distance of a value from a fast level in units of the
   typical one-step change (spikes, the onset of shifts), and from a slow level in units of the
   typical distance from it (excursions that build up). Spreads learn through Huber-clipped
   innovations. A spread never falls below the series' resolution (the smallest non-zero change
   seen), or counters and quantised gauges would divide by zero. A level that stays away for
   ``relearn`` rows is a new regime, and the slow level jumps to it.
2. **daily profile**: the value against what this series does at this time of day (``bins`` bins
   from the timestamps, each a Huber-clipped EWMA of the value and of its spread). A missing
   daily peak, a plateau at the wrong height, a flat day and a traffic jam at night all lie
   within the series' usual range, where a step/level detector cannot see them. The published
   leaders reach the same anomalies through learned context (HTM's sequence memory, CAD OSE's
   contexts, ARTime's window features; see docs/research/nab-leaders.md). The profile does it
   in 48 bins and without their look-ahead at the file's minimum and maximum.
3. **calibration and refractory**: each deviation (per kind and direction) is divided by a
   decayed record of its own past values, the largest in recent memory, so one corpus-wide
   threshold means the same on a quiet series and a wild one. The score is ``R / (1 + R)``, with
   ``R`` the largest weighted ratio. After an alarm the next ``cooldown`` rows score 0: one
   incident, one alarm (NAB, like an on-call engineer, charges every false positive).

Off by default, **stillness** (``still=True``) flags a reading repeated exactly for longer than the
series' own repeats make likely, once per run: a sensor that froze. On NAB it cost false positives
(quantised series sit still), and NAB has no frozen sensors to find.

Strictly online and deterministic: row t uses rows <= t only, so a prefix of a file scores the same
as the start of the whole file. State per series is fixed. The detector is vectorised over
series: one compiled call scores a block of rows of many series. Every setting below was chosen by
leave-one-category-out cross-validation on the NAB subset (`aiops bench nab`), not on the whole
subset.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields

import numpy as np
from numba import njit

from detectors.base import FloatArray

__all__ = ["DAY_S", "SeriesConfig", "SeriesDetector"]

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class SeriesConfig:
    """Every setting. The defaults are the cross-validated choice (`aiops bench nab`)."""

    # deviations (the fleet core's values, not re-tuned)
    slow: float = 0.01  # EWMA weight of the slow level (about 100 rows)
    spread: float = 0.003  # EWMA weight of the spreads (about 330 rows)
    clip: float = 3.0  # Huber clip of innovations, in spreads
    floor: float = 0.1  # a clipped step spread is at least this fraction of the unclipped one
    resolution: bool = True  # spreads at least the smallest non-zero change seen
    warmup: int = 10  # rows of plain means before the EWMAs take over
    judge_after: int = 100  # rows before any score is given
    level_weight: float = 0.8  # weight of the slow-level deviation against the step deviation
    shift_z: float = 3.0  # |fast - slow| in level spreads that counts as a shifted level
    relearn: int = 50  # shifted rows in a row before the slow level jumps to the new one
    # daily profile
    season: bool = True
    bins: int = 48  # bins per day (30 min each)
    period_days: int = 1  # the profile's period: 1 (daily) or 7 (weekly)
    season_rate: float = 0.05  # EWMA weight of a bin's profile, per row in the bin
    season_weight: float = 0.5  # weight of the deviation from the profile against the others
    season_days: float = 2.0  # days of data before the profile is judged
    # stillness: a reading repeated exactly, for longer than this series' repeats make likely
    still: bool = False  # off by default: it cost 5.6 low-FP points out of fold on NAB (benchmarks/nab.py)
    still_weight: float = 1.0  # weight of the stillness ratio against the others
    min_still: float = 10.0  # surprise (-log10 of the run's chance) below which a record does not count
    # calibration and refractory
    record_decay: float = 1e-4  # per-row decay of the records (half-life ln 2 / decay rows)
    min_record: float = 1.0  # records below this many spreads do not count
    alarm: float = 0.52  # a score that starts a cooldown
    cooldown: int = 20  # rows scored 0 after an alarm

    def __post_init__(self) -> None:
        for name in ("slow", "spread", "season_rate"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.record_decay < 1.0:
            raise ValueError(f"record_decay must be in [0, 1), got {self.record_decay}")
        if self.warmup < 1 or self.judge_after < self.warmup:
            raise ValueError("need 1 <= warmup <= judge_after")
        if self.bins < 1 or self.period_days < 1 or self.cooldown < 0 or self.season_days < 0:
            raise ValueError("need bins >= 1, period_days >= 1, cooldown >= 0 and season_days >= 0")

    @classmethod
    def from_settings(cls, settings: list[str]) -> SeriesConfig:
        """The defaults with ``name=value`` changes (``still=true``, ``period_days=7``), each checked."""
        types = {f.name: type(getattr(cls(), f.name)) for f in fields(cls)}
        changes: dict[str, float | int | bool] = {}
        for item in settings:
            name, sep, text = item.partition("=")
            name = name.strip()
            if not sep or name not in types:
                raise ValueError(f"{item!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(types))}")
            kind = types[name]
            try:
                if kind is bool:
                    lowered = text.strip().lower()
                    if lowered not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                        raise ValueError(text)
                    changes[name] = lowered in ("true", "1", "yes", "on")
                else:
                    changes[name] = kind(float(text)) if kind is int and float(text).is_integer() else kind(text)
            except ValueError:
                raise ValueError(f"{item!r}: {name} takes {kind.__name__} values") from None
        return cls().replace(**changes)

    def replace(self, **changes: float | int | bool) -> SeriesConfig:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(changes) - set(values)
        if unknown:
            raise ValueError(f"no such settings: {sorted(unknown)}")
        values.update(changes)
        return SeriesConfig(**values)


# Scalar state per series, in order.
(
    N,
    FAST,
    SLOW,
    STEP_SPREAD,
    RAW_STEP_SPREAD,
    LEVEL_SPREAD,
    RESOLUTION,
    SHIFT_RUN,
    STEP_UP,
    STEP_DOWN,
    LEVEL_UP,
    LEVEL_DOWN,
    DAILY_UP,
    DAILY_DOWN,
    SINCE_ALARM,
    FIRST_TIME,
    PREV,
    REPEAT_RATE,
    STILL_RUN,
    STILL_RECORD,
    STILL_FIRED,
) = range(21)
SCALARS = 21
MEAN, SPREAD, COUNT = range(3)  # per bin of the daily profile


class SeriesDetector:
    """Scores blocks of rows of many series at once: ``score_rows(values, seconds)``, values (rows, series)."""

    def __init__(self, series: int = 1, config: SeriesConfig | None = None) -> None:
        self.config = config or SeriesConfig()
        self._params = np.array([float(v) for v in astuple(self.config)], dtype=np.float64)
        self._scalars = np.zeros((series, SCALARS), dtype=np.float64)
        self._scalars[:, SINCE_ALARM] = 1e12  # no alarm in memory
        self._profile = np.zeros((series, self.config.bins * self.config.period_days, 3), dtype=np.float64)

    @property
    def state_bytes_per_series(self) -> int:
        return int(self._scalars[0].nbytes + self._profile[0].nbytes)

    def score_rows(self, values: FloatArray, seconds: FloatArray | None = None) -> FloatArray:
        """One score in [0, 1] per value, learning every value; 0 for missing values and while warming up.

        ``seconds`` (one per row, seconds since the epoch) place rows in the day for the daily
        profile. Without them the profile is off.
        """
        values = np.ascontiguousarray(values, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != len(self._scalars):
            raise ValueError(f"values of shape {values.shape}, expected (rows, {len(self._scalars)})")
        params = self._params
        if seconds is None:
            seconds = np.zeros(len(values))
            params = params.copy()
            params[P_SEASON] = 0.0
        seconds = np.ascontiguousarray(seconds, dtype=np.float64)
        if seconds.shape != (len(values),):
            raise ValueError(f"{len(seconds)} timestamps for {len(values)} rows")
        if not np.isfinite(seconds).all():
            raise ValueError("timestamps must be finite")
        out = np.zeros(values.shape, dtype=np.float64)
        _run(values, seconds, self._scalars, self._profile, params, out)
        return out


# Positions in the params vector (the astuple order of SeriesConfig).
_P = {f.name: i for i, f in enumerate(fields(SeriesConfig))}
P_SLOW, P_SPREAD, P_CLIP, P_FLOOR, P_RESOLUTION = (_P[k] for k in ("slow", "spread", "clip", "floor", "resolution"))
P_WARMUP, P_JUDGE, P_LW, P_SHIFT_Z, P_RELEARN = (
    _P[k] for k in ("warmup", "judge_after", "level_weight", "shift_z", "relearn")
)
P_SEASON, P_BINS, P_PERIOD, P_SEASON_RATE, P_SEASON_W, P_SEASON_DAYS = (
    _P[k] for k in ("season", "bins", "period_days", "season_rate", "season_weight", "season_days")
)
P_DECAY, P_MIN_RECORD, P_ALARM, P_COOLDOWN = (_P[k] for k in ("record_decay", "min_record", "alarm", "cooldown"))
P_STILL, P_STILL_W, P_MIN_STILL = (_P[k] for k in ("still", "still_weight", "min_still"))


@njit(cache=True, nogil=True)
def _run(
    values: FloatArray, seconds: FloatArray, st: FloatArray, profile: FloatArray, p: FloatArray, out: FloatArray
) -> None:  # pragma: no cover - compiled; exercised through SeriesDetector
    rows, series = values.shape
    slow_w, spread_w, clip, floor = p[P_SLOW], p[P_SPREAD], p[P_CLIP], p[P_FLOOR]
    use_resolution = p[P_RESOLUTION] > 0.5
    warmup, judge_after = p[P_WARMUP], p[P_JUDGE]
    lw, shift_z, relearn = p[P_LW], p[P_SHIFT_Z], p[P_RELEARN]
    use_season = p[P_SEASON] > 0.5
    bins, period, season_rate, season_w = int(p[P_BINS]), int(p[P_PERIOD]), p[P_SEASON_RATE], p[P_SEASON_W]
    season_wait = p[P_SEASON_DAYS] * DAY_S
    keep = 1.0 - p[P_DECAY]
    min_record, alarm, cooldown = p[P_MIN_RECORD], p[P_ALARM], p[P_COOLDOWN]
    use_still, still_w, min_still = p[P_STILL] > 0.5, p[P_STILL_W], p[P_MIN_STILL]
    for t in range(rows):
        for s in range(series):
            x = values[t, s]
            if math.isnan(x):
                continue
            n = st[s, N]
            if n == 0.0:
                st[s, N] = 1.0
                st[s, FAST] = x
                st[s, SLOW] = x
                st[s, FIRST_TIME] = seconds[t]
                st[s, PREV] = x
                if use_season:
                    _learn_bin(profile, s, _bin(seconds[t], bins, period), x, 0.0, clip, season_rate)
                continue
            fast, slow = st[s, FAST], st[s, SLOW]
            ef = x - fast
            es = x - slow
            resolution = 0.0
            if use_resolution:
                if ef != 0.0 and (st[s, RESOLUTION] == 0.0 or abs(ef) < st[s, RESOLUTION]):
                    st[s, RESOLUTION] = abs(ef)
                resolution = st[s, RESOLUTION]
            tiny = 1e-9 * (abs(slow) + 1.0)
            dfe = max(st[s, STEP_SPREAD], floor * st[s, RAW_STEP_SPREAD], resolution) + tiny
            dse = max(st[s, LEVEL_SPREAD], resolution) + tiny
            zf = ef / dfe
            zs = es / dse

            # the daily profile: the value against this time of day's
            zd = 0.0
            daily = False
            b = 0
            if use_season:
                b = _bin(seconds[t], bins, period)
                daily = seconds[t] - st[s, FIRST_TIME] >= season_wait and profile[s, b, COUNT] > 0.0
                zd = (x - profile[s, b, MEAN]) / (max(profile[s, b, SPREAD], resolution) + tiny)

            # stillness: how unlikely this run of exact repeats is, given how often the series repeats
            surprise = 0.0
            if use_still:
                repeat = x == st[s, PREV]
                if repeat:
                    st[s, STILL_RUN] += 1.0
                elif st[s, STILL_RUN] > 0.0:  # a run ended: it is part of the record
                    ended = st[s, STILL_RUN] * -math.log10(max(st[s, REPEAT_RATE], 1e-3))
                    if n >= judge_after:
                        st[s, STILL_RECORD] = max(st[s, STILL_RECORD], ended)
                    st[s, STILL_RUN] = 0.0
                    st[s, STILL_FIRED] = 0.0
                if repeat and st[s, STILL_FIRED] == 0.0:
                    surprise = st[s, STILL_RUN] * -math.log10(max(st[s, REPEAT_RATE], 1e-3))
                w_rep = max(spread_w, 1.0 / (n + 1.0))
                st[s, REPEAT_RATE] += w_rep * ((1.0 if repeat else 0.0) - st[s, REPEAT_RATE])
                st[s, PREV] = x

            # calibration: each deviation against its own record, per direction
            rec_f = max(st[s, STEP_UP] if zf >= 0.0 else st[s, STEP_DOWN], min_record)
            rec_s = max(st[s, LEVEL_UP] if zs >= 0.0 else st[s, LEVEL_DOWN], min_record)
            r = max(abs(zf) / rec_f, lw * abs(zs) / rec_s)
            if daily:
                rec_d = max(st[s, DAILY_UP] if zd >= 0.0 else st[s, DAILY_DOWN], min_record)
                r = max(r, season_w * abs(zd) / rec_d)
            r_still = still_w * surprise / max(st[s, STILL_RECORD], min_still)
            r = max(r, r_still)
            score = r / (1.0 + r)
            since = st[s, SINCE_ALARM]
            if since < cooldown:
                score = 0.0
            if n >= judge_after:
                out[t, s] = score
                st[s, STEP_UP] = max(st[s, STEP_UP] * keep, zf)
                st[s, STEP_DOWN] = max(st[s, STEP_DOWN] * keep, -zf)
                st[s, LEVEL_UP] = max(st[s, LEVEL_UP] * keep, zs)
                st[s, LEVEL_DOWN] = max(st[s, LEVEL_DOWN] * keep, -zs)
                if daily:
                    st[s, DAILY_UP] = max(st[s, DAILY_UP] * keep, zd)
                    st[s, DAILY_DOWN] = max(st[s, DAILY_DOWN] * keep, -zd)
                st[s, SINCE_ALARM] = 0.0 if score >= alarm else since + 1.0
                st[s, STILL_RECORD] *= keep
                if score >= alarm and r_still >= r:  # one alarm per still run: a stuck sensor is one incident
                    st[s, STILL_FIRED] = 1.0

            # baselines: Huber-clipped EWMAs (plain means while warming up)
            if n < warmup:
                w_warm = 1.0 / (n + 1.0)
                w_slow, w_spread = max(slow_w, w_warm), max(spread_w, w_warm)
                ef_c, es_c = ef, es
            else:
                w_slow, w_spread = slow_w, spread_w
                ef_c = min(max(ef, -clip * dfe), clip * dfe)
                es_c = min(max(es, -clip * dse), clip * dse)
            st[s, FAST] = fast + ef_c
            st[s, SLOW] = slow + w_slow * es_c
            st[s, STEP_SPREAD] += w_spread * (abs(ef_c) - st[s, STEP_SPREAD])
            st[s, RAW_STEP_SPREAD] += w_spread * (abs(ef) - st[s, RAW_STEP_SPREAD])
            st[s, LEVEL_SPREAD] += w_spread * (abs(es_c) - st[s, LEVEL_SPREAD])
            # a level away from the slow one for `relearn` rows is a new regime: the slow level jumps
            if abs(st[s, FAST] - st[s, SLOW]) > shift_z * st[s, LEVEL_SPREAD]:
                st[s, SHIFT_RUN] += 1.0
                if st[s, SHIFT_RUN] >= relearn:
                    st[s, SLOW] = st[s, FAST]
                    st[s, LEVEL_SPREAD] = max(st[s, LEVEL_SPREAD], dfe)
                    st[s, SHIFT_RUN] = 0.0
            else:
                st[s, SHIFT_RUN] = 0.0
            if use_season:
                _learn_bin(profile, s, b, x, dse, clip, season_rate)
            st[s, N] = n + 1.0


@njit(cache=True, nogil=True, inline="always")
def _bin(second: float, bins: int, period: int) -> int:  # pragma: no cover - compiled
    return int((second % (period * DAY_S)) / DAY_S * bins) % (bins * period)


@njit(cache=True, nogil=True, inline="always")
def _learn_bin(
    profile: FloatArray, s: int, b: int, x: float, level_spread: float, clip: float, rate: float
) -> None:  # pragma: no cover - compiled
    """A bin's EWMA of the value and of its spread: plain means for its first 1/rate rows, then
    innovations clipped at `clip` spreads (the bin's own, or the series' level spread if larger)."""
    count = profile[s, b, COUNT]
    if count == 0.0:
        profile[s, b, MEAN] = x
        profile[s, b, COUNT] = 1.0
        return
    w = max(rate, 1.0 / (count + 1.0))
    e = x - profile[s, b, MEAN]
    limit = clip * max(profile[s, b, SPREAD], level_spread)
    if count * rate >= 1.0 and limit > 0.0:
        e = min(max(e, -limit), limit)
    profile[s, b, MEAN] += w * e
    profile[s, b, SPREAD] += w * (abs(e) - profile[s, b, SPREAD])
    profile[s, b, COUNT] = count + 1.0
