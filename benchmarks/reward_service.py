"""Reward service under load: connection errors and latency percentiles at a given concurrency.

    python benchmarks/reward_service.py [--requests 2000] [--concurrency 50] [--keep-alive] [--out FILE]

Starts ``loopdrive serve-rewards`` in its own process (the real command, on loopback), then sends
``--requests`` ``POST /enqueue`` requests of the ``trajectory`` reward (a 64 x 3 plan and reference,
about 2.3 kB) from ``--concurrency`` closed-loop asyncio clients in this process (each sends its next
request when the last is answered; the service computes every reward too). By default every request
opens a new connection (the worst case for the listen backlog, and what the fault sweep did); with
``--keep-alive`` each client reuses one connection. A request that fails to connect, is
reset, or gets a status other than 200 counts as an error. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKEN = "benchmark-token-0123456789"


def _start_server() -> tuple[subprocess.Popen, int]:
    env = os.environ | {"LOOPDRIVE_REWARD_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "loopdrive.cli", "serve-rewards", "--port", "0", "--workers", "2"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # "reward service on http://127.0.0.1:PORT (...)"
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    return proc, port


def _load(port: int, requests: int, concurrency: int, keep_alive: bool) -> tuple[list[float], list[str]]:
    """Closed-loop load from asyncio clients (cheap on CPU, so the figures are the server's)."""
    plan = [[float(i), 0.0, 0.0] for i in range(1, 65)]
    body = json.dumps({"reward": "trajectory", "payload": {"plan": plan, "reference": plan}}).encode()
    head = (
        f"POST /enqueue HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    request = (head + ("" if keep_alive else "Connection: close\r\n") + "\r\n").encode() + body
    latencies: list[float] = []
    errors: list[str] = []

    async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        writer.write(request)
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        return None if status.startswith(b"HTTP/1.1 200") else status.decode().strip() or "empty answer"

    async def client(n: int) -> None:
        connection = None
        for _ in range(n):
            start = time.perf_counter()
            try:
                if connection is None:
                    connection = await asyncio.open_connection("127.0.0.1", port)
                outcome = await exchange(*connection)
                if not keep_alive:
                    connection[1].close()
                    connection = None
            except (OSError, asyncio.IncompleteReadError) as e:
                outcome, connection = type(e).__name__, None
            latencies.append(time.perf_counter() - start)
            if outcome:
                errors.append(outcome)

    async def run() -> None:
        share = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
        await asyncio.gather(*(client(n) for n in share))

    asyncio.run(run())
    return latencies, errors


def main(argv: list[str] | None = None) -> dict:
    import numpy as np

    from benchmarks.machine import emit, machine_info

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--keep-alive", action="store_true")
    p.add_argument("--out")
    args = p.parse_args(argv)

    proc, port = _start_server()
    try:
        _load(port, 50, 5, args.keep_alive)  # warm-up: imports and thread pools on both sides
        start = time.perf_counter()
        latencies, errors = _load(port, args.requests, args.concurrency, args.keep_alive)
        wall = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(10)
    ms = np.asarray(latencies) * 1000
    tag = f"c{args.concurrency}_{'keepalive' if args.keep_alive else 'new_connection'}"
    results = [
        {"name": f"errors_{tag}", "value": float(len(errors)), "unit": f"of {args.requests} requests"},
        {"name": f"p50_{tag}", "value": round(float(np.percentile(ms, 50)), 2), "unit": "ms"},
        {"name": f"p99_{tag}", "value": round(float(np.percentile(ms, 99)), 2), "unit": "ms"},
        {"name": f"max_{tag}", "value": round(float(ms.max()), 2), "unit": "ms"},
        {"name": f"throughput_{tag}", "value": round(args.requests / wall, 1), "unit": "requests/s"},
    ]
    kinds = {k: errors.count(k) for k in sorted(set(errors))}
    result = {"benchmark": "reward_service", "machine": machine_info(), "results": results, "errors": kinds}
    return emit(result, args.out)


if __name__ == "__main__":
    main()
