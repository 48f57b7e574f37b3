"""A worker's lanes (``webhooks/lanes.py``): claimed jobs let out to the senders slot by slot."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.webhooks.lanes import Lanes, fair_shares


class Job(NamedTuple):
    name: str
    partner_id: str = "a"
    slots: int = 2


def lanes() -> tuple[Lanes[Job], list[str]]:
    out: list[str] = []
    return Lanes(lambda started: out.append(started[1].name)), out


def test_a_claim_lets_out_what_its_slots_allow_and_parks_the_rest() -> None:
    lane, out = lanes()
    lane.add([Job("a1"), Job("a2"), Job("a3"), Job("b1", "b", 1), Job("b2", "b", 1)], start_by=9.0)
    assert out == ["a1", "a2", "b1"]
    assert lane.parked == 2
    assert (lane.out("a"), lane.out("b"), lane.out("nobody")) == (2, 1, 0)


def test_a_finished_attempt_passes_its_slot_to_the_partners_next_job_at_once() -> None:
    lane, out = lanes()
    lane.add([Job(f"a{n}") for n in range(1, 6)], start_by=9.0)
    lane.done("a")
    assert out == ["a1", "a2", "a3"]
    lane.done("a")
    lane.done("a")
    assert out == ["a1", "a2", "a3", "a4", "a5"]
    assert lane.parked == 0


def test_a_delivered_job_hands_its_slot_to_the_partners_next_job_for_the_same_sender() -> None:
    """The sender that finished takes the next job itself: nothing is let out, the slot stays out."""
    lane, out = lanes()
    lane.add([Job("a1"), Job("a2"), Job("a3"), Job("a4", slots=1)], start_by=9.0)
    assert out == ["a1"]  # the last claim's one slot holds
    lane.add([Job("a5", slots=2)], start_by=7.0)
    assert out == ["a1", "a2"]
    handed = lane.hand_on("a")
    assert handed is not None and handed[1].name == "a3"
    assert (out, lane.out("a"), lane.parked) == (["a1", "a2"], 2, 2)
    lane.add([Job("a6", slots=1)], start_by=8.0)  # another worker took a slot meanwhile
    assert lane.hand_on("a") is None  # two out, one slot: it is not passed on
    assert (out, lane.out("a"), lane.parked) == (["a1", "a2"], 1, 3)
    handed = lane.hand_on("a")
    assert handed is not None and handed == (9.0, Job("a4", slots=1))
    assert [lane.hand_on("a"), lane.hand_on("a")] == [(7.0, Job("a5", slots=2)), (8.0, Job("a6", slots=1))]
    assert lane.hand_on("a") is None  # nothing left: the lane is forgotten
    assert (lane.out("a"), lane.parked) == (0, 0)


def test_the_start_by_moment_travels_with_each_job() -> None:
    started: list[tuple[float, Job]] = []
    lane: Lanes[Job] = Lanes(started.append)
    lane.add([Job("a1"), Job("a2"), Job("a3")], start_by=1.0)
    lane.add([Job("a4")], start_by=2.0)
    for _ in range(2):
        lane.done("a")
    assert [(start_by, job.name) for start_by, job in started] == [
        (1.0, "a1"),
        (1.0, "a2"),
        (1.0, "a3"),
        (2.0, "a4"),
    ]


def test_a_later_claim_sets_the_partners_slots() -> None:
    """Slots shrink when another worker took some, and grow when it let them go."""
    lane, out = lanes()
    lane.add([Job("a1", slots=3), Job("a2", slots=3), Job("a3", slots=3), Job("a4", slots=3)], start_by=9.0)
    lane.add([Job("a5", slots=1)], start_by=9.0)
    for _ in range(3):
        lane.done("a")
    assert out == ["a1", "a2", "a3", "a4"]  # only once a single job is out does the next go
    lane.done("a")
    assert out == ["a1", "a2", "a3", "a4", "a5"]
    lane.add([Job("a6", slots=4), Job("a7", slots=4), Job("a8", slots=4)], start_by=9.0)
    assert out[-3:] == ["a6", "a7", "a8"]


def test_a_failed_attempt_holds_its_slot_until_the_turn_reopens_it() -> None:
    lane, out = lanes()
    lane.add([Job(f"a{n}") for n in range(1, 6)], start_by=9.0)
    lane.done("a", ok=False)
    lane.done("a", ok=False)
    assert out == ["a1", "a2"]  # a partner failing everything gets its slots' worth per turn
    lane.reopen(["a", "unknown"])
    assert out == ["a1", "a2", "a3", "a4"]
    lane.done("a", ok=True)
    assert out == ["a1", "a2", "a3", "a4", "a5"]


def test_taking_back_a_stopped_partners_jobs_leaves_the_others() -> None:
    lane, out = lanes()
    lane.add(
        [Job("a1"), Job("a2"), Job("a3"), Job("a4"), Job("b1", "b"), Job("b2", "b"), Job("b3", "b")],
        start_by=9.0,
    )
    assert [job.name for job in lane.take_back("a")] == ["a3", "a4"]
    assert lane.take_back("a") == []
    lane.done("a")
    lane.done("a")
    assert out == ["a1", "a2", "b1", "b2"]
    assert lane.parked == 1
    assert [job.name for job in lane.take_all()] == ["b3"]
    assert lane.parked == 0


def test_each_lane_names_its_first_parked_job_the_one_claimed_earliest() -> None:
    """What the worker compares with its partner's revision: a lane parks in claim order."""
    lane, _ = lanes()
    lane.add([Job("a1"), Job("a2"), Job("a3"), Job("b1", "b")], start_by=9.0)
    lane.add([Job("a4"), Job("b2", "b"), Job("b3", "b"), Job("c1", "c")], start_by=9.0)
    assert [(partner, job.name) for partner, job in lane.first_parked()] == [("a", "a3"), ("b", "b3")]
    handed = lane.hand_on("a")
    assert handed is not None and handed[1].name == "a3"
    assert dict((partner, job.name) for partner, job in lane.first_parked()) == {"a": "a4", "b": "b3"}
    lane.take_back("a")
    assert [partner for partner, _ in lane.first_parked()] == ["b"]


