"""Pure pieces: settings safety, signatures, result-document parsing, push ordering, the statistic."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from perfci_server.errors import Unprocessable
from perfci_server.results.service import parse_result_document
from perfci_server.forge.events import PushedCommit, PushEvent, oldest_first
from perfci_server.forge.github import signature as github_signature
from perfci_server.forge.registry import kind_of
from perfci_server.security import hash_token, new_token
from perfci_server.settings import DEVELOPMENT_ADMIN_TOKEN, Settings
from tests.server.server_support import result_document


def test_settings_refuse_the_default_admin_token_outside_development():
    assert Settings(env="development").admin_token.get_secret_value() == DEVELOPMENT_ADMIN_TOKEN
    with pytest.raises(ValidationError, match="PERFCI_ADMIN_TOKEN"):
        Settings(env="production")
    with pytest.raises(ValidationError, match="PERFCI_ADMIN_TOKEN"):
        Settings(env="test", admin_token="short")
    assert Settings(env="production", admin_token="x" * 32).env == "production"


def test_settings_default_to_embedded_sqlite_and_eager_tasks(tmp_path):
    settings = Settings(data_dir=tmp_path)
    assert settings.effective_database_url == f"sqlite:///{tmp_path / 'perfci.db'}"
    assert settings.tasks_run_eagerly and settings.is_sqlite
    pg = Settings(database_url="postgresql+psycopg://u:p@127.0.0.1/db", broker_url="redis://127.0.0.1:6379/0")
    assert not pg.is_sqlite and not pg.tasks_run_eagerly


def test_github_signature_is_hmac_sha256_of_the_raw_body():
    # The example from GitHub's "Validating webhook deliveries" documentation.
    assert github_signature("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )
    github, gitea, gitlab = kind_of("github"), kind_of("gitea"), kind_of("gitlab")
    assert github.verifies("k", b"body", github_signature("k", b"body"))
    assert not github.verifies("k", b"body", None)
    assert not github.verifies("k", b"body", github_signature("other", b"body"))
    assert gitea.verifies("k", b"body", github_signature("k", b"body").removeprefix("sha256="))  # hex, no prefix
    assert not gitea.verifies("k", b"body", github_signature("k", b"body"))
    assert gitlab.verifies("tok", b"body", "tok") and not gitlab.verifies("tok", b"body", "tok2")
    assert not gitlab.verifies("tok", b"body", None)


def test_tokens_are_random_and_hashed():
    a, b = new_token("pca_"), new_token("pca_")
    assert a != b and a.startswith("pca_") and len(hash_token(a)) == 64 and hash_token(a) != a


def test_push_commits_are_ordered_oldest_first_whichever_way_the_forge_lists_them():
    c1, c2 = PushedCommit("1" * 40), PushedCommit("2" * 40)
    assert [c.sha for c in oldest_first([c1, c2], "2" * 40)] == ["1" * 40, "2" * 40]
    assert [c.sha for c in oldest_first([c2, c1], "2" * 40)] == ["1" * 40, "2" * 40]
    push = PushEvent("refs/tags/v1", "0" * 40, "0" * 40, [])
    assert push.is_tag and push.is_deletion and push.ref_name == "v1"


def test_result_document_parsing_reports_what_is_wrong():
    good = result_document("a" * 40)
    assert parse_result_document(json.dumps(good).encode()).commit == "a" * 40
    unknown = result_document("a" * 40, values={"nope": [1.0] * 5})
    with pytest.raises(Unprocessable, match="unknown metric 'nope'"):
        parse_result_document(json.dumps(unknown).encode())
    flagged = parse_result_document(json.dumps(result_document("a" * 40, values={"cpp": [float("nan")] * 5})).encode())
    assert all(not s.metrics for s in flagged.samples) and "not a finite number" in flagged.notes[0]  # flagged, not a 422




def test_text_from_outside_is_shown_in_markdown_never_applied():
    from markdown_it import MarkdownIt

    from perfci_server.markdown_text import escape

    render = MarkdownIt("commonmark", {"html": False}).enable("table").render
    hostile = ["dut-01 | x", "[click](https://evil.example)", "![i](https://evil.example/i.png)", "<script>x</script>",
               "# heading", "- item", "1. item", "**bold** _it_ `code`", "a\nb"]
    for text in hostile:
        html = render(f"| machine |\n|---|\n| {escape(text)} |\n\n{escape(text)}\n")
        assert "<a " not in html and "<img" not in html and "<script>" not in html and "<h1>" not in html
        assert "<li>" not in html and "<strong>" not in html and "<em>" not in html and "<code>" not in html
        assert html.count("<td>") == 1  # the text stayed in its cell
    assert escape("mac_rewrite (fwd.c:104)") == "mac\\_rewrite (fwd.c:104)"  # readable in the raw comment
