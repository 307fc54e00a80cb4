"""Tokens and webhook secrets. Tokens are 256-bit random, so a plain sha256 is a sound at-rest hash.
(Each forge's record checks its own delivery signatures: forge/registry.py.)"""

from __future__ import annotations

import hashlib
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
