"""Which I/Os count as slow: LinnOS's latency cutoff, HEIMDALL's period-based labelling (its
Fig. 4), and HEIMDALL's 3-stage noise filter (section 3.2), which cleans the training data only.

Periods, not single I/Os: a device is slow for a while (garbage collection, internal contention),
and a large I/O is slow on any device. HEIMDALL marks the start of a busy period where latency is
high and throughput low (or falls sharply), and keeps marking the following I/Os while throughput
stays below its median.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def cutoff_labels(latency: np.ndarray, threshold_us: float) -> np.ndarray:
    """LinnOS: slow when the latency exceeds the cutoff."""
    return latency > threshold_us


@dataclass(frozen=True)
class PeriodThresholds:
    """HEIMDALL's CalcThreshold and CalcThptDropThreshold, as percentiles of the data labelled.
    (HEIMDALL tunes them by gradient descent per device; these are its typical settings.)"""

    high_latency_percentile: float = 90.0
    low_throughput_percentile: float = 10.0
    max_drop: float = 0.5  # a throughput falling by more than half from one I/O to the next


def period_labels(latency: np.ndarray, throughput: np.ndarray,
                  thresholds: PeriodThresholds = PeriodThresholds()) -> np.ndarray:
    """HEIMDALL Fig. 4: busy starts where IsBusy holds; the period lasts while throughput < median."""
    high_lat = np.percentile(latency, thresholds.high_latency_percentile)
    low_thpt = np.percentile(throughput, thresholds.low_throughput_percentile)
    median_thpt = np.median(throughput)
    previous = np.concatenate([[throughput[0]], throughput[:-1]])
    dropped = throughput < previous * (1 - thresholds.max_drop)
    starts = (latency > high_lat) & ((throughput < low_thpt) | dropped)
    low = throughput < median_thpt
    labels = np.zeros(len(latency), dtype=bool)
    busy = False
    for i in range(len(latency)):  # a period carries over from one I/O to the next: inherently sequential
        busy = starts[i] or (busy and low[i])
        labels[i] = busy
    return labels


def runs(labels: np.ndarray) -> list[tuple[int, int, bool]]:
    """Maximal runs of equal labels, as (start, end exclusive, label)."""
    if len(labels) == 0:
        return []
    edges = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [len(labels)]])
    return [(int(s), int(e), bool(labels[s])) for s, e in zip(starts, ends)]


def outliers_in_slow_periods(labels: np.ndarray, latency: np.ndarray, throughput: np.ndarray) -> np.ndarray:
    """Stage 1: in a slow period, the I/Os faster and of higher throughput than the period's medians
    (lucky hits in the device's cache while it is busy)."""
    out = np.zeros(len(labels), dtype=bool)
    for start, end, slow in runs(labels):
        if slow and end - start > 1:
            lat, thpt = latency[start:end], throughput[start:end]
            out[start:end] = (lat < np.median(lat)) & (thpt > np.median(thpt))
    return out


def outliers_in_fast_periods(labels: np.ndarray, latency: np.ndarray, throughput: np.ndarray,
                             thresholds: PeriodThresholds = PeriodThresholds()) -> np.ndarray:
    """Stage 2: in a fast period, the I/Os whose latency is high or throughput low by the labelling's
    own thresholds (transient errors: read retries, ECC), which are no period."""
    high_lat = np.percentile(latency, thresholds.high_latency_percentile)
    low_thpt = np.percentile(throughput, thresholds.low_throughput_percentile)
    return ~labels & ((latency > high_lat) | (throughput < low_thpt))


def short_bursts(labels: np.ndarray, longest: int = 3) -> np.ndarray:
    """Stage 3: slow runs of at most ``longest`` I/Os, too short to be device contention."""
    out = np.zeros(len(labels), dtype=bool)
    for start, end, slow in runs(labels):
        if slow and end - start <= longest:
            out[start:end] = True
    return out


def noise_filter(labels: np.ndarray, latency: np.ndarray, throughput: np.ndarray, burst: int = 3) -> np.ndarray:
    """The I/Os to keep for training after HEIMDALL's three stages. Never apply it to test data:
    judging a model on filtered data would credit the filter with accuracy it did not earn."""
    drop = outliers_in_slow_periods(labels, latency, throughput)
    drop |= outliers_in_fast_periods(labels, latency, throughput)
    drop |= short_bursts(labels, burst)
    return ~drop
