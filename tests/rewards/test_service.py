"""The reward service on loopback: enqueue / fetch with a bearer token, limits and errors, and the
attacks of the fault sweep (a client-chosen critic, lying Content-Lengths, deep JSON, slow clients)."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rewards.service import SERVICE_REWARDS, RewardClient, RewardServer, RewardServiceError, service_reward
from tests.rewards.fake_chat import ChatEndpoint, serving

TOKEN = "t0ken-for-tests"


@pytest.fixture
def server():
    srv = RewardServer("127.0.0.1", 0, token=TOKEN, max_bytes=20_000, request_timeout=1.0).start()
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
    good = client.compute(
        "consistency",
        {
            "reasoning": "Red light ahead, I slow down and stop.",
            "trajectory": traj,
            "causes": ["red_light", "traffic_light"],
        },
    )
    bad = client.compute(
        "consistency", {"reasoning": "I accelerate past the pedestrian.", "trajectory": traj, "causes": ["red_light"]}
    )
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
    env = {k: v for k, v in os.environ.items() if k != "LOOPDRIVE_REWARD_TOKEN"}
    command = [sys.executable, "-m", "loopdrive.cli", "serve-rewards", "--port", "0"]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and "needs a token" in out.stderr
    out = subprocess.run(command, capture_output=True, text=True, env=env | {"LOOPDRIVE_REWARD_TOKEN": " "}, timeout=60)
    assert out.returncode == 2 and "needs a token" in out.stderr


@pytest.mark.parametrize("token", ["", " ", "\t\n", "two words", "trailing-newline\n"])
def test_blank_or_spaced_tokens_are_refused(token):
    with pytest.raises(ValueError, match=r"token|white space"):
        RewardServer("127.0.0.1", 0, token=token)


@pytest.fixture
def recorder():
    """A critic endpoint that records the Authorization headers it is sent."""
    with serving(ChatEndpoint) as url:
        yield url


def _consistency_payload() -> dict:
    traj = np.stack([np.linspace(1, 20, 64), np.zeros(64)], 1).tolist()
    return {"reasoning": "The road is clear, I keep lane.", "trajectory": traj, "causes": []}


def test_a_client_cannot_choose_the_critic(server, recorder, monkeypatch):
    """The fault sweep's leak: a payload naming a critic made the server send its secret there."""
    monkeypatch.setenv("LOOPDRIVE_CRITIC_TOKEN", "server-secret")
    for critic in (recorder, "hf:/tmp/anything"):
        body = json.dumps({"reward": "consistency", "payload": _consistency_payload() | {"critic": critic}})
        code, answer = _post(server.url + "/enqueue", body.encode(), TOKEN)
        assert code == 400 and "critic" in answer["error"] and "operator" in answer["error"]
    time.sleep(0.2)
    assert ChatEndpoint.seen == []  # nothing, let alone the secret, went to the client's host


def test_the_operator_chooses_the_critic(recorder, monkeypatch):
    monkeypatch.setenv("LOOPDRIVE_CRITIC_TOKEN", "server-secret")
    srv = RewardServer("127.0.0.1", 0, token=TOKEN, critic=recorder).start()
    try:
        scores = RewardClient(srv.url, TOKEN).compute("consistency", _consistency_payload())
    finally:
        srv.stop()
    assert scores["behaviour"] == pytest.approx(0.9) and scores["grounding"] == pytest.approx(0.8)
    assert ChatEndpoint.seen == ["Bearer server-secret"]


def test_unknown_payload_fields_and_non_finite_numbers_are_400(server):
    body = {"reward": "trajectory", "payload": {"plan": [], "reference": [], "extra": 1}}
    code, answer = _post(server.url + "/enqueue", json.dumps(body).encode(), TOKEN)
    assert code == 400 and "extra" in answer["error"]
    code, answer = _post(server.url + "/enqueue", b'{"reward": "trajectory", "payload": {"plan": NaN}}', TOKEN)
    assert code == 400 and "bad JSON" in answer["error"]


