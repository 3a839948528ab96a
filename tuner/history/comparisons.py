"""The comparisons' records in the history: a comparison runs one campaign per algorithm and seed, and keeps its
state, its settings and its results here (``History`` holds these methods; ``store`` keeps the campaigns' and
trials' own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from storetune.tuner.history.models import CampaignRecord, ComparisonRecord, utcnow
from storetune.tuner.history.schema import retrying
from storetune.tuner.history.views import CampaignView, ComparisonView, view


class _Store(Protocol):
    """What these methods use of the history they are part of."""

    url: str

    def session(self) -> Session: ...

    def _transition(self, table: Any, row_id: int, from_states: Sequence[str], values: dict[str, Any],
                    retry: bool = False) -> bool: ...


@retrying
class ComparisonRecords:
    """The comparisons' part of ``History``: created, moved between states, finished with results, read."""

    def create_comparison(self: _Store, state: str = "running", **fields: Any) -> ComparisonView:
        with self.session() as s, s.begin():
            record = ComparisonRecord(state=state, **fields)
            s.add(record)
            s.flush()
            return view(ComparisonView, record)

    def finish_comparison(self: _Store, comparison_id: int, state: str, results: dict[str, Any] | None,
                          note: str | None = None) -> None:
        with self.session() as s, s.begin():
            s.execute(
                update(ComparisonRecord)
                .where(ComparisonRecord.id == comparison_id)
                .values(state=state, results=results, note=note,
                        finished_at=utcnow() if state == "finished" else None)
            )

    def transition_comparison(self: _Store, comparison_id: int, from_states: Sequence[str], retry: bool = False,
                              **values: Any) -> bool:
        """``transition`` for a comparison."""
        return self._transition(ComparisonRecord, comparison_id, from_states, values, retry)

    def comparison_cancel_requested(self: _Store, comparison_id: int) -> bool:
        with self.session() as s:
            return bool(s.scalar(select(ComparisonRecord.cancel_requested)
                                 .where(ComparisonRecord.id == comparison_id)))

    def comparison(self: _Store, comparison_id: int) -> ComparisonView:
        with self.session() as s:
            record = s.get(ComparisonRecord, comparison_id)
            if record is None:
                raise LookupError(f"no comparison {comparison_id} in {self.url}")
            return view(ComparisonView, record)

    def comparisons(self: _Store, *, offset: int = 0, limit: int | None = None, origin: str | None = None,
                    states: Sequence[str] = ()) -> list[ComparisonView]:
        query = select(ComparisonRecord).order_by(ComparisonRecord.id)
        if origin is not None:
            query = query.where(ComparisonRecord.origin == origin)
        if states:
            query = query.where(ComparisonRecord.state.in_(list(states)))
        with self.session() as s:
            return [view(ComparisonView, r) for r in s.scalars(query.offset(offset).limit(limit))]

    def count_comparisons(self: _Store) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.count(ComparisonRecord.id))) or 0)

    def comparison_campaigns(self: _Store, comparison_id: int) -> list[CampaignView]:
        with self.session() as s:
            query = (select(CampaignRecord).where(CampaignRecord.comparison_id == comparison_id)
                     .order_by(CampaignRecord.id))
            return [view(CampaignView, r) for r in s.scalars(query)]
