"""Read-only verdict pages under unguessable ids: what a forge's status and comment links open."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import HTMLResponse

from ..deps import SessionDep, SettingsDep
from ..errors import NotFound, responses
from . import service

router = APIRouter(tags=["pages"])

PublicId = Annotated[str, Path(min_length=8, max_length=32, pattern=r"^[A-Za-z0-9_-]+$")]


@router.get("/v/{public_id}", response_class=HTMLResponse, responses=responses(NotFound))
def verdict_page(public_id: PublicId, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    """One verdict as a page a browser can show (no token: the id is the key)."""
    return HTMLResponse(service.render(session, public_id, settings))
