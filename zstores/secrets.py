"""Passwords out of messages: the one place zstores scrubs secrets.

A URL may carry a password (``redis://user:pw@host/0``,
``mongodb://h/?password=pw``); an error message, a ``repr`` or a log line
must never show it.  Every layer (the stores, ``open_store``, the
synchronizers, the command line, zfuse) scrubs through these functions, so
there is one rule for what a secret is and how it is hidden.  Imports only
the standard library: the lowest layer may use it.

Examples
--------
>>> redact_url("redis://user:pw@h:1/0?password=other")
'redis://user:***@h:1/0?password=***'
>>> secrets_of("redis://user:pw@h:1/0?password=other")
['pw', 'other']
>>> scrub("refused\\nwith pw", ["pw"])
'refused with ***'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["SECRET_OPTIONS", "mentions_secret", "redact_url", "scrub", "secrets_of"]

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#@]*)@")
#: Query options whose value is a secret: a password, or an object store's key,
#: token or signature (``?secret_access_key=``, ``?account_key=``, ``?sas_token=``,
#: a presigned URL's ``X-Amz-Signature`` or an Azure SAS's ``sig``).
SECRET_OPTIONS = frozenset({
    "password", "secret_access_key", "aws_secret_access_key", "session_token",
    "aws_session_token", "account_key", "sas_token", "sas_key", "token", "bearer_token",
    "client_secret", "x-amz-signature", "x-amz-security-token", "sig",
})
_PASSWORD_OPTION = re.compile(
    r"([?&](?:" + "|".join(re.escape(name) for name in sorted(SECRET_OPTIONS)) + r")=)[^&#]*",
    re.IGNORECASE)


def redact_url(url: str) -> str:
    """The URL with every secret (a user part's password, a ``SECRET_OPTIONS`` option) as ``***``.

    Parameters
    ----------
    url : str
        Any URL or plain path; one without a password comes back unchanged.

    Returns
    -------
    str

    Examples
    --------
    >>> redact_url("redis://user:secret@localhost:6379/0?password=x&db=1")
    'redis://user:***@localhost:6379/0?password=***&db=1'
    >>> redact_url("s3://bucket/run1?endpoint_url=http://h:9000&secret_access_key=abc")
    's3://bucket/run1?endpoint_url=http://h:9000&secret_access_key=***'
    >>> redact_url("/data/a@b:c")
    '/data/a@b:c'
    """
    match = _USERINFO.match(url)
    if match and ":" in match.group(2):
        user = match.group(2).split(":", 1)[0]
        url = f"{match.group(1)}{user}:***@{url[match.end():]}"
    return _PASSWORD_OPTION.sub(r"\1***", url)


def secrets_of(url: str) -> list[str]:
    """The passwords a URL carries (raw and percent-decoded), to scrub from messages.

    Examples
    --------
    >>> secrets_of("mongodb://u:p%40ss@h/")
    ['p%40ss', 'p@ss']
    >>> secrets_of("redis://h/0")
    []
    """
    parts = urlsplit(url)
    found = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    found += [value for name, value in parse_qsl(parts.query)
              if name.lower() in SECRET_OPTIONS and value]
    return list(dict.fromkeys(secret for secret in found if secret))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` on one line, every secret in it replaced by ``***``.

    One line, because a driver's message may span several and an error
    message of zstores is read as one.

    Examples
    --------
    >>> scrub("AUTH default pw failed", ["pw"])
    'AUTH default *** failed'
    """
    text = " ".join(text.split())
    # Longest first: a secret that contains another is hidden whole.
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def mentions_secret(error: BaseException, secrets: Iterable[str]) -> bool:
    """True when ``str`` or ``repr`` of ``error`` or of an exception chained to it
    (``__cause__``, ``__context__``) shows one of ``secrets``.

    Examples
    --------
    >>> mentions_secret(ValueError("bad pw"), ["pw"])
    True
    >>> mentions_secret(ValueError("bad"), ["pw"])
    False
    """
    secrets = [secret for secret in secrets if secret]
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        text = f"{current!s} {current!r}"
        if any(secret in text for secret in secrets):
            return True
        pending += [current.__cause__, current.__context__]
    return False
