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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from service.audit import audited, note, reports, unaudited
from service.clock import Clock, format_timestamp
from service.db.faults import once_more_if_rolled_back
from service.events import parse_event
from service.exceptions import InvalidInput, StateConflict, UnknownResource, invalid
from service.ids import IdSource, new_id
from service.keyring import Keyring, UnreadableSecret, load_keyring
from service.params import filter_text, refuse_unknown, refuse_unknown_members, whole_number
from service.settings import OVERLAP_SECONDS_MAX, Settings
from service.states import REPLAYABLE, DeliveryStatus, PartnerStatus
from service.text import text_fault
from service.webhooks import listing, outbox, partners, presenter, requeue, retention, roster, standing, stats
from service.webhooks.batching import BatchPolicy, parse_batch
from service.webhooks.partners import Partner
from service.webhooks.requeue import Resent
from service.webhooks.send import TEST_EVENT, Sender, TestDelivery, send_test
from service.webhooks.ssrf import Resolve, system_resolve
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
            partner_id=filter_text(args, "partner"),
            status=DeliveryStatus(status) if status is not None else None,
            event_id=filter_text(args, "event"),
            limit=whole_number(args, "limit", 100, 1, MAX_PAGE),
            offset=whole_number(args, "offset", 0, 0, 2**62),
        )


REPLAY_MEMBERS = ("partner", "since", "until", "status")


def _moment(data: Mapping[str, Any], name: str) -> datetime:
    value = data[name]
    if not isinstance(value, str):
        raise invalid(name, "invalid_type", "Must be a string.")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.utcoffset() is None:
        raise invalid(name, "invalid", "Must be an ISO-8601 timestamp with Z or a UTC offset.")
    try:  # what every database stores: years 1 to 9999 in UTC, after the offset is applied
        return moment.astimezone(UTC)
    except OverflowError:
        raise invalid(name, "invalid", "Must fall within the years 1 to 9999 in UTC.") from None


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """``{partner?, since, until?, status?}``: deliveries created at or after ``since`` and before
    ``until`` (default: now), in ``status`` (``failed`` by default, or ``delivered``)."""

    since: datetime
    until: datetime
    status: DeliveryStatus = DeliveryStatus.FAILED
    partner_id: str | None = None

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, now: datetime) -> ReplayRequest:
        refuse_unknown_members(data, REPLAY_MEMBERS)
        if "since" not in data:
            raise invalid("since", "missing", "This member is required.")
        since = _moment(data, "since")
        until = _moment(data, "until") if data.get("until") is not None else now
        if until <= since:
            raise invalid("until", "invalid", "Must be later than since.")
        status = data.get("status", DeliveryStatus.FAILED)
        if status not in REPLAYABLE:
            allowed = ", ".join(REPLAYABLE)
            raise invalid("status", "invalid", f"Must be one of: {allowed}.")
        partner = data.get("partner")
        if partner is not None and (not isinstance(partner, str) or text_fault(partner) is not None):
            raise invalid("partner", "invalid", "Must be a partner id.")
        return cls(since=since, until=until, status=DeliveryStatus(status), partner_id=partner)


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


UNREADABLE = (
    "The partner's secret was encrypted with a key SERVICE_SECRETS_KEY no longer lists; add that "
    "key again, or rotate the secret."
)
UNSIGNABLE = (
    "The partner has no signing secret (discard-unreadable deleted the ones no key opened); "
    "rotate-secret gives it one, and its deliveries wait until then."
)
UNREADABLE_STORE = (
    "A stored partner secret was encrypted with a key SERVICE_SECRETS_KEY no longer lists; list "
    "that key after the newest and run this again."
)


def rotation_overlap(data: Mapping[str, Any], default: int) -> int:
    """``{overlapSeconds?}`` of a rotation: a whole number of seconds, 0 to a month."""
    refuse_unknown_members(data, ("overlapSeconds",))
    value = data.get("overlapSeconds")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= OVERLAP_SECONDS_MAX:
        raise invalid("overlapSeconds", "invalid", f"Must be a whole number from 0 to {OVERLAP_SECONDS_MAX}.")
    return value


