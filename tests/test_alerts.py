"""Alerts where people look: Slack, Teams, Discord and generic receivers, with severity filters.

Each receiver is a loopback HTTP server that checks the body against the shape its service
documents and answers as that service does when it does not match (Slack: 400
`invalid_blocks`; Teams: 400; Discord: 400 with a code), so a wrong payload is a failed
delivery here as it would be there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from gatekeeper.alerts import (
    ERROR,
    INFO,
    WARN,
    Endpoint,
    EndpointError,
    parse_endpoint,
    render,
    severity,
)
from gatekeeper.loop import Gatekeeper
from gatekeeper.webhooks import ALARM, REFUSED, ROLLBACK, STAGE_CHANGE, Notifier
from rolegate.http import ApiClient
from router.cli.main import main
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.population import Population
from tests.servers import json_receiver, wait_for, werkzeug_server

Check = Callable[[Any], str | None]

SLACK_BLOCK_TYPES = {"header", "section", "context", "divider", "actions", "image"}


def slack_problem(body: Any) -> str | None:
    """What Slack's incoming webhook would refuse in `body` (Block Kit limits), or None."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str) or not body["text"]:
        return "no_text"
    for block in body.get("blocks", []):
        if block.get("type") not in SLACK_BLOCK_TYPES:
            return "invalid_blocks"
        if block["type"] == "header":
            text = block.get("text", {})
            if text.get("type") != "plain_text" or not 0 < len(text.get("text", "")) <= 150:
                return "invalid_blocks"
        if block["type"] == "section":
            text, fields = block.get("text"), block.get("fields")
            if text is None and not fields:
                return "invalid_blocks"
            if text is not None and (text.get("type") not in ("mrkdwn", "plain_text")
                                     or not 0 < len(text.get("text", "")) <= 3000):
                return "invalid_blocks"
            if fields is not None and (len(fields) > 10 or any(
                    f.get("type") not in ("mrkdwn", "plain_text") or len(f["text"]) > 2000
                    for f in fields)):
                return "invalid_blocks"
    return None


def teams_problem(body: Any) -> str | None:
    """What a Teams incoming webhook / Workflows trigger would refuse, or None."""
    if not isinstance(body, dict) or body.get("type") != "message":
        return "type must be message"
    attachments = body.get("attachments")
    if not isinstance(attachments, list) or len(attachments) != 1:
        return "one attachment expected"
    attachment = attachments[0]
    if attachment.get("contentType") != "application/vnd.microsoft.card.adaptive":
        return "contentType"
    card = attachment.get("content", {})
    if card.get("type") != "AdaptiveCard" or not isinstance(card.get("version"), str):
        return "content must be an AdaptiveCard with a version"
    for element in card.get("body", []):
        if element.get("type") == "TextBlock" and not isinstance(element.get("text"), str):
            return "TextBlock.text"
        if element.get("type") == "FactSet" and any(
                set(f) != {"title", "value"} or not all(isinstance(v, str) for v in f.values())
                for f in element.get("facts", [])):
            return "FactSet.facts"
        if element.get("type") not in ("TextBlock", "FactSet", "ColumnSet", "Container"):
            return f"unknown element {element.get('type')}"
    for action in card.get("actions", []):
        if action.get("type") != "Action.OpenUrl" or not action.get("url", "").startswith("http"):
            return "actions"
    return None


def discord_problem(body: Any) -> str | None:
    """What Discord's execute-webhook endpoint would refuse, or None."""
    if not isinstance(body, dict) or not (body.get("content") or body.get("embeds")):
        return "50006 empty message"
    if len(body.get("content", "")) > 2000:
        return "content"
    for embed in body.get("embeds", []):
        if len(embed.get("title", "")) > 256 or len(embed.get("description", "")) > 4096:
            return "embed title/description"
        if not isinstance(embed.get("color", 0), int):
            return "color"
        fields = embed.get("fields", [])
        if len(fields) > 25 or any(not f.get("name") or not f.get("value")
                                   or len(f["value"]) > 1024 for f in fields):
            return "fields"
    return None