@pytest.mark.parametrize("slots", [1, 3, 8])
def test_no_more_than_its_slots_are_out_at_once_whatever_the_order(slots: int) -> None:
    """Jobs let out are attempted and finish in any order: out never exceeds slots, and every job
    goes out exactly once."""
    out: list[Job] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1]))
    lane.add([Job(f"a{n}", slots=slots) for n in range(40)], start_by=9.0)
    finished = 0
    while finished < len(out):
        assert lane.out("a") == len(out) - finished <= slots
        lane.done("a", ok=finished % 5 != 4)
        finished += 1
        if finished % 3 == 0:
            lane.reopen(["a"])
        if lane.out("a") == 0 and lane.parked:
            lane.reopen(["a"])
    assert sorted(job.name for job in out) == sorted(f"a{n}" for n in range(40))


@pytest.mark.parametrize(
    ("wants", "pool", "shares"),
    [
        ([], 6, []),
        ([3, 2], 6, [3, 2]),  # all fit: each what it wants
        ([6, 6], 6, [3, 3]),
        ([6, 6, 6], 6, [2, 2, 2]),
        ([6, 6, 6, 6], 6, [2, 2, 1, 1]),  # the two left over go to the first held back
        ([1, 6, 6], 6, [1, 3, 2]),  # the small want is met; the rest split what it leaves
        ([8, 1, 1, 8], 12, [5, 1, 1, 5]),
        ([8] * 10, 6, [1] * 10),  # more partners than senders: each slowed to one, never stopped
        ([384, 8], 384, [376, 8]),
    ],
)
def test_fair_shares_meet_small_wants_and_split_the_rest_evenly(
    wants: list[int], pool: int, shares: list[int]
) -> None:
    assert fair_shares(wants, pool) == shares


