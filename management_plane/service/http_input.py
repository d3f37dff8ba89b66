"""What the API does before a handler sees a request: bounded JSON numbers, and the OpenAPI
document and its page behind an API key. No `from __future__ import annotations`: FastAPI
reads the handlers' annotations.

Python's int() refuses strings of more than 4300 digits with a ValueError, which FastAPI
would answer with a message naming no field. Integers of more digits than any field takes
are read as infinity instead, which every integer field refuses by name ("Input should be
a finite number") and `is_out_of_range` recognizes, so the answer is a 400 naming the field.
"""

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute

# Far above any integer field's range (the widest is a 64-bit byte count, 19 digits).
MAX_JSON_INTEGER_DIGITS = 30


def _bounded_int(text: str) -> int | float:
    if len(text.lstrip("-")) > MAX_JSON_INTEGER_DIGITS:
        return math.inf if not text.startswith("-") else -math.inf
    return int(text)


class BoundedJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), parse_int=_bounded_int)
        return self._json


class BoundedJsonRoute(APIRoute):
    """A route whose JSON body is parsed with bounded integers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            return await handler(BoundedJsonRequest(request.scope, request.receive))

        return bounded


def is_out_of_range(value: object) -> bool:
    """A number no field accepts: an integer read as infinity, or a float that overflowed."""
    return isinstance(value, float) and math.isinf(value)


# The page of the OpenAPI document: Swagger UI with the document inlined, since the browser
# that loads the page cannot add the API key header to the page's own fetch of it.
_DOCS_PAGE = """<!DOCTYPE html>
<html><head><title>{title}</title>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head><body><div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({{spec: {spec}, dom_id: "#swagger-ui"}});</script>
</body></html>
"""


def add_docs_routes(app: FastAPI, caller: Any) -> None:
    """/openapi.json and /docs for callers with a valid API key (`caller`: the app's
    dependency). The app is made with openapi_url, docs_url and redoc_url None."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(caller)])
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(caller)])
    def docs() -> HTMLResponse:
        # "</" never ends the script element early: JSON allows "<\/".
        spec = json.dumps(app.openapi()).replace("</", "<\\/")
        return HTMLResponse(_DOCS_PAGE.format(title=app.title, spec=spec))
