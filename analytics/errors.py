"""The root of the analytics jobs' own errors (bad input files, unreadable offsets)."""


class AnalyticsError(Exception):
    """An error the analytics code raises itself, naming what went wrong."""
