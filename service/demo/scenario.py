"""The demo's scenario as data: six weeks of a launch, its partners, and the plan built from a seed.

Pure: nothing here starts a server or touches a database. ``plan(seed)`` is every action the
driver will perform, with its time; ``PARTNERS`` says how each partner's endpoint answers;
``digest(seed)`` sums both up for the demo database's fingerprint (``service.demo.files``).
Every choice is drawn from ``random.Random`` seeded with the seed, so the same seed plans the
same six weeks.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ulid import ULID

DEFAULT_SEED = 20260629  # the public API version date; any integer gives another, equally valid demo
# Bump when the demo changes in a way ``digest`` cannot see: how the driver or the receivers play
# the scenario, rather than the scenario itself.
FORMAT = 3

# --- the scenario -----------------------------------------------------------------------------

START = datetime(2026, 5, 11, tzinfo=UTC)  # a Monday
DAYS = 42  # six weeks
END = START + timedelta(days=DAYS)
ANNOUNCEMENT = START + timedelta(days=21)  # the launch post: a spike, and arcade takes off after it
REGISTRATIONS = 3000  # submissions, valid or not
EVENTS = 300  # events published, besides the scripted ones
BASE_URL = "https://launchrooms.example"
# Not a credential: it guards only the generator's own server, on loopback, while it runs.
DEMO_ADMIN_TOKEN = "demo-admin-token-for-the-loopback-server"  # noqa: S105

# Short, so the whole schedule plays out in a few simulated minutes; the clock is simulated, so
# a longer one would cost nothing but rows.
RETRY_SCHEDULE = (30.0, 120.0, 600.0, 1800.0)
WEBHOOK_TIMEOUT = 0.3  # seconds; the designed timeout, as the attempts' durations read it
PROMPT_REPLY = 0.1  # seconds the healthy partner takes on a busy moment
SLOW_REPLY = 0.2  # seconds the slow partner takes when it does answer
HANG = 0.6  # seconds the slow partner sits on a request it will not answer in time
# Seconds the demo's worker really waits for an answer (its SERVICE_WEBHOOK_TIMEOUT). Answers
# designed to come in time come at once, so a loaded machine has this long to carry them before a
# timeout the scenario did not design fires; an answer designed to miss WEBHOOK_TIMEOUT is held
# for REAL_HOLD, past it. Each designed timeout costs the generator REAL_HOLD of real time.
REAL_TIMEOUT = 1.0
REAL_HOLD = REAL_TIMEOUT + 0.2
TRANSIT = (0.001, 0.009)  # seconds loopback adds to an attempt, drawn per attempt in this range
# The notebooks read latency in steps this wide, each designed delay starting one. The demo's
# durations are the same every run at any resolution (see the package's docstring); a real log's
# are measured in real time and carry a few ms of jitter, which a step absorbs.
LATENCY_RESOLUTION_MS = 100

HEALTHY = "Lighthouse Analytics"
FLAKY = "Ripple Alerts"
SLOW = "Tortoise Bot"
GONE = "Sunset Feeds"
OUTAGE = (datetime(2026, 6, 3, 1, 30, tzinfo=UTC), datetime(2026, 6, 3, 4, 30, tzinfo=UTC))
GONE_AT = datetime(2026, 6, 10, tzinfo=UTC)  # from then on the partner answers 410 Gone


@dataclass(frozen=True)
class Answer:
    """How a partner's endpoint answers one attempt, ``delay`` seconds after it came (on the demo's
    stopwatch, ``service.demo.receivers.Stopwatch``)."""

    status: int = 200
    body: str = '{"received":true}'
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0


OK = Answer()
RETIRED = Answer(410, "this integration has been retired")


@dataclass(frozen=True)
class PartnerSpec:
    """A partner: the kinds it subscribes to, and how its endpoint behaves.

    Each attempt draws one number in [0, 1) (``service.demo.receivers.Endpoint``): ``answers`` are
    tried in order, each taking the draws below its bound, and the rest are answered ``OK``.
    Between the two moments of ``down`` the endpoint is off the network (connections refused);
    from ``retired_at`` on it answers ``RETIRED`` to everything.
    """

    name: str
    events: tuple[str, ...] | None  # None: every kind
    answers: tuple[tuple[float, Answer], ...] = ()
    down: tuple[datetime, datetime] | None = None
    retired_at: datetime | None = None

    def answer(self, draw: float, at: datetime) -> Answer:
        if self.retired_at is not None and at >= self.retired_at:
            return RETIRED
        return next((answer for bound, answer in self.answers if draw < bound), OK)


PARTNERS = (
    PartnerSpec(HEALTHY, None, answers=((0.2, Answer(delay=PROMPT_REPLY)),)),
    PartnerSpec(
        FLAKY,
        None,
        answers=(
            (1 / 6, Answer(500, "internal error")),
            (1 / 6 + 1 / 16, Answer(503, "busy, come back later", (("Retry-After", "90"),))),
        ),
        down=OUTAGE,
    ),
    PartnerSpec(
        SLOW,
        ("room.claimed", "room.upgraded", "room.trending", "platform.milestone"),
        answers=((0.1, Answer(body="ok", delay=HANG)), (0.3, Answer(body="ok", delay=SLOW_REPLY))),
    ),
    PartnerSpec(
        GONE,
        ("room.links.updated", "room.content.published", "room.arcade.high_score"),
        retired_at=GONE_AT,
    ),
)


@dataclass(frozen=True)
class Project:
    name: str
    ticker: str
    chain: str

    @property
    def slug(self) -> str:
        return "-".join(self.name.lower().split())

    @property
    def room_url(self) -> str:
        return f"{BASE_URL}/rooms/{self.slug}"


# Invented names in the style of launches and collections; most named first.
PROJECTS = (
    Project("Moonfrog", "FROG", "solana"),
    Project("Degen Otters", "OTTR", "solana"),
    Project("Based Bunnies", "BUNS", "base"),
    Project("Solar Sloths", "SLTH", "base"),
    Project("Pixel Pandas", "PNDA", "ethereum"),
    Project("Lilypad DAO", "LILY", "arbitrum"),
    Project("Cosmic Cats", "CCAT", "solana"),
    Project("Mochi Money", "MOCHI", "base"),
    Project("Glowworm", "GLOW", "solana"),
    Project("Night Owls", "OWLS", "ethereum"),
    Project("Zap Protocol", "ZAP", "arbitrum"),
    Project("Kelp Kingdom", "KELP", "solana"),
    Project("Tiny Titans", "TITN", "base"),
    Project("Hopscotch", "HOP", "solana"),
    Project("Quokka Quest", "QKKA", "base"),
    Project("Velvet Vaults", "VELV", "arbitrum"),
    Project("Snail Mail", "SNAIL", "ethereum"),
    Project("Rugless Finance", "RGLS", "ethereum"),
    Project("Paper Planes", "PLNE", "base"),
    Project("Marble Moles", "MOLE", "solana"),
)
PROJECT_WEIGHTS = tuple(1 / (rank + 1) ** 1.1 for rank in range(len(PROJECTS)))  # Zipf-like

FIRST_NAMES = (
    "ann", "ben", "cara", "dev", "eli", "fay", "gus", "hana", "ivan", "jo", "kai", "lena", "milo",
    "nia", "omar", "pia", "quinn", "rosa", "sam", "tara", "uma", "vic", "wren", "yuki", "zoe",
)  # fmt: skip
LAST_NAMES = (
    "lee", "khan", "silva", "novak", "okafor", "berg", "rossi", "tanaka", "moreau", "haas",
    "ward", "costa", "ivanova", "nguyen", "park", "diaz", "meyer", "walsh", "popescu", "ali",
)  # fmt: skip
DOMAINS = (
    ("gmail.com", 40), ("proton.me", 12), ("outlook.com", 10), ("icloud.com", 8), ("yahoo.com", 5),
    ("hey.com", 3), ("fastmail.com", 3), ("moonfrog.xyz", 4), ("otters.gg", 3), ("pixelpandas.io", 3),
    ("lilypad.finance", 3), ("example.org", 6),
)  # fmt: skip
INTENT_WEIGHTS = {"claim": 28, "member": 52, "arcade": 20}
INTENT_WEIGHTS_AFTER = {"claim": 26, "member": 42, "arcade": 32}  # arcade was in the launch post
PROJECT_SHARE = {"claim": 0.92, "member": 0.4, "arcade": 0.3}
MESSAGE_SHARE = {"claim": 0.5, "member": 0.22, "arcade": 0.3}
FORM_SHARE = 0.2  # the site's plain HTML form; the rest is the site's script or API clients
INVALID_SHARE = 0.04
RETURNING_SHARE = 0.15  # of valid submissions, someone who registered before
SAME_INTENT_SHARE = 0.3  # of those, the same intent again (stored once, updated)

SHORT_MESSAGES = (
    "gm", "wen claim?", "lfg", "early access pls", "hi!", "🐸🐸🐸", "👀", "ser pls", "in", "following",
    "need arcade asap", "let's go", "hello from the discord", "wagmi",
)  # fmt: skip
SENTENCES = (
    "I run the community for {project} and want to claim our room before someone else does.",
    "We are migrating liquidity next month and need an official room people can trust.",
    "Our holders keep asking where the canonical links are.",
    "Would love an arcade for our Discord, the frog game idea is great.",
    "I'm a holder and want to follow a few rooms in one place.",
    "Can the room show our deployments on more than one chain?",
    "We have an NFT collection and a token; can both live in one project hub?",
    "Interested in the Pro tier once we pass our next milestone.",
    "Our old site was cloned by phishers last month, verified links would help a lot.",
    "I'm one of the moderators for {project}, the founders asked me to sign up.",
    "Please let me know what the claim process needs from us (contract owner signature?).",
    "Mostly here for the arcade, our community loves high-score tables.",
    "Is there an API so our bot can post room updates automatically?",
    "We launched three weeks ago and the fake accounts are already out of control.",
)
CONTACT_SHARE = 0.08  # of longer messages, one that leaves a contact address in the text
INVALID: tuple[dict[str, object], ...] = (
    {"email": "not-an-email", "intent": "member"},
    {"email": "ann@", "intent": "claim"},
    {"email": "@gmail.com", "intent": "member"},
    {"email": "ben lee@gmail.com", "intent": "arcade"},
    {"email": "", "intent": "member"},
    {"email": "cara@example.org", "intent": "owner"},
    {"email": "dev@example.org", "intent": "Claim"},
    {"email": "eli@example.org"},
    {"email": "fay@example.org", "intent": "member", "name": "Fay"},
    {"email": "gus@example.org", "intent": "claim", "project": None},
    {"email": "hana@example.org", "intent": 3},
    {"email": "ivan@example.org", "intent": "claim", "project": "Moonfrog " * 16},
    {"email": "jo@example.org", "intent": "member", "message": "x" * 601},
)

EVENT_KIND_WEIGHTS = {
    "room.claimed": 15,
    "room.upgraded": 8,
    "room.links.updated": 12,
    "room.content.published": 20,
    "project.deployment.indexed": 8,
    "room.arcade.high_score": 17,
    "room.artwork.vote_milestone": 8,
    "room.trending": 12,
}
DUPLICATE_SHARE = 0.03  # events a publisher sends twice (a retry on its side); delivered once
MILESTONES = (1000, 2000)  # waitlist registrations stored: announced as platform.milestone
GAMES = ("frog-hop", "otter-dash", "sloth-climb", "panda-stack", "bunny-blast", "kelp-dive")
PLAYERS = ("lilypad_larry", "otter_queen", "satoshi_snail", "degenDave", "mochi_mia", "pixelpete")
TITLES = (
    "Liquidity migration schedule", "Community call recap", "New staking dashboard", "Roadmap for Q3",
    "AMA transcript", "Security audit results", "Holder snapshot complete", "Merch drop",
)  # fmt: skip
ARTWORKS = ("Sunrise over the pond", "Otter in space", "Neon sloth", "Pixel pond", "The lily throne")
LINK_FIELDS = ("website", "x", "telegram", "discord", "github", "docs")
UPGRADES = (
    ("claimed", "verified", "Verified Room"),
    ("verified", "pro", "Pro Room"),
    ("pro", "custom", "Custom Room"),
    (None, "verified", "Verified Room"),
)
CLAIM_STATES = {"official_owner": 50, "community_claimed": 30, "nft_room": 15, "unclaimed_stub": 5}


# --- the plan: what happens, and when (pure and seeded) ---------------------------------------


@dataclass(frozen=True)
class Submit:
    """One ``POST /api/waitlist``; ``valid`` says whether the service must accept it."""

    body: dict[str, Any]
    form: bool
    valid: bool


@dataclass(frozen=True)
class Publish:
    """One ``POST /admin/events``; ``duplicate`` repeats an earlier event exactly."""

    data: dict[str, Any]
    duplicate: bool = False


@dataclass(frozen=True)
class Outage:
    partner: str
    down: bool  # True: the endpoint goes away; False: it comes back


Action = Submit | Publish | Outage


@dataclass(frozen=True)
class Plan:
    seed: int
    actions: tuple[tuple[datetime, Action], ...]  # in time order; ties in the order listed

    def submissions(self) -> list[Submit]:
        return [action for _, action in self.actions if isinstance(action, Submit)]


def plan(seed: int = DEFAULT_SEED, registrations: int = REGISTRATIONS, events: int = EVENTS) -> Plan:
    """Everything the generator will do, with its time; the same arguments give the same plan."""
    timed: list[tuple[datetime, int, Action]] = []
    submissions = list(_submissions(random.Random(f"{seed}/waitlist"), registrations))
    timed += [(at, 0, action) for at, action in submissions]
    timed += [(at, 1, action) for at, action in _events(random.Random(f"{seed}/events"), events, submissions)]
    for spec in PARTNERS:
        if spec.down is not None:
            timed += [(spec.down[0], 2, Outage(spec.name, down=True))]
            timed += [(spec.down[1], 2, Outage(spec.name, down=False))]
    timed.sort(key=lambda item: (item[0], item[1]))
    return Plan(seed, tuple((at, action) for at, _, action in timed))


def _day_weights() -> list[float]:
    weights = []
    for day in range(DAYS):
        moment = START + timedelta(days=day)
        weight = 1 + day / DAYS  # steady growth, doubling over the six weeks
        weight *= 0.7 if moment.weekday() >= 5 else 1.0
        weight *= {0: 6.0, 1: 3.0, 2: 1.8}.get((moment - ANNOUNCEMENT).days, 1.0)
        weights.append(weight)
    return weights


# Share of a day's registrations per UTC hour: quiet nights, busy European and American evenings.
HOUR_WEIGHTS = (2, 1, 1, 1, 1, 2, 3, 4, 5, 6, 6, 6, 7, 8, 9, 9, 9, 10, 10, 9, 8, 6, 4, 3)


def _moments(rng: random.Random, count: int) -> list[datetime]:
    days = rng.choices(range(DAYS), weights=_day_weights(), k=count)
    hours = rng.choices(range(24), weights=HOUR_WEIGHTS, k=count)
    return sorted(
        START + timedelta(days=day, hours=hour, seconds=rng.randrange(3600))
        for day, hour in zip(days, hours, strict=True)
    )


def _email(rng: random.Random, taken: set[str]) -> str:
    domains, weights = zip(*DOMAINS, strict=True)
    while True:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        local = rng.choice((f"{first}.{last}", f"{first}{last}", f"{first}_{last}", f"{first[0]}{last}"))
        if rng.random() < 0.35:
            local += str(rng.randrange(1, 100))
        email = f"{local}@{rng.choices(domains, weights=weights)[0]}"
        if email.lower() not in taken:
            taken.add(email.lower())
            return email


def _recased(rng: random.Random, email: str) -> str:
    """The same address as someone types it on another day: compared case-insensitively."""
    local, _, domain = email.partition("@")
    return rng.choice((local.capitalize() + "@" + domain, email.upper(), local + "@" + domain.capitalize()))


def project_text(rng: random.Random) -> str:
    """A project as people type it: a name in some casing or spacing, a ticker, a note."""
    project = rng.choices(PROJECTS, weights=PROJECT_WEIGHTS)[0]
    return rng.choices(
        (
            project.name,
            project.name.lower(),
            project.name.upper(),
            "  " + project.name.replace(" ", "  ") + " ",
            "$" + project.ticker,
            project.ticker.lower(),
            f"{project.name} ({project.chain})",
        ),
        weights=(45, 15, 5, 8, 15, 5, 7),
    )[0]


def message_text(rng: random.Random, project: str | None) -> str:
    """A waitlist message: a word or two, a sentence, or a paragraph, sometimes with an address."""
    name = (project or "our project").strip()
    shape = rng.random()
    if shape < 0.35:
        return rng.choice(SHORT_MESSAGES)
    count = 1 if shape < 0.75 else rng.randint(2, 6)
    text = " ".join(sentence.format(project=name) for sentence in rng.sample(SENTENCES, count))
    if rng.random() < CONTACT_SHARE:
        text += f" Reach me at {rng.choice(FIRST_NAMES)}.team@{rng.choice(DOMAINS)[0]} if easier."
    return text[:600]


def _submissions(rng: random.Random, count: int) -> Iterator[tuple[datetime, Submit]]:
    taken: set[str] = set()
    people: list[tuple[str, set[str]]] = []  # address as first typed, intents registered
    for at in _moments(rng, count):
        form = rng.random() < FORM_SHARE
        if rng.random() < INVALID_SHARE:
            broken = dict(rng.choice(INVALID))
            # A form cannot carry a number, a null or a missing-vs-empty distinction: send JSON.
            form = form and all(isinstance(value, str) for value in broken.values())
            yield at, Submit(broken, form, valid=False)
            continue
        weights = INTENT_WEIGHTS_AFTER if at >= ANNOUNCEMENT else INTENT_WEIGHTS
        returning = people and rng.random() < RETURNING_SHARE
        if returning:
            email, intents = rng.choice(people)
            others = [intent for intent in INTENT_WEIGHTS if intent not in intents]
            if others and rng.random() >= SAME_INTENT_SHARE:
                intent = rng.choice(others)
            else:
                intent = rng.choice(sorted(intents))
            intents.add(intent)
            if rng.random() < 0.25:
                email = _recased(rng, email)
        else:
            email = _email(rng, taken)
            intent = rng.choices(list(weights), weights=list(weights.values()))[0]
            people.append((email, {intent}))
        body: dict[str, Any] = {"email": email, "intent": intent}
        if rng.random() < PROJECT_SHARE[intent]:
            body["project"] = project_text(rng)
        if rng.random() < MESSAGE_SHARE[intent]:
            body["message"] = message_text(rng, body.get("project"))
        yield at, Submit(body, form, valid=True)


def _event_id(rng: random.Random, at: datetime) -> str:
    """``evt_`` + a ULID like the service's own, with the time and the randomness both given."""
    millis = int(at.timestamp() * 1000)
    return f"evt_{ULID.from_bytes(millis.to_bytes(6, 'big') + rng.getrandbits(80).to_bytes(10, 'big'))}"


