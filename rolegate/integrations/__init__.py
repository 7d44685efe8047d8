"""Framework integrations: fill a rolegate trace from a framework's finished run.

One module per framework, each imported only by callers who use that framework
(it imports the framework): `rolegate.integrations.pydantic_ai`,
`rolegate.integrations.openai_agents`, `rolegate.integrations.google_adk`,
`rolegate.integrations.langgraph`, and
`rolegate.integrations.otel` for OpenTelemetry spans. Each exposes
`record(recorder, result)`, `stamps(agent)` and a pre-tool guard built on
`Client.allowed()`; see docs/integrations/.
"""
