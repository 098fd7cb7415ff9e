"""What the network stores share: scrubbing passwords and turning driver errors
into ``StoreConnectionError``.  Imports no driver, so each store works with
only its own installed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from ..errors import StoreConnectionError

__all__ = ["connection_error", "network_errors_as", "secrets_of"]

F = TypeVar("F", bound=Callable[..., Any])


def secrets_of(url: str) -> list[str]:
    """The passwords a URL carries, to scrub from error messages."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    found += [v for n, v in parse_qsl(parts.query) if n.lower() == "password" and v]
    return found


def network_errors_as(method: F) -> F:
    """Decorate a store method so the driver errors in ``self._network_errors``
    become the ``StoreConnectionError`` that ``self._connection_error`` makes."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any) -> Any:
        try:
            return method(self, *args)
        except self._network_errors as error:
            raise self._connection_error(error) from None

    return wrapper  # type: ignore[return-value]


def connection_error(store: str, where: str, secrets: list[str], error: BaseException) -> StoreConnectionError:
    """A ``StoreConnectionError`` naming the store and its redacted URL.

    The driver's message is kept with every password scrubbed; the driver's
    exception is not chained, so no traceback can carry a password either.
    """
    detail = str(error)
    for secret in secrets:
        detail = detail.replace(secret, "***")
    return StoreConnectionError(
        f"{store} could not talk to the server at {where}: "
        f"{type(error).__name__}: {detail}"
    )
