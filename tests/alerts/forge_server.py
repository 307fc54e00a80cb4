"""A real HTTP server on loopback standing in for a forge's API: it records every request and
answers with the status codes it is told to (e.g. 503 twice, then 201)."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    answered: int


class ForgeServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: deque[int] = deque()  # status codes to answer with, then 201
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self._answer("POST", 201)

            def do_PATCH(self) -> None:  # edits (a pull request's comment)
                self._answer("PATCH", 200)

            def do_PUT(self) -> None:  # GitLab's note edits
                self._answer("PUT", 200)

            def _answer(self, method: str, success: int) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    code = server.script.popleft() if server.script else success
                    server.requests.append(Recorded(method, self.path, {k.lower(): v for k, v in self.headers.items()}, body, code))
                    # an edit answers with the id it edited, a creation with a new one
                    made = self.path.rsplit("/", 1)[-1] if method != "POST" else str(len(server.requests))
                payload = json.dumps({"id": int(made) if made.isdigit() else made, "state": body.get("state")} if code < 300
                                     else {"message": f"HTTP {code}"}).encode()
                self.send_response(code)
                if 300 <= code < 400:  # a forge (or a proxy before it) sending the client elsewhere
                    self.send_header("Location", "http://elsewhere.invalid" + self.path)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ForgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def accepted(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if 200 <= r.answered < 300]
