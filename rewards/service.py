"""A reward service for expensive rewards (as cosmos-rl's): enqueue work over HTTP, fetch scores later.

``loopdrive serve-rewards`` runs ``RewardServer``: ``POST /enqueue`` with
``{"reward": name, "payload": {...}}`` returns ``{"uuid": ...}``; ``POST /fetch`` with ``{"uuid": ...}``
returns ``{"status": "done", "scores": {...}}`` (or ``pending`` / ``error``). Every request needs
``Authorization: Bearer <token>`` (the token comes from ``LOOPDRIVE_REWARD_TOKEN``); a missing or
wrong token gets 401, a payload over the size limit 413. The server binds 127.0.0.1 unless told
otherwise and computes rewards on a thread pool. ``RewardClient`` is what trainers and evaluators use.
"""

from __future__ import annotations

import hmac
import importlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

TOKEN_ENV = "LOOPDRIVE_REWARD_TOKEN"
ServiceReward = Callable[[dict[str, Any]], dict[str, float]]
SERVICE_REWARDS: dict[str, ServiceReward] = {}


def service_reward(name: str):
    """Register ``fn(payload: dict) -> dict[str, float]`` as a reward the service can compute."""

    def wrap(fn: ServiceReward) -> ServiceReward:
        SERVICE_REWARDS[name] = fn
        return fn

    return wrap


@service_reward("consistency")
def _consistency(payload: dict[str, Any]) -> dict[str, float]:
    """{"reasoning", "trajectory" ([T, 3] ego-frame plan with "speed0", or [T, 2] positions), "causes",
    "critic" (default "rules")} -> behaviour, grounding, overall."""
    from rewards.consistency import consistency_score
    from rewards.critics import make_critic

    critic = make_critic(payload.get("critic", "rules"))
    trajectory = np.asarray(payload["trajectory"], float)
    s = consistency_score(
        payload["reasoning"], trajectory, set(payload.get("causes", [])), critic, payload.get("speed0")
    )
    return {"behaviour": s.behaviour, "grounding": s.grounding, "overall": s.overall}


@service_reward("trajectory")
def _trajectory(payload: dict[str, Any]) -> dict[str, float]:
    """{"plan": [T, 3], "reference": [T, 3]} -> ADE and Alpamayo's demo reward."""
    from rewards.terms import ade, plan_comfort

    plan, ref = np.asarray(payload["plan"], float), np.asarray(payload["reference"], float)
    d = ade(plan, ref)
    demo = -1.0 if d >= 3.0 else -0.4 * d / 3.0 + 0.1 * (plan_comfort(plan) - 1.0)
    return {"ade": d, "alpamayo_demo": demo}


def load_service_reward(spec: str) -> str:
    """Register a user's ``module:function`` as a service reward named by the spec."""
    module, _, attr = spec.partition(":")
    fn = getattr(importlib.import_module(module), attr, None)
    if not callable(fn):
        raise ValueError(f"service reward {spec!r}: {module!r} has no callable {attr!r}")
    SERVICE_REWARDS[spec] = fn
    return spec


class RewardServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None, workers: int = 4,
                 max_bytes: int = 1_000_000, keep_results: int = 10_000) -> None:  # fmt: skip
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if not token:
            raise ValueError(f"the reward service needs a token: set {TOKEN_ENV}")
        self.token, self.max_bytes, self.keep = token, max_bytes, keep_results
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.results: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RewardServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, key: str, reward: str, payload: dict[str, Any]) -> None:
        try:
            scores = {k: float(v) for k, v in SERVICE_REWARDS[reward](payload).items()}
            entry = {"status": "done", "scores": scores}
        except Exception as e:  # a bad payload is the caller's error, reported on fetch
            entry = {"status": "error", "error": f"{type(e).__name__}: {e}"}
        with self.lock:
            self.results[key] = entry

    def _enqueue(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reward = body.get("reward")
        if reward not in SERVICE_REWARDS:
            return 400, {"error": f"unknown reward {reward!r}; known: {sorted(SERVICE_REWARDS)}"}
        if not isinstance(body.get("payload"), dict):
            return 400, {"error": "'payload' must be a JSON object"}
        key = uuid.uuid4().hex
        with self.lock:
            self.results[key] = {"status": "pending"}
            while len(self.results) > self.keep:
                self.results.popitem(last=False)
        self.pool.submit(self._run, key, reward, body["payload"])
        return 200, {"uuid": key}

    def _fetch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            entry = self.results.get(str(body.get("uuid")))
        if entry is None:
            return 404, {"error": f"unknown uuid {body.get('uuid')!r}"}
        return 200, dict(entry)

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):  # quiet by default
                pass

            def _send(self, code: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    return self._send(200, {"ok": True})
                return self._send(404, {"error": "not found"})

            def do_POST(self):
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer ") or not hmac.compare_digest(auth[7:].encode(), server.token.encode()):
                    return self._send(401, {"error": "missing or wrong bearer token"})
                length = int(self.headers.get("Content-Length") or 0)
                if length > server.max_bytes:
                    return self._send(413, {"error": f"payload of {length} bytes exceeds {server.max_bytes}"})
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("the body must be a JSON object")
                except ValueError as e:
                    return self._send(400, {"error": f"bad JSON: {e}"})
                if self.path == "/enqueue":
                    return self._send(*server._enqueue(body))
                if self.path == "/fetch":
                    return self._send(*server._fetch(body))
                return self._send(404, {"error": f"no endpoint {self.path}"})

        return Handler


class RewardServiceError(RuntimeError):
    pass


class RewardClient:
    """Client of the reward service (URL and token default to ``LOOPDRIVE_REWARD_URL`` / ``_TOKEN``)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 10.0, retries: int = 2):
        self.url = (url or os.environ.get("LOOPDRIVE_REWARD_URL", "http://127.0.0.1:8765")).rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.timeout, self.retries = timeout, retries

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                req = urllib.request.Request(self.url + path, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                detail = e.read().decode(errors="replace")[:300]
                if e.code < 500:
                    raise RewardServiceError(f"reward service {self.url}{path}: {e.code} {detail}") from None
                last = e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = e
            time.sleep(0.2 * 2**attempt)
        raise RewardServiceError(f"reward service {self.url}{path} unreachable: {last}")

    def enqueue(self, reward: str, payload: dict[str, Any]) -> str:
        return self._post("/enqueue", {"reward": reward, "payload": payload})["uuid"]

    def fetch(self, key: str) -> dict[str, Any]:
        return self._post("/fetch", {"uuid": key})

    def compute(self, reward: str, payload: dict[str, Any], wait: float = 60.0, poll: float = 0.02) -> dict[str, float]:
        """Enqueue and wait for the scores (raises on a server-side error or after ``wait`` s)."""
        key = self.enqueue(reward, payload)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            res = self.fetch(key)
            if res["status"] == "done":
                return res["scores"]
            if res["status"] == "error":
                raise RewardServiceError(f"reward {reward!r} failed on the service: {res['error']}")
            time.sleep(poll)
        raise RewardServiceError(f"reward {reward!r} not ready after {wait} s (uuid {key})")