@given(st.lists(st.integers(1, 400), max_size=40), st.integers(1, 512))
def test_fair_shares_are_max_min_fair(wants: list[int], pool: int) -> None:
    """No share passes its want; they fill the pool when wants do (one each at least); and no share
    could grow without a share as small or smaller shrinking: one below its want is never more
    than one under any other share."""
    shares = fair_shares(wants, pool)
    assert all(1 <= share <= want for share, want in zip(shares, wants, strict=True))
    assert sum(shares) == min(sum(wants), max(pool, len(wants)))
    for share, want in zip(shares, wants, strict=True):
        if share < want:
            assert all(share >= other - 1 for other in shares)


def test_lanes_over_the_pool_hold_their_shares_and_a_newcomer_borrows_from_the_reserve() -> None:
    """Two partners want 6 each of a pool of 6 (8 senders less a quarter): 3 each go out. A third
    partner's claim lets out one at once, a loan from the two senders the pool leaves free; the
    first two let out nothing more until their attempts come down to their new shares of 2."""
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=6, senders=8)
    lane.add([Job(f"a{n}", "a", 6) for n in range(8)] + [Job(f"b{n}", "b", 6) for n in range(8)], start_by=9.0)
    assert (lane.out("a"), lane.out("b")) == (3, 3)
    lane.add([Job(f"c{n}", "c", 6) for n in range(8)], start_by=9.0)
    assert out[-1:] == ["c0"] and lane.out("c") == 1 and lane.loan == 1
    assert [lane.share(partner) for partner in "abc"] == [2, 2, 2]
    lane.done("a")
    assert lane.out("a") == 2 and out[-1] == "c0"  # the pool is full (b is over its share)
    lane.done("a")
    assert out[-1] == "c1"  # c waited first: it has the sender
    assert lane.hand_on("b") is None  # b's delivered attempt does not pass its slot on: 3 out, share 2
    # The slot went to a, under its share; then b, delivering, borrowed one past its share from
    # the reserve, which keeps its other half (one sender) free.
    assert out[-2:] == ["a3", "b3"]
    assert (lane.out("a"), lane.out("b"), lane.sending) == (2, 3, 7)


def test_a_partner_hanging_after_the_others_takes_its_loan_and_leaves_the_reserve() -> None:
    """A pool of 24 of 40 senders (a reserve of 16, loans of 2). Two partners hold the pool; a
    third that wants 24 gets its loan of 2, not its share of 8, so partners whose work arrives
    next still find senders, and the jobs let out never outnumber the senders."""
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=24, senders=40)
    lane.add([Job(f"{p}{n}", p, 24) for p in "ab" for n in range(30)], start_by=9.0)
    assert (lane.out("a"), lane.out("b"), lane.sending) == (12, 12, 24)
    lane.add([Job(f"c{n}", "c", 24) for n in range(30)], start_by=9.0)
    assert (lane.out("c"), lane.share("c")) == (2, 8)
    for newcomer in "defghij":  # seven more after it: each its loan, until the senders run out
        lane.add([Job(f"{newcomer}{n}", newcomer, 24) for n in range(30)], start_by=9.0)
    assert [lane.out(p) for p in "cdefghij"] == [2, 2, 2, 2, 2, 2, 2, 2]
    assert lane.sending == len(out) == 40
    lane.add([Job("k0", "k", 8)], start_by=9.0)
    assert lane.out("k") == 0  # every sender is out: k waits for the next one to come free
    lane.done("a", ok=False)  # a hanging attempt of a's times out
    assert out[-1] == "k0" and lane.sending == 40


