"""The baselines: minimal Flask apps with no rolegate code, served like the router.

    gunicorn -c deploy/gunicorn.conf.py 'bench.bare_apps:resolve_app()'
    gunicorn -c deploy/gunicorn.conf.py 'bench.bare_apps:ingest_app()'

`resolve_app` has one route answering a constant JSON body of a resolve's size
and shape: what any Flask service pays per request under the same gunicorn
settings. `ingest_app` parses the posted JSON body and makes one Redis round
trip (a SET NX with a TTL on the run id, as a dedup check would), then answers a
constant body: the floor a single-trace ingest could reach. A batch body
(`{"traces": [...]}`) is one round trip too: one LPUSH per trace (its JSON),
pipelined, and a counts-only answer (bench/ingest_batch.py). Neither imports
anything from rolegate, so neither pays the router's hooks (logs, metrics,
auth); that is the point. The gunicorn config's hooks still run in the master
(embedded Redis only when REDIS_URL is unset: the benches always set it).
"""

from __future__ import annotations

import json
import os
from typing import Any

from flask import Flask, jsonify, request

#: The same shape and about the same size as a resolve answer.
RESOLVE_ANSWER = {"role": "summarizer", "config": "summarizer@2026-10-02", "arm": "current",
                  "stage": "canary", "share": 0.1, "shadow": None, "version": 1,
                  "key": "job-000", "stale": False}
INGEST_ANSWER = {"accepted": 1, "duplicates": 0, "refused": 0,
                 "results": [{"index": 0, "run_id": "r", "status": "accepted"}], "tripwire": []}


def resolve_app() -> Flask:
    """One GET route, /v1/resolve/<role>, answering a constant JSON body."""
    app = Flask("bare_resolve")

    @app.get("/v1/resolve/<role>")
    def resolve(role: str) -> Any:
        return jsonify(RESOLVE_ANSWER)

    @app.get("/healthz")
    def healthz() -> Any:
        return jsonify({"status": "ok"})

    return app


def ingest_app() -> Flask:
    """One POST route, /v1/traces: parse the JSON body, one Redis round trip, constant JSON."""
    import redis

    app = Flask("bare_ingest")
    connection = redis.Redis.from_url(os.environ["REDIS_URL"])

    @app.post("/v1/traces")
    def ingest() -> Any:
        body = request.get_json()
        if isinstance(body, dict) and isinstance(body.get("traces"), list):
            pipe = connection.pipeline(transaction=False)
            for trace in body["traces"]:
                pipe.lpush("bare:traces", json.dumps(trace))
            pipe.ltrim("bare:traces", 0, 99_999)
            pipe.execute()
            return jsonify({"accepted": len(body["traces"]), "duplicates": 0, "refused": 0})
        run_id = body.get("run_id") if isinstance(body, dict) else None
        connection.set(f"bare:run:{run_id}", "1", nx=True, ex=3600)
        return jsonify(INGEST_ANSWER)

    @app.get("/healthz")
    def healthz() -> Any:
        return jsonify({"status": "ok"})

    return app
