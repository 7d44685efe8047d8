"""Alerts where people look: webhook endpoints, their severity filter, and each service's payload.

Pure: an event (the dict `webhooks.Notifier.emit()` builds) and an endpoint in, the JSON
body to post out. The delivery, retries and the background thread stay in
`gatekeeper.webhooks`.

An endpoint is written `[format[.severity]=]url`, in `ROLEGATE_WEBHOOKS` (comma
separated) or `rolegate gatekeeper --webhook`:

- `https://example.org/hook`: rolegate's own event JSON, every event (as before);
- `slack.error=https://hooks.slack.com/services/...`: a Slack incoming-webhook message,
  rollbacks and alarms only;
- `teams.warn=https://...`: a Microsoft Teams message with an Adaptive Card (the shape both
  Teams incoming webhooks and Workflows' "post to a channel when a webhook request is
  received" accept), rollbacks, alarms, holds and refusals;
- `discord=...`, `generic=...`: a Discord webhook message; a flat JSON of title, text,
  severity and link for any other receiver.

Severities follow Flagger's alert providers: `info` (every stage change), `warn` (the
rollout stopped or a move was refused and needs a look), `error` (a rollback or an alarm).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

INFO, WARN, ERROR = "info", "warn", "error"
SEVERITIES = (INFO, WARN, ERROR)

FORMATS = ("rolegate", "generic", "slack", "teams", "discord")

#: The severity of each event kind; a kind not listed is `info`, an event's own
#: `severity` field wins (a hold, say, is posted as a stage event with severity warn).
KIND_SEVERITY = {"rollback": ERROR, "alarm": ERROR, "refused": WARN, "hold": WARN,
                 "warning": WARN, "approval_needed": WARN, "stage_change": INFO}

_SPEC = re.compile(r"^(?P<format>[a-z]+)(?:\.(?P<severity>[a-z]+))?=(?P<url>.+)$")

#: Limits each service documents; longer text is cut with an ellipsis, never refused.
SLACK_TEXT_MAX = 3000
SLACK_HEADER_MAX = 150
SLACK_FIELD_MAX = 2000
SLACK_FIELDS_MAX = 10
DISCORD_TITLE_MAX = 256
DISCORD_DESCRIPTION_MAX = 4096
DISCORD_FIELD_VALUE_MAX = 1024
DISCORD_FIELDS_MAX = 25

_COLOURS = {INFO: "#2f80ed", WARN: "#f2994a", ERROR: "#d64545"}


class EndpointError(ValueError):
    """A webhook endpoint spec that names an unknown format or severity."""


@dataclass(frozen=True)
class Endpoint:
    """One receiver: where to post, in which shape, and the least severity it wants."""

    url: str
    format: str = "rolegate"
    min_severity: str = INFO

    def wants(self, event: Mapping[str, Any]) -> bool:
        """Whether this endpoint's severity filter lets `event` through."""
        return SEVERITIES.index(severity(event)) >= SEVERITIES.index(self.min_severity)


def parse_endpoint(spec: str) -> Endpoint:
    """`[format[.severity]=]url` as an Endpoint; raises EndpointError naming what was wrong."""
    spec = spec.strip()
    match = _SPEC.match(spec)
    if match is None or "://" in match.group("format"):
        if not re.match(r"^https?://", spec):
            raise EndpointError(f"webhook {spec!r}: expected [format[.severity]=]http(s)://...")
        return Endpoint(spec)
    fmt, level, url = match.group("format"), match.group("severity") or INFO, match.group("url")
    if fmt not in FORMATS:
        raise EndpointError(f"webhook format {fmt!r} is not one of {', '.join(FORMATS)}")
    if level not in SEVERITIES:
        raise EndpointError(f"webhook severity {level!r} is not one of {', '.join(SEVERITIES)}")
    if not re.match(r"^https?://", url):
        raise EndpointError(f"webhook {fmt} URL {url!r} must start with http:// or https://")
    return Endpoint(url, fmt, level)


def severity(event: Mapping[str, Any]) -> str:
    """The event's severity: its own field when valid, else its kind's."""
    own = event.get("severity")
    if isinstance(own, str) and own in SEVERITIES:
        return own
    return KIND_SEVERITY.get(str(event.get("kind")), INFO)


