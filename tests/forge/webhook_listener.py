"""A real HTTP server on loopback that records every webhook delivery it receives (headers as sent,
body as bytes) and answers 200."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names as the sender spelled them
    body: bytes

    def header(self, name: str) -> str | None:
        """A header's value, whatever the case of its name."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    @property
    def event(self) -> str | None:
        return self.header("X-GitHub-Event")

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookListener:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self._changed = threading.Condition()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with listener._changed:
                    listener.received.append(Received(self.path, dict(self.headers.items()), body))
                    listener._changed.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def wait_for(self, matches: Callable[[Received], bool], count: int = 1, since: int = 0,
                 timeout: float = 30.0) -> list[Received]:
        """The first `count` matching deliveries from the `since`-th received on, waiting for them
        (forges deliver asynchronously)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [r for r in self.received[since:] if matches(r)]
                if len(found) >= count:
                    return found[:count]
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(r.event, r.header("X-Gitea-Event-Type")) for r in self.received]
                    raise TimeoutError(f"{len(found)} of {count} expected deliveries after {timeout:.0f} s; received {seen}")
                self._changed.wait(left)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
