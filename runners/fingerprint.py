"""A workload's fingerprint: the features of Zhang and Bhargava's Table 2, computed from a block I/O trace.

Every trace StoreTune reads (``runners.traces``: FlashNet, MSR, MSR CSV) and every traced run on a
device (``runners.device.blktrace``) becomes a ``Trace``; ``features`` describes it with the
request-level and window-level features of the self-learning disk scheduler (Zhang and Bhargava, Table 2):

- the number of reads and writes and the read ratio;
- the distribution of request sizes (mean, quartiles, 90th percentile, and the mean and spread of
  log2 size, which is what the distance uses: sizes are powers of two spread over decades);
- the sequential ratio: the share of I/Os that start where the previous one ended, and the median
  block-number distance between consecutive I/Os (``|offset - previous end|``);
- the arrival rate and its burstiness: the coefficient of variation of the gaps between arrivals,
  and the index of dispersion (variance over mean) of the arrivals per window of 1% of the span;
- the concurrency: the mean number of I/Os in flight (Little's law, the summed latency over the
  span), where the trace has latencies;
- the think time: the mean gap between an I/O's completion and the next arrival, where the trace has
  latencies (a closed-loop workload's think time; 0 when the next I/O was already waiting).

Windows are counted in I/Os, never in seconds: some traces are stamped in whole seconds.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storetune.runners.traces import Trace

# Below this many I/Os the ratios and percentiles are noise: a fingerprint refuses a shorter trace.
MIN_IOS = 200
# What the distance compares (standardised): the shape of the workload, not its length. Counts of
# reads and writes grow with the trace's length, so they are reported but not compared; a read ratio
# says the same without the length.
DISTANCE_FEATURES = (
    "read_ratio",
    "log2_size_mean",
    "log2_size_std",
    "sequential_ratio",
    "log10_distance_median",
    "log10_arrival_rate",
    "interarrival_cv",
)
# The least spread a feature is scaled by when it is standardised over a handful of workloads: a
# feature that happens to be equal on the workloads seen so far must not turn a small difference on
# a new one into an enormous distance. In the feature's own unit (a ratio, log2 bytes, log10 ...).
MIN_SCALE = {
    "read_ratio": 0.05,
    "log2_size_mean": 0.25,
    "log2_size_std": 0.25,
    "sequential_ratio": 0.05,
    "log10_distance_median": 0.25,
    "log10_arrival_rate": 0.1,
    "interarrival_cv": 0.1,
}


class FingerprintError(ValueError):
    """A trace that cannot be fingerprinted (too short); one line saying what is needed."""


def features(trace: Trace, *, min_ios: int = MIN_IOS) -> dict[str, float | None]:
    """The features of ``trace`` (see the module's docstring); None where the trace cannot say
    (no latency: no concurrency or think time)."""
    n = len(trace)
    if n < min_ios:
        raise FingerprintError(f"{trace.source or 'the trace'}: {n} I/Os are too few to fingerprint; "
                               f"a fingerprint needs at least {min_ios}")
    order = np.argsort(trace.ts_ms, kind="stable")
    ts = trace.ts_ms[order].astype(float)
    is_read = trace.is_read[order].astype(bool)
    size = trace.size[order].astype(float)
    offset = trace.offset[order].astype(float)
    latency = trace.latency_us[order].astype(float)

    reads = int(is_read.sum())
    log2 = np.log2(np.maximum(size, 1.0))
    ends = offset + size
    distance = np.abs(offset[1:] - ends[:-1])
    span_ms = float(ts[-1] - ts[0])
    gaps = np.diff(ts)
    rate = (n - 1) / (span_ms / 1000.0) if span_ms > 0 else None
    cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else None
    out: dict[str, float | None] = {
        "ios": float(n),
        "reads": float(reads),
        "writes": float(n - reads),
        "read_ratio": reads / n,
        "size_mean": float(size.mean()),
        "size_p25": float(np.percentile(size, 25)),
        "size_p50": float(np.percentile(size, 50)),
        "size_p75": float(np.percentile(size, 75)),
        "size_p90": float(np.percentile(size, 90)),
        "log2_size_mean": float(log2.mean()),
        "log2_size_std": float(log2.std()),
        "read_size_mean": float(size[is_read].mean()) if reads else None,
        "write_size_mean": float(size[~is_read].mean()) if reads < n else None,
        "sequential_ratio": float((distance == 0).mean()),
        "log10_distance_median": float(np.log10(1.0 + np.median(distance))),
        "span_s": span_ms / 1000.0,
        "arrival_rate": rate,
        "log10_arrival_rate": math.log10(rate) if rate else None,
        "interarrival_cv": cv,
        "dispersion_index": _dispersion(ts),
        "concurrency": None,
        "think_time_us": None,
    }
    known = np.isfinite(latency)
    if known.all() and span_ms > 0:
        out["concurrency"] = float(latency.sum() / 1000.0 / span_ms)
        done_ms = ts[:-1] + latency[:-1] / 1000.0
        out["think_time_us"] = float(np.maximum(ts[1:] - done_ms, 0.0).mean() * 1000.0)
    return out


def _dispersion(ts: np.ndarray, bins: int = 100) -> float | None:
    """Variance over mean of the arrivals per window (1 for Poisson arrivals, more when bursty)."""
    if ts[-1] <= ts[0]:
        return None
    counts, _ = np.histogram(ts, bins=bins, range=(ts[0], ts[-1]))
    return float(counts.var() / counts.mean())


def trace_fingerprint(trace: Trace) -> dict[str, Any]:
    """What the history records of a trace's workload: its features and where they came from."""
    return {"source": "trace", "ios": len(trace), "features": features(trace),
            "meta": {"trace": trace.source, "latency": trace.has_latency}}


FINGERPRINTS_FILE = "fingerprints.json"


def dataset_fingerprint(folder: Path, workload: str) -> dict[str, Any] | None:
    """A dataset's fingerprint of ``workload``, from ``fingerprints.json`` in its folder (None without one)."""
    path = Path(folder) / FINGERPRINTS_FILE
    if not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text())["workloads"].get(workload)
    except (ValueError, KeyError, AttributeError) as e:
        raise FingerprintError(f"{path}: not a fingerprints file ({e})") from None
    if entry is None:
        return None
    return {"source": entry["source"], "ios": int(entry["ios"]), "features": entry["features"],
            "meta": {**entry.get("meta", {}), "file": str(path)}}


