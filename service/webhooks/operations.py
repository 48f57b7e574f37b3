"""The operator's use cases, each written once: the admin routes and the commands both call these.

``Operations`` takes its collaborators (engine, settings, clock, the sender that makes test
deliveries, name resolution, a notifier, an id source) and answers with the JSON-ready documents
both adapters print. It raises only the domain errors of ``service.exceptions``; the HTTP layer
turns those into statuses, the commands into the error shape on stderr.

The notifier is how a use case tells the rest of its process what changed: deliveries became due
(the in-process worker wakes at once; other processes hear PostgreSQL's NOTIFY at commit) or the
rooms the sitemap lists may have grown. Commands run without one; their worker is elsewhere.

Every operation is one line of the audit trail (``service.audit``): the class is ``audited``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from service.audit import audited, reports, unaudited
from service.clock import Clock, format_timestamp
from service.exceptions import UnknownResource, invalid
from service.ids import IdSource, new_id
from service.params import refuse_unknown, text, whole_number
from service.settings import Settings
from service.webhooks import outbox, partners, retention, stats
from service.webhooks.partners import Partner
from service.webhooks.sender import TEST_EVENT, Sender, TestDelivery, send_test
from service.webhooks.ssrf import Resolve, system_resolve
from service.webhooks.states import DeliveryStatus, PartnerStatus
from service.webhooks.stats import OutboxStats

Document = dict[str, Any]
MAX_PAGE = 1000  # deliveries per page, each with its attempts


class Notifier(Protocol):
    def deliveries_due(self) -> None:
        """Deliveries became due: wake this process's worker."""

    def rooms_changed(self) -> None:
        """An event was stored: the sitemap may list new rooms."""


