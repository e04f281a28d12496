"""The reward service on loopback: enqueue / fetch with a bearer token, limits and errors."""

import json
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from rewards.service import SERVICE_REWARDS, RewardClient, RewardServer, RewardServiceError, service_reward

TOKEN = "t0ken-for-tests"


@pytest.fixture
def server():
    srv = RewardServer("127.0.0.1", 0, token=TOKEN, max_bytes=20_000).start()
    yield srv
    srv.stop()


def _post(url, body: bytes, token: str | None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_consistency_and_trajectory_rewards_round_trip(server):
    client = RewardClient(server.url, TOKEN)
    t = np.arange(0, 6.4, 0.1)
    x = np.where(t < 3, 8 * t - 4 / 3 * t**2, 12.0)
    traj = np.stack([x, 0 * t], 1).tolist()
    good = client.compute("consistency", {"reasoning": "Red light ahead, I slow down and stop.", "trajectory": traj,
                                          "causes": ["red_light", "traffic_light"]})  # fmt: skip
    bad = client.compute("consistency", {"reasoning": "I accelerate past the pedestrian.", "trajectory": traj,
                                         "causes": ["red_light"]})  # fmt: skip
    assert good["overall"] > bad["overall"] and 0 <= bad["overall"] <= 1
    plan = np.stack([np.arange(1, 65) * 1.0, np.zeros(64), np.zeros(64)], 1).tolist()
    scores = client.compute("trajectory", {"plan": plan, "reference": plan})
    assert scores == {"ade": 0.0, "alpamayo_demo": 0.0}


def test_missing_or_wrong_token_is_401(server):
    body = json.dumps({"reward": "trajectory", "payload": {}}).encode()
    assert _post(server.url + "/enqueue", body, None)[0] == 401
    assert _post(server.url + "/enqueue", body, "nope")[0] == 401
    assert _post(server.url + "/fetch", b'{"uuid": "x"}', "nope")[0] == 401
    with pytest.raises(RewardServiceError, match="401"):
        RewardClient(server.url, "nope").enqueue("trajectory", {})


def test_oversized_payload_is_413_and_bad_input_is_reported(server):
    big = json.dumps({"reward": "trajectory", "payload": {"x": "a" * 30_000}}).encode()
    assert _post(server.url + "/enqueue", big, TOKEN)[0] == 413
    assert _post(server.url + "/enqueue", b"{not json", TOKEN)[0] == 400
    code, body = _post(server.url + "/enqueue", json.dumps({"reward": "nope", "payload": {}}).encode(), TOKEN)
    assert code == 400 and "unknown reward 'nope'" in body["error"]
    assert _post(server.url + "/fetch", b'{"uuid": "missing"}', TOKEN)[0] == 404
    client = RewardClient(server.url, TOKEN)
    with pytest.raises(RewardServiceError, match="KeyError"):
        client.compute("trajectory", {"plan": [[0, 0, 0]]})  # no reference: the service reports the error


def test_user_rewards_and_health(server):
    @service_reward("double")
    def double(payload):
        return {"value": 2 * payload["x"]}

    try:
        assert RewardClient(server.url, TOKEN).compute("double", {"x": 21}) == {"value": 42.0}
    finally:
        SERVICE_REWARDS.pop("double")
    with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
        assert json.loads(r.read()) == {"ok": True}


def test_server_refuses_to_start_without_a_token(monkeypatch):
    monkeypatch.delenv("LOOPDRIVE_REWARD_TOKEN", raising=False)
    with pytest.raises(ValueError, match="needs a token"):
        RewardServer("127.0.0.1", 0)
    out = subprocess.run([sys.executable, "-m", "loopdrive.cli", "serve-rewards", "--port", "0"], capture_output=True,
                         text=True, env={k: v for k, v in __import__("os").environ.items()
                                         if k != "LOOPDRIVE_REWARD_TOKEN"}, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "needs a token" in out.stderr
