"""A reward service for expensive rewards (as cosmos-rl's): enqueue work over HTTP, fetch scores later.

``loopdrive serve-rewards`` runs ``RewardServer``: ``POST /enqueue`` with
``{"reward": name, "payload": {...}}`` returns ``{"uuid": ...}``; ``POST /fetch`` with ``{"uuid": ...}``
returns ``{"status": "done", "scores": {...}}`` (or ``pending`` / ``error``). Every request needs
``Authorization: Bearer <token>`` (the token comes from ``LOOPDRIVE_REWARD_TOKEN``). The server binds
127.0.0.1 unless told otherwise and computes rewards on a thread pool. ``RewardClient`` is what
trainers and evaluators use.

What a client may and may not do is decided here, not by the client:

- The reasoning critic is the operator's choice (``--critic``), built once when the server starts.
  A payload names data, never code or hosts: a reward refuses fields it does not know, so a
  ``"critic"`` field is a 400, and the critic's own secret (``LOOPDRIVE_CRITIC_TOKEN``) only ever
  goes to the endpoint the operator configured.
- Every malformed request is answered 4xx and never reaches a reward: a missing, negative or
  non-numeric ``Content-Length`` (411 / 400), a body over the limit (413), a body shorter than
  announced (408), JSON that is not an object, nests too deep or holds NaN (400).
- A connection lives at most ``request_timeout`` seconds per request, however slowly it trickles
  bytes; a reaper thread shuts down the ones that outstay it. At most ``max_connections`` are open
  at once (503 beyond). The listen backlog holds bursts of new connections without resets.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import http.client
import math
import os
import socket
import threading
import time
import urllib.parse
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import h11
import numpy as np
import orjson

from loopdrive.plugins import Registry

TOKEN_ENV = "LOOPDRIVE_REWARD_TOKEN"

ServiceReward = Callable[[dict[str, Any]], dict[str, float]]
SERVICE_REWARDS: Registry = Registry("service reward")


def service_reward(name: str, fields: set[str] | None = None):
    """Register ``fn(payload: dict) -> dict[str, float]`` as a reward the service can compute.

    ``fields``, when given, are the payload keys the reward reads: the server refuses any other key
    with a 400 at enqueue time, so a client can never smuggle options into the computation.
    """

    def wrap(fn: ServiceReward) -> ServiceReward:
        if fields is not None:
            fn.fields = frozenset(fields)  # type: ignore[attr-defined]
        return SERVICE_REWARDS.register(name)(fn)

    return wrap


def consistency_reward(critic_spec: str = "rules") -> ServiceReward:
    """The ``consistency`` reward bound to the operator's critic (``rules``, ``hf:PATH``, ``http://...``).

    Payload: ``reasoning``, ``trajectory`` ([T, 3] ego-frame plan with ``speed0``, or [T, 2] executed
    positions), ``causes``; scores: behaviour, grounding, overall.
    """
    from rewards.consistency import consistency_score
    from rewards.critics import make_critic

    critic = make_critic(critic_spec)

    def consistency(payload: dict[str, Any]) -> dict[str, float]:
        trajectory = np.asarray(payload["trajectory"], float)
        causes = set(payload.get("causes", []))
        s = consistency_score(payload["reasoning"], trajectory, causes, critic, payload.get("speed0"))
        return {"behaviour": s.behaviour, "grounding": s.grounding, "overall": s.overall}

    consistency.fields = frozenset({"reasoning", "trajectory", "causes", "speed0"})  # type: ignore[attr-defined]
    return consistency


@service_reward("trajectory", fields={"plan", "reference"})
def _trajectory(payload: dict[str, Any]) -> dict[str, float]:
    """{"plan": [T, 3], "reference": [T, 3]} -> ADE and Alpamayo's demo reward."""
    from rewards.comfort import plan_comfort
    from rewards.terms import ade

    plan, ref = np.asarray(payload["plan"], float), np.asarray(payload["reference"], float)
    d = ade(plan, ref)
    demo = -1.0 if d >= 3.0 else -0.4 * d / 3.0 + 0.1 * (plan_comfort(plan) - 1.0)
    return {"ade": d, "alpamayo_demo": demo}


