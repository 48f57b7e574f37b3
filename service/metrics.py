"""Prometheus metrics, one registry per app (tests build many apps; nothing is global)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


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
        self.delivery_attempts = Counter(
            "service_webhook_attempts_total",
            "Webhook delivery attempts, by outcome (delivered, retry, failed, paused).",
            ["outcome"],
            registry=self.registry,
        )
        self.attempt_seconds = Histogram(
            "service_webhook_attempt_seconds",
            "Duration of webhook delivery attempts.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "service_webhook_queue_depth",
            "Deliveries by state, read from the outbox when metrics are scraped.",
            ["status"],
            registry=self.registry,
        )
        self._children: dict[tuple[int, str], Counter] = {}

    def inc(self, counter: Counter, label: str) -> None:
        """``counter.labels(label).inc()`` with each label value's child looked up only once.

        ``labels()`` validates, hashes and takes a lock on every call: 1.3 µs of the 1.8 µs an
        increment cost on the registration path, measured here.
        """
        key = (id(counter), label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(label)
        child.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
