"""Statistical stream detector: robust deviations of each series, scored against its own records.

Per value, two deviations are measured against recursive baselines of its own series (fixed-size
state, no history buffer, all series of a block at once):

- **step** ``zf``: distance from a fast level (the last value, moved by at most ``clip`` spreads per
  row), in units of the typical one-step change: spikes, drops and the onset of level shifts;
- **level** ``zs``: distance from a slow level, in units of the typical distance from it: sustained
  excursions that build up over several rows.

Baselines learn through Huber-clipped innovations, so a heavy tail or an outlier moves them by a
bounded step and no single point can blow up a spread; a spread never falls below ``floor`` times
the unclipped spread (a series that is flat but for rare spikes would otherwise end with a spread
of zero and score every spike as infinite). A level that stays away from the slow baseline for
``relearn`` rows is a new regime: the slow baseline jumps to it.

How large is "large" differs wildly between series (tweet counts have deviations of 100 spreads
every day, an ad-exchange price rarely 5), so deviations are judged against the series' own record:
a decayed maximum of past deviations, one per direction and kind. The score is ``R / (1 + R)`` with
``R`` the ratio of the deviation to its record: 0.5 means "as large as the largest deviation in
recent memory", and the record then rises to it, so the same incident does not fire again and again
(this plays the part of Numenta's anomaly likelihood: a tail probability under the series' own
history, here of its extremes). Records decay (half-life ``ln 2 / decay`` rows), so a series that
became noisier for good is re-learnt. After an alarm (score >= ``alarm``) the next ``cooldown``
rows score 0: one incident, one alarm (NAB credits the first detection in a window and charges
every false positive).

The defaults are one configuration for every series, chosen on the NAB subset in
shared/datasets/nab (standard 72.1, reward_low_FP_rate 63.5, reward_low_FN_rate 76.9); neighbouring
values of each parameter score within about two points of them. Those are in-sample figures: on
NAB series it was not tuned on it scored 38.0, which is why `score-csv` moved to
`detectors.series` (settings chosen out of fold). This core stays where its 104 bytes a series
matter: the fleet's drift detectors, over millions of series a tick.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

from detectors.base import Block, Detector, FloatArray, IndexArray, Mask, State, grow, learn_mask

__all__ = ["FIELDS", "Univariate", "UnivariateConfig"]

# Fields of the per-value state vector, in order.
FIELDS: tuple[str, ...] = (
    "n",
    "fast",
    "slow",
    "step_spread",
    "raw_step_spread",
    "level_spread",
    "step_up",
    "step_down",
    "level_up",
    "level_down",
    "since_alarm",
    "masked_run",
    "shifted_run",
)
(N, MF, MS, DF, DR, DS, RFP, RFN, RSP, RSN, COOL, RUN, SHIFT) = range(len(FIELDS))
BASELINE = [N, MF, MS, DF, DR, DS, SHIFT]  # what a masked value must not move
INITIAL = np.zeros(len(FIELDS), dtype=np.float64)
INITIAL[COOL] = 1e12  # no alarm in memory


@dataclass(frozen=True, slots=True)
class UnivariateConfig:
    """One configuration for every series (tuned once on NAB, see the module docstring)."""

    fast: float = 1.0  # EWMA weight of the fast level (1: the last value, clipped)
    slow: float = 0.01  # EWMA weight of the slow level
    spread: float = 0.003  # EWMA weight of the spreads
    clip: float = 3.0  # Huber clip of innovations, in spreads
    floor: float = 0.1  # a clipped spread is at least this fraction of the unclipped one
    warmup: int = 10  # values before deviations are measured
    judge_after: int = 100  # values before records are kept and scores given
    decay: float = 1e-4  # per-row decay of the records
    min_record: float = 1.0  # records below this many spreads do not count
    level_weight: float = 0.8  # weight of the level deviation's ratio against the step's
    alarm: float = 0.52  # score that starts a cooldown
    cooldown: int = 20  # rows scored 0 after an alarm
    shift_z: float = 3.0  # |fast - slow| in level spreads that counts as a shifted level
    relearn: int = 50  # shifted (or masked) rows in a row before the baseline re-learns

    def __post_init__(self) -> None:
        for name in ("fast", "slow", "spread"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {self.decay}")
        if self.warmup < 1 or self.judge_after < self.warmup:
            raise ValueError("need 1 <= warmup <= judge_after")


class Univariate(Detector[Block]):
    """Vectorised over series and columns: ``len(FIELDS)`` float64 numbers per value (104 bytes).

    State is held field-major, (fields, series, width), so that a block of consecutive series is
    processed without gathering; blocks are worked through in chunks of ``CHUNK`` values so that
    temporaries stay in cache. Checkpoints (`state_dict`) hold it as (series, width, fields).

    ``score`` gives NaN for missing values and for series with fewer than ``judge_after`` values,
    otherwise a score in [0, 1). ``learn`` learns every value the mask lets through; records and
    the cooldown always learn (they describe the scores, not the baseline). A series masked for
    ``relearn`` rows in a row learns again: a baseline must not learn what it flagged, but must
    not stay stuck in a regime that is gone either.
    """

    def __init__(self, width: int = 1, config: UnivariateConfig | None = None) -> None:
        self.width = width
        self.config = config or UnivariateConfig()
        # field-major: a field of consecutive series is one contiguous run of memory
        self._state = np.empty((len(FIELDS), 0, width), dtype=np.float64)

    @property
    def series(self) -> int:
        """Rows of state allocated (series seen, rounded up)."""
        return int(self._state.shape[1])

    # -- protocol -----------------------------------------------------------------------------

    def score(self, block: Block) -> FloatArray:
        scores = np.empty(block.values.shape, dtype=np.float64)
        for rows, _, old in self._chunks(block):
            scores[rows] = self._evaluate_chunk(old, block.values[rows])[0]
        return scores

    def learn(self, block: Block, mask: Mask | None = None) -> None:
        for rows, where, old in self._chunks(block):
            new = self._evaluate_chunk(old, block.values[rows])[1]
            self._store(where, old, new, block.values[rows], None if mask is None else mask[rows])

    def score_and_learn(self, block: Block, threshold: float | None = None) -> FloatArray:
        """`score` then `learn` with `learn_mask`, in one pass over the block."""
        scores = np.empty(block.values.shape, dtype=np.float64)
        for rows, where, old in self._chunks(block):
            scores[rows], new = self._evaluate_chunk(old, block.values[rows])
            self._store(where, old, new, block.values[rows], learn_mask(scores[rows], threshold))
        return scores

    def state_dict(self) -> State:
        """``state`` is indexed by series: (series, width, fields)."""
        state: State = {"width": self.width, "state": np.moveaxis(self._state, 0, -1).copy()}
        for key, value in asdict(self.config).items():
            state[f"config.{key}"] = value
        return state

    def load_state(self, state: State) -> None:
        array = np.array(state["state"], dtype=np.float64)
        if array.ndim != 3 or array.shape[1:] != (self.width, len(FIELDS)):
            raise ValueError(f"state of shape {array.shape} does not fit width {self.width}")
        defaults = asdict(UnivariateConfig())
        fields = {k.removeprefix("config."): v for k, v in state.items() if k.startswith("config.")}
        config = {k: type(defaults[k])(v) for k, v in fields.items() if k in defaults}
        self.config = UnivariateConfig(**{**asdict(self.config), **config})
        self._state = np.ascontiguousarray(np.moveaxis(array, -1, 0))

    # -- internals ----------------------------------------------------------------------------

    def _chunks(self, block: Block) -> Iterator[tuple[slice, slice | IndexArray, FloatArray]]:
        """(rows of the block, where their state is, that state as (fields, rows, width)), in chunks
        small enough for the temporaries of one chunk to stay in cache. Allocates new series."""
        n_rows = len(block.series)
        if block.values.shape != (n_rows, self.width):
            raise ValueError(f"block values of shape {block.values.shape}, expected ({n_rows}, {self.width})")
        if n_rows == 0:
            return
        needed = int(block.series.max()) + 1
        if needed > self.series:
            fresh = self.series
            grown = grow(np.moveaxis(self._state, 1, 0), needed, 0.0)
            grown[fresh:] = INITIAL[:, None]
            self._state = np.ascontiguousarray(np.moveaxis(grown, 0, 1))
        span = _contiguous(block.series)
        step = max(1, CHUNK // self.width)
        for lo in range(0, n_rows, step):
            rows = slice(lo, min(lo + step, n_rows))
            where: slice | IndexArray
            if span is not None:
                where = slice(span.start + rows.start, span.start + rows.stop)
                yield rows, where, self._state[:, where]
            else:
                where = block.series[rows]
                yield rows, where, self._state[:, where]

    def _store(
        self,
        where: slice | IndexArray,
        old: FloatArray,
        new: FloatArray,
        values: FloatArray,
        mask: NDArray[np.bool_] | None,
    ) -> None:
        """Write a chunk's new state; a masked value leaves the baseline where it was (see class doc)."""
        valid = ~np.isnan(values)
        if mask is None or bool(np.asarray(mask).all()):
            new[RUN] = np.where(valid, 0.0, old[RUN])
        else:
            keep = ~np.asarray(mask, dtype=bool).reshape(values.shape) & valid
            keep &= old[RUN] < self.config.relearn
            new[BASELINE] = np.where(keep, old[BASELINE], new[BASELINE])
            new[RUN] = np.where(keep, old[RUN] + 1.0, np.where(valid, 0.0, old[RUN]))
        self._state[:, where] = new

    def _evaluate_chunk(self, old: FloatArray, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Scores of values `x` (chunk, width) given state `old` (fields, chunk, width), and the new state."""
        c = self.config
        n, mf, ms, df, dr, ds = old[N], old[MF], old[MS], old[DF], old[DR], old[DS]
        valid = ~np.isnan(x)
        all_valid = bool(valid.all())
        if not all_valid:
            x = np.where(valid, x, mf)
        warming = bool((n < c.judge_after).any())
        new = np.empty_like(old)

        # deviations, in spreads
        tiny = np.abs(ms)
        tiny += 1.0
        tiny *= 1e-9
        dfe = np.maximum(df, c.floor * dr)
        ef = x - mf
        es = x - ms
        zf = ef / (dfe + tiny)
        zs = es / (ds + tiny)

        # ratio to the records (decayed maxima of past deviations, per direction)
        def ratio(z: FloatArray, up: FloatArray, down: FloatArray) -> FloatArray:
            record = np.where(z >= 0.0, up, down)
            np.maximum(record, c.min_record, out=record)
            out: FloatArray = np.abs(z)
            out /= record
            return out

        r = ratio(zs, old[RSP], old[RSN])
        r *= c.level_weight
        np.maximum(r, ratio(zf, old[RFP], old[RFN]), out=r)
        score = r / (1.0 + r)
        score[old[COOL] < c.cooldown] = 0.0
        judged = valid & (n >= c.judge_after) if warming else valid
        scores = score if all_valid and not warming else np.where(judged, score, np.nan)

        # records learn once judging starts
        keep = 1.0 - c.decay
        for z, up, down in ((zf, RFP, RFN), (zs, RSP, RSN)):
            np.maximum(old[up] * keep, z, out=new[up])
            np.maximum(old[down] * keep, -z, out=new[down])
            if warming:
                new[up] = np.where(judged, new[up], old[up])
                new[down] = np.where(judged, new[down], old[down])
        alarm = score >= c.alarm
        if warming:
            alarm &= judged
        np.add(old[COOL], 1.0, out=new[COOL])
        new[COOL][alarm] = 0.0

        # baselines: Huber-clipped EWMAs (plain means while warming up)
        w_fast: FloatArray | float
        w_slow: FloatArray | float
        w_spread: FloatArray | float
        if warming:
            warm = n < c.warmup
            w_warm = 1.0 / (n + 1.0)
            limit_f = np.where(warm, np.inf, c.clip * dfe)
            limit_s = np.where(warm, np.inf, c.clip * ds)
            w_fast = np.where(warm, np.maximum(c.fast, w_warm), c.fast)
            w_slow = np.where(warm, np.maximum(c.slow, w_warm), c.slow)
            w_spread = np.where(warm, np.maximum(c.spread, w_warm), c.spread)
        else:
            limit_f, limit_s = c.clip * dfe, c.clip * ds
            w_fast, w_slow, w_spread = c.fast, c.slow, c.spread
        ef_c = np.clip(ef, -limit_f, limit_f)
        es_c = np.clip(es, -limit_s, limit_s)
        np.add(mf, w_fast * ef_c, out=new[MF])
        np.add(ms, w_slow * es_c, out=new[MS])
        for spread, dev, f in ((df, ef_c, DF), (dr, ef, DR), (ds, es_c, DS)):
            step = np.abs(dev)
            step -= spread
            step *= w_spread
            np.add(spread, step, out=new[f])
        if warming:
            new[[DF, DR, DS]] *= n != 0  # the first value has no spread
        # a level away from the slow baseline for `relearn` rows is a new regime: re-learn it
        gap = np.abs(new[MF] - new[MS])
        shifted = gap > c.shift_z * new[DS]
        np.add(old[SHIFT], 1.0, out=new[SHIFT])
        new[SHIFT][~shifted] = 0.0
        relearn = new[SHIFT] >= c.relearn
        if relearn.any():
            new[MS] = np.where(relearn, new[MF], new[MS])
            new[DS] = np.where(relearn, np.maximum(new[DS], dfe), new[DS])
            new[SHIFT][relearn] = 0.0
        np.add(n, 1.0, out=new[N])
        new[RUN] = old[RUN]
        if not all_valid:  # a missing value leaves its state as it was
            missing = ~valid
            new[:, missing] = old[:, missing]
        return scores, new


CHUNK = 16384  # values per chunk: a chunk's temporaries fit in a core's L2 cache


def _contiguous(s: IndexArray) -> slice | None:
    """The series as a slice when they are consecutive and ascending (no gather needed)."""
    if len(s) == 0 or int(s[-1]) - int(s[0]) != len(s) - 1:
        return None
    if len(s) > 1 and not bool((np.diff(s) == 1).all()):
        return None
    return slice(int(s[0]), int(s[-1]) + 1)
