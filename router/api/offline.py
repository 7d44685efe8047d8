"""Offline suite verdicts over HTTP, and the check that guards the way into shadow.

POST /v1/roles/<role>/offline         store a suite's verdict for its config
GET  /v1/roles/<role>/offline         every stored verdict of the role
GET  /v1/roles/<role>/offline/<config> one config's verdict

A role whose gate policy sets `require_offline_pass` may enter shadow only with a
passing verdict for its candidate (`require_offline_pass()`, called from the
transition path in api_bindings). And no candidate whose registered body offers a
tool the role's invariants forbid (or that its allowlist lacks) runs on real jobs
(`refuse_offered_breaches()`): a framework that hides such a tool from the model
would never call it, so no run would ever trip the wire.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from bindings.errors import Conflict, NotFound
from bindings.models import Binding
from bindings.offline import OfflineStore, OfflineVerdict
from gatekeeper.checks.invariants import offered_breaches
from gatekeeper.checks.served import LIVE, offered_tools
from gatekeeper.store.configs import ConfigStore
from router.api.bodies import json_body, parse
from router.api.params import role_param
from router.server.auth import actor, require
from router.server.services import services_of

bp = Blueprint("offline", __name__)


def _store() -> OfflineStore:
    return OfflineStore(services_of(current_app).redis)


@bp.post("/v1/roles/<role>/offline")
@require("gatekeeper")
def post_verdict(role: str) -> ResponseReturnValue:
    """Store a suite verdict for (role, config); the latest one for a config wins.

    The config must be one of the role's arms (its current or its candidate):
    a verdict for a config the role does not run would guard nothing, and a
    typo in --role or the config's name would otherwise be stored without a word.
    """
    verdict = parse(OfflineVerdict, json_body(allow_empty=False))
    role = role_param(role)
    refuse_stray_verdict(role, verdict.config)
    stored = _store().put(role, verdict, actor())
    return jsonify(stored.model_dump(mode="json")), 201


@bp.get("/v1/roles/<role>/offline")
@require("caller", "reviewer", "gatekeeper")
def list_verdicts(role: str) -> ResponseReturnValue:
    """Every stored verdict of the role."""
    found = _store().all(role_param(role))
    return jsonify({"role": role, "verdicts": [v.model_dump(mode="json") for v in found]})


@bp.get("/v1/roles/<role>/offline/<config>")
@require("caller", "reviewer", "gatekeeper")
def get_verdict(role: str, config: str) -> ResponseReturnValue:
    """One config's stored verdict (404 when none was posted)."""
    return jsonify(_store().get(role_param(role), config).model_dump(mode="json"))


def refuse_stray_verdict(role: str, config: str) -> None:
    """Raise Conflict (409) unless `config` is the role's current or candidate (404: no role)."""
    binding = services_of(current_app).store.get(role).binding
    arms = {"current": binding.current, "candidate": binding.candidate}
    if config in arms.values():
        return
    raise Conflict(
        f"role {role!r} runs neither arm on config {config!r} (current {binding.current!r}, "
        f"candidate {binding.candidate!r}): a verdict is stored only for one of them; set "
        f"the config as the candidate first (rolegate bindings set {role} "
        f"candidate={config}), or post for the right role",
        role=role, config=config, refused="not_an_arm", **arms,
    )


def guard_live_candidate(role: str, old: Binding | None, new: Binding) -> None:
    """Require the offline pass whenever a write lets a candidate start running on real jobs.

    That is entering shadow, and also skipping it (an operator's canary share or a
    restored canary/full version), since the pass protects the jobs, not a stage name.
    A current config the write brings in from elsewhere (not the candidate it
    promotes) meets the offered-tools check too: it serves every job.
    """
    if new.current != (old.current if old else None) and (old is None
                                                          or new.current != old.candidate):
        refuse_offered_breaches(role, new, "current")
    if new.stage not in LIVE:
        return
    if old is not None and old.stage in LIVE and old.candidate == new.candidate:
        return
    refuse_offered_breaches(role, new)
    require_offline_pass(role, new)


def refuse_offered_breaches(role: str, binding: Binding, arm: str = "candidate") -> None:
    """Raise Conflict (409) if the arm's registered body offers a tool its runs may not call."""
    config = binding.candidate if arm == "candidate" else binding.current
    if config is None:
        return
    configs: ConfigStore = current_app.extensions["rolegate_configs"]
    found = configs.find(config)
    refused = offered_breaches(binding.gate.invariants,
                               offered_tools(found.body if found else None))
    if refused:
        raise Conflict(
            f"role {role!r} may not run {arm} {config!r}: its body offers "
            f"{refused} (forbidden by the role's invariants or outside its allowed_tools); "
            "remove them from the config's body or change the role's gate",
            role=role, **{arm: config}, refused="offered_tools", tools=list(refused),
        )


def require_offline_pass(role: str, binding: Binding) -> None:
    """Raise Conflict (409) if `binding` may not enter shadow for want of an offline pass."""
    if not binding.gate.require_offline_pass or binding.candidate is None:
        return
    candidate = binding.candidate
    try:
        stored = _store().get(role, candidate)
    except NotFound:
        raise Conflict(
            f"role {role!r} requires an offline suite pass before its candidate runs on "
            f"real jobs, and none is recorded for candidate {candidate!r}: run "
            f"'rolegate suite run ... --post --role {role}'",
            role=role, candidate=candidate, missing="offline_pass",
        ) from None
    if not stored.verdict.passed:
        raise Conflict(
            f"role {role!r} requires an offline suite pass before its candidate runs on "
            f"real jobs, but the suite failed candidate {candidate!r}: "
            f"{'; '.join(stored.verdict.reasons[:3])}",
            role=role, candidate=candidate, missing="offline_pass",
            reasons=stored.verdict.reasons[:20],
        )
