#!/usr/bin/env python3
"""A small deterministic agent speaking rolegate's suite adapter protocol (no LLM).

It reads the run request (JSON on stdin), calls its tools through the suite's
tool proxy, writes its artifact into the workspace and prints its trace report
as one JSON object. Its behaviour comes from the config:

- `summarize_tables: false` keeps markdown tables verbatim (the good config);
  `true` collapses any table longer than two rows into one sentence: the
  "summarize it when too long" edit that also collapsed the numeric tables, as a config change.
- `verify_reads: true` re-reads its artifact after writing it (one extra step).

Stdlib only, so it runs with any Python 3.11.
"""

from __future__ import annotations

import http.client
import json
import re
import sys
from typing import Any
from urllib.parse import urlsplit

USD_PER_TOKEN = 0.000002


class Tools:
    """Calls tools through the proxy over one kept-alive connection."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.prefix = parts.path.rstrip("/")
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1",
                                                     parts.port or 80, timeout=30)
        self.tokens = 0

    def call(self, tool: str, **args: Any) -> Any:
        """Call `tool`; return its result, or raise RuntimeError with its error."""
        body = json.dumps(args)
        self.connection.request("POST", f"{self.prefix}/tools/{tool}", body=body,
                                headers={"Content-Type": "application/json"})
        answer = json.loads(self.connection.getresponse().read())
        self.tokens += len(body) // 4 + len(json.dumps(answer)) // 4
        if "error" in answer:
            raise RuntimeError(f"{tool}: {answer['error']}")
        return answer["result"]


def is_table_line(line: str) -> bool:
    """A markdown table row."""
    return line.strip().startswith("|")


def summarize(text: str, summarize_tables: bool) -> str:
    """Shorten prose paragraphs to their first sentence; keep or collapse tables."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if lines and all(is_table_line(line) for line in lines):
            rows = len(lines) - 2
            if summarize_tables and rows > 2:
                out.append(f"The table lists {rows} rows of figures (summarized).")
            else:
                out.append(block)
        elif block.startswith("#"):
            out.append(block)
        else:
            prose = " ".join(line.strip() for line in lines)
            out.append(re.split(r"(?<=[.!?])\s", prose, maxsplit=1)[0])
    return "\n\n".join(out) + "\n"


def main() -> int:
    """Do the task; print the trace report."""
    request = json.load(sys.stdin)
    config = request["config"]
    task = request["task"]
    tools = Tools(request["tool_url"])
    inputs = [f for f in tools.call("list_files")["files"] if f.startswith("input/")]
    text = "\n\n".join(tools.call("read_file", path=path)["content"] for path in inputs)
    summary = summarize(text, bool(config.get("summarize_tables")))
    if "rate" in task:
        rate = tools.call("fetch_rates", currency="EUR")
        summary += f"\nEUR/USD {rate['usd']} as of {rate['as_of']}.\n"
    target = re.search(r"(output/[\w./-]*\w)", task)
    out_path = target.group(1) if target else "output/result.md"
    tools.call("write_file", path=out_path, content=summary)
    if config.get("verify_reads"):
        tools.call("read_file", path=out_path)
    if "notify" in task:
        tools.call("send_message", to="owner", text=summary.splitlines()[0][:200])
    tools.connection.close()
    print(json.dumps({
        "output_text": summary,
        "tokens": tools.tokens,
        "cost_usd": round(tools.tokens * USD_PER_TOKEN, 6),
        "answered": True,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
