#!/usr/bin/env python3
"""A scripted agent for the suite's tests: does exactly what its config's `script` says.

Config keys: `calls` ([tool, args] pairs made in order through the tool proxy),
`output_text`, `cost_usd`, `tokens`, `sleep` (seconds before answering), `exit`
(a non-zero status to crash with), `raw_stdout` (printed instead of a trace),
`report_env` (environment variable names whose values go into output_text),
`answered` (false: the run reports that it produced no answer).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request


def call(base: str, tool: str, args: dict) -> dict:
    """POST one tool call to the proxy and return its JSON answer."""
    request = urllib.request.Request(f"{base}/tools/{tool}", data=json.dumps(args).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def main() -> int:
    """Follow the script."""
    request = json.load(sys.stdin)
    config = request["config"]
    if config.get("sleep"):
        time.sleep(config["sleep"])
    if config.get("exit"):
        print("crashing on purpose", file=sys.stderr)
        return int(config["exit"])
    answers = [call(request["tool_url"], tool, args) for tool, args in config.get("calls", [])]
    if "raw_stdout" in config:
        print(config["raw_stdout"])
        return 0
    text = config.get("output_text", "")
    for name in config.get("report_env", []):
        text += f"{name}={os.environ.get(name, '')}\n"
    if config.get("report_answers"):
        text += json.dumps(answers)
    print(json.dumps({"output_text": text, "cost_usd": config.get("cost_usd", 0.0),
                      "tokens": config.get("tokens", 0),
                      "answered": config.get("answered", True)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
