"""FastAPI dependencies as `Annotated` aliases: the session (which owns the request's transaction)
and the three kinds of caller (agent, admin, reader)."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import AsyncIterator, Callable
from typing import Annotated, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from . import db
from . import identity
from .identity import AgentIdentity
from .bounded import DbOffset
from .database_slots import DatabaseSlots
from .errors import DATABASE_UNAVAILABLE, Forbidden, Unauthorized
from .pagination import PageParams
from .security import AGENT_TOKEN_PREFIX, hash_token
from .settings import DEVELOPMENT_ADMIN_TOKEN, Settings, get_settings

T = TypeVar("T")


async def get_session() -> AsyncIterator[Session]:
    """One transaction per request: committed when the endpoint returns, rolled back if it raises.

    Used with scope="function" so the commit happens before the response is sent: a client that
    got a 2xx can rely on the next request seeing its write. Async so that only the commit (or
    rollback) takes a trip to the threadpool: a new session does no I/O until it is first used,
    and one that :func:`committed` already committed has nothing left to send.
    """
    session = db.new_session()
    try:
        yield session
    except BaseException:
        await run_in_threadpool(db.end_session, session, False)
        raise
    if session.in_transaction():
        await run_in_threadpool(db.end_session, session, True)
    else:
        session.close()


async def committed(session: Session, work: Callable[[], T], *, urgent: bool = False) -> T:
    """Run ``work`` (blocking database code) and commit the request's transaction, in one trip to
    the threadpool: the hot agent endpoints are async and call this once instead of paying a trip
    per sync dependency, one for the endpoint and one for the commit. If ``work`` raises, nothing
    is committed and :func:`get_session` rolls back. The trip waits for one of the process's
    database slots (:mod:`.database_slots`); ``urgent`` requests (claims) are let in first."""

    def work_then_commit() -> T:
        result = work()
        session.commit()
        return result

    async with _database_slots().slot(urgent):
        return await anyio.to_thread.run_sync(work_then_commit)


# A few requests in the database at once (settings.database_slots, at most the pool's connections):
# the others wait on the event loop instead of contending for the GIL and opening overflow
# connections. One per event loop, like anyio's own threadpool limiter.
_DATABASE_SLOTS: RunVar[DatabaseSlots] = RunVar("perfci_database_slots")


def _database_slots() -> DatabaseSlots:
    try:
        return _DATABASE_SLOTS.get()
    except LookupError:
        settings = get_settings()
        slots = DatabaseSlots(min(settings.database_slots, settings.database_pool_size))
        _DATABASE_SLOTS.set(slots)
        return slots


async def _settings() -> Settings:
    return get_settings()  # cached; async so it runs on the event loop, not in the threadpool


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(_settings)]

_agent_bearer = HTTPBearer(auto_error=False, scheme_name="AgentToken", description="Agent token from enrollment")
_admin_bearer = HTTPBearer(auto_error=False, scheme_name="AdminToken", description="PERFCI_ADMIN_TOKEN or an API token")


def _bearer(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise Unauthorized("missing bearer token")
    return credentials.credentials


async def agent_token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_agent_bearer)]) -> str:
    """The bearer token of an agent request (401 when missing, 403 for another kind of token);
    checked against the database by :func:`authenticate_agent`."""
    token = _bearer(credentials)
    if not token.startswith(AGENT_TOKEN_PREFIX):
        raise Forbidden("agent endpoints take an agent token")
    return token


def authenticate_agent(session: Session, token: str) -> AgentIdentity:
    """The agent holding ``token``. Looked up on every request (never cached): a revoked token is
    refused from the next request on."""
    agent = identity.agent_identity_by_token_hash(session, hash_token(token))
    if agent is None:
        raise Unauthorized("unknown or revoked agent token")
    return agent


AgentTokenDep = Annotated[str, Depends(agent_token)]


def current_agent(session: SessionDep, token: AgentTokenDep) -> AgentIdentity:
    return authenticate_agent(session, token)


def _is_admin(session: Session, settings: Settings, token: str) -> bool:
    if hmac.compare_digest(token.encode(), settings.admin_token.get_secret_value().encode()):
        return True
    return identity.api_token_by_hash(session, hash_token(token)) is not None


def _loopback(request: Request) -> bool:
    """Both ends of the connection on a loopback address (a request from another host, or to an
    address other hosts reach, is not)."""
    ends = [request.scope.get("client"), request.scope.get("server")]
    try:
        return all(end is not None and ipaddress.ip_address(end[0]).is_loopback for end in ends)
    except ValueError:  # a host name, not an address
        return False


def require_admin(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)],
) -> None:
    token = _bearer(credentials)
    if token.startswith(AGENT_TOKEN_PREFIX):
        raise Forbidden("agent tokens are only accepted on agent endpoints")
    if token == DEVELOPMENT_ADMIN_TOKEN and settings.development_token_loopback_only and not _loopback(request):
        raise Unauthorized("the public development token is only taken on loopback connections while PERFCI_ENV is unset; "
                           "set PERFCI_ADMIN_TOKEN (or PERFCI_ENV=development)")
    if not _is_admin(session, settings, token):
        raise Unauthorized("invalid admin/API token")


def is_admin_caller(request: Request, settings: Settings, credentials: HTTPAuthorizationCredentials | None, *, database_up: bool) -> bool:
    """Whether the request carries a token :func:`require_admin` would take, answered without
    raising (readiness shows admins more). API tokens live in the database: they count only while
    it answers; PERFCI_ADMIN_TOKEN always does."""
    token = credentials.credentials if credentials is not None else ""
    if not token or token.startswith(AGENT_TOKEN_PREFIX):
        return False
    if token == DEVELOPMENT_ADMIN_TOKEN and settings.development_token_loopback_only and not _loopback(request):
        return False
    if hmac.compare_digest(token.encode(), settings.admin_token.get_secret_value().encode()):
        return True
    if not database_up:
        return False
    session = db.new_session()
    try:
        return identity.api_token_by_hash(session, hash_token(token)) is not None
    except DATABASE_UNAVAILABLE:
        return False
    finally:
        db.end_session(session, commit=False)


def require_reader(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)],
) -> None:
    if settings.reads_require_token:
        require_admin(request, session, settings, credentials)


AgentDep = Annotated[AgentIdentity, Depends(current_agent)]
# The admin bearer token, if any, unchecked: for a route that only shows admins more (is_admin_caller).
AdminCredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)]
AdminDep = Annotated[None, Depends(require_admin)]
ReaderDep = Annotated[None, Depends(require_reader)]


def page_params(
    limit: Annotated[int, Query(ge=1, le=500, description="Items per page")] = 50,
    offset: Annotated[DbOffset, Query(description="Items to skip")] = 0,
) -> PageParams:
    return PageParams(limit=limit, offset=offset)


PageDep = Annotated[PageParams, Depends(page_params)]