# --- distances ---------------------------------------------------------------------------------------

def vector(features: Mapping[str, float | None], names: Sequence[str] = DISTANCE_FEATURES) -> np.ndarray:
    """The compared features as a vector (NaN where one is unknown)."""
    return np.array([np.nan if features.get(k) is None else float(features[k])  # type: ignore[arg-type]
                     for k in names])


def scales(vectors: np.ndarray, names: Sequence[str] = DISTANCE_FEATURES) -> np.ndarray:
    """Each feature's standard deviation over ``vectors`` (rows), at least its ``MIN_SCALE``."""
    with np.errstate(all="ignore"):
        spread = np.nanstd(vectors, axis=0) if len(vectors) > 1 else np.zeros(len(names))
    spread = np.nan_to_num(spread)
    return np.maximum(spread, np.array([MIN_SCALE.get(k, 1e-9) for k in names]))


def distance(a: np.ndarray, b: np.ndarray, scale: np.ndarray) -> float:
    """The root mean square of the standardised differences, over the features both know: 1 is a
    typical difference between the workloads the scale was taken from."""
    d = (a - b) / scale
    d = d[np.isfinite(d)]
    return float(np.sqrt(np.mean(d**2))) if len(d) else math.inf


# --- change detection (Zhang and Bhargava, 3.3.1) ---------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """The fingerprint shifted at ``window`` (0-based), whose first I/O is ``first_io``."""

    window: int
    first_io: int
    distance: float

    def to_dict(self) -> dict[str, float]:
        return {"window": self.window, "first_io": self.first_io, "distance": round(self.distance, 3)}


def check_detection(window: int, threshold: float = 4.0) -> None:
    """Refuse a change detection that cannot work, before a trace is read or a device replays it."""
    if window < 2:
        raise FingerprintError(f"a window of {window} I/Os is too small; use at least 2")
    if not (math.isfinite(threshold) and threshold > 0):
        raise FingerprintError(f"a threshold of {threshold:g} noise units would make every window a shift; use a "
                               "positive number (4 by default)")


def window_features(trace: Trace, window: int) -> list[dict[str, float | None]]:
    """The features of each run of ``window`` I/Os, in trace order (a last partial window dropped)."""
    check_detection(window)
    count = len(trace) // window
    if count < 2:
        raise FingerprintError(f"{trace.source or 'the trace'}: {len(trace)} I/Os make fewer than two windows of "
                               f"{window}; change detection needs at least {2 * window}")
    return [features(_slice(trace, i * window, (i + 1) * window), min_ios=2) for i in range(count)]


def _slice(trace: Trace, start: int, stop: int) -> Trace:
    s = slice(start, stop)
    return Trace(trace.ts_ms[s], trace.is_read[s], trace.size[s], trace.offset[s], trace.latency_us[s],
                 trace.submit_ms[s], trace.returned[s], trace.source)


def changes(trace: Trace, window: int = 1000, threshold: float = 4.0, history: int = 5) -> list[Change]:
    """The windows where the fingerprint shifts: a window that starts a new phase is one whose
    standardised distance to the mean of the current phase's last ``history`` windows exceeds
    ``threshold``, and so is the window after it (one odd window, a burst, is no new workload).

    The scale of each feature is its typical change from one window to the next (1.4826 times the
    median absolute difference of consecutive windows, over sqrt 2), which one change point barely
    moves: a shift counts in units of the trace's own window-to-window noise."""
    check_detection(window, threshold)
    rows = np.array([vector(f) for f in window_features(trace, window)])
    diffs = np.abs(np.diff(rows, axis=0))
    with np.errstate(all="ignore"):
        noise = np.nan_to_num(1.4826 * np.nanmedian(diffs, axis=0) / math.sqrt(2))
    scale = np.maximum(noise, np.array([MIN_SCALE[k] for k in DISTANCE_FEATURES]) / 5)
    found: list[Change] = []
    start = 0
    for w in range(1, len(rows)):
        with warnings.catch_warnings():  # a feature no window knows (no latencies) is NaN, and skipped
            warnings.simplefilter("ignore", RuntimeWarning)
            reference = np.nanmean(rows[max(start, w - history):w], axis=0)
        d = distance(rows[w], reference, scale)
        confirmed = w + 1 == len(rows) or distance(rows[w + 1], reference, scale) > threshold
        if d > threshold and confirmed:
            found.append(Change(w, w * window, d))
            start = w
    return found
