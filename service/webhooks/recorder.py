"""The worker's recorder: metrics and log lines for what a turn committed.

An attempt counts only once its row is committed, so the worker hands each committed batch here:
one metric per attempt (by partner and outcome) and its duration, a DEBUG line per delivered
attempt, INFO for a retry, a WARNING when a delivery ends ``failed`` (INFO, marked ``superseded``, for
an attempt whose claim had been taken over: its delivery is another claim's); and a line and a metric for
every change of a partner's circuit (a WARNING when one opens or a partner is disabled); and, by
reason, the claimed deliveries it handed back unsent (``service_webhook_handed_back_total``). The lines
keep the worker's logger name, which operators filter by.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from service.metrics import Metrics
from service.states import AttemptOutcome, CircuitChange, HandedBack
from service.webhooks.settle import Settlement

log = logging.getLogger("service.webhooks.worker")

_CHANGE_LINES = {
    CircuitChange.OPENED: "a partner's circuit opened: its deliveries are held until a probe succeeds",
    CircuitChange.REOPENED: "a partner's probe failed: its circuit stays open for a longer cool-down",
    CircuitChange.CLOSED: "a partner's circuit closed: its held deliveries go out",
    CircuitChange.DISABLED: (
        "a partner was disabled after failing without a break; resume it to deliver again"
    ),
}


class Recorder:
    def __init__(self, metrics: Metrics | None) -> None:
        self.metrics = metrics
        if metrics is not None:
            metrics.delivering = True  # its partners' delivery counters show from 0 (Metrics.set_partners)
            for reason in HandedBack:  # from 0 too: increase() sees the first deliveries handed back
                metrics.handed_back.labels(reason)

    def committed(
        self,
        records: Sequence[Settlement],
        changes: Sequence[tuple[str, CircuitChange]],
        superseded: frozenset[str] = frozenset(),
    ) -> None:
        """Measure and log attempts whose rows are committed, and the circuits they moved. An
        attempt ``superseded`` (``settle.Recorded``) counts as made, but ended no delivery."""
        metrics = self.metrics
        quiet = not log.isEnabledFor(logging.DEBUG)  # delivered attempts are DEBUG lines: asked once a turn
        for record in records:
            if metrics is not None:
                metrics.inc(metrics.delivery_attempts, record.job.partner_id, record.outcome)
                metrics.attempt_seconds.observe(record.duration_ms / 1000)
            if quiet and record.outcome is AttemptOutcome.DELIVERED:
                continue
            failed = record.outcome is AttemptOutcome.FAILED and record.job.delivery_id not in superseded
            level = {
                AttemptOutcome.DELIVERED: logging.DEBUG,
                AttemptOutcome.FAILED: logging.WARNING if failed else logging.INFO,  # someone should look
            }.get(record.outcome, logging.INFO)
            log.log(
                level,
                "webhook delivery failed for good" if failed else "webhook attempt",
                extra={
                    "delivery": record.job.delivery_id,
                    "event_id": record.job.event_id,
                    "partner": record.job.partner_id,
                    "attempt": record.job.attempt,
                    "status_code": record.status_code,
                    "error_class": record.error_class,
                    "outcome": record.outcome,
                    "duration_ms": record.duration_ms,
                    **({"superseded": True} if record.job.delivery_id in superseded else {}),
                },
            )
            if failed and metrics is not None:
                metrics.inc(metrics.deliveries_failed, record.job.partner_id)
        self._paused_themselves(records)
        for partner_id, change in changes:
            if metrics is not None:
                metrics.inc(metrics.circuit_changes, partner_id, change)
            warn = change in (CircuitChange.OPENED, CircuitChange.DISABLED)
            log.log(
                logging.WARNING if warn else logging.INFO,
                _CHANGE_LINES[change],
                extra={"partner": partner_id, "circuit": change},
            )

    def handed_back(self, counts: Mapping[HandedBack, int]) -> None:
        """Count claimed deliveries whose handing back (unsent, to be claimed again) is committed."""
        if self.metrics is not None:
            for reason, count in counts.items():
                if count:
                    self.metrics.handed_back.labels(reason).inc(count)

    def _paused_themselves(self, records: Sequence[Settlement]) -> None:
        """A WARNING line and ``service_webhook_partner_paused_total`` for each partner whose 410
        Gone answer among these committed attempts paused it (once per partner and turn: attempts
        of one partner in flight together come back in the same turn)."""
        gone = dict.fromkeys(
            record.job.partner_id for record in records if record.outcome is AttemptOutcome.PAUSED
        )
        for partner_id in gone:
            if self.metrics is not None:
                self.metrics.inc(self.metrics.partner_paused, partner_id)
            log.warning(
                "a partner answered 410 Gone and paused itself; resume it once its endpoint is back",
                extra={"partner": partner_id, "status_code": 410},
            )
