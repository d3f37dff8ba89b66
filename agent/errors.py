"""The root of the agent's own errors, so a caller can tell them from a library's."""


class AgentError(Exception):
    """An error the agent raises itself, naming what went wrong."""
