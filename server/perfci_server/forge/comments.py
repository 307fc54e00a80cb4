"""The one comment on each pull (merge) request: written by the pull-request room in the
transaction that decides it (:func:`write_comment`), posted by a task after commit — created on
the first post, edited in place after — so a forge outage delays it but never loses it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from .. import dispatch
from ..models import PullRequest, Repository
from ..settings import Settings
from . import client
from .kind import ForgeKind
from .registry import kind_of

COMMENT_TASK = "perfci.forge.post_comment"


def write_comment(session: Session, pr: PullRequest, body: str) -> None:
    """Store the comment's new text; its post is queued after commit when the text changed."""
    if body == pr.comment_body:
        return
    pr.comment_body, pr.comment_version = body, pr.comment_version + 1
    dispatch.send_once_after_commit(session, COMMENT_TASK, pr.id)


@dataclass(frozen=True)
class CommentPost:
    kind: ForgeKind
    api_url: str
    token: str
    project: str
    number: int  # the number the forge shows (a merge request's iid)
    comment_id: str | None  # None: create it
    body: str
    version: int
    sha: str  # the head the comment speaks of


def prepare(session: Session, pr: PullRequest, settings: Settings) -> CommentPost | None:
    """What to send for the pull request's comment, or None when it is sent (or cannot be: no token)."""
    if pr.comment_version == 0 or pr.comment_sent_version == pr.comment_version:
        return None
    repository = session.get(Repository, pr.repository_id)
    assert repository is not None, "a pull request is deleted with its repository"
    kind = kind_of(repository.forge)
    token = kind.token(settings)
    if token is None:
        pr.comment_error = f"no {kind.name} token configured: the comment is kept, not posted"
        return None
    return CommentPost(kind, kind.api_url(settings), token, repository.name, pr.number, pr.comment_id, pr.comment_body,
                       pr.comment_version, pr.head_sha)


def send(post: CommentPost, timeout: float) -> tuple[str, int]:
    """Create or edit the comment; returns its id and the forge's HTTP status. A comment someone
    deleted is created again."""
    call = post.kind.comment_call(post.api_url, post.token, post.project, post.number, post.comment_id, post.body)
    try:
        response = client.call(post.kind.name, call, timeout)
    except client.ForgeRejected as exc:
        if post.comment_id is None or exc.status != 404:
            raise
        return send(replace(post, comment_id=None), timeout)
    return client.comment_id_of(post.kind.name, call, response), response.status_code


def record_sent(pr: PullRequest, post: CommentPost, comment_id: str) -> None:
    pr.comment_id, pr.comment_sent_version, pr.comment_error = comment_id, post.version, ""


def record_failure(pr: PullRequest, error: Exception) -> None:
    pr.comment_error = str(error)[:2000]
