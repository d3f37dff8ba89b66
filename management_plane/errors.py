"""Errors the command line reports as one clear line and a non-zero exit."""


class KaasError(Exception):
    """A problem the user can act on; its message names the problem and, where one exists, the fix."""
