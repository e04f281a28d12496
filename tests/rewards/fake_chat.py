"""A stand-in OpenAI-compatible chat endpoint on loopback, for the critic and reward-service tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


class ChatEndpoint(BaseHTTPRequestHandler):
    """Records every request's Authorization header and answers ``respond(body)``: (status, text)."""

    seen: ClassVar[list[str | None]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def respond(self, body: dict[str, Any]) -> tuple[int, str | None]:
        return 200, "behaviour: 9, grounding: 8"

    def do_POST(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        status, text = self.respond(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        data = json.dumps({"choices": [{"message": {"content": text}}]}).encode() if text is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serving(handler: type[ChatEndpoint]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields its URL."""
    handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
