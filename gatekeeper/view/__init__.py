"""The gate view: read the stores, compute every section, return a `GateView`.

`gate_view()` in `gatekeeper.view.build` is the one function the API
(`GET /v1/roles/<role>/gate`), the dashboard and the benches call; it imports
no Flask. `context` holds what a view is computed from; `GateView`, the model of
what it returns, is `gatekeeper.view_model`'s (pure: the gatekeeper's core reads it).
"""

from __future__ import annotations

from gatekeeper.view.arms import arms_section, comparison_section
from gatekeeper.view.build import gate_view
from gatekeeper.view.context import GateContext, arm_configs, context_of, gate_context
from gatekeeper.view_model import GateView

__all__ = ["GateContext", "GateView", "arm_configs", "arms_section", "comparison_section",
           "context_of", "gate_context", "gate_view"]
