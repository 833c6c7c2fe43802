"""How every ``/admin/`` call is served: an operation of the driver, metered, with its own store-outage answer.

The request paths' 503 says "nothing was paused or resumed", which means nothing for an admin call
and would be wrong about a write. A store that does not answer within ``store.timeout_ms`` may
still have taken the write (it runs it once it wakes up; a ``WAIT`` that confirms too few
replicas follows a write the primary made), so an admin write that gets this 503 may have been
applied: the message says so, and how to find out, instead of inviting a blind retry. A read
changed nothing.
"""

from __future__ import annotations

from starlette.requests import Request

from gateway.api.driver import Answer, Handler, Operation
from gateway.api.request.lifecycle import Work
from gateway.api.services import AdminServices, admin_services
from gateway.errors import GatewayError
from gateway.store.errors import StoreUnavailable

_UNAVAILABLE = "the store is unavailable (it refused the connection or did not answer within store.timeout_ms)"
_WRITES = {
    "POST": "; the key may have been created all the same, with a secret nobody was given: list the keys "
            "(GET /admin/keys) and revoke any you cannot account for before creating it again",
    "PATCH": "; the change may have been applied all the same: read the key back (GET /admin/keys/{id}) "
             "before retrying",
    "DELETE": "; the key may have been revoked all the same: read it back (GET /admin/keys/{id}) before "
              "retrying",
}
_READ = "; nothing was changed, retry later"


def store_unavailable(method: str) -> GatewayError:
    """The 503 of an admin call whose store did not answer, true to what may have happened."""
    return GatewayError(503, _UNAVAILABLE + _WRITES.get(method, _READ), "service_unavailable_error",
                        code="store_unavailable")


def admin_operation(method: str, path: str, handler: Handler[AdminServices]) -> Operation[AdminServices]:
    """``handler`` as a metered, recorded operation (``path`` is its template) with the admin store 503."""

    async def serve(request: Request, services: AdminServices, work: Work) -> Answer:
        try:
            return await handler(request, services, work)
        except StoreUnavailable as exc:
            raise store_unavailable(request.method) from exc

    serve.__name__ = getattr(handler, "__name__", "admin")
    return Operation(method, path, serve, admin_services, metered=True)
