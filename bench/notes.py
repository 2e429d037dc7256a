"""Seeded, realistic-looking memory text for the benchmarks (same seed, same text)."""

from __future__ import annotations

import random

PEOPLE = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Julia"]
PROJECTS = ["billing service", "search API", "mobile app", "data warehouse", "onboarding flow",
            "auth gateway", "reporting dashboard", "notification service", "CI pipeline",
            "customer portal"]
TOOLS = ["Postgres", "SQLite", "Redis", "Kafka", "Celery", "Terraform", "Grafana", "Sentry",
         "Kubernetes", "GitHub Actions", "S3", "ClickHouse"]
PLACES = ["Berlin", "Lisbon", "Toronto", "Nairobi", "Osaka", "Madrid", "Oslo", "Austin"]
TEMPLATES = [
    "Met {p} about the {proj}; we agreed to move the nightly jobs to {t} before the end of {m}.",
    "Decision: the {proj} keeps {t} for now, {p} will write a short migration plan by Friday.",
    "{p} reported a latency spike on the {proj} around {h}:00, traced to a missing index in {t}.",
    "Booked the flight to {pl} for the offsite on {d} {m}; hotel near the station, {p} shares.",
    "Reminder: renew the {t} licence for the {proj} team before {d} {m}, budget owner is {p}.",
    "Reviewed {p}'s pull request for the {proj}: good tests, asked to split the {t} changes out.",
    "User preference: prefers short answers, metric units, and meeting notes as bullet lists.",
    "{p} is on holiday in {pl} from {d} {m}; {p2} covers the {proj} on-call rotation meanwhile.",
    "Post-mortem for the {proj} outage: {t} ran out of disk at {h}:40, alerts fired 12 min late.",
    "Idea: cache the {proj} search results in {t} for five minutes; ask {p} about invalidation.",
    "Call with {p} and {p2}: the {proj} launch slips one week, marketing copy is due {d} {m}.",
    "Todo: rotate the {t} credentials used by the {proj}, then update the runbook with {p}.",
    "Learned that {t} vacuum settings matter for the {proj}; {p} suggested a weekly schedule.",
    "Birthday of {p} on {d} {m}; the team wants a small dinner in {pl} if the dates line up.",
    "Benchmark: the {proj} handles {n} requests per second on {t} with two workers, p99 {h}0 ms.",
]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def bullet(rng: random.Random) -> str:
    """One note line of about 90-100 characters, drawn from the templates."""
    p, p2 = rng.sample(PEOPLE, 2)
    return rng.choice(TEMPLATES).format(
        p=p, p2=p2, proj=rng.choice(PROJECTS), t=rng.choice(TOOLS), pl=rng.choice(PLACES),
        m=rng.choice(MONTHS), d=rng.randint(1, 28), h=rng.randint(1, 23),
        n=rng.randint(200, 5000))
