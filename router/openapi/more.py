"""OpenAPI operations of the trace, gate, feedback, offline, lease and dashboard endpoints.

Same shape as `router.openapi.paths` (which holds the binding, resolve and
config operations); `router.openapi.document` merges both.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.stats.drift import METRICS
from rolegate.config_ids import CONFIG_ID_PATTERN, MAX_CONFIG_ID
from rolegate.run_ids import STEM
from rolegate.trace import ROLE_PATTERN, TraceArm
from router.api.exposures import MAX_IDS, MAX_ROWS
from router.api.feedback import QUOTA_PATTERN
from router.api.trace_parse import MAX_BATCH
from router.openapi.paths import AUTH, HTML, enum_of, json_body, json_response, ref

OBJECT: dict[str, Any] = {"type": "object"}


def _obj(*required: str, **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": properties}


RESULT = _obj("index", "run_id", "status",
              index={"type": "integer"}, run_id={"type": ["string", "null"]},
              status={"enum": ["accepted", "duplicate", "refused"]},
              verdict=OBJECT, error=ref("ErrorDetail"))
INGEST = _obj("accepted", "duplicates", "refused", "results", "tripwire",
              accepted={"type": "integer"}, duplicates={"type": "integer"},
              refused={"type": "integer"}, results={"type": "array", "items": RESULT},
              tripwire={"type": "array", "items": OBJECT}, error=ref("ErrorDetail"))
#: A batch holds 1 to MAX_BATCH traces (an empty one is refused: 400).
_BATCH = {"type": "array", "items": ref("Trace"), "minItems": 1, "maxItems": MAX_BATCH}
TRACE_BODY = {"anyOf": [ref("Trace"), _BATCH,
                        {**_obj("traces", traces=_BATCH), "additionalProperties": False}]}
#: OTLP JSON (ExportTraceServiceRequest in OTLP's JSON encoding); router.api.otlp_decode reads it.
OTLP_JSON = {"type": "object", "required": ["resourceSpans"],
             "properties": {"resourceSpans": {"type": "array", "items": OBJECT}}}
OTLP_ANSWER = {"type": "object", "properties": {"partialSuccess": _obj(
    "rejectedSpans", rejectedSpans={"type": "string"}, errorMessage={"type": "string"})}}
_RUN_IDS = {**_obj("stem", "from", "to",
                   stem={"type": "string", "pattern": "^" + STEM.pattern + "$"},
                   **{end: {"type": "integer", "minimum": 0, "maximum": 10**18}
                      for end in ("from", "to")}),
            "additionalProperties": False}
_EXPOSURE = {**_obj("role", "config", "arm", "epoch", "bucket", "count",
                    role={"type": "string", "minLength": 1, "maxLength": 128,
                          "pattern": ROLE_PATTERN},
                    config={"type": "string", "minLength": 1, "maxLength": MAX_CONFIG_ID,
                            "pattern": CONFIG_ID_PATTERN.pattern},
                    arm=enum_of(TraceArm),
                    epoch={"type": "string", "pattern": r"^(0|\d{1,12}\.\d{6})$"},
                    bucket={"type": "integer", "minimum": 0, "maximum": 10**10},
                    count={"type": "integer", "minimum": 1, "maximum": 10**7},
                    ids={"anyOf": [{"type": "null"}, _RUN_IDS],
                         "description": "The rows' run ids, stem + n for n in [from, to): "
                                        "to - from equals count; not for the shadow arm; "
                                        f"at most {MAX_IDS} per request."}),
             "additionalProperties": False}
EXPOSURES = {**_obj("exposures", exposures={"type": "array", "items": _EXPOSURE,
                                            "maxItems": MAX_ROWS}),
             "additionalProperties": False}
FEEDBACK = _obj("role", "run_id", "tier", "feedback",
                role={"type": "string"}, run_id={"type": "string"},
                tier={"type": ["string", "null"]}, flagged={"type": ["string", "null"]},
                feedback={"type": "array", "items": OBJECT})
LEASE = _obj("holder", "ttl_ms", holder={"type": ["string", "null"]},
             ttl_ms={"type": ["integer", "null"]})
#: `gatekeeper.heartbeat.summarize`, the gate view's `gatekeeper` section's model.
HEARTBEAT = ref("GatekeeperView")
#: `gatekeeper.view.fleet.fleet_report`: the outlook and, with a fleet budget, the advice.
FLEET = _obj("fleet", "text", "budget", "budget_lines", "roles",
             fleet=_obj("live", "live_bound", "last_day", "last_day_bound", "per_rollout",
                        "rollouts_per_day", "per_day"),
             text={"type": "string"}, budget={"type": ["object", "null"]},
             budget_lines={"type": "array", "items": {"type": "string"}},
             roles={"type": "array", "items": OBJECT})
ROLE_QUERY = {"name": "role", "in": "query", "required": False,
              "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"}}
STORED_TRACE = _obj("id", "received", "role", "trace", "verdict",
                    id={"type": "string"}, received={"type": "number"},
                    role={"type": "string"}, trace=ref("Trace"), verdict=OBJECT)
#: `gatekeeper.view_model`: the whole view, or one targeting rule's (`?rule=R`); generated
#: from the models the view is built as, every section included, so a field added to one
#: is in the schema.
GATE = {"anyOf": [ref("GateView"), ref("RuleView")]}

MORE_PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/v1/traces": {"post": {
        "summary": "Report one trace, a list, or {traces: [...]}; each gets its own outcome. "
                   "Or OpenTelemetry spans (OTLP/HTTP).",
        "description": "200 when every trace was accepted or a duplicate, 207 when some were "
                       "refused, 422 when all were. A trace counts in the stage of the "
                       "binding Redis holds when it is stored; one whose config is neither "
                       "the role's current nor its candidate is refused (config_not_bound). "
                       "A breaching candidate or shadow trace rolls its role back at once "
                       "(the tripwire list). An OTLP body "
                       "(`application/x-protobuf`, an ExportTraceServiceRequest, gzip or "
                       "deflate Content-Encoding allowed; or OTLP JSON with `resourceSpans`) "
                       "is GenAI spans instead: they are assembled into one run per trace id "
                       "when the root span arrives (earlier batches wait in Redis), placed by "
                       "the rolegate.role/config/arm/key attributes of the root span or "
                       "resource, and answered with an ExportTraceServiceResponse in the "
                       "request's encoding (partialSuccess counts refused spans). A forbidden "
                       "execute_tool span trips the wire when it arrives. With "
                       "`Prefer: return=minimal` (what the SDK sends) a trace JSON answer "
                       "keeps the counts and lists only the traces refused or that tripped "
                       "the wire (Preference-Applied: return=minimal).",
        "parameters": [{"name": "Prefer", "in": "header", "required": False,
                        "description": "return=minimal: the compact answer (RFC 7240).",
                        "schema": {"type": "string"}}],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": {"anyOf": [TRACE_BODY, OTLP_JSON]}},
            "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}}}},
        "responses": {
            "200": {"description": "Every trace accepted or a duplicate; for OTLP, the "
                                   "ExportTraceServiceResponse.",
                    "content": {"application/json": {"schema": {"anyOf": [INGEST,
                                                                          OTLP_ANSWER]}},
                                "application/x-protobuf": {"schema": {"type": "string",
                                                                      "format": "binary"}}}},
            "207": json_response("Some traces refused; the rest kept.", INGEST),
            "422": json_response("Every trace refused.", INGEST)},
        # 403: every trace was of a role outside the token's list (the body is as for 422).
        # 409: the tripwire lost its compare-and-set on every retry (traces are stored).
        "errors": (400, *AUTH, 409, 413, 429, 503),
    }},
    "/v1/traces/{run_id}/feedback": {
        "post": {
            "summary": "Record a reviewer's feedback tier (and correction) on a stored run.",
            "requestBody": json_body(ref("FeedbackRequest"), required=True),
            "responses": {"201": json_response("The run's feedback so far.", FEEDBACK)},
            "errors": (400, *AUTH, 404, 409, 413, 422, 503),
        },
        "get": {
            "summary": "Every feedback entry on a run and the tier they add up to.",
            "parameters": [ROLE_QUERY],
            "responses": {"200": json_response("The run's feedback.", FEEDBACK)},
            "errors": (400, *AUTH, 404, 409, 503),
        },
    },
    "/v1/traces/{run_id}": {"get": {
        "summary": "One stored trace as reported, with its verdict and arrival time.",
        "description": "The run id is looked up among the roles the token may act on; name "
                       "the role (?role=) when two know it (409 otherwise). When several "
                       "reporters sent traces under the run id (a clash), `claimed_by` names "
                       "them and ?reporter= picks one (default: the caller's own, else the "
                       "first stored).",
        "parameters": [ROLE_QUERY, {"name": "reporter", "in": "query", "required": False,
                                    "schema": {"type": "string", "minLength": 1}}],
        "responses": {"200": json_response("The stored trace.", {
            **STORED_TRACE, "properties": {
                **STORED_TRACE["properties"],
                "claimed_by": {"type": "array", "items": {"type": "string"}}}})},
        "errors": (400, *AUTH, 404, 409, 503),
    }},
    "/v1/roles/{role}/traces": {"get": {
        "summary": "The role's traces in arrival order across its live configs and arms.",
        "description": "Without since_id the newest `limit`; with it the first `limit` from "
                       "that stream id on (inclusive), for tailing.",
        "parameters": [
            {"name": "since_id", "in": "query", "required": False,
             "schema": {"type": "string", "pattern": r"^\d{1,20}-\d{1,20}$"}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
            {"name": "config", "in": "query", "required": False,
             "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
            {"name": "arm", "in": "query", "required": False,
             "schema": enum_of(TraceArm)},
        ],
        "responses": {"200": json_response("Stored traces, oldest first.", _obj(
            "role", "traces", "last_id", role={"type": "string"},
            traces={"type": "array", "items": STORED_TRACE},
            last_id={"type": ["string", "null"]}))},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/v1/roles/{role}/gate": {"get": {
        "summary": "The regression gate per arm since the stage began, with paired and drift.",
        "description": "With ?rule=R: over the runs targeting rule R routed (404 for no such "
                       "rule).",
        "parameters": [{"name": "rule", "in": "query", "required": False,
                        "schema": {"type": "string", "minLength": 1}}],
        "responses": {"200": json_response("The gate view.", GATE)},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/v1/roles/{role}/tools": {"get": {
        "summary": "Per config: every tool its runs called and how often.",
        "responses": {"200": json_response("The tool tally.", _obj(
            "role", "configs", role={"type": "string"}, configs=OBJECT))},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/v1/roles/{role}/golden": {"get": {
        "summary": "A feedback-aware golden sample of the role's recent current-config runs.",
        "parameters": [
            {"name": "quota", "in": "query", "required": False,
             "schema": {"type": "array", "items": {"type": "string", "pattern": QUOTA_PATTERN}}},
            {"name": "min_age", "in": "query", "required": False,
             "schema": {"type": "number", "minimum": 0}},
            {"name": "window", "in": "query", "required": False,
             "schema": {"type": "number", "minimum": 0}},
            {"name": "seed", "in": "query", "required": False, "schema": {"type": "string"}},
        ],
        "responses": {"200": json_response("The sample.", _obj(
            "role", "config", "cases", role={"type": "string"}, config={"type": "string"},
            cases={"type": "array", "items": OBJECT}))},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/v1/roles/{role}/drift/calibrate": {"get": {
        "summary": "False CUSUM alarms per h over the newest stored runs of (config, arm).",
        "parameters": [
            {"name": "h", "in": "query", "required": True,
             "schema": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0,
                                                   "maximum": 1e6},
                        "minItems": 1, "maxItems": 50}},
            {"name": "config", "in": "query", "required": False, "schema": {"type": "string"}},
            {"name": "arm", "in": "query", "required": False,
             "schema": enum_of(TraceArm)},
            {"name": "metric", "in": "query", "required": False,
             "schema": enum_of(METRICS)},
            {"name": "shift", "in": "query", "required": False,
             "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}},
            {"name": "p0", "in": "query", "required": False,
             "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}},
            {"name": "runs", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 100000}},
        ],
        "responses": {"200": json_response("One row per h.", _obj(
            "role", "config", "arm", "metric", "shift", "runs", "results",
            results={"type": "array", "items": OBJECT}))},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/v1/exposures": {"post": {
        "summary": "Add an SDK's assignment counts (in-process resolves), per arm and bucket.",
        "description": "Each row: `count` runs of (role, config, arm) assigned in stage "
                       "`epoch` during 30 s time bucket `bucket`, and with `ids` the run "
                       "ids its resolves minted. The gate view's `reports` section compares "
                       "them with the runs that reported: ids one by one, counts by bucket.",
        "requestBody": json_body(EXPOSURES, required=True),
        "responses": {"200": json_response("How many assignments were added.",
                                           _obj("added", added={"type": "integer"}))},
        "errors": (400, *AUTH, 413, 422, 503),
    }},
    "/v1/roles/{role}/offline": {
        "post": {
            "summary": "Store an offline suite's verdict for one config of the role.",
            "requestBody": json_body(ref("OfflineVerdict"), required=True),
            "responses": {"201": json_response("Stored.", ref("StoredOfflineVerdict"))},
            "errors": (400, *AUTH, 404, 409, 413, 422, 503),
        },
        "get": {
            "summary": "Every stored offline verdict of the role.",
            "responses": {"200": json_response("Verdicts.", _obj(
                "role", "verdicts", role={"type": "string"},
                verdicts={"type": "array", "items": ref("StoredOfflineVerdict")}))},
            "errors": (400, *AUTH, 503),
        },
    },
    "/v1/roles/{role}/offline/{config}": {"get": {
        "summary": "One config's stored offline verdict.",
        "responses": {"200": json_response("The verdict.", ref("StoredOfflineVerdict"))},
        "errors": (400, *AUTH, 404, 422, 503),
    }},
    "/v1/gatekeeper/lease": {
        "post": {
            "summary": "Take or renew the gatekeeper leader lease for a holder.",
            "requestBody": json_body(ref("LeaseRequest"), required=True),
            "responses": {"200": json_response("Held.", _obj(
                "held", "holder", "ttl_ms", held={"const": True}, holder={"type": "string"},
                ttl_ms={"type": ["integer", "null"]}))},
            "errors": (400, *AUTH, 409, 413, 422, 503),
        },
        "delete": {
            "summary": "Release the lease, only when the holder holds it.",
            "requestBody": json_body(ref("ReleaseRequest"), required=True),
            "responses": {"200": json_response("Released.", _obj(
                "released", "holder", released={"const": True}, holder={"type": "string"}))},
            "errors": (400, *AUTH, 409, 413, 422, 503),
        },
        "get": {
            "summary": "Who holds the lease and for how many more milliseconds.",
            "responses": {"200": json_response("The lease.", LEASE)},
            "errors": (*AUTH, 503),
        },
    },
    "/v1/gatekeeper/heartbeat": {
        "post": {
            "summary": "A gatekeeper's tick: who, leader or not, roles judged, errors.",
            "requestBody": json_body(ref("HeartbeatRequest"), required=True),
            "responses": {"200": json_response("Recorded; the summary after it.", HEARTBEAT)},
            "errors": (400, *AUTH, 413, 422, 503),
        },
        "get": {
            "summary": "Is anyone judging: the leader, its last tick (Redis's clock), status.",
            "responses": {"200": json_response("The heartbeat summary.", HEARTBEAT)},
            "errors": (*AUTH, 503),
        },
    },
    "/v1/fleet": {"get": {
        "summary": "What the fleet gets: expected false rollbacks among the live rollouts and "
                   "per day; with ROLEGATE_FLEET_BUDGET, the alpha it asks of each rollout "
                   "and the roles over it (advice, never applied).",
        "responses": {"200": json_response("The fleet's outlook over the token's roles.",
                                           FLEET)},
        "errors": (*AUTH, 503),
    }},
    "/roles/{role}": {"get": {
        "summary": "The dashboard page of one role (data inline only on an open server).",
        "responses": {"200": HTML, "404": HTML},
        "errors": (400,),
    }},
    "/ui/roles": {"get": {
        "summary": "The dashboard's roles table, as an HTML fragment.",
        "responses": {"200": HTML},
        "errors": (*AUTH, 503),
    }},
    "/ui/roles/{role}": {"get": {
        "summary": "The dashboard's detail of one role, as an HTML fragment.",
        "responses": {"200": HTML},
        "errors": (400, *AUTH, 404, 503),
    }},
}
