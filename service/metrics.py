"""Prometheus metrics, one registry per app (tests build many apps; nothing is global).

Counters count what this process did (registrations, answers, delivery attempts); the outbox gauges
are read from the database when metrics are scraped (``set_outbox``), so every server and worker
reports the same queue, and so are the partner gauges (``set_partners``: circuit, status, stored
failures, and the partner's name), which are then the same in every process and survive restarts.

Partner names are text an admin typed: prometheus_client escapes them as label values, control
characters are replaced, and they are cut to ``NAME_LABEL_MAX`` characters so one long name cannot
bloat every scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from service.states import AttemptOutcome, CircuitChange, DeliveryStatus, PartnerStatus
from service.text import readable


# What the gauges are set from, as plain read-only shapes: the modules that read them from the
# database (``service.webhooks.stats`` and ``service.webhooks.standing``) stand above this one.
class WaitingFigures(Protocol):
    """One partner's waiting deliveries."""

    @property
    def deliveries(self) -> int: ...
    @property
    def oldest(self) -> datetime | None: ...
    @property
    def due(self) -> datetime | None: ...


class OutboxFigures(Protocol):
    """The outbox as a scrape reads it."""

    @property
    def by_status(self) -> Mapping[DeliveryStatus, int]: ...
    @property
    def by_partner(self) -> Mapping[str, WaitingFigures]: ...


class PartnerFigures(Protocol):
    """One partner's standing as a scrape reads it."""

    @property
    def partner_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def status(self) -> PartnerStatus: ...
    @property
    def circuit_open(self) -> bool: ...
    @property
    def failed(self) -> int: ...


# The text format ``generate_latest`` writes (prometheus_client's CONTENT_TYPE_LATEST now names
# another version, and older releases lack a name for this one).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Characters of a partner's name in its info series: enough to tell partners apart on a dashboard
# or in an alert, a third of what the name column holds.
NAME_LABEL_MAX = 64
# The states a partner's state gauge has a series for (a removed partner has none).
# The server errors the service answers itself: 500 for an unhandled error, 503 while its
# database or rate-limit store is out of reach (service.errors).
SERVER_ERRORS = ("500", "503")
PARTNER_STATES = tuple(status for status in PartnerStatus if status is not PartnerStatus.REMOVED)