@contextmanager
def receiver(check: Check, ok_status: int = 200) -> Iterator[tuple[str, list[Any]]]:
    """A loopback receiver keeping every body it accepted; refusing (400) what `check` flags."""
    refused: list[str] = []

    def answer(body: Any) -> tuple[int, str]:
        problem = check(body)
        if problem is not None:
            refused.append(problem)
        return (ok_status, "ok") if problem is None else (400, problem)

    with json_receiver(answer) as (url, accepted):
        yield url, accepted
    assert not refused, f"the receiver refused: {refused}"


ROLLBACK_EVENT = {"kind": ROLLBACK, "role": "summarizer", "action": "rollback",
                  "from_stage": "canary", "to_stage": "rolled_back", "version": 7,
                  "reason": "candidate fails more than current: 12/40 failed against 3/60",
                  "details": {"n": 40, "passes": 28, "current_n": 60, "current_passes": 57}}


def test_endpoint_specs() -> None:
    """A plain URL is rolegate's JSON at info; format[.severity]=URL picks shape and filter."""
    assert parse_endpoint("https://h/x") == Endpoint("https://h/x")
    assert parse_endpoint("slack.error=https://hooks.slack.com/services/T/B/X") == Endpoint(
        "https://hooks.slack.com/services/T/B/X", "slack", ERROR)
    assert parse_endpoint("teams=http://h/x?a=b") == Endpoint("http://h/x?a=b", "teams", INFO)
    # A URL whose query holds '=' is still a plain URL.
    assert parse_endpoint("http://h/x?sig=abc").format == "rolegate"
    for bad, named in (("pager=http://h", "pager"), ("slack.loud=http://h", "loud"),
                       ("slack=hooks.slack.com", "http"), ("nonsense", "expected")):
        with pytest.raises(EndpointError, match=named):
            parse_endpoint(bad)


def test_severities() -> None:
    """Rollbacks and alarms are errors, refusals and holds warnings, stage changes info."""
    assert severity({"kind": ROLLBACK}) == ERROR and severity({"kind": ALARM}) == ERROR
    assert severity({"kind": REFUSED}) == WARN and severity({"kind": "hold"}) == WARN
    assert severity({"kind": STAGE_CHANGE}) == INFO
    assert severity({"kind": STAGE_CHANGE, "severity": WARN}) == WARN
    assert Endpoint("http://h", "slack", ERROR).wants({"kind": ROLLBACK})
    assert not Endpoint("http://h", "slack", ERROR).wants({"kind": STAGE_CHANGE})


def test_each_service_gets_its_documented_shape_with_reason_numbers_and_link() -> None:
    """Slack, Teams, Discord and generic receivers accept the message and find what matters."""
    with receiver(slack_problem) as (slack, slacked), \
            receiver(teams_problem, 202) as (teams, teamed), \
            receiver(discord_problem, 204) as (discord, discorded), \
            receiver(lambda b: None if b.get("title") else "title") as (generic, generics):
        notifier = Notifier([f"slack={slack}", f"teams={teams}", f"discord={discord}",
                             f"generic={generic}"], backoff=0.01,
                            public_url="https://rolegate.example.org/")
        try:
            notifier.emit(**ROLLBACK_EVENT)
            wait_for(lambda: slacked and teamed and discorded and generics, 5, "all four")
        finally:
            notifier.close()
    assert notifier.delivered == 4 and notifier.failed == 0
    link = "https://rolegate.example.org/roles/summarizer"
    slack_text = json.dumps(slacked[0])
    assert "rolled back" in slacked[0]["text"] and "12/40 failed" in slack_text
    assert f"<{link}|" in slack_text and "28/40 passed" in slack_text
    card = teamed[0]["attachments"][0]["content"]
    assert card["actions"][0]["url"] == link
    facts = {f["title"]: f["value"] for e in card["body"] if e["type"] == "FactSet"
             for f in e["facts"]}
    assert facts["severity"] == "error" and facts["current"] == "57/60 passed"
    assert discorded[0]["embeds"][0]["url"] == link
    assert "12/40 failed" in discorded[0]["embeds"][0]["description"]
    assert generics[0]["link"] == link and generics[0]["event"]["version"] == 7


