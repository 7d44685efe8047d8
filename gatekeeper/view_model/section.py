"""The base of every typed section of the gate view."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A typed part of the gate view: built trusted, read back validated."""

    # Unknown keys are ignored, not refused: a gatekeeper reads the views of a newer router.
    # An infinite figure (a CUSUM's h at p0 near 1) stays one, as the view always served it.
    model_config = ConfigDict(extra="ignore", frozen=True, ser_json_inf_nan="constants")

    def as_json(self) -> dict[str, Any]:
        """JSON-ready, as the gate view serves it."""
        return self.model_dump(mode="json")