def role_link(public_url: str | None, role: str) -> str | None:
    """The dashboard page of `role` under the router's public URL, if one is configured."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/roles/{quote(role, safe='')}"


def title(event: Mapping[str, Any]) -> str:
    """One line naming what happened to which role."""
    role, kind = event.get("role", "?"), event.get("kind", "event")
    if kind == "rollback":
        return f"rolegate: {role} rolled back"
    if kind == "stage_change":
        return f"rolegate: {role} {event.get('from_stage', '?')} -> {_stage(event)}"
    if kind == "alarm":
        return f"rolegate: drift alarm on {role} ({event.get('arm', '?')}, {event.get('metric')})"
    if kind == "refused":
        return f"rolegate: {event.get('action', 'move')} of {role} refused"
    if kind == "hold":
        return f"rolegate: {role} held for a human ({event.get('from_stage', '?')})"
    if kind == "warning":
        return f"rolegate: {role} warning: {event.get('rule')} would roll back"
    if kind == "approval_needed":
        return f"rolegate: {role} waits for approval ({event.get('stage', '?')})"
    return f"rolegate: {role} {str(kind).replace('_', ' ')}"


def facts(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The numbers behind the event as (name, value) pairs, in a stable order."""
    out: list[tuple[str, str]] = [("severity", severity(event))]
    for name in ("arm", "config", "candidate", "metric", "version", "by"):
        if event.get(name) not in (None, ""):
            out.append((name, str(event[name])))
    details = event.get("details") or (event.get("decision") or {}).get("details") or {}
    if isinstance(details, Mapping):
        if "n" in details and "passes" in details:
            out.append(("candidate", f"{details['passes']}/{details['n']} passed"))
        if "current_n" in details and "current_passes" in details:
            out.append(("current", f"{details['current_passes']}/{details['current_n']} passed"))
        paired = details.get("paired")
        if isinstance(paired, Mapping) and "pairs" in paired:
            out.append(("shadow pairs", f"{paired.get('pairs')}, flips {paired.get('flips')}"))
    cusum = event.get("cusum")
    if isinstance(cusum, Mapping) and "statistic" in cusum:
        out.append(("cusum", f"{cusum.get('statistic')} (h {cusum.get('h')})"))
    if event.get("share") is not None:
        out.append(("share", str(event["share"])))
    return out


def text(event: Mapping[str, Any]) -> str:
    """The reason, in words, as a person reads it in a channel."""
    reason = event.get("reason") or event.get("error") or ""
    return str(reason) if reason else title(event)


def render(event: Mapping[str, Any], fmt: str, public_url: str | None = None) -> dict[str, Any]:
    """The body to post to an endpoint of format `fmt` for `event`."""
    if fmt == "rolegate":
        return dict(event)
    link = role_link(public_url, str(event.get("role", "")))
    if fmt == "slack":
        return _slack(event, link)
    if fmt == "teams":
        return _teams(event, link)
    if fmt == "discord":
        return _discord(event, link)
    if fmt == "generic":
        return {"title": title(event), "text": text(event), "severity": severity(event),
                "role": event.get("role"), "kind": event.get("kind"), "link": link,
                "facts": dict(facts(event)), "event": dict(event)}
    raise EndpointError(f"webhook format {fmt!r} is not one of {', '.join(FORMATS)}")


def _slack(event: Mapping[str, Any], link: str | None) -> dict[str, Any]:
    """Slack incoming webhook: `text` (the notification's fallback) and Block Kit blocks."""
    body = text(event) + (f"\n<{link}|Open {event.get('role')} in rolegate>" if link else "")
    fields = [{"type": "mrkdwn", "text": _cut(f"*{name}*\n{value}", SLACK_FIELD_MAX)}
              for name, value in facts(event)[:SLACK_FIELDS_MAX]]
    blocks: list[dict[str, Any]] = [
        {"type": "header",
         "text": {"type": "plain_text", "text": _cut(title(event), SLACK_HEADER_MAX)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(body, SLACK_TEXT_MAX)}},
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    return {"text": _cut(f"{title(event)}: {text(event)}", SLACK_TEXT_MAX), "blocks": blocks}


def _teams(event: Mapping[str, Any], link: str | None) -> dict[str, Any]:
    """Teams: a message carrying one Adaptive Card attachment."""
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": title(event), "weight": "Bolder", "size": "Medium",
             "wrap": True, "color": "Attention" if severity(event) == ERROR else "Default"},
            {"type": "TextBlock", "text": text(event), "wrap": True},
            {"type": "FactSet", "facts": [{"title": n, "value": v} for n, v in facts(event)]},
        ],
    }
    if link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in rolegate", "url": link}]
    return {"type": "message", "attachments": [
        {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
         "content": card}]}


def _discord(event: Mapping[str, Any], link: str | None) -> dict[str, Any]:
    """Discord webhook: a short `content` line and one embed with the numbers as fields."""
    embed: dict[str, Any] = {
        "title": _cut(title(event), DISCORD_TITLE_MAX),
        "description": _cut(text(event), DISCORD_DESCRIPTION_MAX),
        "color": int(_COLOURS[severity(event)][1:], 16),
        "fields": [{"name": n, "value": _cut(v, DISCORD_FIELD_VALUE_MAX), "inline": True}
                   for n, v in facts(event)[:DISCORD_FIELDS_MAX]],
    }
    if link:
        embed["url"] = link
    return {"content": _cut(title(event), 2000), "embeds": [embed]}


def _stage(event: Mapping[str, Any]) -> str:
    stage, share = event.get("to_stage", "?"), event.get("share")
    return f"{stage} {share}" if stage == "canary" and share is not None else str(stage)


def _cut(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"