def test_a_lane_whose_last_attempt_got_no_answer_borrows_nothing_more() -> None:
    """A pool of 6 of 8 senders, full. c and d borrow one each; c's attempt times out and d's is
    answered 500: once the turn has logged them, d borrows again and c does not, so e, arriving
    next, finds the sender c held free."""
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=6, senders=8)
    lane.add([Job(f"{p}{n}", p, 3) for p in "ab" for n in range(3)], start_by=9.0)
    lane.add([Job(f"{p}{n}", p, 3) for p in "cd" for n in range(3)], start_by=9.0)
    assert (lane.out("c"), lane.out("d"), lane.sending) == (1, 1, 8)
    lane.done("c", ok=False, answered=False)
    lane.done("d", ok=False)
    lane.reopen(["c", "d"])
    assert (lane.out("c"), lane.out("d"), lane.sending) == (0, 1, 7)
    lane.add([Job("e0", "e", 3)], start_by=9.0)
    assert out[-1] == "e0" and lane.sending == 8
    lane.done("e")  # delivered, nothing parked: its sender goes to whoever may borrow it
    assert lane.out("c") == 0 and lane.sending == 7


def _beside_six_hanging() -> tuple[Lanes[Job], list[str]]:
    """A pool of 48 of 64 senders (loans of 2, half the reserve 8), held whole by six partners
    hanging at 8 each; then a healthy partner's claim of 20 at cap 8, whose share is 6."""
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=48, senders=64)
    lane.add([Job(f"{p}{n}", p, 8) for p in "abcdef" for n in range(10)], start_by=9.0)
    lane.add([Job(f"h{n}", "h", 8) for n in range(20)], start_by=9.0)
    assert (lane.sending, lane.share("h"), lane.out("h")) == (50, 6, 2)  # its loans
    return lane, out


def test_a_lane_held_to_its_share_borrows_past_it_once_it_delivers() -> None:
    """Beside partners that hang, a healthy partner's share (6 of its 8 slots) left the rest of the
    reserve idle: 64 partners hanging at cap 8 gave a newcomer 5 of its 8, 0.75 of its rate alone.
    Once an attempt of its is delivered, it borrows up to its slots; the hanging, which deliver
    nothing, borrow nothing past their shares."""
    lane, out = _beside_six_hanging()
    handed = lane.hand_on("h")
    assert handed is not None and handed[1].name == "h2"
    assert lane.out("h") == 8 and out[-6:] == ["h3", "h4", "h5", "h6", "h7", "h8"]
    assert [lane.out(p) for p in "abcdef"] == [8] * 6 and lane.sending == 56


def test_lanes_past_their_shares_leave_half_the_reserve_free() -> None:
    """A second healthy partner, delivering, borrows only what is left of the first half of the
    reserve; a newcomer still gets its loans from the other half."""
    lane, _ = _beside_six_hanging()
    lane.hand_on("h")
    assert lane.sending == 56
    lane.add([Job(f"k{n}", "k", 8) for n in range(20)], start_by=9.0)
    assert lane.out("k") == 2 and lane.sending == 58  # under its share: its loans
    assert lane.hand_on("k") is not None and lane.out("k") == 2  # delivering, but half is taken
    lane.add([Job("n0", "n", 8), Job("n1", "n", 8)], start_by=9.0)
    assert lane.out("n") == 2 and lane.sending == 60


def test_a_lane_that_stops_delivering_borrows_past_its_share_no_more() -> None:
    """Its attempt failed: the lane lets nothing more out as its attempts end (the pool is the
    hanging partners', so only its loans are owed it) until one of its attempts is delivered."""
    lane, out = _beside_six_hanging()
    lane.hand_on("h")
    lane.done("h", ok=False)
    lane.reopen(["h"])
    sent = len(out)
    for _ in range(3):
        lane.done("h")  # handed back unsent, say: no delivery
    assert lane.out("h") == 4 and len(out) == sent
    assert lane.hand_on("h") is not None and lane.out("h") == 8


