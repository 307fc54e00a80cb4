"""The check mark in the workflows a team runs every day: main merged into a pull request's branch, a
stacked branch, two pull requests sharing a head, a cherry-pick, closing, merging and superseding a
pull request, and never green before the commit's own measurement.

The world (pull_world.py) is a real git repository served to the server's mirror, the API, the tasks
run as a worker would, a recording forge API, and an agent uploading simulated results:
``world.regressed`` holds the commits that carry regression (a) (one store-forward block per packet).
"""

from __future__ import annotations

import pytest
from sqlalchemy import text


pytestmark = pytest.mark.services

ZERO = "0" * 40
SERIES, PR_MAIN = "perfci/dut-01", "perfci/pr/dut-01/main"


def _alerts(world, sightings: bool = False) -> list[dict]:
    return world.client.get("/api/v1/alerts", params={"sightings": sightings}).json()["items"]


def _edit(world, path: str, text: str, subject: str) -> str:
    """A commit that changes a file (a copy of it has the same patch id)."""
    (world.git.path / path).write_text(text)
    world.git.git("add", path)
    world.git.git("commit", "--quiet", "-m", subject)
    return world.git.head()


def test_merging_main_into_a_branch_carries_mains_regression_without_blaming_the_branch(world):
    main = world.git.commit(1)
    world.push("main", ZERO, main)
    world.git.git("checkout", "--quiet", "-b", "docs")
    [docs] = world.git.commit(1, "docs: explain the harness")
    world.push("docs", ZERO, [docs])
    world.git.git("checkout", "--quiet", "main")
    world.regressed.add(bad := world.git.commit(1, "fwd: stage the MAC header through a vector")[0])
    world.push("main", main[-1], [bad])
    world.measure()
    [alert] = _alerts(world)
    assert (alert["branch"], alert["first_bad"]["sha"]) == ("main", bad)

    world.git.git("checkout", "--quiet", "docs")
    world.git.git("merge", "--quiet", "--no-ff", "--no-edit", "main")  # GitHub's "Update branch"
    merge = world.git.head()
    world.regressed.add(merge)  # it carries main's regression
    world.push("docs", docs, [merge])
    world.measure()

    status = world.statuses(merge)[SERIES]
    assert status["state"] == "success", status
    assert status["description"] == f"no regression of its own: carries alert {alert['id']} (the change of {bad[:12]})"
    assert [a["id"] for a in _alerts(world)] == [alert["id"]]  # one alert for one change
    [sighting] = [a for a in _alerts(world, sightings=True) if a["id"] != alert["id"]]
    assert (sighting["branch"], sighting["first_bad"]["sha"]) == ("docs", merge)
    assert (sighting["origin_sha"], sighting["origin_group_id"]) == (bad, alert["id"])
    check = world.client.get("/api/v1/alerts/check", params={"commit": merge}).json()
    assert check["exit_code"] == 0, check


def test_a_stacked_branch_starts_from_the_branch_it_forked_from(world):
    main = world.git.commit(2)
    world.push("main", ZERO, main)
    world.git.git("checkout", "--quiet", "-b", "feature1")
    world.regressed.add(bad := world.git.commit(1, "fwd: stage the MAC header through a vector")[0])
    world.push("feature1", ZERO, [bad])
    world.measure()
    world.git.git("checkout", "--quiet", "-b", "feature2")
    [stacked] = world.git.commit(1, "fwd: name the ports")
    world.regressed.add(stacked)  # it carries feature1's change
    world.push("feature2", ZERO, [stacked])
    world.measure()

    assert [(a["branch"], a["first_bad"]["sha"]) for a in _alerts(world, sightings=True)] == [("feature1", bad)]
    assert world.statuses(stacked)[SERIES]["state"] == "success"  # judged against feature1, where it changed nothing
    branches = {b["name"]: b for b in world.client.get(f"/api/v1/repositories/{world.repository_id}/branches").json()["items"]}
    assert branches["feature2"]["base_branch_id"] == branches["feature1"]["id"]