def _warm_up() -> None:
    """Compile the built-in rewards' kernels before the first request, not during it."""
    plan = [[float(i), 0.0, 0.0] for i in range(1, 65)]
    _trajectory({"plan": plan, "reference": plan})


def load_service_reward(spec: str) -> str:
    """Register a user's ``module:function`` as a service reward named by the spec."""
    SERVICE_REWARDS[spec] = SERVICE_REWARDS.resolve(spec)
    return spec


def check_token(token: str | None) -> str:
    """The service's bearer token, refused when empty or holding white space (a copy-paste slip)."""
    if not token or not token.strip():
        raise ValueError(f"the reward service needs a token: set {TOKEN_ENV} to a secret string")
    if any(c.isspace() for c in token):
        raise ValueError(f"{TOKEN_ENV} holds white space: a token must be one word of printable characters")
    return token


class RequestError(Exception):
    """A malformed request: answered with ``status`` and ``message``, never reaching a reward."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, or a ``RequestError(400)`` that says what is wrong.

    orjson refuses what a reward must never see: NaN and infinities, invalid UTF-8, and nesting
    deeper than 1,024 levels (a 100,000-deep body is a 400, not a stack overflow).
    """
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as e:
        raise RequestError(400, f"bad JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "bad JSON: the body must be a JSON object")
    return body


class RewardServer:
    """The HTTP reward service (see the module docstring for what it accepts and refuses).

    One asyncio event loop serves every connection (``h11`` parses HTTP/1.1); rewards run on a
    thread pool, so a slow reward never holds a connection's I/O.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        workers: int = 4,
        max_bytes: int = 1_000_000,
        keep_results: int = 10_000,
        critic: str = "rules",
        request_timeout: float = 10.0,
        max_connections: int = 512,
        backlog: int = 1024,
    ) -> None:
        self.token = check_token(token if token is not None else os.environ.get(TOKEN_ENV))
        self.max_bytes, self.keep, self.request_timeout = max_bytes, keep_results, request_timeout
        self.max_connections, self.backlog = max_connections, backlog
        self._consistency = consistency_reward(critic)
        _warm_up()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward")
        self.results: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()
        self.connections: set[_Connection] = set()
        self.socket = socket.create_server((host, port), backlog=backlog)  # bound now: the URL is known
        self.loop = asyncio.new_event_loop()
        self.thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def rewards(self) -> dict[str, ServiceReward]:
        """What the service computes: the registry (user rewards may register later) and its critic."""
        return {**SERVICE_REWARDS, "consistency": self._consistency}

    @property
    def port(self) -> int:
        return self.socket.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.socket.getsockname()[0]}:{self.port}"

    def start(self) -> RewardServer:
        """Serve on a background thread (tests, an in-process trainer)."""
        ready = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)
        return self

    def serve_forever(self, ready: threading.Event | None = None) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            self.loop.create_server(lambda: _Connection(self), sock=self.socket, backlog=self.backlog)
        )
        if ready is not None:
            ready.set()
        gc.freeze()  # the libraries' start-up objects leave the collector: no 100 ms full collections
        try:
            self.loop.run_forever()
        finally:
            server.close()
            for connection in list(self.connections):
                connection.close()
            self.loop.run_until_complete(server.wait_closed())
            self.loop.close()
            self._stopped.set()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._stopped.wait(10)
        else:
            self.socket.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, key: str, reward: ServiceReward, payload: dict[str, Any]) -> None:
        try:
            scores = {str(k): float(v) for k, v in reward(payload).items()}
            bad = [k for k, v in scores.items() if not math.isfinite(v)]
            if bad:
                raise ValueError(f"non-finite scores {bad}")
            entry = {"status": "done", "scores": scores}
        except Exception as e:  # a bad payload is the caller's error, reported on fetch
            entry = {"status": "error", "error": f"{type(e).__name__}: {e}"}
        with self.lock:
            self.results[key] = entry

    def enqueue(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reward, rewards = body.get("reward"), self.rewards
        if not isinstance(reward, str) or reward not in rewards:
            return 400, {"error": f"unknown reward {reward!r}; known: {sorted(rewards)}"}
        payload = body.get("payload")
        if not isinstance(payload, dict):
            return 400, {"error": "'payload' must be a JSON object"}
        fields = getattr(rewards[reward], "fields", None)
        unknown = sorted(set(payload) - fields) if fields is not None else []
        if unknown:
            hint = " (the critic is the server operator's choice: serve-rewards --critic)"
            hint = hint if "critic" in unknown else ""
            return 400, {"error": f"reward {reward!r} takes payload fields {sorted(fields)}, not {unknown}{hint}"}
        key = uuid.uuid4().hex
        with self.lock:
            self.results[key] = {"status": "pending"}
            while len(self.results) > self.keep:
                self.results.popitem(last=False)
        self.pool.submit(self._run, key, rewards[reward], payload)
        return 200, {"uuid": key}

    def fetch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            entry = self.results.get(str(body.get("uuid")))
        if entry is None:
            return 404, {"error": f"unknown uuid {body.get('uuid')!r}"}
        return 200, dict(entry)

    def authorised(self, header: bytes | None) -> bool:
        scheme, _, token = (header or b"").partition(b" ")
        return scheme == b"Bearer" and hmac.compare_digest(token, self.token.encode())

    def respond(self, method: bytes, path: bytes, body: bytes) -> tuple[int, dict]:
        """The answer to one complete request (headers already checked by the connection)."""
        if method == b"GET":
            return (200, {"ok": True}) if path == b"/health" else (404, {"error": "not found"})
        if method != b"POST":
            return 405, {"error": f"method {method.decode(errors='replace')} not allowed"}
        parsed = parse_body(body)
        if path == b"/enqueue":
            return self.enqueue(parsed)
        if path == b"/fetch":
            return self.fetch(parsed)
        return 404, {"error": f"no endpoint {path.decode(errors='replace')}"}

    def check_headers(self, method: bytes, headers: dict[bytes, bytes]) -> None:
        """Refuse a request on its headers alone, before its body is read."""
        if method != b"POST":
            return
        if not self.authorised(headers.get(b"authorization")):
            raise RequestError(401, "missing or wrong bearer token")
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            raise RequestError(411, "chunked bodies are not accepted: send a Content-Length")
        if b"content-length" not in headers:
            raise RequestError(411, "a POST needs a Content-Length header")
        length = int(headers[b"content-length"])  # h11 has checked that it is digits
        if length > self.max_bytes:
            raise RequestError(413, f"payload of {length} bytes exceeds {self.max_bytes}")


class _Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 with keep-alive, each request within ``request_timeout``."""

    def __init__(self, server: RewardServer) -> None:
        self.server = server
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=16_384)
        self.transport: asyncio.Transport | None = None
        self.request: h11.Request | None = None
        self.body = bytearray()
        self.deadline: asyncio.TimerHandle | None = None
        self.draining = -1  # after an answer that ends the connection: bytes dropped since (-1: not yet)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.server.connections) >= self.server.max_connections:
            self._answer(503, {"error": "too many connections; try again"}, close=True)
            return
        self.server.connections.add(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.deadline is not None:
            self.deadline.cancel()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _arm(self) -> None:
        """(Re)start the clock of the request now beginning: its bytes must all arrive in time."""
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = self.server.loop.call_later(self.server.request_timeout, self._expire)

    def _expire(self) -> None:
        started = self.request is not None or bool(self.http.trailing_data[0])
        if started and self.draining < 0:
            self._answer(408, {"error": f"request not complete within {self.server.request_timeout} s"}, close=True)
        else:
            self.close()  # an idle kept-alive connection: nothing to say

    def data_received(self, data: bytes) -> None:
        if self.draining >= 0:
            self.draining += len(data)
            if self.draining > 1 << 20:
                self.close()
            return
        self.http.receive_data(data)
        try:
            self._events()
        except h11.RemoteProtocolError as e:
            self._answer(e.error_status_hint, {"error": f"bad request: {e}"}, close=True)
        except RequestError as e:
            self._answer(e.status, {"error": e.message}, close=True)

    def eof_received(self) -> bool | None:
        self.http.receive_data(b"")
        if self.request is not None and self.draining < 0:
            self._answer(408, {"error": "the body ended before the announced length"}, close=True)
        return None

    def _events(self) -> None:
        while self.transport is not None and not self.transport.is_closing():
            event = self.http.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self.request, self.body = event, bytearray()
                self.server.check_headers(event.method, dict(event.headers))
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                request, self.request = self.request, None
                status, answer = self.server.respond(request.method, request.target, bytes(self.body))
                self._answer(status, answer, close=False)
                if self.http.our_state is h11.MUST_CLOSE or self.http.their_state is h11.MUST_CLOSE:
                    self.close()
                    return
                self.http.start_next_cycle()
                self._arm()
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _answer(self, status: int, obj: dict[str, Any], close: bool) -> None:
        """Send a JSON answer; after an error that ends the connection, linger: drop what the client
        is still sending for a moment, so it reads this answer instead of a reset."""
        data = orjson.dumps(obj)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if close:
            headers.append((b"connection", b"close"))
        try:
            out = self.http.send(h11.Response(status_code=status, headers=headers))
            out += self.http.send(h11.Data(data=data)) + self.http.send(h11.EndOfMessage())
        except h11.LocalProtocolError:  # a response already began: raw bytes are all we can send
            out = b""
        if not out:
            reason = HTTPStatus(status).phrase.encode()
            out = b"HTTP/1.1 %d %s\r\n" % (status, reason) + b"".join(k + b": " + v + b"\r\n" for k, v in headers)
            out += b"\r\n" + data
        self.transport.write(out)
        if close:
            self.draining = 0
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.server.loop.call_later(0.5, self.close)


class RewardServiceError(RuntimeError):
    pass


class RewardClient:
    """Client of the reward service (URL and token default to ``LOOPDRIVE_REWARD_URL`` / ``_TOKEN``).

    Each thread keeps its connection alive between requests (a new connection per request costs
    the service about as much as the request itself); a connection the service has closed is
    replaced at once, connection errors and 5xx answers are retried with back-off, 4xx are not.
    """

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 10.0, retries: int = 2):
        self.url = (url or os.environ.get("LOOPDRIVE_REWARD_URL", "http://127.0.0.1:8765")).rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"reward service URL {self.url!r}: use http(s)://host:port")
        self._secure, self._host, self._port = parts.scheme == "https", parts.hostname, parts.port
        self._prefix = parts.path
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.timeout, self.retries = timeout, retries
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            kind = http.client.HTTPSConnection if self._secure else http.client.HTTPConnection
            connection = self._local.connection = kind(self._host, self._port, timeout=self.timeout)
        return connection

    def _drop_connection(self) -> None:
        connection, self._local.connection = getattr(self._local, "connection", None), None
        if connection is not None:
            connection.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        last: Exception | str | None = None
        attempt = 0
        while attempt <= self.retries:
            reused = getattr(self._local, "connection", None) is not None
            try:
                connection = self._connection()
                connection.request("POST", self._prefix + path, data, headers)
                response = connection.getresponse()
                raw = response.read()
                if response.will_close:
                    self._drop_connection()
            except (OSError, http.client.HTTPException) as e:
                self._drop_connection()
                if reused:  # the service closed an idle kept-alive connection: a fresh one, no back-off
                    continue
                last = e
            else:
                if response.status < 400:
                    return orjson.loads(raw)
                detail = raw.decode(errors="replace")[:300]
                if response.status < 500:
                    raise RewardServiceError(f"reward service {self.url}{path}: {response.status} {detail}")
                last = f"{response.status} {detail}"
            time.sleep(0.2 * 2**attempt)
            attempt += 1
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
