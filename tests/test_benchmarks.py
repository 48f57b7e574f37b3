"""The benchmark entry point runs end to end and prints its table; no timing is asserted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import load, report, waitlist
from service.clock import ManualClock as Clock
from service.errors import BadRequest
from service.waitlist import parse_registration
from tests.conftest import REDIS_URL
from tests.tools import require_tool

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_run_prints_the_table() -> None:
    """`python -m benchmarks --quick` on one cheap scenario prints every column and a positive rate."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "invalid", "--storage", "sqlite",
         "--workers", "1", "--markdown"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    header = next(line for line in completed.stdout.splitlines() if line.startswith("| scenario"))
    assert [cell.strip() for cell in header.strip("|").split("|")] == list(report.COLUMNS)
    rows = report.parse_markdown(completed.stdout)
    assert [(row["scenario"], row["storage"], row["workers"]) for row in rows] == [
        ("POST /api/waitlist (invalid, 400)", "SQLite", "1")
    ]
    assert float(rows[0]["req/s"].replace(",", "")) > 0
    assert float(rows[0]["baseline req/s"].replace(",", "")) > 0


@pytest.mark.slow
def test_delivery_benchmark_runs_the_isolation_rounds() -> None:
    """`python -m benchmarks.delivery --isolation` drains, measures latency, then runs K = 0, 1, 10
    side by side and prints both ratios for K = 1 and 10 (the verdict depends on the machine);
    `--isolation-control` adds to each round a run with the ten partners paused (their rows in the
    table, none sent), compared with K = 0 and K = 10."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.delivery", "--events", "200", "--rounds", "1", "--samples", "5",
         "--isolation", "100", "--isolation-rounds", "1", "--isolation-control"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert completed.returncode in (0, 1), completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    rounds = [line for line in lines if line.strip().startswith("round 1 K=")]
    assert [line.split("K=")[1].split(":")[0].strip() for line in rounds] == ["0", "1", "10"]
    best = [line for line in lines if line.strip().startswith("best K=")]
    assert len(best) == 2 and all("rate ratio" in line and "p99 ratio" in line for line in best)
    assert [line.strip().split(":")[0] for line in lines if "paused 10:" in line] == ["round 1 paused 10"]
    [control] = [line for line in lines if line.strip().startswith("control, 10 partners paused")]
    assert "of alone; beside 10 hanging" in control
    assert lines[-1] in ("PASS", "BELOW TARGET")


@pytest.mark.parametrize("scenario", waitlist.SCENARIOS, ids=lambda s: s.key)
def test_scenario_bodies_get_the_expected_answer(scenario: waitlist.Scenario) -> None:
    """Every body a scenario sends is valid (200 scenarios) or refused (the 400 one) by the service."""
    bodies = scenario.bodies("t0k3n")
    for thread, n in [(1, 1), (1, 2), (2, 1), (7, 9999)]:
        document = json.loads(bodies.python(thread, n))
        if scenario.expect == 200:
            parse_registration(document, Clock().now)
        else:
            with pytest.raises(BadRequest):
                parse_registration(document, Clock().now)


def test_unique_bodies_are_unique() -> None:
    """Thread number and counter make every address of a run different."""
    bodies = waitlist.unique_bodies("t0k3n")
    sent = {bodies.python(thread, n) for thread in range(1, 5) for n in range(1, 500)}
    assert len(sent) == 4 * 499


def test_lua_string_escapes_everything_but_plain_ascii() -> None:
    """Quotes, backslashes, control characters and UTF-8 bytes become decimal escapes."""
    assert load.lua_string('a"b\\c\n') == '"a\\034b\\092c\\010"'
    assert load.lua_string("é") == '"\\195\\169"'


def test_limiter_benchmark_prints_a_row_per_client_count(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.ratelimit` measures both storages for each client count it is given."""
    from benchmarks import ratelimit

    ratelimit.main(["--hits", "300", "--clients", "1", "40", "--rounds", "2"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:4]]
    assert [row[0] for row in rows] == ["1", "40"]
    assert all(float(row[1]) > 0 and float(row[2]) > 0 and float(row[3]) > 0 for row in rows)


