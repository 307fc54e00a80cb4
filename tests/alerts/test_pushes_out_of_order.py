"""Pushes completed out of order (several workers, or deliveries that arrive out of order): the
default branch's creating push completed after a later push to it (with another branch whose head
holds its history in git recorded first, or not). Every commit it lists lands on the branch in
git's order and is measured, and a verdict given before an earlier commit was placed ("no baseline
yet") is decided again once that commit is measured."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from perfci_server.db import session_scope
from perfci_server.models import Branch, BranchCommit, Commit

pytestmark = pytest.mark.services

ZERO = "0" * 40


def _order(branch: str) -> list[str]:
    with session_scope() as session:
        statement = (select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id)
                     .join(Branch, Branch.id == BranchCommit.branch_id).where(Branch.name == branch)
                     .order_by(BranchCommit.position))
        return list(session.scalars(statement))


def test_the_creating_push_completed_last_puts_all_it_lists_on_the_branch(world):
    main = world.git.commit(8)
    world.git.git("checkout", "--quiet", "-b", "feature")
    feature = world.git.commit(1, "fwd: a feature")
    world.push("feature", ZERO, feature)  # recorded first: its head holds main's history in git
    world.push("main", main[3], main[4:])  # a later push to main, completed before the one that creates it
    world.push("main", ZERO, main[:4])
    assert _order("main") == main
    assert world.measure() > 0
    assert {sha: world.statuses(sha)["perfci/dut-01"]["state"] for sha in main[1:]} == dict.fromkeys(main[1:], "success")


def test_a_commit_without_a_baseline_is_decided_again_once_an_earlier_one_is_placed_and_measured(world):
    main = world.git.commit(8)
    world.push("main", main[3], main[4:])  # completed before the push that creates the branch
    world.measure()
    assert _order("main") == main[3:]
    assert world.statuses(main[3])["perfci/dut-01"]["description"].startswith("no baseline yet")

    world.push("main", ZERO, main[:4])
    world.measure()
    assert _order("main") == main
    verdicts = {sha: world.statuses(sha)["perfci/dut-01"] for sha in main}
    assert verdicts[main[0]]["description"].startswith("no baseline yet")  # the root: nothing before it
    assert {sha: v["state"] for sha, v in verdicts.items() if sha != main[0]} == dict.fromkeys(main[1:], "success")
