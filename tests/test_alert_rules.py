"""The shipped Prometheus alert rules: they load, every alert has a promtool unit test that sees
it fire, and every partner alert names the partner by name and says what to do."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from service.webhooks import scrape
from tests.tools import require_tool

PROMETHEUS = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"
RULES = PROMETHEUS / "alerts.yml"
RULE_TESTS = PROMETHEUS / "alerts_test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = require_tool("promtool", "the alert rules are checked and unit-tested with it")
    return subprocess.run([path, *args], capture_output=True, text=True, cwd=PROMETHEUS, timeout=120)


def alerts() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return {rule["alert"]: rule for group in document["groups"] for rule in group["rules"] if "alert" in rule}


def test_the_rules_load_as_they_are() -> None:
    """promtool check rules accepts the file unchanged, every rule in it."""
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_the_unit_tests_of_the_rules_pass() -> None:
    """promtool test rules runs alerts_test.yml: each alert fires when it must and not before."""
    tested = promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_is_seen_firing_by_a_unit_test() -> None:
    """No alert goes untested: each appears in a unit test that expects it to fire."""
    document = yaml.safe_load(RULE_TESTS.read_text())
    assert document["rule_files"] == [RULES.name]
    fired = {
        check["alertname"]
        for test in document["tests"]
        for check in test["alert_rule_test"]
        if check["exp_alerts"]
    }
    assert fired == set(alerts())


def test_partner_alerts_name_the_partner_and_the_action() -> None:
    """Every alert about a partner joins its name into the summary, beside a command to run."""
    partner_alerts = {name: rule for name, rule in alerts().items() if "service_webhook_partner" in rule["expr"]}
    assert len(partner_alerts) == 5
    for name, rule in partner_alerts.items():
        assert "group_left (name)" in rule["expr"], name
        summary = rule["annotations"]["summary"]
        assert "{{ $labels.name }}" in summary and "(partners " in summary, name


def test_the_example_configuration_loads_the_rules(tmp_path: Path) -> None:
    """prometheus.yml, with its token file in place, passes promtool check config, rules included."""
    config = (PROMETHEUS / "prometheus.yml").read_text()
    token = tmp_path / "service-admin-token"
    token.write_text("x" * 32)
    assert "/etc/prometheus/service-admin-token" in config
    (tmp_path / "prometheus.yml").write_text(config.replace("/etc/prometheus/service-admin-token", str(token)))
    (tmp_path / RULES.name).write_text(RULES.read_text())
    path = require_tool("promtool", "the example configuration is checked with it")
    checked = subprocess.run(
        [path, "check", "config", "prometheus.yml"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def _seconds(duration: str) -> float:
    """A Prometheus duration of one unit (5s, 1m) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    unit = "ms" if duration.endswith("ms") else duration[-1]
    return float(duration.removesuffix(unit)) * units[unit]


def test_a_scrape_answers_within_the_configured_timeout() -> None:
    """Every job's scrape_timeout leaves a scrape its database bound with room to spare and stays
    within the interval: a silent database makes a target not ready (service_ready 0), never down."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    shipped = config["global"]
    for job in config["scrape_configs"]:
        timeout = _seconds(job.get("scrape_timeout", shipped["scrape_timeout"]))
        interval = _seconds(job.get("scrape_interval", shipped["scrape_interval"]))
        assert 2 * scrape.DATABASE_WITHIN < timeout <= interval, job["job_name"]
