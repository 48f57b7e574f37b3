"""Drills: the real service on loopback, attacked and killed, and what it must still prove.

``python -m benchmarks.drills`` (``make drills``) runs four, each bounded by deadlines, cleaning up
every child process it starts however it ends, and printing the numbers behind each claim:

1. ``registrations``: SIGKILL the server under registration load, restart, repeat; every
   registration answered 200 is in the database (SQLite, and PostgreSQL when available).
2. ``delivery``: a flaky receiver, delivery workers SIGKILLed mid-run; every event arrives at every
   partner at least once, every request's signature verifies, an eventId never changes its bytes.
3. ``hostile``: schemathesis, every phase and check, against the server's own OpenAPI document.
4. ``ratelimit``: two server processes sharing Redis enforce one limit for one client.

PostgreSQL and Redis come from ``SERVICE_DRILL_POSTGRES_URL`` / ``SERVICE_DRILL_REDIS_URL`` or the
test suite's ``SERVICE_TEST_*`` variables; without them those parts are skipped, with the reason.
``tests/test_drills.py`` runs short versions of all four in the test suite, so they cannot rot.
"""