def test_two_pull_requests_sharing_a_head_keep_their_own_verdicts_and_pages(world):
    main = world.git.commit(1)
    world.push("main", ZERO, main)
    world.git.git("checkout", "--quiet", "-b", "feature1")
    world.regressed.add(bad := world.git.commit(1, "fwd: stage the MAC header through a vector")[0])
    world.push("feature1", ZERO, [bad])
    world.git.git("checkout", "--quiet", "-b", "feature2")
    [head] = world.git.commit(1, "fwd: name the ports")
    world.regressed.add(head)
    world.push("feature2", ZERO, [head])
    world.measure()
    world.pull_request("opened", 1, "feature2", head, base="main")
    world.pull_request("opened", 2, "feature2", head, base="feature1")
    world.measure()

    statuses = world.statuses(head)
    assert statuses[PR_MAIN]["state"] == "failure"  # feature2 against main carries feature1's regression
    assert statuses["perfci/pr/dut-01/feature1"]["state"] == "success"  # against feature1 it changes nothing
    assert statuses[PR_MAIN]["target_url"] != statuses["perfci/pr/dut-01/feature1"]["target_url"]
    for context, number in ((PR_MAIN, 1), ("perfci/pr/dut-01/feature1", 2)):
        page = world.client.get(statuses[context]["target_url"].removeprefix("https://perfci.example.com"))
        assert page.status_code == 200 and f"Pull request #{number}" in page.text and f"Pull request #{3 - number}" not in page.text


def test_a_cherry_picked_regression_links_the_original_alert(world):
    _edit(world, "fwd.c", "base\n", "fwd: the forwarder")
    world.push("main", ZERO, [world.git.head()])
    world.git.git("checkout", "--quiet", "-b", "feature")
    world.regressed.add(original := _edit(world, "fwd.c", "base\nstage through a vector\n", "fwd: stage the MAC header"))
    world.push("feature", ZERO, [original])
    world.measure()
    [alert] = _alerts(world)
    world.git.git("checkout", "--quiet", "main")
    before = world.git.head()
    [moved] = world.git.commit(1, "docs: the harness")  # main moved on: the copy has another parent
    world.git.git("cherry-pick", original)
    world.regressed.add(copy := world.git.head())
    world.push("main", before, [moved, copy])
    world.measure()

    assert [a["id"] for a in _alerts(world)] == [alert["id"]]  # no second alert for the same change
    status = world.statuses(copy)[SERIES]
    assert (status["state"], status["description"]) == ("failure", f"regression: a copy of {original[:12]}, alert {alert['id']}")
    world.client.post(f"/api/v1/alerts/{alert['id']}/triage", json={"status": "acknowledged", "by": "ada"},
                      headers={"Authorization": "Bearer perfci-development-admin-token"})
    world.run_tasks()
    assert world.statuses(copy)[SERIES]["state"] == "success"  # the copy follows the original's triage


def test_superseding_closing_and_merging_end_what_was_pending(world):
    main = world.git.commit(1)
    world.push("main", ZERO, main)
    world.measure()
    world.git.git("checkout", "--quiet", "-b", "feature")
    first = world.git.commit(1, "feature")[0]
    world.push("feature", ZERO, [first])
    world.pull_request("opened", 3, "feature", first)
    assert world.statuses(first)[PR_MAIN]["state"] == "pending"
    second = world.git.commit(1, "feature again")[0]
    world.push("feature", first, [second])
    world.pull_request("synchronize", 3, "feature", second)
    superseded = world.statuses(first)[PR_MAIN]
    assert (superseded["state"], superseded["description"]) == ("error", f"superseded by {second[:12]} before it was measured")

    world.pull_request("closed", 3, "feature", second)
    closed = world.statuses(second)[PR_MAIN]
    assert (closed["state"], closed["description"]) == ("error", "closed before it was measured")
    comment = world.comments()[-1].body["body"]
    assert "The pull request was closed: nothing more is measured for it." in comment
    assert "closed before it was measured" in comment and "measuring the head" not in comment

    world.pull_request("reopened", 3, "feature", second)
    assert world.statuses(second)[PR_MAIN]["state"] == "pending"
    world.pull_request("closed", 3, "feature", second, merged=True)
    assert world.statuses(second)[PR_MAIN]["description"] == "merged before it was measured"
    world.measure()  # its own series jobs still measure it: the series verdict is the commit's, not the pull request's
    assert world.statuses(second)[SERIES]["state"] == "success"
    assert world.statuses(second)[PR_MAIN]["description"] == "merged before it was measured"


