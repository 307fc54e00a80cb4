"""The read-only page of one verdict, for a person who followed a forge's link.

A status's ``target_url`` (and each machine's link in a pull request's comment) is
``<PERFCI_PUBLIC_URL>/v/<public_id>``: an unguessable id per verdict, so the page needs no token
and shows nothing a token would protect besides that one verdict. The page is Markdown rendered
by markdown-it with raw HTML off (every text from a forge or a commit is escaped).

- A series verdict: the commit, the machine, the state and why; for a failure, each implicating
  alert group's explanation (the lean model's sentence, with hazard sites), its range, its
  metrics and its bisect, and the Grafana Alerts dashboard when ``PERFCI_GRAFANA_URL`` is set.
- A pull request's verdict: the pull request's comment, as the forge shows it.
"""

from __future__ import annotations

import math
from urllib.parse import urlencode

from markdown_it import MarkdownIt
from sqlalchemy.orm import Session

from perfci_core.metrics import change_text

from ..alerts import repository as alert_sql
from ..bisect import repository as bisect_sql
from ..bisect import service as bisect_service
from ..forge import repository as status_sql
from ..markdown_text import escape
from ..models import AlertGroup, BenchConfig, Commit, CommitStatus, Machine, PullRequest, Repository, StatusScope
from ..settings import Settings

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<title>{title}</title>
<style>body{{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1f2328}}
table{{border-collapse:collapse}}td,th{{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left}}
code{{background:#f6f8fa;padding:.1rem .3rem}}.failure{{color:#cf222e}}.success{{color:#1a7f37}}</style>
</head><body>{body}</body></html>"""


def not_found() -> str:
    body = _MARKDOWN.render("# No such verdict\n\nNo perfci verdict has this link. It may be mistyped, or belong to "
                            "another perfci server.")
    return _PAGE.format(title="perfci: no such verdict", body=body)


def render(session: Session, public_id: str, settings: Settings) -> str | None:
    """The page of a verdict, or None when no verdict has this id."""
    status = status_sql.by_public_id(session, public_id)
    if status is None:
        return None
    commit = session.get(Commit, status.commit_id)
    repository = session.get(Repository, status.repository_id)
    machine = session.get(Machine, status.machine_id)
    assert commit is not None and repository is not None and machine is not None
    lines = [f"# {_text(repository.name)} `{commit.sha[:12]}` on {_text(machine.name)}", "",
             f"**{status.state}**: {_text(status.description)}", "",
             f"Commit `{commit.sha}`: {_text(_subject(commit.message))}", ""]
    if status.scope == StatusScope.PULL.value:
        lines += _pull_parts(session, status, commit)
    else:
        lines += _series_parts(session, status, machine, settings)
    body = _MARKDOWN.render("\n".join(lines))
    return _PAGE.format(title=f"perfci: {status.state} {commit.sha[:12]}", body=body)


def _pull_parts(session: Session, status: CommitStatus, commit: Commit) -> list[str]:
    """The pull request this verdict is about, and its comment — or why it is no longer its verdict."""
    pr = session.get(PullRequest, status.pull_request_id) if status.pull_request_id is not None else None
    if pr is None:
        return ["The pull request of this verdict is no longer known to perfci."]
    lines = [f"## Pull request #{pr.number}: {_text(pr.title)}", "",
             f"{_text(pr.head_branch)} into {_text(status.base_branch)}, {pr.state}.", ""]
    if pr.head_commit_id != commit.id or pr.head_sha != commit.sha:
        lines += [f"This verdict is about an earlier head of the pull request: it has moved to `{pr.head_sha[:12]}` "
                  f"since, and that head has a verdict of its own.", ""]
        return lines
    if pr.base_branch != status.base_branch:
        lines += [f"The pull request's base has changed to {_text(pr.base_branch)} since this verdict.", ""]
        return lines
    return lines + [pr.comment_body, ""]


def _series_parts(session: Session, status: CommitStatus, machine: Machine, settings: Settings) -> list[str]:
    groups = alert_sql.implicating_groups(session, [status.commit_id], [status.machine_id])
    if not groups:
        return ["No untriaged regression implicates this commit on this machine."]
    lines = []
    for group in groups:
        lines += _group_parts(session, group, machine, settings)
    return lines


def _group_parts(session: Session, group: AlertGroup, machine: Machine, settings: Settings) -> list[str]:
    commits = alert_sql.commits_by_id(session, [c for c in (group.first_bad_commit_id, group.last_good_commit_id) if c])
    first_bad = commits[group.first_bad_commit_id]
    last_good = commits.get(group.last_good_commit_id) if group.last_good_commit_id else None
    lines = [f"## Alert {group.id}: {group.direction} ({group.status})", "", _text(group.summary), "",
             f"Range: after `{last_good.sha[:12] if last_good else 'the first measured commit'}`, "
             f"up to and including `{first_bad.sha[:12]}`.", ""]
    sentence = (group.explanation or {}).get("sentence")
    if sentence:
        lines += [f"Why: {_text(sentence)}", ""]
    alerts = alert_sql.alerts_of_groups(session, [group.id])
    configs = alert_sql.names(session, BenchConfig, [a.config_id for a in alerts])
    lines += ["| config | metric | before | after | change |", "|---|---|---|---|---|"]
    lines += [f"| {_text(configs.get(a.config_id, str(a.config_id)))} ({a.backend}) | {a.metric} | {_num(a.before_median)} | "
              f"{_num(a.after_median)} | {change_text(a.change_pct)} |" for a in alerts]
    lines.append("")
    bisect = bisect_sql.for_alert_group(session, group.id)
    if bisect is not None:
        read = bisect_service.read(session, bisect)
        culprit = f": culprit `{read.culprit.sha[:12]}`" if read.culprit else ""
        lines += [f"Bisect {read.id}: {read.status}{culprit} — {_text(read.message)}", ""]
    if settings.grafana_url:
        query = urlencode({"var-machine": machine.name, "var-status": group.status})
        lines += [f"[Alerts dashboard]({settings.grafana_url.rstrip('/')}/d/perfci-alerts/?{query})", ""]
    return lines


def _num(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "—"


def _subject(message: str) -> str:
    return message.strip().splitlines()[0][:200] if message.strip() else ""


def _text(value: str) -> str:
    return escape(value)
