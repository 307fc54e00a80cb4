"""Gitea (and Forgejo): GitHub's dialect — the same payloads, statuses and issue comments under its
own API root (``https://gitea.example.com/api/v1``) — with deliveries signed in
``X-Gitea-Signature`` (the hex HMAC-SHA256, without GitHub's ``sha256=``), a ``token`` scheme,
and a ``warning`` state for a verdict without an answer."""

from __future__ import annotations

import hmac
from typing import ClassVar

from .github import GitHub, signature


class Gitea(GitHub):
    name = "gitea"
    title = "Gitea"
    also_accepts = ("github",)
    event_header = "X-Gitea-Event"
    delivery_header = "X-Gitea-Delivery"
    signature_header = "X-Gitea-Signature"
    git_user = "perfci"  # Gitea takes a token as the password of any user name
    state_names: ClassVar[dict[str, str]] = {"neutral": "warning"}

    def verifies(self, secret: str, body: bytes, given: str | None) -> bool:
        expected = signature(secret, body).removeprefix("sha256=")
        return bool(given) and hmac.compare_digest(expected.encode(), (given or "").strip().encode())

    def auth_headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"token {token}", "Accept": "application/json"}
