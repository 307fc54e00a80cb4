"""What perfci needs of a forge, as one record per forge (one module each) listed in registry.py. A record:

- reads the forge's webhook deliveries: which headers carry the event, the delivery id and the
  signature, how the signature verifies, and what a payload means (:mod:`.events`);
- shapes its REST calls: a commit status, the pull request's one comment (created, then edited);
- says how git fetches from it: the user a token goes with, where pull-request heads live;
- names its settings: ``PERFCI_<NAME>_API_URL`` and ``PERFCI_<NAME>_TOKEN``
  (fields ``<name>_api_url`` and ``<name>_token`` of the one settings class).

Records hold no state and import nothing of the server (pydantic reads their payloads), so every
room may ask them, and the `perfci` command line lists them without the server's dependencies
(docs/contributing.md: adding a forge). A verdict's state is its name: success, failure, pending,
neutral (``models.CommitState``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import SecretStr

from .events import Parsed

DESCRIPTION_MAX = 140  # GitHub refuses longer status descriptions; the others show them cut anyway


class MissingHeader(ValueError):
    """A delivery lacks a header the forge always sends."""


@dataclass(frozen=True)
class Headers:
    """A delivery's headers as the forge names them: the event, the delivery's id, its signature."""

    event: str
    delivery_id: str | None
    signature: str | None


@dataclass(frozen=True)
class ApiCall:
    method: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any]


class ForgeKind(ABC):
    name: ClassVar[str]  # the route (/webhooks/<name>), the stored repository.forge, the settings' prefix
    title: ClassVar[str]
    # Repositories registered with these forges may deliver to this route too (Gitea speaks GitHub's dialect).
    also_accepts: ClassVar[tuple[str, ...]] = ()
    event_header: ClassVar[str]
    delivery_header: ClassVar[str]
    signature_header: ClassVar[str]
    repository_field: ClassVar[tuple[str, ...]]  # where a payload names the repository
    git_user: ClassVar[str]  # the user a token is sent with over https
    pull_refspec: ClassVar[str]  # what a fetch maps pull-request heads from (forks' heads live there)
    # States the forge's status API names otherwise; a verdict without an answer (neutral) is never success.
    state_names: ClassVar[Mapping[str, str]] = {}

    # --- deliveries ---------------------------------------------------------------------------

    delivery_required: ClassVar[bool] = True  # False where older versions send no per-event id

    def headers(self, get: Mapping[str, str]) -> Headers:
        """The delivery's headers (``get``: case-insensitive). Raises MissingHeader."""
        event, delivery = get.get(self.event_header), get.get(self.delivery_header)
        if not event or (self.delivery_required and not delivery):
            required = [self.event_header, *([self.delivery_header] if self.delivery_required else [])]
            raise MissingHeader(f"{' and '.join(required)} header{'s are' if len(required) > 1 else ' is'} required")
        return Headers(event, delivery or None, get.get(self.signature_header))

    def delivery_id(self, given: str | None, body: bytes) -> str:
        """The id that makes a redelivery recognisable."""
        assert given, "required by headers()"
        return given

    @abstractmethod
    def verifies(self, secret: str, body: bytes, signature: str | None) -> bool:
        """Whether the delivery was signed with the repository's webhook secret."""

    @abstractmethod
    def parse(self, event: str, payload: dict[str, Any]) -> Parsed:
        """What the delivery means. Raises pydantic.ValidationError on a payload it cannot read."""

    # --- the REST API -------------------------------------------------------------------------

    @abstractmethod
    def auth_headers(self, token: str) -> dict[str, str]: ...

    @abstractmethod
    def status_call(self, api_url: str, token: str, project: str, sha: str, state: str, context: str,
                    description: str, target_url: str | None) -> ApiCall: ...

    @abstractmethod
    def comment_call(self, api_url: str, token: str, project: str, number: int, comment_id: str | None,
                     body: str) -> ApiCall: ...

    def state_name(self, state: str) -> str:
        return self.state_names.get(state, state)

    # --- settings and git ---------------------------------------------------------------------

    def api_url(self, settings: Any) -> str:
        return str(getattr(settings, f"{self.name}_api_url"))

    def token(self, settings: Any) -> str | None:
        secret: SecretStr | None = getattr(settings, f"{self.name}_token")
        return secret.get_secret_value() or None if secret is not None else None

    def git_base(self, api_url: str) -> str:
        """The forge's git host (scheme://host:port) from its API root: api.github.com serves
        github.com; self-hosted forges serve both from one host."""
        parts = urlsplit(api_url)
        host = (parts.hostname or "").removeprefix("api.")
        return base_of(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host).geturl())


def base_of(url: str) -> str:
    """scheme://host:port of a URL, the port made explicit (git matches config URLs that way)."""
    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return f"{parts.scheme}://{parts.hostname}:{port}"