def name_label(name: str) -> str:
    """A partner's name as a label value: control characters (line breaks, escape sequences) as
    U+FFFD, at most ``NAME_LABEL_MAX`` characters, an ellipsis ending one that was cut. Quotes and
    backslashes stay: prometheus_client escapes them."""
    shown = readable(name)
    return shown if len(shown) <= NAME_LABEL_MAX else shown[: NAME_LABEL_MAX - 1] + "\u2026"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registrations = Counter(
            "service_waitlist_registrations_total",
            "Waitlist registrations answered 200, by intent (repeats included).",
            ["intent"],
            registry=self.registry,
        )
        self.waitlist_limited = Counter(
            "service_waitlist_rate_limited_total",
            "Waitlist requests answered 429.",
            registry=self.registry,
        )
        self.client_errors = Counter(
            "service_http_client_errors_total",
            "Answers with a 4xx status, by status.",
            ["status"],
            registry=self.registry,
        )
        self.server_errors = Counter(
            "service_http_server_errors_total",
            "Answers with a 5xx status, by status.",
            ["status"],
            registry=self.registry,
        )
        # The 5xx the service answers show from 0, so an alert's increase() sees a first burst too.
        for status in SERVER_ERRORS:
            self.server_errors.labels(status)
        self.delivery_attempts = Counter(
            "service_webhook_attempts_total",
            "Webhook delivery attempts, by partner and outcome (delivered, retry, failed, paused).",
            ["partner", "outcome"],
            registry=self.registry,
        )
        self.attempt_seconds = Histogram(
            "service_webhook_attempt_seconds",
            "Duration of webhook delivery attempts.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
            registry=self.registry,
        )
        self.deliveries_failed = Counter(
            "service_webhook_deliveries_failed_total",
            "Deliveries whose retry schedule ran out (failed until an admin retries them), by partner.",
            ["partner"],
            registry=self.registry,
        )
        self.handed_back = Counter(
            "service_webhook_handed_back_total",
            "Claimed deliveries this process's worker handed back unsent, to be claimed again, by "
            "reason (late, changed, stopped, stopping).",
            ["reason"],
            registry=self.registry,
        )
        self.circuit_changes = Counter(
            "service_webhook_circuit_changes_total",
            "Partners' circuit breakers: opened, reopened (a failed probe), closed, disabled.",
            ["partner", "change"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "service_webhook_queue_depth",
            "Undelivered deliveries (pending, delivering, batching), by state, read when metrics are "
            "scraped.",
            ["status"],
            registry=self.registry,
        )
        self.waiting = Gauge(
            "service_webhook_deliveries_waiting",
            "Undelivered deliveries (pending, delivering, batching) per partner, read when metrics are "
            "scraped.",
            ["partner"],
            registry=self.registry,
        )
        self.oldest_waiting = Gauge(
            "service_webhook_oldest_waiting_seconds",
            "Age of each partner's oldest undelivered delivery (0 when none waits).",
            ["partner"],
            registry=self.registry,
        )
        self.overdue = Gauge(
            "service_webhook_overdue_seconds",
            "How long each partner's earliest undelivered delivery has been due and not sent (0 when "
            "none is past due): a retry counts from its time, a claim from its lease's end, a delivery "
            "waiting for its batch from its batch's longest wait.",
            ["partner"],
            registry=self.registry,
        )
        self.partner_paused = Counter(
            "service_webhook_partner_paused_total",
            "Partners that paused themselves by answering 410 Gone, by partner.",
            ["partner"],
            registry=self.registry,
        )
        self.circuit_open = Gauge(
            "service_webhook_circuit_open",
            "1 while a partner's circuit is open or half-open (its deliveries held), read at scrape time.",
            ["partner"],
            registry=self.registry,
        )
        self.partner_state = Gauge(
            "service_webhook_partner_state",
            "1 for each partner's current state (active, paused, disabled), 0 for the others.",
            ["partner", "state"],
            registry=self.registry,
        )
        self.failed_deliveries = Gauge(
            "service_webhook_failed_deliveries",
            "Deliveries stored failed (the schedule spent, waiting for an admin retry), per partner.",
            ["partner"],
            registry=self.registry,
        )
        self.partner_info = Info(
            "service_webhook_partner",
            "Each partner's name, to join on the partner label (cut to 64 characters).",
            ["partner"],
            registry=self.registry,
        )
        self.workers = Gauge(
            "service_webhook_workers",
            "Delivery workers in the roster, live (a beat within 45 s) or silent, read at scrape time.",
            ["state"],
            registry=self.registry,
        )
        self.clock_offset = Gauge(
            "service_clock_offset_seconds",
            "This machine's clock less the database server's (positive: ahead), measured at each "
            "delivery worker heartbeat; NaN until measured (SQLite, or no worker in this process).",
            registry=self.registry,
        )
        self.clock_offset.set(float("nan"))
        self.ready = Gauge(
            "service_ready",
            "1 while this process's /readyz answers 200 (what it needs is reachable), read when scraped.",
            registry=self.registry,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Counter] = {}
        # Whether this process delivers (a worker's recorder counts into these metrics): only then
        # are a partner's attempt, circuit and failure counters shown from 0 (``_from_zero``).
        self.delivering = False
        # Each partner's series shown from 0, by partner, and whether those of a worker were.
        self._zeroed: dict[str, tuple[bool, list[tuple[Counter, tuple[str, ...]]]]] = {}

    def inc(self, counter: Counter, *labels: str) -> None:
        """``counter.labels(*labels).inc()`` with each label set's child looked up only once.

        ``labels()`` validates, hashes and takes a lock on every call: 1.3 µs of the 1.8 µs an
        increment cost on the registration path, measured here.
        """
        key = (id(counter), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        child.inc()

    def set_outbox(self, stats: OutboxFigures, now: datetime) -> None:
        """The outbox gauges, from what ``service.webhooks.stats`` read at scrape time.

        Every partner listed has a series (``stats`` lists those not removed, and a removed one
        only while something of its own still waits); one no longer listed drops out, as does a
        state.
        """
        self.queue_depth.clear()
        for status, count in stats.by_status.items():
            self.queue_depth.labels(status).set(count)
        self.waiting.clear()
        self.oldest_waiting.clear()
        self.overdue.clear()
        for partner_id, waiting in stats.by_partner.items():
            self.waiting.labels(partner_id).set(waiting.deliveries)
            self.oldest_waiting.labels(partner_id).set(_seconds_since(waiting.oldest, now))
            self.overdue.labels(partner_id).set(_seconds_since(waiting.due, now))

    def set_partners(self, standings: Sequence[PartnerFigures]) -> None:
        """The partner gauges, from what ``service.webhooks.standing`` read at scrape time.

        Every partner not removed has a series; a removed one drops out, and so do its counter
        series that never counted anything.
        """
        for gauge in (self.circuit_open, self.partner_state, self.failed_deliveries, self.partner_info):
            gauge.clear()
        listed = set()
        for standing in standings:
            partner = standing.partner_id
            listed.add(partner)
            self.circuit_open.labels(partner).set(1 if standing.circuit_open else 0)
            for state in PARTNER_STATES:
                self.partner_state.labels(partner, state).set(1 if standing.status == state else 0)
            self.failed_deliveries.labels(partner).set(standing.failed)
            self.partner_info.labels(partner).info({"name": name_label(standing.name)})
            worker_shown, _ = self._zeroed.get(partner, (None, []))
            if worker_shown is None or (self.delivering and not worker_shown):  # new, or a worker since
                self._zeroed[partner] = (self.delivering, self._from_zero(partner))
        for partner in self._zeroed.keys() - listed:
            for counter, labels in self._zeroed.pop(partner)[1]:
                if (id(counter), labels) not in self._children:  # never counted in: nothing to keep
                    counter.remove(*labels)

    def _from_zero(self, partner: str) -> list[tuple[Counter, tuple[str, ...]]]:
        """Show ``partner``'s counter series from 0, before anything is counted in them; the series
        made. Its 410s in every process, as the alert on them reads every target; its attempts,
        circuit changes and failed deliveries where a worker counts them (``delivering``).

        A series first scraped above 0 has no sample before its first increment, so ``increase()``
        and ``rate()`` miss that increment: for events as rare as a partner's circuit opening, its
        deliveries failing or its 410, the one that matters.
        """
        made: list[tuple[Counter, tuple[str, ...]]] = [(self.partner_paused, (partner,))]
        if self.delivering:
            made += [(self.delivery_attempts, (partner, outcome)) for outcome in AttemptOutcome]
            made += [(self.circuit_changes, (partner, change)) for change in CircuitChange]
            made.append((self.deliveries_failed, (partner,)))
        for counter, labels in made:
            counter.labels(*labels)
        return made

    def set_workers(self, live: int, silent: int) -> None:
        """The roster gauges, from what ``service.webhooks.roster`` read at scrape time."""
        self.workers.labels("live").set(live)
        self.workers.labels("silent").set(silent)

    def set_clock_offset(self, seconds: float) -> None:
        """The clock offset gauge, from what the worker's last heartbeat measured
        (``service.db.clockcheck``)."""
        self.clock_offset.set(seconds)

    def clear_database_gauges(self) -> None:
        """Drop every gauge read from the database (it could not be read: none is better than stale)."""
        for gauge in (
            self.queue_depth,
            self.waiting,
            self.oldest_waiting,
            self.overdue,
            self.circuit_open,
            self.partner_state,
            self.failed_deliveries,
            self.partner_info,
            self.workers,
        ):
            gauge.clear()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _seconds_since(moment: datetime | None, now: datetime) -> float:
    """Seconds from ``moment`` to ``now``; 0 for none, or one still to come."""
    return 0.0 if moment is None else max(0.0, (now - moment).total_seconds())