def batch_member(value: object) -> BatchPolicy | None:
    """A partner body's ``batch`` member (onboarding or update): the policy, None for null (no
    batching), or ``InvalidInput`` naming ``batch.<member>``. Store it with ``partners.set_batch``."""
    return parse_batch(value)


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
    # None: the settings' own (``service.keyring.load_keyring``), loaded by the first operation
    # that seals or opens a secret, so listings work where no key is configured.
    keyring: Keyring | None = None

    @property
    def _keyring(self) -> Keyring:
        if self.keyring is None:
            self.keyring = load_keyring(self.settings)
        return self.keyring

    # --- partners -----------------------------------------------------------------------------

    @reports(partner="id")
    async def onboard(self, data: Mapping[str, Any]) -> Document:
        """Validate, check the URL's destination, store; the answer is the only place the secret shows."""
        new = partners.validate_new_partner(data)
        await partners.check_destination(
            new.url, allow_private=self.settings.webhook_allow_private_urls, resolve=self.resolve
        )
        secret = partners.new_secret()
        async with self.engine.begin() as conn:
            partner = await partners.create_partner(
                conn,
                new,
                now=self.clock(),
                keyring=self._keyring,
                secret=secret,
                partner_id=self.ids(partners.PARTNER_PREFIX),
            )
        return {**partner.public(self.clock()), "secret": secret}

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

    async def update(self, partner_id: str, data: Mapping[str, Any]) -> Document:
        """Change a partner's name, URL, event kinds or cap; a new URL is checked as at onboarding."""
        change = partners.validate_partner_change(data)
        if change.url is not None:
            await partners.check_destination(
                change.url, allow_private=self.settings.webhook_allow_private_urls, resolve=self.resolve
            )
        async with self.engine.begin() as conn:
            # Checked against the partner as it is once its row is held: read before, a concurrent
            # change of the other of events and batch could leave the two disagreeing.
            held = await partners.lock_partner(conn, partner_id)
            stored = await partners.get_partner(conn, partner_id) if held else None
            if stored is None:
                raise unknown_partner()
            if faults := change.faults_against(stored):
                raise InvalidInput(errors=faults)
            partner = await partners.update_partner(conn, partner_id, change, now=self.clock())
        if partner is None:
            raise unknown_partner()
        self.notifier.deliveries_due()  # a new URL or a larger cap may let waiting deliveries go
        return partner.public(self.clock())

    async def remove(self, partner_id: str) -> Document:
        """Remove a partner: its secrets go, its undelivered deliveries are cancelled, never sent.

        On PostgreSQL the removal locks the partner's row, then its deliveries, as a worker's turn
        settling the partner's attempts does (``settle.record``): one waits for the other. A turn
        claiming or handing back the partner's deliveries may still deadlock with it; when
        PostgreSQL ends the removal, it runs once more, and a second answers 503
        (``service.db.faults``). ``partners.remove_partner`` says why the order is as it is."""

        async def removal() -> int | None:
            async with self.engine.begin() as conn:
                return await partners.remove_partner(conn, partner_id, now=self.clock())

        cancelled = await once_more_if_rolled_back(removal, "removing a partner")
        if cancelled is None:
            raise unknown_partner()
        return {"partnerId": partner_id, "cancelled": cancelled}

    async def pause(self, partner_id: str) -> Document:
        return await self._set_status(partner_id, PartnerStatus.PAUSED)

    async def resume(self, partner_id: str) -> Document:
        """Active again, and tried now: what waited goes out now; an open circuit turns half-open
        and one probe goes at once (success releases what it held; failure re-opens it for the
        same cool-down). ``partners.resume_partner``."""
        async with self.engine.begin() as conn:
            partner = await partners.resume_partner(conn, partner_id, now=self.clock())
        if partner is None:
            raise unknown_partner()
        self.notifier.deliveries_due()
        return partner.public(self.clock())

    async def _set_status(self, partner_id: str, status: PartnerStatus) -> Document:
        async with self.engine.begin() as conn:
            partner = await partners.set_status(conn, partner_id, status, now=self.clock())
        if partner is None:
            raise unknown_partner()
        return partner.public(self.clock())

    async def test(self, partner_id: str) -> Document:
        """One signed ``webhook.test`` delivery, sent now with every live secret; never retried.
        A partner left with no secret (``discard_unreadable_secrets``) is a ``StateConflict``."""
        async with self.engine.begin() as conn:
            # The secrets first: their read starts by deleting expired ones, and on SQLite a
            # transaction that writes before it reads never has to upgrade a read lock.
            try:
                secrets = await partners.live_secrets(
                    conn, partner_id, now=self.clock(), keyring=self._keyring
                )
            except UnreadableSecret:
                raise StateConflict(UNREADABLE) from None
            partner = await partners.get_partner(conn, partner_id)
            if partner is None:
                raise unknown_partner()
            digests = await partners.digests(conn, partner_id)
        if not secrets:
            raise StateConflict(UNSIGNABLE)
        delivery = await send_test(
            self.sender, partner_id=partner.id, url=partner.url, secrets=secrets, digests=digests
        )
        return test_result(delivery)

    async def rotate_secret(self, partner_id: str, data: Mapping[str, Any] | None = None) -> Document:
        """A new secret; the live ones sign for ``{overlapSeconds}`` more (default
        ``SERVICE_SECRET_ROTATION_OVERLAP``; ``0`` ends them now), never longer than they had. A
        partner that had none sends what waited at once (``partners.rotate_secret``)."""
        overlap = rotation_overlap(data or {}, self.settings.secret_rotation_overlap)
        async with self.engine.begin() as conn:
            rotated = await partners.rotate_secret(
                conn, partner_id, now=self.clock(), overlap=overlap, keyring=self._keyring
            )
        if rotated is None:
            raise unknown_partner()
        self.notifier.deliveries_due()  # a partner that had no secret sends what waited
        partner, secret = rotated
        return {**partner.public(self.clock()), "secret": secret}

    async def reencrypt_secrets(self) -> Document:
        """Seal every partner secret under the newest key of ``SERVICE_SECRETS_KEY``."""
        async with self.engine.begin() as conn:
            expired = await partners.delete_expired_secrets(conn, now=self.clock())  # a write first
            try:
                count = await partners.reseal_secrets(conn, self._keyring)
            except UnreadableSecret:
                raise StateConflict(UNREADABLE_STORE) from None
        return {"reencrypted": count, "expiredDeleted": expired, "keys": self._keyring.keys}

    @reports(discarded="discarded")
    async def discard_unreadable_secrets(self) -> Document:
        """Delete the stored secrets no key of ``SERVICE_SECRETS_KEY`` opens, after every key that
        sealed them is lost; the partners left without a secret wait for ``rotate_secret``."""
        async with self.engine.begin() as conn:
            expired = await partners.delete_expired_secrets(conn, now=self.clock())  # a write first
            discarded = await partners.discard_unreadable(conn, self._keyring, now=self.clock())
            waiting = await partners.without_secret(conn)
        return {"discarded": discarded, "expiredDeleted": expired, "partnersWithoutSecret": waiting}

    @reports(requeued="requeued")
    async def retry(self, partner_id: str) -> Document:
        """Make the partner's failed deliveries pending again, due now."""
        async with self.engine.begin() as conn:
            if await partners.get_partner(conn, partner_id) is None:
                raise unknown_partner()
            requeued = await requeue.retry_failed(conn, partner_id, now=self.clock())
        if requeued:
            self.notifier.deliveries_due()
        return {"partnerId": partner_id, "requeued": requeued}

    # --- events and deliveries ----------------------------------------------------------------

    async def publish(self, data: Mapping[str, Any]) -> Document:
        """Validate ``{event, ...members}``, store the event and its deliveries together, fan out."""
        now = self.clock()
        published = await outbox.publish_event(self.engine, parse_event(data, now=now), now=now)
        if published.deliveries:
            self.notifier.deliveries_due()
        if not published.duplicate:
            self.notifier.rooms_changed()  # sitemap.xml lists the rooms events name
        return {"eventId": published.event_id, "deliveries": published.deliveries}

    async def list_deliveries(self, query: DeliveryFilter) -> Document:
        """Deliveries, newest first, each with its attempts in order (``presenter.deliveries``)."""
        async with self.engine.connect() as conn:
            rows = await listing.deliveries(
                conn,
                partner_id=query.partner_id,
                status=query.status,
                event_id=query.event_id,
                limit=query.limit,
                offset=query.offset,
            )
            attempts = await listing.attempts(conn, [row.id for row in rows])
            sizes = await listing.batch_sizes(conn, [row.id for row in rows if row.batch])
            found = presenter.deliveries(rows, attempts, sizes)
            await standing.mark_held(conn, found)  # heldBy: "circuit"
        return {"deliveries": found}

    @reports(requeued="deliveries")
    async def replay(self, data: Mapping[str, Any]) -> Document:
        """Requeue the deliveries created in a window (``ReplayRequest``), across partners or for one.

        The audit line names the filter's partner, read from the body once it is checked (the trail
        reads only arguments named ``partner_id``), and counts what was requeued."""
        request = ReplayRequest.parse(data, now=self.clock())
        note(partner=request.partner_id)
        async with self.engine.begin() as conn:
            if (
                request.partner_id is not None
                and await partners.get_partner(conn, request.partner_id) is None
            ):
                raise unknown_partner()
            count = await requeue.replay(
                conn,
                since=request.since,
                until=request.until,
                status=request.status,
                partner_id=request.partner_id,
                now=self.clock(),
            )
        if count:
            self.notifier.deliveries_due()
        return {"deliveries": count}

    async def resend(self, delivery_id: str) -> Document:
        """Send one delivery again, whatever its state: same delivery id, a fresh attempt."""
        async with self.engine.begin() as conn:
            outcome = await requeue.resend(conn, delivery_id, now=self.clock())
        if outcome is Resent.UNKNOWN:
            raise UnknownResource("No delivery has this id.")
        if outcome is Resent.CANCELLED:
            raise StateConflict("This delivery's partner was removed; it is never sent again.")
        if outcome is Resent.SPLIT:
            raise StateConflict(
                "Some of this batch's events went out again in another batch; resend those, not the batch."
            )
        if outcome is Resent.IN_BATCH:
            raise StateConflict("This delivery went out in a batch (see its batchId); resend the batch.")
        if outcome is Resent.IN_FLIGHT:
            raise StateConflict("This delivery is being attempted right now; resend it once it settles.")
        self.notifier.deliveries_due()
        return {"deliveryId": delivery_id, "status": DeliveryStatus.PENDING}

    async def prune(self, older_than_days: int | None = None) -> Document:
        """Delete settled deliveries, their attempts and settled events older than the retention
        (``service.webhooks.retention``); registrations are never pruned. Counts of what went."""
        days = self.settings.retention_days if older_than_days is None else older_than_days
        if days < 1:
            raise invalid("olderThan", "too_small", "Must be at least 1 day.")
        # timedelta's longest: a retention longer still reaches back before the year 1 all the same
        older_than = timedelta(days=min(days, timedelta.max.days))
        pruned = await retention.prune(self.engine, now=self.clock(), older_than=older_than)
        return pruned.document()

    # --- workers ------------------------------------------------------------------------------

    async def workers(self) -> Sequence[roster.Presence]:
        """The delivery workers in the roster (``service.webhooks.roster``), live or silent."""
        async with self.engine.connect() as conn:
            return await roster.roster(conn)

    async def list_workers(self) -> Document:
        found = await self.workers()
        now = self.clock()
        return {"workers": [presence.public(now) for presence in found]}

    @unaudited  # the metrics scrape, every few seconds
    async def outbox_stats(self) -> OutboxStats:
        """What waits to be delivered, per state and per partner (``service.webhooks.stats``)."""
        async with self.engine.connect() as conn:
            return await stats.outbox_stats(conn)
