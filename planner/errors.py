"""The root of every error the planner package raises: a caller catches PlannerError to
handle any of them; each subclass keeps the name its users already know (and, where it
had one, its built-in base, so existing `except ValueError` handlers still apply)."""

from __future__ import annotations


class PlannerError(Exception):
    """Something the planner was asked to do cannot be done; the message says why."""
