"""Which tests share one xdist worker (``make test``: ``-n 3 --dist loadgroup``).

pytest-xdist sends the tests of one ``xdist_group`` to one worker. A test is in the group of each
resource it uses: by the fixtures it uses (:data:`FIXTURE_GROUPS`) or by an explicit
``@pytest.mark.xdist_group(NAME)``; groups that share a test merge. A test that uses none is in its
module's group (a module's tests run on one worker, so its module-scoped fixtures are made once, as
with ``--dist loadfile``). The reasons for the resource groups:

- a costly session resource is built once per worker: the scratch repository's and the bisect
  repository's dataplane builds, the dataplane build, the memhazard valgrind tool;
- the dashboard role is cluster-wide: its login password (the dashboards tests) and the migrations
  run outside the template (``pg-roles`` marks) alter it one at a time (the migrations themselves
  survive altering it at once: the benchmarks migrate their own databases outside any group).

Without xdist the marks do nothing. Under ``--dist loadgroup`` the groups are collected costliest first
(:data:`MARK_COST`), which ``--no-loadscope-reorder`` keeps.
"""

from __future__ import annotations

import pytest

FIXTURE_GROUPS = {
    "scratch_repo": "dataplane-scratch",
    "fwd_bin": "dataplane",
    "bisect_repo": "bisect-repo",
    "tool_lib": "memhazard",
    "run_window": "memhazard",
    "dash_engine": "pg-roles",
    "agent_host": "playbooks",  # Ansible applied to this host: once, by one worker
}


def _groups(item: pytest.Item) -> set[str]:
    names = {FIXTURE_GROUPS[f] for f in getattr(item, "fixturenames", ()) if f in FIXTURE_GROUPS}
    for mark in item.iter_markers("xdist_group"):
        names.add(mark.args[0] if mark.args else mark.kwargs["name"])
    return names or {item.nodeid.split("::", 1)[0]}


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the marks into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    per_item = [(item, _groups(item)) for item in items]
    for _, names in per_item:
        ordered = sorted(names)
        for other in ordered[1:]:
            parent[root(other)] = root(ordered[0])
    for item, names in per_item:
        # xdist joins every xdist_group mark a test carries into its group's name: one mark, the merged group's
        for node in item.listchain():
            node.own_markers[:] = [m for m in node.own_markers if m.name != "xdist_group"]
        group = root(min(names))
        item.add_marker(pytest.mark.xdist_group(group))
        if getattr(config.option, "loadgroup", False) and not hasattr(item, "_nodeid"):
            # An xdist worker of --dist loadgroup tells the controller a test's group as a suffix of its
            # id, written to item._nodeid, which pytest 9.2 no longer reads (the id is item._id).
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{group}")
    if getattr(config.option, "loadgroup", False):
        _costliest_groups_first(items)


# A test's rough cost by what it runs (the marks): real builds and stacks take a minute, most tests a
# fraction of a second. xdist hands out groups in collection order (with --no-loadscope-reorder; by
# default it puts the groups with the most tests first), so the long groups start first and the short
# ones fill in around them, instead of one long test starting last while the other worker idles.
MARK_COST = {"playbooks": 60, "dataplane": 20, "services": 5}


def _costliest_groups_first(items: list[pytest.Item]) -> None:
    def group(item: pytest.Item) -> str:
        return next(item.iter_markers("xdist_group")).args[0]

    cost: dict[str, float] = {}
    for item in items:
        cost[group(item)] = cost.get(group(item), 0.0) + 1 + sum(MARK_COST.get(m.name, 0) for m in item.iter_markers())
    items.sort(key=lambda item: -cost[group(item)])  # stable: a group's tests keep their order
