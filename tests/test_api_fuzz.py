"""Fuzz every operation of the REST API from its own OpenAPI document (schemathesis, in-process).

The app runs its real lifespan (history, scheduler, worker processes) on a fresh SQLite history,
with one data directory holding an eight-row table, one campaign at a time, and no commands:
whatever the fuzzer posts cannot launch big work. Before fuzzing, one small campaign is run to
its end, so the fuzzed ids 0, 1, 2... also reach a real campaign with trials. No response may be
a 5xx (an exception the app lets out counts too), and every response must conform to the schema
the app publishes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance
from schemathesis.python import asgi

from api.app import create_app
from api.service import ServiceSettings

# A MOOT table: three options, the objective last ("-": minimise). Eight configurations.
TABLE = "a,b,c,PERF-\n" + "".join(
    f"{a},{b},{c},{1 + a * 0.5 + b * 0.25 + c * 0.125}\n" for a in (0, 1) for b in (0, 1) for c in (0, 1)
)

# The app is built at import, for schemathesis to collect one test per operation; its lifespan
# reads these settings only when it starts (at the first request), after ``service`` has pointed
# them at a fresh history and data directory. Nothing from the environment widens them.
SETTINGS = ServiceSettings(database_url="sqlite://", data_dirs="", max_campaigns=1, comparison_workers=1,
                           allow_commands=False, allow_devices="", token=None)
app = create_app(SETTINGS)


# What GET /openapi.json serves, loaded as schemathesis.openapi.from_asgi() does, but without
# starting the lifespan at import (schemathesis starts it at the first request of each test and
# ends it at the test's teardown).
schema = schemathesis.openapi.from_dict(app.openapi())
schema.app, schema.location = app, "/openapi.json"


def _wait_ended(client: Any, campaign_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/campaigns/{campaign_id}").json()
        if body["state"] not in ("queued", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    """A fresh history, a data directory with the tiny table, and one campaign run to its end on it."""
    top = tmp_path_factory.mktemp("fuzz")
    data = top / "data"
    data.mkdir()
    (data / "tiny.csv").write_text(TABLE)
    SETTINGS.database_url = f"sqlite:///{top / 'history.sqlite'}"
    SETTINGS.data_dirs = str(data)
    try:
        with asgi.get_client(app) as client:  # the lifespan schemathesis sends its requests to
            created = client.post("/campaigns", json={"runner": "dataset", "budget": 4, "seed": 1,
                                                      "runner_settings": {"dataset": str(data / "tiny.csv")}})
            assert created.status_code == 201, created.text
            ended = _wait_ended(client, created.json()["id"])
            assert ended["state"] == "finished" and ended["progress"]["evaluated"] == 4, ended
        yield top
    finally:
        asgi.shutdown_lifespans()  # schemathesis ends it after each test; this covers a failed seeding


def _formats_a_device(case: Any) -> bool:
    """The device runner's 'loop' needs no allow list: a fuzzed campaign could make a loop device and
    format it (the tests run as root in CI). schemathesis knows 'device' from the app's constants."""
    body = case.body
    return case.operation.path == "/campaigns" and isinstance(body, dict) and body.get("runner") == "device"


def _deletes_the_seeded_campaign(case: Any) -> bool:
    """DELETE /campaigns/1 would take away the one campaign with trials that the other operations (and the
    tests below) read; every other id is fuzzed."""
    if case.method.upper() != "DELETE":
        return False
    try:  # the id as FastAPI reads it ("01", " 1", "+1" are 1 too)
        return int(str((case.path_parameters or {}).get("campaign_id")).strip()) == 1
    except ValueError:
        return False


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_no_operation_answers_a_server_error_or_off_schema(case, service):
    if _formats_a_device(case) or _deletes_the_seeded_campaign(case):
        return
    case.call_and_validate(checks=[not_a_server_error, response_schema_conformance])


@pytest.mark.parametrize("method, path", [
    ("GET", "/campaigns/{}"), ("POST", "/campaigns/{}/cancel"), ("POST", "/campaigns/{}/resume"),
    ("GET", "/campaigns/{}/trials"), ("GET", "/campaigns/1/trials/{}"), ("GET", "/campaigns/{}/near-optimal"),
    ("GET", "/campaigns/{}/convergence"), ("GET", "/comparisons/{}"),
])
def test_an_id_beyond_64_bits_is_not_found_not_a_server_error(service, method, path):
    """What the fuzzer found first: the path's int went to the database unbounded (a 500)."""
    with asgi.get_client(app) as client:
        response = client.request(method, path.format(2**63))
    assert response.status_code in (404, 422), response.text


def test_timestamps_carry_their_utc_offset(service):
    """Found by the schema check: SQLite gave the history's UTC times back naive."""
    with asgi.get_client(app) as client:
        campaign = client.get("/campaigns/1").json()
        trial = client.get("/campaigns/1/trials/0").json()
    stamps = [campaign["created_at"], campaign["finished_at"], trial["started_at"], trial["finished_at"]]
    assert all(s.endswith("Z") or s[-6] in "+-" for s in stamps), stamps
