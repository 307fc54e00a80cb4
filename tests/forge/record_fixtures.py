"""Re-record the Gitea webhook fixtures (tests/forge/fixtures/gitea/) from a real Gitea: the life of
a pull request (pull_request_scenario.py), signed with the fixtures' secret.

    PERFCI_GITEA_BIN=$(bash .ci/gitea) .venv/bin/python -m tests.forge.record_fixtures

Each file is {"headers": <the X-* headers and Content-Type as sent>, "body": <the JSON payload>}.
Gitea signs the bytes it sends; they are `json.dumps(body, indent=2, ensure_ascii=False)` exactly
(checked here before anything is written), so the signatures in the headers verify over that.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.forge import pull_request_scenario
from tests.forge.gitea import Gitea, GiteaBuild, signature
from tests.forge.webhook_listener import Received, WebhookListener

HERE = Path(__file__).resolve().parent

FIXTURE_SECRET = "perfci-fixture-secret"
OUT = HERE / "fixtures" / "gitea"


def body_bytes(body: object) -> bytes:
    """The bytes Gitea sends for a payload (Go's json.MarshalIndent with two spaces)."""
    return json.dumps(body, indent=2, ensure_ascii=False).encode()


def fixture(received: Received) -> dict[str, object]:
    body = received.json()
    if body_bytes(body) != received.body:
        raise SystemExit(f"{received.event}: Gitea's bytes are not json.dumps(body, indent=2); the signatures would not verify")
    if received.header("X-Gitea-Signature") != signature(FIXTURE_SECRET, received.body):
        raise SystemExit(f"{received.event}: the signature does not verify with {FIXTURE_SECRET!r}")
    headers = {k: v for k, v in sorted(received.headers.items()) if k.lower().startswith("x-") or k.lower() == "content-type"}
    return {"headers": headers, "body": body}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="perfci-gitea-fixtures-") as tmp:
        gitea = Gitea.start(GiteaBuild.from_env(), Path(tmp) / "gitea")
        listener = WebhookListener()
        try:
            life = pull_request_scenario.run(gitea, listener, Path(tmp) / "checkout", "dataplane", FIXTURE_SECRET)
        finally:
            listener.close()
            gitea.stop()
    names = ("push_main", "push_new_branch", "pull_request_opened", "push_feature", "pull_request_synchronized",
             "pull_request_closed")
    fixtures = {name: fixture(getattr(life, name)) for name in names}  # all checked before any is written
    OUT.mkdir(parents=True, exist_ok=True)
    for name, content in fixtures.items():
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n")
        print(path.relative_to(HERE.parents[1]))


if __name__ == "__main__":
    main()