def test_limiter_benchmark_measures_batched_redis_hits(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.ratelimit --redis URL` prints limits' call per hit and BatchedHits per hits in flight."""
    if not REDIS_URL:
        pytest.skip("SERVICE_TEST_REDIS_URL is not set: no Redis to measure")
    from benchmarks import ratelimit

    ratelimit.main(
        ["--hits", "100", "--clients", "1", "--rounds", "1", "--redis", REDIS_URL, "--redis-hits", "64"]
    )
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("in flight")))
    rows = [line.split() for line in lines[start + 2 : start + 5]]
    assert [row[0] for row in rows] == ["1", "8", "32"]
    assert all(float(row[1]) > 0 and float(row[2]) > 0 for row in rows)


def test_secrets_benchmark_claims_and_signs_with_sealed_and_plaintext_secrets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m benchmarks.secrets` claims and signs every delivery both ways and prints the ratio."""
    from benchmarks import secrets

    assert secrets.main(["--partners", "2", "--events", "30", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("claim + sign, 2 partners x 30 events")
    assert float(lines[-1].rsplit(" ", 1)[1]) > 0


def test_signing_benchmark_signs_the_same_bytes_both_ways_and_prints_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m benchmarks.signing` checks both sides sign alike, then prints both rates and the ratio."""
    from benchmarks import signing

    assert signing.main(["--deliveries", "200", "--rounds", "2", "--secrets", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "signing 200 deliveries with 2 secret(s), both schemes, 2 rounds"
    assert float(lines[-1].rsplit(" ", 1)[1]) > 0
    for delivery_id, body in signing.deliveries(3):
        for secrets in (signing.SECRETS[:1], signing.SECRETS):
            assert signing.service(delivery_id, body, secrets) == signing.baseline(delivery_id, body, secrets)


def test_delivery_benchmark_measures_a_batching_partner_against_unbatched(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m benchmarks.delivery --batch EVENTS` prints both rates per round and their ratio
    (every event received, one POST per batch: the scenario checks both itself)."""
    from benchmarks import delivery

    delivery.main(["--batch", "300", "--batch-size", "50", "--rounds", "1", "--loop", "asyncio"])
    loop, *lines = capsys.readouterr().out.splitlines()
    assert loop.startswith("event loop: asyncio ")
    assert lines[0].startswith("batched delivery: a burst of 300 room.trending events")
    round_line = lines[1].split()
    unbatched, batched = float(round_line[3]), float(round_line[9])
    assert unbatched > 0 and batched > 0
    assert lines[2].startswith("  best: unbatched")
    assert lines[-1] in ("PASS", "BELOW TARGET")


def test_the_sender_alone_is_measured_against_the_plain_client_at_each_cases_concurrency(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m benchmarks.delivery --sender-alone DELIVERIES` sends every delivery through the
    service's Sender (each answer a 200: the scenario checks it) and the same requests through the
    plain client, at each like-for-like concurrency, and prints both rates, the median of the
    rounds' ratios and both sides' CPU time a message."""
    from benchmarks import delivery

    delivery.main(["--sender-alone", "120", "--rounds", "2"])
    _, title, *cases = capsys.readouterr().out.splitlines()
    assert title.startswith("the sender alone: 120 deliveries")
    assert [int(line.split(":")[0].removeprefix("  at ")) for line in cases] == [
        case.concurrency for case in delivery.LIKE_FOR_LIKE
    ]
    for line in cases:
        found = re.search(
            r"plain +(\d+)/s, sender +(\d+)/s: ratio (\d+\.\d+) .*CPU (\d+) µs a delivery \(plain (\d+) µs", line
        )
        assert found is not None, line
        assert all(float(figure) > 0 for figure in found.groups()), line


def test_a_slow_partners_drain_says_what_the_worker_claimed_and_handed_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m benchmarks.delivery --slow-partner MS` drains a backlog to a partner answering after
    MS milliseconds and prints its rate beside what its cap allows, the deliveries claimed (each
    handed back is claimed again) and those handed back unsent; it passes when none was."""
    from benchmarks import delivery

    passed = delivery.main(["--slow-partner", "20", "--slow-events", "40"]) == 0
    _, line, verdict = capsys.readouterr().out.splitlines()
    found = re.search(
        r"answering in 20 ms at the default cap (\d+), a backlog of 40, SQLite, webhook timeout 2 s: "
        r"(\d+\.\d)/s \(its cap allows (\d+\.\d)/s\); (\d+) deliveries claimed, (\d+) handed back unsent",
        line,
    )
    assert found is not None, line
    cap, rate, allowed, claimed, handed_back = found.groups()
    assert float(allowed) == int(cap) * 1000 / 20
    assert 0 < float(rate) <= float(allowed) * 1.05
    assert int(claimed) == 40 + int(handed_back)
    assert (verdict, passed) == (("PASS", True) if handed_back == "0" else ("ABOVE TARGET", False))


def test_delivery_benchmark_runs_each_like_for_like_case_against_a_plain_client(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m benchmarks.delivery --like-for-like DELIVERIES` drains each case (every delivery
    posted: the scenario checks it itself) and prints per case both rates, the ratio of the best,
    each round's ratio and their median, how full the worker held the caps (on average, never past
    them), both sides' CPU time a message and the receiver's beside each, the rest of the machine's
    and its idle share (read from /proc/stat), how long the measuring process and the receiver
    waited for a core (schedstat), and the drain's turns (at least one; fewer than its
    deliveries, which share commits)."""
    from benchmarks import delivery

    delivery.main(["--like-for-like", "160", "--rounds", "2"])
    loop, *lines = capsys.readouterr().out.splitlines()
    assert loop.startswith("event loop: uvloop ")  # by default the one serve and the worker run on
    assert lines[0].startswith("like for like: a backlog of 160 deliveries")
    cases = lines[1:-1]
    assert [line.split(":")[0].strip() for line in cases] == [str(case) for case in delivery.LIKE_FOR_LIKE]
    for line in cases:
        plain = float(line.split("/s, service")[0].rsplit(" ", 1)[1])
        service = float(line.split("/s: ratio")[0].rsplit(" ", 1)[1])
        ratio = float(line.split("ratio ")[1].split(" ")[0])
        rounds = line.split("(rounds ")[1].split(", median")[0].split(", ")
        assert plain > 0 and service > 0 and ratio == pytest.approx(service / plain, abs=0.006)
        assert len(rounds) == 2 and "median" in line
        held = float(line.split("caps held ")[1].split(" ")[0])
        assert 0 < held <= 1
        service_cpu = float(line.split("; CPU ")[1].split(" µs a delivery")[0])
        plain_cpu = float(line.split("(plain ")[1].split(" µs a request")[0])
        turns = int(line.split("), ")[-1].removesuffix(" turns"))
        assert service_cpu > 0 and plain_cpu > 0 and 1 <= turns < 160
        # The receiver answered every post of both sides in its own process.
        receiver = float(line.split("the receiver ")[1].split(" µs")[0])
        plain_receiver = float(line.split("(plain's ")[1].split(")")[0])
        assert receiver > 0 and plain_receiver > 0
        rest = float(line.split("the rest of the machine ")[1].split(" µs")[0])
        idles = re.search(r"the machine (\d+) % idle \(plain's (\d+) %\)", line)
        assert idles is not None, line
        assert rest >= 0 and all(0 <= int(share) <= 100 for share in idles.groups())
        # How long each process stood ready while both cores were taken (Linux's schedstat).
        waits = re.search(
            r"waiting for a core (\d+) % of the time \(plain (\d+) %\), the receiver (\d+) % \(plain's (\d+) %\)",
            line,
        )
        assert waits is not None, line
        # Summed over each process's threads: past 100 % when several wait at once (the suite runs
        # a process a core, so its machine is loaded).
        assert all(int(share) >= 0 for share in waits.groups())
    assert lines[-1] in ("PASS", "BELOW TARGET")


@pytest.mark.slow
def test_prune_benchmark_prints_a_row_per_round(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.prune` at tiny sizes: a row per round, with and without pruning in turn,
    every settled delivery pruned in the rounds with pruning, and the ratio line."""
    from benchmarks import prune

    prune.main(["--settled", "300", "--backlog", "300", "--rooms", "5", "--rounds", "1"])
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("round  pruning  window s  drained/s  pruned")
    rows = [line.split() for line in lines[start + 1 : start + 3]]
    assert [(row[0], row[1], row[4]) for row in rows] == [("1", "yes", "300"), ("1", "no", "0")]
    # Tiny runs may drain their backlog at once: windows and rates are shown, whatever they are.
    assert all(float(row[2]) >= 0 and float(row[3]) >= 0 for row in rows)
    assert any(line.startswith("median drain rate with pruning") for line in lines)


@pytest.mark.slow
def test_instruction_benchmark_counts_each_part_under_callgrind() -> None:
    """`python -m benchmarks.instructions` runs each part under callgrind and prints its instructions
    a message (counted over the measured phase only) and its ratio to the plain client's; the drain
    says how many turns it committed, and --objects breaks each part down by shared object."""
    require_tool("valgrind", "the instruction counts are callgrind's")
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", "--count", "50", "--concurrency", "4",
         "--parts", "plain", "drain", "--objects"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].startswith("instructions a message, counted by callgrind: 50 messages at 4 connections")
    parts = [line.split()[0] for line in lines[1:] if not line.startswith(" " * 6)]
    assert parts == ["plain", "drain"]
    plain = next(line for line in lines if line.lstrip().startswith("plain "))
    drain = next(line for line in lines if line.lstrip().startswith("drain "))
    plain_k = float(plain.split()[1])
    drain_k = float(drain.split()[1])
    # The drain does all the plain client does and more: it signs, claims and logs every delivery.
    assert 0 < plain_k < drain_k
    ratio = float(drain.split("plain ÷ drain ")[1].split(" ")[0])
    assert ratio == pytest.approx(plain_k / drain_k, abs=0.006)
    turns = int(drain.split("50 deliveries in ")[1].split(" turns")[0])
    assert 1 <= turns < 50
    objects = [line.split()[-1] for line in lines if line.startswith(" " * 6)]
    assert any(name.startswith("libpython") for name in objects)


@pytest.mark.slow
def test_instruction_benchmark_traces_the_bytecodes_of_each_part() -> None:
    """`python -m benchmarks.instructions --bytecodes` (no valgrind) prints each part's bytecodes a
    message, by package or module and by function, as many of each as ``--top`` asks: the drain runs
    more of them than the plain client, the worker's own loop among them."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", "--bytecodes", "--count", "50",
         "--concurrency", "4", "--parts", "plain", "drain", "--top", "25"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "bytecodes a message, traced: 50 messages at 4 connections"
    heads = [
        index for index, line in enumerate(lines) if line.startswith("  ") and not line.startswith("   ")
    ]
    assert [lines[index].split()[0] for index in heads] == ["plain", "drain"]
    assert lines[heads[0]] == "  plain (50 posts)"
    assert lines[heads[1]].startswith("  drain (50 deliveries in ")
    plain = float(lines[heads[0] + 1].split()[0].replace(",", ""))
    drain = float(lines[heads[1] + 1].split()[0].replace(",", ""))
    assert lines[heads[0] + 1].endswith("bytecodes a message")
    assert 0 < plain < drain
    drained = lines[heads[1] + 2 :]
    places = [line.split()[-1] for line in drained[: drained.index("            the busiest functions:")]]
    assert "aiohttp" in places and "service/webhooks/worker.py" in places
    # --top 25: as many of the busiest functions as asked for (a drain runs far more than 25).
    assert len(drained) - len(places) - 1 == 25 and len(places) <= 25
    assert any("service/webhooks/worker.py:" in line and " _send" in line for line in drained)


@pytest.mark.slow
def test_instruction_benchmark_times_each_part_at_full_speed() -> None:
    """`python -m benchmarks.instructions --cpu` runs each part at full speed in a process of its own,
    the parts alternating for --rounds rounds, and prints the medians of its CPU a message, its rate
    and its share of the time running, with each part's rate against the plain client's."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", "--cpu", "--count", "60", "--concurrency", "4",
         "--rounds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == (
        "CPU a message at full speed: 60 messages at 4 connections "
        "(the drain: one partner at cap 4, SQLite), medians of 2 rounds"
    )
    pattern = re.compile(
        r"  (\w+) +(\d+) µs CPU a message, +([\d,]+)/s(?:, (\w+) ÷ plain (\d+\.\d\d))?; running (\d+)% of the time"
    )
    found = [pattern.fullmatch(line) for line in lines[1:]]
    assert all(found), lines
    rows = {match[1]: match for match in found if match}
    assert list(rows) == ["plain", "send", "drain"]
    assert rows["plain"][4] is None
    rate = {part: float(match[3].replace(",", "")) for part, match in rows.items()}
    for part in ("send", "drain"):
        assert rows[part][4] == part
        assert float(rows[part][5]) == pytest.approx(rate[part] / rate["plain"], abs=0.02)
    # The sender signs what the plain client sent ready-signed, and the drain also claims and logs
    # every delivery in SQLite, in this process: each costs more CPU a message than the one before.
    cpu = {part: int(match[2]) for part, match in rows.items()}
    assert 0 < cpu["plain"] < cpu["drain"] and cpu["send"] < cpu["drain"]
    # On SQLite the drain's database thread runs beside its event loop, and may add to its share.
    assert all(int(match[6]) > 0 for match in rows.values())
    assert int(rows["plain"][6]) <= 100 and int(rows["send"][6]) <= 100


@pytest.mark.parametrize(
    "apart", [[], ["--coalition-apart"], ["--coalition-latency", "2"]], ids=["together", "apart", "latency"]
)
def test_delivery_benchmark_runs_the_coalition_rounds(apart: list[str]) -> None:
    """`python -m benchmarks.delivery --coalition` onboards a healthy partner once the hanging ones
    (claimed together, or one after another) hold the senders they may, alone and beside them in
    turn, and prints both ratios; with a latency, the healthy partner answers that much later."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.delivery", "--coalition", "50", "--coalition-partners", "2",
         "--coalition-cap", "8", "--rounds", "1", *apart],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert completed.returncode in (0, 1), completed.stdout + completed.stderr
    lines = [line.strip() for line in completed.stdout.splitlines()]
    assert [line.split(":")[0] for line in lines if line.startswith("round 1")] == ["round 1 alone ", "round 1 beside 2"]
    [best] = [line for line in lines if line.startswith("best: beside")]
    assert "rate ratio" in best and "p99 ratio" in best
    [title] = [line for line in lines if line.startswith("coalition:")]
    assert ("claimed one after another" if "--coalition-apart" in apart else "claimed together") in title
    assert ("answering in 2 ms" in title) == ("--coalition-latency" in apart)
    assert lines[-1] in ("PASS", "BELOW TARGET")


def test_answers_benchmark_prices_each_answer_for_both_buffers() -> None:
    """`python -m benchmarks.answers` prints the Sender's CPU an attempt for each answer's shape,
    the service's buffer beside aiohttp's default."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.answers", "--attempts", "5", "--rounds", "1", "--chunks", "2000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = [line.strip() for line in completed.stdout.splitlines()]
    sides = [line for line in lines if line.startswith(("service", "baseline"))]
    assert [line.split()[0] for line in sides] == ["service", "baseline"]
    assert all(all(f"{shape} " in line for shape in ("plain", "chunks", "page", "large")) for line in sides)
    assert "16,384 bytes" in sides[0] and "262,144 bytes" in sides[1]
