"""A static, read-only HTTP file server over one folder, with Range requests.

The tests' stand-in for a web server or CDN serving a Zarr hierarchy
(``http(s)://`` stores).  Python's ``http.server`` ignores ``Range`` headers
(it always answers 200 with the whole file), so a client's byte-range read
would pass against it without being a range read at all.  Werkzeug (already
in ``.venv-emulators`` as moto's web layer, and a well-kept Pallets library)
implements the HTTP side: ``Range`` (one range, suffix ranges ``bytes=-N``
included) answered 206 with ``Content-Range``, unsatisfiable ranges 416,
``ETag`` / ``Last-Modified`` with conditional requests (304), ``HEAD``.
This file only maps paths to files.

For tests of concurrency, ``--delay-ms`` holds every request that long (a
network's latency, so that concurrent requests surely overlap) and the path
``/.requests`` answers ``{"total": n, "peak": n}``: how many requests were
served and the most that were in flight at once (``/.requests?reset=1``
answers and starts counting afresh).  Neither changes what a file read gives.

Not served: several ranges in one request (416, as werkzeug does; object-store
clients ask for one range per request), writes (405), and paths escaping the
folder (404).  A folder answers an HTML page of links to its entries (what
fsspec's HTTP file system parses to list); there is no WebDAV ``PROPFIND``.

Examples
--------
::

    python scripts/http_range_server.py --port 8080 --root /srv/data
    curl -H 'Range: bytes=0-3' http://127.0.0.1:8080/array/zarr.json
"""

from __future__ import annotations

import argparse
import html
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.security import safe_join
from werkzeug.serving import run_simple
from werkzeug.utils import send_file
from werkzeug.wrappers import Request, Response


def folder_page(folder: Path, url_path: str) -> Response:
    """An HTML list of links to a folder's entries (sub-folders end with ``/``)."""
    base = url_path if url_path.endswith("/") else url_path + "/"
    items = []
    for entry in sorted(folder.iterdir()):
        name = entry.name + ("/" if entry.is_dir() else "")
        items.append(f'<li><a href="{html.escape(base + quote(name))}">'
                     f"{html.escape(name)}</a></li>")
    body = f"<!DOCTYPE html><html><body><ul>\n{chr(10).join(items)}\n</ul></body></html>\n"
    return Response(body, mimetype="text/html")


class RequestCounter:
    """Requests served and the most in flight at once (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.total = 0

    def __enter__(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.total += 1
            self.peak = max(self.peak, self.in_flight)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.in_flight -= 1

    def report(self, reset: bool) -> Response:
        with self.lock:
            body = json.dumps({"total": self.total, "peak": self.peak})
            if reset:
                self.total = self.peak = 0
        return Response(body, mimetype="application/json")


def make_app(root: Path, delay: float = 0.0) -> Callable[..., Iterable[bytes]]:
    """The WSGI application serving ``root`` read-only; each request held ``delay`` seconds."""
    root = root.resolve()
    counter = RequestCounter()

    @Request.application
    def app(request: Request) -> Response:
        if request.path == "/.requests":
            return counter.report(reset="reset" in request.args)
        with counter:
            if delay:
                time.sleep(delay)
            return serve(request)

    def serve(request: Request) -> Response:
        try:
            if request.method not in ("GET", "HEAD"):
                raise MethodNotAllowed(valid_methods=["GET", "HEAD"])
            # safe_join refuses '..' and absolute parts: nothing outside root.
            joined = safe_join(str(root), request.path.lstrip("/"))
            if joined is None or not os.path.exists(joined):
                raise NotFound()
            path = Path(joined)
            if path.is_dir():
                return folder_page(path, request.path)
            # conditional=True: Range, If-Range, ETag and If-None-Match handling.
            return send_file(path, request.environ, conditional=True, etag=True,
                             mimetype="application/octet-stream")
        except HTTPException as error:
            return error.get_response(request.environ)

    return app


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True, help="the folder to serve")
    parser.add_argument("--delay-ms", type=float, default=0.0,
                        help="hold every request this long (a network's latency)")
    args = parser.parse_args(None if argv is None else list(argv))
    if not args.root.is_dir():
        parser.error(f"--root {args.root} is not a folder")
    # threaded: clients read many ranges at once (batch reads are concurrent).
    run_simple(args.host, args.port, make_app(args.root, args.delay_ms / 1000), threaded=True)


if __name__ == "__main__":
    main()