def test_how_a_partners_last_attempt_ended_outlives_its_lane() -> None:
    """A partner's work often comes a claim at a time, and its lane empties in between: the next
    claim's lane borrows past its share at once if its last attempt was delivered, and borrows
    nothing if that attempt got no answer."""
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=48, senders=64)
    lane.add([Job(f"{p}{n}", p, 8) for p in "abcdef" for n in range(10)], start_by=9.0)
    lane.add([Job("h0", "h", 8), Job("s0", "s", 8)], start_by=9.0)  # on loans: the pool is full
    assert lane.hand_on("h") is None and lane.out("h") == 0  # delivered; its lane empties
    lane.done("s", ok=False, answered=False)  # timed out
    lane.reopen(["s"])
    assert lane.out("s") == 0
    lane.add([Job(f"h{n}", "h", 8) for n in range(1, 20)], start_by=9.0)
    assert (lane.share("h"), lane.out("h")) == (6, 8)
    lane.add([Job(f"s{n}", "s", 8) for n in range(1, 20)], start_by=9.0)
    assert lane.out("s") == 0


def test_without_a_reserve_the_pool_bounds_what_is_let_out() -> None:
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=6)
    lane.add([Job(f"{p}{n}", p, 6) for p in "abc" for n in range(8)], start_by=9.0)
    assert lane.loan == 0 and lane.sending == len(out) == 6
    lane.add([Job("d0", "d", 6)], start_by=9.0)
    assert lane.out("d") == 0
    lane.done("a", ok=False)
    assert out[-1] == "d0"


@settings(max_examples=200, deadline=None)
@given(
    pool=st.integers(1, 12),
    reserve=st.integers(0, 20),
    steps=st.lists(
        st.tuples(st.sampled_from(["add", "finish", "reopen"]), st.integers(0, 5), st.integers(0, 1_000)),
        max_size=80,
    ),
)
def test_jobs_let_out_never_outnumber_the_senders_and_each_goes_out_once(
    pool: int, reserve: int, steps: list[tuple[str, int, int]]
) -> None:
    """Claims, attempts finishing (delivered, failed or handed on) and turns in any order: the jobs
    out never outnumber the senders nor a lane's slots, and once every attempt has ended and every
    failure is logged, each job has gone out exactly once."""
    partners = "abcdef"
    in_flight: list[Job] = []
    sent: list[str] = []

    def let_out(started: tuple[float, Job]) -> None:
        in_flight.append(started[1])
        sent.append(started[1].name)

    lane: Lanes[Job] = Lanes(let_out, pool=pool, senders=pool + reserve)
    claimed = 0

    def check() -> None:
        assert lane.sending == len(in_flight) <= pool + reserve
        for partner in partners:
            assert lane.out(partner) == sum(job.partner_id == partner for job in in_flight)

    for verb, which, number in steps:
        partner = partners[which]
        if verb == "add":
            slots = 1 + number % 7
            lane.add([Job(f"{partner}{claimed + n}", partner, slots) for n in range(number % 9)], start_by=9.0)
            claimed += number % 9
        elif verb == "finish" and in_flight:
            job = in_flight.pop(number % len(in_flight))
            if number % 3 == 0:
                handed = lane.hand_on(job.partner_id)
                if handed is not None:
                    let_out(handed)
            else:
                lane.done(job.partner_id, ok=number % 3 == 1, answered=number % 2 == 0)
        elif verb == "reopen":
            lane.reopen(partners)
        check()
    while True:
        lane.reopen(partners)  # a turn logs every failure
        if not in_flight:
            break
        while in_flight:
            lane.done(in_flight.pop().partner_id, ok=False)
            check()
    assert lane.parked == 0, "jobs parked with nothing out and every failure logged"
    assert sorted(sent) == sorted(set(sent)) and len(sent) == claimed


def test_a_lane_that_empties_gives_its_share_back_at_the_next_turn() -> None:
    out: list[str] = []
    lane: Lanes[Job] = Lanes(lambda started: out.append(started[1].name), pool=6)
    lane.add([Job(f"a{n}", "a", 6) for n in range(8)] + [Job("b0", "b", 6)], start_by=9.0)
    assert (lane.out("a"), lane.out("b")) == (5, 1)  # b wants one: a takes the rest of the pool
    assert lane.contended
    lane.done("b")
    lane.reopen(["b"])  # the turn that logs b's attempt shares again: a alone
    assert lane.out("a") == 6
    assert not lane.contended