def _address(project: Project, chain: str) -> str:
    """A stable, made-up contract address in the chain's own notation."""
    digest = hashlib.sha256(f"{project.name}/{chain}".encode()).digest()
    if chain == "solana":
        alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # base58
        number = int.from_bytes(digest, "big")
        chars = []
        while number:
            number, digit = divmod(number, 58)
            chars.append(alphabet[digit])
        return "".join(chars)[:44]
    return "0x" + digest[:20].hex()


def _payload(rng: random.Random, kind: str, serial: int) -> dict[str, Any]:
    project = rng.choices(PROJECTS, weights=PROJECT_WEIGHTS)[0]
    room = {"slug": project.slug, "roomUrl": project.room_url}
    if kind == "room.claimed":
        state = rng.choices(list(CLAIM_STATES), weights=list(CLAIM_STATES.values()))[0]
        data = {**room, "project": project.name, "ticker": project.ticker, "chain": project.chain}
        if rng.random() < 0.8:
            data["contractAddress"] = _address(project, project.chain)
        return {**data, "roomType": state}
    if kind == "room.upgraded":
        previous, tier, label = rng.choice(UPGRADES)
        data = {**room, "tier": tier, "tierLabel": label}
        return {**data, "previousTier": previous} if previous else data
    if kind == "room.links.updated":
        return {**room, "changedFields": sorted(rng.sample(LINK_FIELDS, rng.randint(1, 3)))}
    if kind == "room.content.published":
        data = {**room, "updateId": f"upd_{4000 + serial}"}
        return {**data, "title": rng.choice(TITLES)} if rng.random() < 0.85 else data
    if kind == "project.deployment.indexed":
        chain = rng.choice(("solana", "base", "ethereum", "arbitrum"))
        return {
            "slug": project.slug,
            "project": project.name,
            "chain": chain,
            "contractAddress": _address(project, chain),
            "roomUrl": f"{project.room_url}-{chain}",
            "hubUrl": f"{BASE_URL}/projects/{project.slug}",
        }
    if kind == "room.arcade.high_score":
        score = int(rng.lognormvariate(9, 1))
        return {
            **room,
            "game": GAMES[PROJECTS.index(project) % len(GAMES)],
            "playerName": rng.choice(PLAYERS),
            "score": score,
            "scoreId": f"hs_{90000 + serial}",
        }
    if kind == "room.artwork.vote_milestone":
        milestone = rng.choice((50, 100, 250, 500, 1000))
        return {
            **room,
            "artworkId": f"art_{700 + serial}",
            "artworkTitle": rng.choice(ARTWORKS),
            "votes": milestone + rng.randrange(0, milestone // 5 + 1),
            "milestone": milestone,
        }
    if kind == "room.trending":
        window = rng.choice(("1h", "24h"))
        base = 400 if window == "1h" else 5000
        return {
            **room,
            "metric": rng.choice(("visits", "new_members", "arcade_plays")),
            "value": int(base * rng.uniform(1, 4)),
            "window": window,
        }
    raise ValueError(f"no demo payload for {kind}")


def _event(rng: random.Random, at: datetime, kind: str, members: Mapping[str, Any]) -> dict[str, Any]:
    occurred = at - timedelta(seconds=rng.randrange(1, 30))  # recorded a moment before publishing
    return {
        "event": kind,
        "eventId": _event_id(rng, at),
        "occurredAt": occurred.isoformat().replace("+00:00", "Z"),
        **members,
    }


def _events(
    rng: random.Random, count: int, submissions: Sequence[tuple[datetime, Submit]]
) -> Iterator[tuple[datetime, Publish]]:
    kinds, weights = zip(*EVENT_KIND_WEIGHTS.items(), strict=True)
    moments = [at for at in _moments(rng, count) if at >= START + timedelta(hours=1)]
    # Scripted: some events while the flaky partner is down, and some after the gone one left.
    down = OUTAGE[0]
    moments += [down + timedelta(minutes=minutes) for minutes in (20, 70, 130, 175)]
    moments += [GONE_AT + timedelta(hours=hours) for hours in (2, 30)]
    for serial, at in enumerate(sorted(moments)):
        kind = rng.choices(kinds, weights=weights)[0]
        if at >= GONE_AT and at - GONE_AT < timedelta(days=2):
            kind = "room.content.published"  # make sure the gone partner is sent something
        event = _event(rng, at, kind, _payload(rng, kind, serial))
        yield at, Publish(event)
        if rng.random() < DUPLICATE_SHARE:
            yield at + timedelta(seconds=rng.randrange(10, 120)), Publish(event, duplicate=True)
    # The waitlist's round numbers, announced when the stored registrations pass them.
    for milestone, at in _milestone_moments(submissions):
        label = f"{milestone:,} waitlist registrations"
        members = {"milestone": label, "value": milestone}
        yield at + timedelta(seconds=1), Publish(_event(rng, at, "platform.milestone", members))


def _milestone_moments(submissions: Sequence[tuple[datetime, Submit]]) -> Iterator[tuple[int, datetime]]:
    stored: set[tuple[str, str]] = set()
    pending = list(MILESTONES)
    for at, submit in submissions:
        if submit.valid:
            stored.add((str(submit.body["email"]).lower(), str(submit.body["intent"])))
        if pending and len(stored) >= pending[0]:
            yield pending.pop(0), at


def digest(seed: int = DEFAULT_SEED, registrations: int = REGISTRATIONS, events: int = EVENTS) -> str:
    """A hash of what this scenario asks of the service for ``seed``: every planned action, the
    partners' behaviour and the delivery settings. Any change to them changes the hash."""
    scenario = (
        FORMAT,
        PARTNERS,
        RETRY_SCHEDULE,
        WEBHOOK_TIMEOUT,
        REAL_TIMEOUT,
        TRANSIT,
        END,
        plan(seed, registrations, events),
    )
    # Every part is a tuple, a dataclass, a number, a string or a datetime: repr is stable.
    return hashlib.sha256(repr(scenario).encode()).hexdigest()
