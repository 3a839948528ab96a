"""The service on a Ray cluster, with real processes: `storetune serve` with RAY_ADDRESS at a head and a worker
node started with `ray start` on 127.0.0.1 (tests/ray_cluster.py). Its campaigns' trials are Ray
tasks on both nodes; GET /cluster shows the nodes and what a campaign holds; a worker node killed, the head
lost and the service restarted mid-campaign each lose nothing; a resource no node has, a class of disk none
advertises and an unreachable head are refused with the reason.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from test_api_restart import Service
from ray_cluster import Cluster, free_port
from test_ray import slow_benchmark

pytestmark = pytest.mark.slow


class RayService(Service):
    """`storetune serve` with RAY_ADDRESS (and what the cluster's processes share: its auth mode)."""

    def __init__(self, tmp_path: Path, db: str, log_name: str, address: str, **env: str):
        self.extra = {"RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                      "STORETUNE_ALLOW_DEVICES": "/dev/nvme9n9", "STORETUNE_MAX_PARALLEL": "16", **env}
        saved = {k: os.environ.get(k) for k in self.extra}
        os.environ.update(self.extra)  # Service passes os.environ on to `storetune serve`
        try:
            super().__init__(tmp_path, db, log_name)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def ready(self, timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            health = self.client.get("/health").json()
            if health["executor"].get("ready"):
                return health
            assert time.monotonic() < deadline, f"the cluster never answered: {health}\n{self.output()}"
            time.sleep(0.5)


def command_campaign(bench: Path, budget: int, parallel: int, **kw) -> dict:
    return {"runner": "command", "runner_settings": {"command": str(bench), "space": "storage_v1"}, "metric": "ops",
            "direction": "max", "algorithm": "random", "budget": budget, "seed": kw.pop("seed", 1),
            "parallel": parallel, **kw}


def launch(service: Service, body: dict) -> dict:
    response = service.client.post("/campaigns", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def every_trial_once(service: Service, campaign: int, budget: int) -> list[dict]:
    trials = service.trials(campaign)
    succeeded = [t for t in trials if t["status"] == "SUCCEEDED"]
    assert len(succeeded) == budget and len({t["config_hash"] for t in succeeded}) == budget, \
        Counter(t["status"] for t in trials)
    assert {t["status"] for t in trials} <= {"SUCCEEDED", "STALE"}
    stale = {t["number"] for t in trials if t["status"] == "STALE"}
    assert sorted(t["retry_of"] for t in trials if t["retry_of"] is not None) == sorted(stale)  # each re-run once
    return trials


@pytest.fixture
def cluster():
    c = Cluster(Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp")))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_service_campaigns_run_on_both_nodes_and_survive_a_node_and_a_service_restart(cluster, sqlite_url, tmp_path):
    bench = slow_benchmark(tmp_path, 0.4)
    service = RayService(tmp_path, sqlite_url, "first.log", cluster.address)
    try:
        health = service.ready()
        assert health["executor"]["kind"] == "ray" and health["executor"]["nodes"] == 2
        state = service.client.get("/cluster").json()
        assert state["ready"] and len(state["nodes"]) == 2 and state["total"]["loop_slot"] == 2
        assert all(n["alive"] and n["resources"]["CPU"] == 1 for n in state["nodes"])

        # asked for more than the cluster runs at once: capped, said in the response and in the campaign
        created = launch(service, command_campaign(bench, budget=30, parallel=5))
        assert created["executor"] == {"kind": "ray"}
        assert created["warnings"] == ["parallel 5 is capped to 2: the Ray cluster advertises 2 CPU (one "
                                       "measurement each)"]
        campaign = created["id"]
        running = service.wait(campaign, lambda c: c["progress"]["evaluated"] >= 3, "got going", timeout=90)
        assert running["executor"]["workers"] == 2 and running["executor"]["address"] == cluster.address
        assert any("capped to 2" in note for note in running["executor"]["notes"])
        held = service.client.get("/cluster").json()["campaigns"]
        assert held == [{"campaign": campaign, "state": "running", "workers": 2, "per_task": {},
                         "holds": {"CPU": 2.0}, "notes": running["executor"]["notes"]}]

        # both nodes have measured before one dies (on a loaded machine the worker node's first task starts late)
        deadline = time.monotonic() + 120
        while len({n for t in service.trials(campaign) if t["status"] == "SUCCEEDED" for n in t["nodes"]}) < 2:
            assert time.monotonic() < deadline, Counter(n for t in service.trials(campaign) for n in t["nodes"])
            time.sleep(0.5)
        os.kill(cluster.worker_raylet(), signal.SIGKILL)  # a worker node dies: its tasks run again on the head
        service.wait(campaign, lambda c: c["progress"]["evaluated"] >= 12, "went on", timeout=120)
        service.kill()  # and the service itself: the next one adopts the campaign
        second = RayService(tmp_path, sqlite_url, "second.log", cluster.address)
        try:
            second.ready()
            done = second.wait(campaign, lambda c: c["state"] == "finished", "finished", timeout=240)
            assert done["progress"]["evaluated"] == 30
            trials = every_trial_once(second, campaign, 30)
            nodes = Counter(n for t in trials for n in t["nodes"])
            assert len(nodes) == 2, nodes  # both nodes measured (the worker node until it died)
            detail = second.client.get(f"/campaigns/{campaign}/trials/{trials[0]['number']}").json()
            assert detail["measurements"][0]["node"] in nodes
        finally:
            second.kill()
    finally:
        service.kill()


def test_what_no_node_advertises_and_a_head_that_does_not_answer_are_refused_with_the_reason(cluster, sqlite_url,
                                                                                            tmp_path, bdbc):
    (tmp_path / "BDBC.csv").write_bytes(bdbc.read_bytes())  # inside the service's data directory
    service = RayService(tmp_path, sqlite_url, "service.log", cluster.address)
    try:
        service.ready()
        # a comparison's seeds are Ray tasks too
        compared = service.client.post("/comparisons", json={"dataset": str(tmp_path / "BDBC.csv"),
                                                             "algorithms": ["random", "sa"], "seeds": 4, "budget": 20})
        assert compared.status_code == 201, compared.text
        assert compared.json()["settings"]["executor"] == "ray"
        path = f"/comparisons/{compared.json()['id']}"
        deadline = time.monotonic() + 180
        while (done := service.client.get(path).json())["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, done
            time.sleep(0.5)
        assert done["state"] == "finished" and done["campaigns"] == 8, done
        seed = service.client.get("/campaigns", params={"limit": 1}).json()["items"][0]
        measured = service.trials(seed["id"])
        assert all(len(t["nodes"]) == 1 and "/" in t["nodes"][0] for t in measured)  # host/Ray node

        disk = service.client.post("/campaigns", json={"runner": "device", "runner_settings": {
            "device": "/dev/nvme9n9"}, "budget": 2})
        assert disk.status_code == 422, disk.text
        [detail] = disk.json()["detail"]
        assert detail["loc"] == ["body", "runner_settings", "device"]
        assert "no node of the Ray cluster" in detail["msg"] and "'device:/dev/nvme9n9'" in detail["msg"]
        kind = service.client.post("/campaigns", json={"runner": "device", "runner_settings": {
            "hardware": "ssd-z"}, "budget": 2})
        assert kind.status_code == 422, kind.text
        [detail] = kind.json()["detail"]
        assert detail["loc"] == ["body", "runner_settings", "hardware"] and "'disk:ssd-z'" in detail["msg"]
        assert service.client.get("/campaigns").json()["total"] == 8  # the comparison's seeds: nothing else recorded
    finally:
        service.kill()

    nowhere = f"127.0.0.1:{free_port()}"
    service = RayService(tmp_path, sqlite_url, "nowhere.log", nowhere)
    try:
        deadline = time.monotonic() + 60
        while (health := service.client.get("/health").json())["executor"]["cluster"] != "unreachable":
            assert time.monotonic() < deadline, health
            time.sleep(0.2)
        assert "unreachable" in health["executor"]["reason"] and nowhere in health["executor"]["reason"]
        bench = slow_benchmark(tmp_path, 0.0)
        refused = service.client.post("/campaigns", json=command_campaign(bench, budget=2, parallel=1))
        assert refused.status_code == 503, refused.text
        assert f"the Ray cluster at {nowhere} does not answer now" in refused.json()["detail"][0]["msg"]
        here = launch(service, command_campaign(bench, budget=2, parallel=1, executor="local"))  # still works here
        assert service.wait(here["id"], lambda c: c["state"] == "finished", "finished", timeout=60)
    finally:
        service.kill()


def test_a_head_lost_mid_campaign_queues_it_and_it_resumes_when_the_cluster_is_back(cluster, sqlite_url, tmp_path):
    bench = slow_benchmark(tmp_path, 0.4)
    service = RayService(tmp_path, sqlite_url, "service.log", cluster.address)
    again = None
    try:
        service.ready()
        campaign = launch(service, command_campaign(bench, budget=24, parallel=2))["id"]
        service.wait(campaign, lambda c: c["progress"]["evaluated"] >= 4, "got going", timeout=90)
        cluster.stop()  # every process of the cluster, the head's too
        queued = service.wait(campaign, lambda c: c["state"] == "queued", "queued", timeout=120)
        assert "was lost" in queued["note"], queued["note"]
        health = service.client.get("/health").json()["executor"]
        assert health["cluster"] == "unreachable" and not health["ready"]
        time.sleep(3)
        assert service.campaign(campaign)["state"] == "queued"  # it waits: no worker, no death counted

        again = Cluster(Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp")), port=cluster.port)
        again.start()
        done = service.wait(campaign, lambda c: c["state"] == "finished", "finished once the cluster is back",
                            timeout=300)
        assert done["progress"]["evaluated"] == 24
        every_trial_once(service, campaign, 24)
        assert "died" not in service.output()
    finally:
        service.kill()
        if again is not None:
            again.stop()
