"""What to do when the CARLA server stops answering: retry, reconnect, restart it, give up cleanly.

CARLA's client raises ``RuntimeError`` on RPC time-outs and lost connections; a crashed server
takes every later call with it. ``run_with_retries`` runs one unit of work (an episode) under a
:class:`RetryPolicy`: a connection error triggers ``reconnect`` (and, after ``restart_after``
failures, ``restart``: e.g. ``docker restart carla``) and the work is tried again; past
``attempts`` it raises :class:`CarlaUnavailable`, which an evaluation records as ``infra_error``.
Errors that are not about the connection propagate at once (they are the agent's or ours).
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

CONNECTION_MESSAGES = ("time-out", "timeout", "failed to connect", "connection", "rpc", "closed", "broken pipe")


class CarlaUnavailable(RuntimeError):
    """The server did not come back within the retry policy: record the episode as an infra error."""


def is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in CONNECTION_MESSAGES)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # tries of the unit of work in all
    backoff_s: float = 2.0  # wait before the 2nd try; doubles up to max_backoff_s
    max_backoff_s: float = 30.0
    restart_after: int = 2  # consecutive connection failures before restarting the server

    def delay(self, failure: int) -> float:
        return min(self.backoff_s * 2 ** max(failure - 1, 0), self.max_backoff_s)


def run_with_retries(
    work: Callable[[], T],
    policy: RetryPolicy,
    reconnect: Callable[[], None],
    restart: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    failures = 0
    while True:
        try:
            return work()
        except Exception as e:
            if not is_connection_error(e):
                raise
            failures += 1
            if failures >= policy.attempts:
                raise CarlaUnavailable(f"CARLA did not answer after {failures} attempts: {e}") from e
            log.warning("CARLA connection error (%s); attempt %d of %d", e, failures + 1, policy.attempts)
            if restart is not None and failures >= policy.restart_after:
                restart()
            sleep(policy.delay(failures))
            try:
                reconnect()
            except Exception as again:  # the next attempt reports it, through the same policy
                log.warning("reconnecting to CARLA failed: %s", again)


def docker_restart(container: str = "carla", timeout_s: float = 120.0) -> Callable[[], None]:
    """A ``restart`` callable for :func:`run_with_retries`: ``docker restart CONTAINER``."""

    def restart() -> None:
        log.warning("restarting the CARLA container %r", container)
        subprocess.run(["docker", "restart", container], check=True, timeout=timeout_s, capture_output=True)

    return restart
