"""The management plane's errors: one root, and the one place that says what each family of
error means to an operation's step and to an HTTP caller.

- `TemporaryError`: may succeed when tried again (a cluster not answering yet, a provider
  call that failed). A step that raises it waits and runs again until its timeout.
- `PermanentError`: trying again cannot help. A step that raises it fails its operation.
- `RequestRefused`: a request the service will not carry out; `refusal` says why and
  chooses the HTTP status.
- `ApiError`: an explicit HTTP answer, for the few places that need a particular code.

The command line reports any `KaasError` as one clear line and a non-zero exit.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class KaasError(Exception):
    """A problem the user can act on; its message names the problem and, where one exists, the fix."""


class TemporaryError(KaasError):
    """Worth trying again later: the step waits and runs again."""


class PermanentError(KaasError):
    """Trying again cannot help: the step fails its operation."""


class UpstreamError(KaasError):
    """A system the service depends on (Kafka, a cloud API) refused or failed a call."""

    http_code = "upstream_error"


class Refusal(Enum):
    """Why a request is refused; each has one HTTP status."""

    INVALID = "invalid"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    LIMIT_EXCEEDED = "limit_exceeded"
    BUSY = "cluster_busy"


# (HTTP status, the answer's code) of each refusal.
REFUSAL_ANSWERS: dict[Refusal, tuple[int, str]] = {
    Refusal.INVALID: (400, "invalid_request"),
    Refusal.FORBIDDEN: (403, "forbidden"),
    Refusal.NOT_FOUND: (404, "not_found"),
    Refusal.CONFLICT: (409, "conflict"),
    Refusal.LIMIT_EXCEEDED: (409, "limit_exceeded"),
    Refusal.BUSY: (409, "cluster_busy"),
}


class RequestRefused(KaasError):
    """A request refused before anything changed."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


class ApiError(KaasError):
    """An HTTP answer chosen by the code that raises it."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class StepVerdict(Enum):
    """What an exception raised by an operation's step does to the operation."""

    RETRY = "retry"  # the step waits and runs again (until its timeout)
    FAIL = "fail"  # the operation fails at this step


def step_verdict(exc: KaasError) -> StepVerdict:
    """A known error's effect on the step that raised it. Only a permanent error fails the
    operation at once; anything else the user can act on may clear while the step waits."""
    if isinstance(exc, (PermanentError, RequestRefused)):
        return StepVerdict.FAIL
    return StepVerdict.RETRY


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    code: str
    message: str


def http_answer(exc: Exception) -> HttpAnswer:
    """The HTTP answer to a request that raised `exc`; anything unknown is a 500 that names
    only the exception's type (its message may hold internals)."""
    if isinstance(exc, ApiError):
        return HttpAnswer(exc.status, exc.code, exc.message)
    if isinstance(exc, RequestRefused):
        status, code = REFUSAL_ANSWERS[exc.refusal]
        return HttpAnswer(status, code, str(exc))
    if isinstance(exc, UpstreamError):
        return HttpAnswer(502, exc.http_code, str(exc))
    if isinstance(exc, PermanentError):
        return HttpAnswer(409, "failed", str(exc))
    if isinstance(exc, KaasError):  # temporary, or the service cannot do it now
        return HttpAnswer(503, "unavailable", str(exc))
    return HttpAnswer(500, "internal", f"internal error: {type(exc).__name__}")
