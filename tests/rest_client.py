"""The REST service in-process, as the API tests drive it: a TestClient on a history, and a wait for a state."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from storetune.api.service.app import create_app
from storetune.api.settings import Settings as ServiceSettings
from conftest import ROOT, shared


def client_for(url: str, tmp_path: Path, **settings) -> TestClient:
    data = settings.pop("data_dirs", f"{shared('moot_configs/BDBC.csv').parent}:{ROOT / 'datasets'}")
    return TestClient(create_app(ServiceSettings(database_url=url, data_dirs=data, comparison_workers=1,
                                                 **settings)))


def wait_for(client: TestClient, path: str, states: tuple[str, ...], timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(path).json()
        if body["state"] in states:
            return body
        assert time.monotonic() < deadline, f"{path} still {body['state']} after {timeout} s: {body.get('note')}"
        time.sleep(0.2)
