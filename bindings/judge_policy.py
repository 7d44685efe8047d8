"""A role's online judge, as its binding names it (`gate.judge`). Pure data.

Kept beside `bindings.models` (which imports it into `GatePolicy`) so each stays
one concern; `gatekeeper.judging` asks the judge, `router.api.judge_sampling`
samples for it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from rolegate.trace import JsonInt, JsonNumber, PositiveJsonInt


class Frozen(BaseModel):
    """Immutable, unknown keys and NaN/Infinity refused (as `bindings.models.Frozen`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


#: An environment variable's name: where a judge's credential is read from.
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class JudgePolicy(Frozen):
    """An online judge for the role's judge criteria (`gatekeeper.judging`).

    The credential is never stored here: `api_key_env` names the environment
    variable (or `api_key_file` the file) the judging process reads it from.
    """

    #: An OpenAI-compatible chat-completions endpoint.
    url: str = Field(min_length=1, max_length=2000, pattern=r"^https?://")
    model: str = Field(min_length=1, max_length=200)
    #: Share of each arm's runs judged (0-1); `arms` and `stages` override it.
    sample_rate: JsonNumber = Field(ge=0.0, le=1.0)
    api_key_env: str | None = Field(None, pattern=ENV_NAME_PATTERN)
    api_key_file: str | None = Field(None, min_length=1, max_length=1000)
    #: Sample rate per arm ("current", "candidate", "shadow"), before `stages`'.
    arms: dict[Literal["current", "candidate", "shadow"],
               Annotated[JsonNumber, Field(ge=0.0, le=1.0)]] = Field(default_factory=dict)
    #: Sample rate per stage ("shadow", "canary", "full", "stable").
    stages: dict[Literal["shadow", "canary", "full", "stable"],
                 Annotated[JsonNumber, Field(ge=0.0, le=1.0)]] = Field(default_factory=dict)
    #: The per-day budget (UTC days): judge calls, and tokens (estimated, 4 characters a
    #: token, when the judge does not say). Past either, sampling stops for the day.
    max_calls_per_day: JsonInt = Field(1000, ge=0)
    max_tokens_per_day: JsonInt = Field(2_000_000, ge=0)
    timeout_s: JsonNumber = Field(30.0, gt=0.0, le=600.0)
    #: Judge calls in flight at once.
    concurrency: JsonInt = Field(4, ge=1, le=64)
    #: Characters of input and of output text sent to the judge, each.
    max_chars: JsonInt = Field(8000, ge=100, le=200_000)
    #: Sampled runs waiting at most; past it a sampled run is counted as skipped.
    queue_max: JsonInt = Field(1000, ge=1, le=100_000)
    #: Share of judged runs asked twice, to measure the judge's agreement with itself.
    repeat_rate: JsonNumber = Field(0.0, ge=0.0, le=1.0)
    #: A judged criterion acts (gated or blocking) only once the judge agrees this
    #: often with the humans' feedback on it (else with itself) over at least
    #: `min_agreement_runs` runs; until then it is observed. None: no requirement.
    min_agreement: JsonNumber | None = Field(None, ge=0.0, le=1.0)
    min_agreement_runs: JsonInt = Field(20, ge=1)
    #: Judged runs the judged arm needs per judge criterion before the stage may
    #: advance (None: judged evidence is never required, a judge only rolls back).
    min_judged: PositiveJsonInt | None = None
    #: Blind pairwise in shadow: the share (0-1) of sampled shadow jobs whose two
    #: runs are also asked together, in a random order and unnamed (the blind
    #: pairwise prompt of gatekeeper.suite.judge); the winner is a flip for a paired
    #: test. None: off.
    pairwise: JsonNumber | None = Field(None, ge=0.0, le=1.0)
    #: Judge criterion keys tagged safety: a pair asked about any of them whose
    #: answer says `regression_detected` fails the stage at once.
    safety_criteria: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(
        default_factory=list, max_length=200)

    def rate(self, arm: str, stage: str) -> float:
        """The sample rate for a run of `arm` in `stage`."""
        for name, rate in self.arms.items():
            if name == arm:
                return rate
        for each, rate in self.stages.items():
            if each == stage:
                return rate
        return self.sample_rate