def test_a_commit_is_never_green_before_its_own_measurement(world, committed):
    """The head's pull-request session measured before the head's own job (as when its jobs were queued
    first: a forge does not order its deliveries): its series verdict stays pending until its own job is."""
    main = world.git.commit(1)
    world.push("main", ZERO, main)
    world.measure()
    world.git.git("checkout", "--quiet", "-b", "feature")
    world.regressed.add(bad := world.git.commit(1, "fwd: stage the MAC header through a vector")[0])
    world.push("feature", ZERO, [bad])
    world.pull_request("opened", 4, "feature", bad)
    with committed.begin() as conn:  # the session ahead of the push job in the claim order
        assert conn.execute(text("UPDATE jobs SET priority = 1 WHERE purpose = 'pull' AND state = 'queued'")).rowcount == 2
    assert world.statuses(bad)[SERIES] == {**world.statuses(bad)[SERIES], "state": "pending",
                                           "description": "being measured on dut-01"}
    seen = []
    while world.measure_one() is not None:
        seen.append(world.statuses(bad)[SERIES]["state"])
    assert seen[0] == "pending"  # after the pull request's session: its own job is still queued
    assert seen[-1] == "failure" and "success" not in seen
    assert world.statuses(bad)[PR_MAIN]["state"] == "failure"


def test_a_backfilled_commit_is_pending_from_the_moment_its_job_is_queued(world):
    from tests.alerts.pull_world import MACHINE
    from tests.server.server_support import enroll

    shas = world.git.commit(3)
    world.push("main", ZERO, shas)
    world.measure()
    late = enroll(world.client, name="dut-02", machine={**MACHINE, "host": "dut-02", "cpu_model": "AMD EPYC 9454"}, backends=["sim"])
    world.run_tasks()
    context = f"perfci/{late['fingerprint'][:12]}"  # the machine's name until someone names it
    assert {world.statuses(sha).get(context, {}).get("state") for sha in shas} == {"pending"}


def test_a_branch_rebased_onto_main_carries_mains_regression_without_a_second_alert(world):
    main = world.git.commit(1)
    world.push("main", ZERO, main)
    world.git.git("checkout", "--quiet", "-b", "docs")
    [docs] = world.git.commit(1, "docs: explain the harness")
    world.push("docs", ZERO, [docs])
    world.git.git("checkout", "--quiet", "main")
    world.regressed.add(bad := world.git.commit(1, "fwd: stage the MAC header through a vector")[0])
    world.push("main", main[-1], [bad])
    world.measure()
    [alert] = _alerts(world)

    world.git.git("checkout", "--quiet", "docs")
    world.git.git("rebase", "--quiet", "main")  # the branch now starts after main's regression
    rebased = world.git.head()
    world.regressed.add(rebased)
    world.push("docs", docs, [rebased])  # forced
    world.measure()

    assert [a["id"] for a in _alerts(world)] == [alert["id"]]  # main's change, alerted once
    assert world.statuses(bad)[SERIES]["state"] == "failure"
    assert world.statuses(rebased)[SERIES]["state"] == "success", world.statuses(rebased)[SERIES]