def _raw(url: str, request: bytes, read_timeout: float = 5.0) -> bytes:
    """Send raw bytes and return everything the server answers before it closes (or the timeout)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=read_timeout) as sock:
        try:
            sock.sendall(request)
        except OSError:  # the server answered and closed before the whole (oversized) body went out
            pass
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def _request(length: str | None, body: bytes, path: str = "/enqueue") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    return head.encode() + b"\r\n" + body


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("length", "status"), [("-1", 400), ("abc", 400), ("1e3", 400), (" 12 ", 200), (None, 411), ("99999999", 413)]
)
def test_content_length_is_checked(server, length, status):
    body = json.dumps({"reward": "trajectory", "payload": {}}).encode()
    if length == " 12 ":
        length, body = str(len(body)), body
    big = body + b" " * 3_000_000 if length == "-1" else body  # the sweep's bypass: -1 with 3 MB
    if length == "-1":  # the answer comes before the body is read: send a part, so the reply is not reset
        big = big[:60_000]
    assert _status(_raw(server.url, _request(length, big))) == status


def test_deeply_nested_json_is_400(server):
    deep = b'{"reward": "trajectory", "payload": {"plan": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    server.max_bytes = 300_000
    answer = _raw(server.url, _request(str(len(deep)), deep))
    assert _status(answer) == 400 and b"depth" in answer


def test_a_body_shorter_than_announced_is_answered_and_closed(server):
    start = time.monotonic()
    answer = _raw(server.url, _request("100", b'{"reward": '), read_timeout=5.0)
    assert _status(answer) == 408 and time.monotonic() - start < 4.0


def test_slow_clients_are_closed(server):
    """100 clients that trickle a byte at a time are all closed after the request time-out (1 s)."""
    socks = []
    for _ in range(100):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(b"POST /enq")
        socks.append(s)
    deadline = time.monotonic() + 8.0
    open_ = list(socks)
    while open_ and time.monotonic() < deadline:
        for s in list(open_):
            try:
                s.sendall(b"u")  # keep trickling: a per-read time-out alone would never fire
            except OSError:
                open_.remove(s)
                continue
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    open_.remove(s)
            except BlockingIOError:
                pass
            except OSError:
                open_.remove(s)
            s.setblocking(True)
        time.sleep(0.2)
    for s in socks:
        s.close()
    assert not open_, f"{len(open_)} slow clients still open after 8 s"
    plan = [[float(i), 0.0, 0.0] for i in range(1, 65)]
    assert RewardClient(server.url, TOKEN).compute("trajectory", {"plan": plan, "reference": plan})["ade"] == 0.0


def test_a_burst_of_connections_is_served_without_resets(server):
    """The listen backlog holds 50 clients at once (the sweep saw resets from a backlog of 5)."""
    assert server.backlog >= 1024
    client = RewardClient(server.url, TOKEN, retries=0)
    payload = {"plan": [[1.0, 0.0, 0.0]] * 64, "reference": [[1.0, 0.0, 0.0]] * 64}
    with ThreadPoolExecutor(50) as pool:
        keys = list(pool.map(lambda _: client.enqueue("trajectory", payload), range(300)))
    assert len(set(keys)) == 300


def test_the_client_keeps_its_connection_and_replaces_a_closed_one(server):
    client = RewardClient(server.url, TOKEN, retries=0)
    plan = [[float(i), 0.0, 0.0] for i in range(1, 65)]
    client.enqueue("trajectory", {"plan": plan, "reference": plan})
    first = client._local.connection
    client.enqueue("trajectory", {"plan": plan, "reference": plan})
    assert client._local.connection is first  # kept alive
    time.sleep(1.6)  # past the server's request time-out: it closes the idle connection
    assert client.compute("trajectory", {"plan": plan, "reference": plan})["ade"] == 0.0
