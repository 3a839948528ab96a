"""The public shape of a trial, the same for the REST service and `storetune trials --format json`: addressed by
its number in its campaign, never by the history's internal ids (``storetune.api.service.schemas.TrialPublic``
is its schema, and a test keeps the two the same)."""

from __future__ import annotations

from typing import Any

TRIAL_FIELDS = ("number", "status", "value", "reason", "config", "config_hash", "seed", "retry_of", "started_at",
                "finished_at", "nodes")


def public_trials(history: Any, trials: list[Any]) -> list[dict[str, Any]]:
    """Trials as the API and `storetune trials --format json` show them: addressed by number, so ``retry_of``
    is the number of the STALE trial each re-runs (the history points at it by its internal id)."""
    numbers = history.numbers(t.retry_of for t in trials if t.retry_of is not None)
    nodes = history.nodes(t.id for t in trials)
    out = []
    for t in trials:
        fields = {k: getattr(t, k) for k in TRIAL_FIELDS if k != "nodes"}
        fields["retry_of"] = None if t.retry_of is None else numbers.get(t.retry_of)
        fields["nodes"] = nodes.get(t.id, [])
        out.append(fields)
    return out