def test_severity_filter_per_endpoint_and_no_link_without_public_url() -> None:
    """`slack.error` gets rollbacks and alarms only; a plain endpoint gets every event."""
    with receiver(slack_problem) as (slack, slacked), \
            receiver(lambda b: None if b.get("kind") else "kind") as (raw, raws):
        notifier = Notifier([f"slack.error={slack}", raw], backoff=0.01)
        try:
            notifier.emit(STAGE_CHANGE, "r", from_stage="shadow", to_stage="canary", share=0.1,
                          reason="gate passed")
            notifier.emit(ALARM, "r", arm="current", metric="run_failure",
                          cusum={"statistic": 5.1, "h": 4.2})
            wait_for(lambda: len(raws) == 2 and slacked, 5, "the events")
        finally:
            notifier.close()
    assert [e["kind"] for e in raws] == [STAGE_CHANGE, ALARM]
    assert len(slacked) == 1 and "drift alarm" in slacked[0]["text"]
    assert "5.1 (h 4.2)" in json.dumps(slacked[0]) and "roles/" not in json.dumps(slacked[0])


def test_long_reasons_are_cut_to_the_services_limits() -> None:
    """A reason longer than a Slack section or a Discord field is cut, not refused."""
    event = {**ROLLBACK_EVENT, "reason": "x" * 10_000, "role": "r" * 300}
    assert slack_problem(render(event, "slack")) is None
    assert discord_problem(render(event, "discord")) is None
    assert teams_problem(render(event, "teams")) is None


def test_cli_names_a_bad_webhook_spec() -> None:
    """A typo in --webhook is a usage error naming it, before any tick."""
    result = CliRunner().invoke(main, ["gatekeeper", "--once", "--webhook", "slak=http://h/"])
    assert result.exit_code == 2 and "slak" in result.output
    assert "Traceback" not in result.output


def _rolled_back(messages: list[Any]) -> list[Any]:
    """The messages that announce the `regressed` role's rollback."""
    return [m for m in messages if "regressed rolled back" in json.dumps(m)]


@pytest.mark.slow
@pytest.mark.usefixtures("quick_buckets")
def test_a_real_rollback_reaches_slack_and_teams(app: Flask) -> None:
    """The gatekeeper rolls a regressed candidate back; Slack and Teams get it, with the link."""
    with werkzeug_server(app) as url, receiver(slack_problem) as (slack, slacked), \
            receiver(teams_problem, 202) as (teams, teamed):
        policy = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.9, "alpha": 0.01,
                                 "min_stage_seconds": 0.2, "bake_seconds": 0.4},
                  "invariants": {"artifact_exists": ["out.md"]}}
        binding = {"current": "cfg-a", "candidate": "cfg-broken", "stage": "canary",
                   "share": 0.5, "steps": [0.5, 1.0], "gate": policy}
        with requests.put(f"{url}/v1/bindings/regressed", json=binding, headers=auth(OPERATOR),
                          timeout=5) as answer:
            assert answer.status_code == 201, answer.text
        api = ApiClient(url, GATEKEEPER)
        notifier = Notifier([f"slack.error={slack}", f"teams.warn={teams}"], backoff=0.01,
                            public_url="https://rg.example")
        keeper = Gatekeeper(api, interval=0.05, notifier=notifier)
        try:
            with Population(url, ["regressed"]):
                wait_for(lambda: any(d.action.value == "rollback" for d in keeper.once()), 30,
                         "the gatekeeper to roll the broken candidate back", interval=0.1)
            # A drift alarm (also an error) may come first: wait for the rollback's messages.
            wait_for(lambda: _rolled_back(slacked) and _rolled_back(teamed), 5,
                     "Slack and Teams messages of the rollback")
        finally:
            keeper.release()
            notifier.close()
            api.close()
    assert "regressed rolled back" in _rolled_back(slacked)[0]["text"]
    card = _rolled_back(teamed)[0]["attachments"][0]["content"]
    assert card["actions"][0]["url"] == "https://rg.example/roles/regressed"