class Quiet:
    """The notifier of a process with no worker and no sitemap of its own (the commands)."""

    def deliveries_due(self) -> None:
        pass

    def rooms_changed(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class DeliveryFilter:
    partner_id: str | None = None
    status: DeliveryStatus | None = None
    event_id: str | None = None
    limit: int = 100
    offset: int = 0

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> DeliveryFilter:
        """From query parameters or command options (strings); unknown names are refused."""
        refuse_unknown(args, ("partner", "status", "event", "limit", "offset"))
        status = args.get("status")
        if status is not None and status not in DeliveryStatus.__members__.values():
            allowed = ", ".join(DeliveryStatus)
            raise invalid("status", "invalid", f"Must be one of: {allowed}.")
        return cls(
            partner_id=text(args, "partner"),
            status=DeliveryStatus(status) if status is not None else None,
            event_id=text(args, "event"),
            limit=whole_number(args, "limit", 100, 1, MAX_PAGE),
            offset=whole_number(args, "offset", 0, 0, 2**62),
        )


def test_result(delivery: TestDelivery) -> Document:
    """The answer to a test delivery: what the endpoint did with one signed request."""
    attempt = delivery.attempt
    ok = attempt.status_code is not None and 200 <= attempt.status_code < 300
    return {
        "ok": ok,
        "deliveryId": delivery.delivery_id,
        "eventId": delivery.event_id,
        "event": TEST_EVENT,
        "attempt": {
            "startedAt": format_timestamp(attempt.started_at),
            "durationMs": attempt.duration_ms,
            "statusCode": attempt.status_code,
            "errorClass": attempt.error_class,
            "responseExcerpt": attempt.response_excerpt,
            "outcome": "delivered" if ok else "failed",
        },
    }


def unknown_partner() -> UnknownResource:
    return UnknownResource("No partner has this id.")


@audited
@dataclass
class Operations:
    engine: AsyncEngine
    settings: Settings
    clock: Clock
    sender: Sender  # opened by the owner; test deliveries only (the worker has its own)
    resolve: Resolve = system_resolve
    notifier: Notifier = field(default_factory=Quiet)
    ids: IdSource = new_id

    # --- partners -----------------------------------------------------------------------------

    @reports(partner="id")
    async def onboard(self, data: Mapping[str, Any]) -> Document:
        """Validate, check the URL's destination, store; the answer is the only place the secret shows."""
        new = partners.validate_new_partner(data)
        await partners.check_destination(
            new.url, allow_private=self.settings.webhook_allow_private_urls, resolve=self.resolve
        )
        async with self.engine.begin() as conn:
            partner = await partners.create_partner(
                conn, new, now=self.clock(), partner_id=self.ids(partners.PARTNER_PREFIX)
            )
        return {**partner.public(self.clock()), "secret": partner.secret}

    async def list_partners(self) -> Document:
        async with self.engine.connect() as conn:
            found = await partners.list_partners(conn)
        return {"partners": [partner.public(self.clock()) for partner in found]}

    async def partner(self, partner_id: str) -> Partner:
        async with self.engine.connect() as conn:
            partner = await partners.get_partner(conn, partner_id)
        if partner is None:
            raise unknown_partner()
        return partner

    async def show_partner(self, partner_id: str) -> Document:
        return (await self.partner(partner_id)).public(self.clock())

    async def pause(self, partner_id: str) -> Document:
        return await self._set_status(partner_id, PartnerStatus.PAUSED)

    async def resume(self, partner_id: str) -> Document:
        """Active again: what waited goes out now."""
        document = await self._set_status(partner_id, PartnerStatus.ACTIVE)
        self.notifier.deliveries_due()
        return document

    async def _set_status(self, partner_id: str, status: PartnerStatus) -> Document:
        async with self.engine.begin() as conn:
            partner = await partners.set_status(conn, partner_id, status, now=self.clock())
        if partner is None:
            raise unknown_partner()
        return partner.public(self.clock())

    async def test(self, partner_id: str) -> Document:
        """One signed ``webhook.test`` delivery, sent now with every live secret; never retried."""
        partner = await self.partner(partner_id)
        delivery = await send_test(
            self.sender,
            partner_id=partner.id,
            url=partner.url,
            secrets=partner.live_secrets(self.clock()),
        )
        return test_result(delivery)

    async def rotate_secret(self, partner_id: str) -> Document:
        async with self.engine.begin() as conn:
            rotated = await partners.rotate_secret(
                conn, partner_id, now=self.clock(), overlap=self.settings.secret_rotation_overlap
            )
        if rotated is None:
            raise unknown_partner()
        partner, secret = rotated
        return {**partner.public(self.clock()), "secret": secret}

    async def retry(self, partner_id: str) -> Document:
        """Make the partner's failed deliveries pending again, due now."""
        async with self.engine.begin() as conn:
            if await partners.get_partner(conn, partner_id) is None:
                raise unknown_partner()
            requeued = await partners.retry_failed(conn, partner_id, now=self.clock())
        if requeued:
            self.notifier.deliveries_due()
        return {"partnerId": partner_id, "requeued": requeued}

    # --- events and deliveries ----------------------------------------------------------------

    async def publish(self, data: Mapping[str, Any]) -> Document:
        """Validate ``{event, ...members}``, store the event and its deliveries together, fan out."""
        published = await outbox.publish_event(self.engine, data, now=self.clock())
        if published.deliveries:
            self.notifier.deliveries_due()
        if not published.duplicate:
            self.notifier.rooms_changed()  # sitemap.xml lists the rooms events name
        return {"eventId": published.event_id, "deliveries": published.deliveries}

    async def list_deliveries(self, query: DeliveryFilter) -> Document:
        async with self.engine.connect() as conn:
            found = await outbox.list_deliveries(
                conn,
                partner_id=query.partner_id,
                status=query.status,
                event_id=query.event_id,
                limit=query.limit,
                offset=query.offset,
            )
        return {"deliveries": found}

    async def prune(self, older_than_days: int | None = None) -> Document:
        """Delete settled deliveries, their attempts and settled events older than the retention
        (``service.webhooks.retention``); registrations are never pruned. Counts of what went."""
        days = self.settings.retention_days if older_than_days is None else older_than_days
        if days < 1:
            raise invalid("olderThan", "too_small", "Must be at least 1 day.")
        pruned = await retention.prune(self.engine, now=self.clock(), older_than=timedelta(days=days))
        return pruned.document()

    @unaudited  # the metrics scrape, every few seconds
    async def outbox_stats(self) -> OutboxStats:
        """What waits to be delivered, per state and per partner (``service.webhooks.stats``)."""
        async with self.engine.connect() as conn:
            return await stats.outbox_stats(conn)
