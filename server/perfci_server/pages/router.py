"""Read-only verdict pages under unguessable ids: what a forge's status and comment links open."""

from __future__ import annotations

import re

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ..deps import SessionDep, SettingsDep
from . import service

router = APIRouter(tags=["pages"])

_PUBLIC_ID = re.compile(r"^[A-Za-z0-9_-]{8,32}$")


@router.get("/v/{public_id}", response_class=HTMLResponse,
            responses={404: {"description": "No verdict has this id (an HTML page saying so)", "content": {"text/html": {}}}})
def verdict_page(public_id: str, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    """One verdict as a page a browser can show (no token: the id is the key). A browser is
    answered in HTML whatever the id, a malformed one included."""
    page = service.render(session, public_id, settings) if _PUBLIC_ID.match(public_id) else None
    return HTMLResponse(page) if page is not None else HTMLResponse(service.not_found(), status_code=404)
