"""Seeded demo data, made by driving the real service: ``python -m service.demo --out var/demo.db``.

The analysis notebooks need a database that looks like six weeks of a launch: people joining the
waitlist (some twice, some with typos the service refuses), partners receiving webhooks (one
healthy, one flaky and briefly down, one slow, one that stops with 410 Gone). Rather than writing
rows that merely look right, the generator starts the service on a fresh SQLite file and does what
its users do:

- every registration is a real ``POST /api/waitlist`` over HTTP, as JSON or as a form; the invalid
  ones get their 400 and leave no row;
- partners are onboarded through ``POST /admin/partners`` and publish goes through
  ``POST /admin/events``;
- the service's own delivery worker signs and sends every attempt to receivers on loopback, which
  verify the signature and answer from a seeded script, and logs it in ``delivery_attempts``.

The modules: ``scenario`` (what happens, as data, and the plan built from a seed; pure),
``receivers`` (the partners' endpoints), ``driver`` (plays a plan against the running service),
``files`` (the database on disk, its fingerprint, and ``source`` for the notebooks' ``SOURCE``),
and ``capture`` (the signed deliveries the signature notebook checks).

Determinism comes from the source, not from tidying the output: every choice is drawn from
``random.Random`` seeded with the seed; the service's clock is one the driver moves from one action
to the next (timestamps, retry times and time-to-delivery are exact); the worker's jitter has its
own seeded ``Random`` and due deliveries are sent one at a time in a fixed order, so its draws land
on the same deliveries every run. Partner ids come from a seeded source (``SeededIds``), the same
every run, since the delivery notebook's list of actions prints them; delivery and claim ids are
the service's own random ULIDs, which the analyses never show.

Attempt durations, too, are read from a timer the generator moves (``receivers.Stopwatch``): each
is what the partner's answer is designed to take (at once, ``PROMPT_REPLY`` or ``SLOW_REPLY``
seconds, or cut off at ``WEBHOOK_TIMEOUT``) plus a seeded few milliseconds of ``TRANSIT``. The
receivers answer at once, except where an answer must miss the timeout: that one they hold back
in real time past the worker's own timeout (``REAL_TIMEOUT``, 1 s), so that timeout really fires.
A loaded machine, which would add its own delay to a real reading (and could push a slow answer
past the designed timeout), changes nothing unless it holds an answer back longer than
``REAL_TIMEOUT``.
"""
