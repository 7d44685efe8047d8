#!/usr/bin/env python3
"""A deterministic refund-desk agent for the criteria and golden-set walk-through (no LLM).

It speaks rolegate's suite adapter protocol (the run request as JSON on stdin, its
trace report as one JSON object on stdout) and calls its tools through the suite's
tool proxy. It reads the job's `input.json` from its workspace, looks the order up,
verifies the customer's identity on refunds over 1000 (unless its config sets
`skip_verify`: the "faster" candidate that quietly drops a policy step), and
answers a JSON decision.

Stdlib only, so it runs with any Python 3.11.
"""

from __future__ import annotations

import http.client
import json
import sys
from typing import Any
from urllib.parse import urlsplit


def call(connection: http.client.HTTPConnection, prefix: str, tool: str, **args: Any) -> Any:
    """Call one tool through the proxy; raise RuntimeError with its error."""
    connection.request("POST", f"{prefix}/tools/{tool}", body=json.dumps(args),
                       headers={"Content-Type": "application/json"})
    answer = json.loads(connection.getresponse().read())
    if "error" in answer:
        raise RuntimeError(f"{tool}: {answer['error']}")
    return answer["result"]


def main() -> int:
    """Decide one refund request; print the trace report."""
    request = json.load(sys.stdin)
    config = request["config"]
    parts = urlsplit(request["tool_url"])
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80,
                                            timeout=30)
    prefix = parts.path.rstrip("/")
    job = json.loads(call(connection, prefix, "read_file", path="input.json")["content"])
    order = call(connection, prefix, "lookupOrder", order=job["order"])
    amount = float(job["amount"])
    if amount > 1000 and not config.get("skip_verify"):
        call(connection, prefix, "verifyIdentity", customer=job["customer"])
    limit = float(config.get("auto_refund_limit", 5000))
    decision = "refund" if amount <= limit and order.get("refundable", True) else "escalate"
    connection.close()
    print(json.dumps({
        "output_text": json.dumps({"decision": decision, "customer": {"id": job["customer"]},
                                   "amount": amount}),
        "answered": True,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
