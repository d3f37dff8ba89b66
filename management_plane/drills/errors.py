"""The drills' errors, in the management plane's `KaasError` family."""

from __future__ import annotations

from management_plane.errors import KaasError


class DrillError(KaasError):
    """A drill could not go on: a target that is not there, a cluster that did not recover."""


class DrillRefused(DrillError):
    """A drill refused before anything was touched: an unknown drill, a cluster that is not
    healthy, a fault that cannot run here."""
