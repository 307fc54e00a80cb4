"""Tokens and signatures. Tokens are 256-bit random, so a plain sha256 is a sound at-rest hash."""

from __future__ import annotations

import hashlib
import hmac
import secrets

AGENT_TOKEN_PREFIX = "pca_"
API_TOKEN_PREFIX = "pct_"
ENROLLMENT_TOKEN_PREFIX = "pce_"


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_webhook_secret() -> str:
    return secrets.token_hex(32)


def github_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github_signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    if not header:
        return False
    return hmac.compare_digest(github_signature(secret, body).encode(), header.strip().encode())


def gitea_signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """Gitea's own header: the hex HMAC-SHA256 of the body, without GitHub's ``sha256=`` prefix."""
    if not header:
        return False
    return hmac.compare_digest(github_signature(secret, body).removeprefix("sha256=").encode(), header.strip().encode())


def gitlab_token_valid(secret: str, header: str | None) -> bool:
    if not header:
        return False
    return hmac.compare_digest(secret.encode(), header.encode())
