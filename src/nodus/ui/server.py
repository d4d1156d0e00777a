"""The server of ``nodus ui``: the standard library's threading HTTP server, read-only.

What it answers is fixed by construction: GET and HEAD of the pages :func:`route` knows and of
the assets in :data:`ASSETS` (read from the package by name, never from a path built from the
URL, so no request can reach another file); every other path is 404, every other method 405.
Each answer carries a Content-Security-Policy that lets the page run only its own script, and
headers that keep it out of frames and other sites' referrers.

Access: bound to loopback (the default), the Host header must name loopback too, so a web page
elsewhere cannot reach it through a rebound DNS name. Bound elsewhere, every request needs the
access token (``?token=`` once, then an HttpOnly, SameSite=Strict cookie); :func:`access_token`
refuses such a bind without one.
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from nodus.client import Client
from nodus.errors import CatalogError, NodusError, NotFoundError, UsageError
from nodus.ui import pages
from nodus.ui.html import tag

__all__ = ["ASSETS", "TOKEN_VAR", "UiServer", "access_token", "is_loopback", "route"]

TOKEN_VAR = "NODUS_UI_TOKEN"
COOKIE = "nodus_ui_token"
MIN_TOKEN = 16  # characters: shorter is guessable by anyone who can reach the port
ASSETS = {"/assets/ui.css": ("ui.css", "text/css"), "/assets/ui.js": ("ui.js", "text/javascript")}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_RUN = re.compile(r"/runs/([^/]+)(/metrics|/metrics\.csv)?")
_log = logging.getLogger("nodus.ui")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_token(host: str, given: str | None, environ: dict[str, str]) -> str | None:
    """The token every request must carry, or None on loopback without one.

    On another address a token is required: ``given`` (``--token``), else ``$NODUS_UI_TOKEN``,
    else a new random one. An empty or short one is refused, never served without.
    """
    token = given if given is not None else environ.get(TOKEN_VAR)
    if token is None:
        return None if is_loopback(host) else secrets.token_urlsafe(24)
    if len(token) < MIN_TOKEN:
        source = "--token" if given is not None else TOKEN_VAR
        if is_loopback(host) and not token:
            return None
        raise UsageError(
            f"{source} must be at least {MIN_TOKEN} characters: --host {host} lets other "
            f"machines reach the page (leave {source} out and one is made for you)"
        )
    return token


_FIXED = {
    "/": "runs",
    "/lineage": "lineage",
    "/models": "models",
    "/api/output": "output",
    "/api/output/raw": "raw_output",
}


def route(path: str) -> tuple[str, tuple[str, ...]] | None:
    """The page a path names and its arguments, or None (404): ``/``, ``/runs/REF``,
    ``/runs/REF/metrics``, ``/runs/REF/metrics.csv`` (every series, a download), ``/lineage``,
    ``/models``, ``/api/output``, ``/api/output/raw`` (an attempt's output, its bytes as
    written: a download) and the assets."""
    if path in _FIXED:
        return _FIXED[path], ()
    if path in ASSETS:
        return "asset", (path,)
    found = _RUN.fullmatch(path)
    if found and found.group(1) not in (".", ".."):
        # A run reference is looked up in the catalog, never used as a path: a key written
        # with spaces arrives percent-encoded, as the page's own links encode it.
        page = {None: "run", "/metrics": "metrics", "/metrics.csv": "csv"}[found.group(2)]
        return page, (unquote(found.group(1)),)
    return None


class UiServer(http.server.ThreadingHTTPServer):
    """One ``nodus ui``: the pages of one home's catalog, read through one read-only client."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, client: Client, host: str, port: int, token: str | None) -> None:
        self.client = client
        self.token = token
        self.loopback = is_loopback(host)
        self.lock = threading.Lock()  # one page at a time reads the client's connection
        if ":" in host.strip("[]"):
            self.address_family = socket.AF_INET6
        super().__init__((host.strip("[]"), port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: UiServer
    server_version = "nodus-ui"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)

    # --- methods ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _refuse_method(self) -> None:
        self.close_connection = True  # its body, if any, is never read
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            b"only GET and HEAD\n",
            "text/plain",
            True,
            extra={"Allow": "GET, HEAD", "Connection": "close"},
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method

    # --- one request --------------------------------------------------------------------------

    def _answer(self, body: bool) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if not self._host_allowed():
            self._send(
                HTTPStatus.FORBIDDEN, b"this page answers on loopback only\n", "text/plain", body
            )
            return
        if not self._token_allowed(query, parts.path, body):
            return
        found = route(parts.path)
        if found is None:
            self._page_error(HTTPStatus.NOT_FOUND, "no such page", body)
            return
        name, args = found
        if name == "asset":
            self._asset(args[0], body)
            return
        try:
            with self.server.lock:
                self._dispatch(name, args, query, body)
        except NotFoundError as error:
            self._page_error(HTTPStatus.NOT_FOUND, str(error), body)
        except UsageError as error:
            self._page_error(HTTPStatus.BAD_REQUEST, str(error), body)
        except (CatalogError, NodusError, OSError) as error:
            self._page_error(HTTPStatus.SERVICE_UNAVAILABLE, str(error), body)
        except Exception as error:  # a bug in nodus: said on the page, the server goes on
            _log.exception("nodus ui: %s failed", parts.path)
            words = f"internal error: {type(error).__name__}: {error} (please report it)"
            self._page_error(HTTPStatus.INTERNAL_SERVER_ERROR, words, body)

    def _dispatch(
        self, name: str, args: tuple[str, ...], query: dict[str, str], body: bool
    ) -> None:
        client = self.server.client
        if name == "raw_output":
            self._raw_output(query, body)
            return
        if name == "output":
            piece = client.output(
                query.get("run", ""),
                query.get("stage", ""),
                _number(query.get("attempt")),
                _number(query.get("offset")),
            )
            data = json.dumps(piece).encode()
            self._send(HTTPStatus.OK, data, "application/json", body)
            return
        if name == "csv":
            self._csv(*pages.metrics_csv(client, args[0]), body)
            return
        builders: dict[str, Callable[[], pages.Page]] = {
            "runs": lambda: pages.runs_page(client, query),
            "run": lambda: pages.run_page(client, args[0]),
            "metrics": lambda: pages.metrics_page(
                client,
                args[0],
                query.get("with") or None,
                every=bool(query.get("all")),
                options=pages.chart_options(query),
            ),
            "lineage": lambda: pages.lineage_page(client),
            "models": lambda: pages.models_page(client),
        }
        page = builders[name]()
        if query.get("fragment"):  # the live part alone; the header says when to stop asking
            self._send(
                HTTPStatus.OK,
                page.live.encode(),
                "text/html; charset=utf-8",
                body,
                extra={"X-Nodus-Changing": "1" if page.changing else "0"},
            )
            return
        live = {k: v for k, v in query.items() if k != "token"}
        live["fragment"] = "1"
        document = page.document(self._path_only() + "?" + urlencode(live))
        self._send(HTTPStatus.OK, document.encode(), "text/html; charset=utf-8", body)

    def _csv(self, text: str, filename: str, body: bool) -> None:
        """A download: the name is a run id (letters, digits, ``-``), quoted all the same."""
        disposition = f'attachment; filename="{filename.replace(chr(34), "")}"'
        extra = {"Content-Disposition": disposition}
        self._send(HTTPStatus.OK, text.encode(), "text/csv; charset=utf-8", body, extra=extra)

    def _raw_output(self, query: dict[str, str], body: bool) -> None:
        """An attempt's output as the program wrote it, a download: the page shows the lines a
        terminal would (progress bars collapsed), this keeps every byte."""
        run, stage = query.get("run", ""), query.get("stage", "")
        attempt = _number(query.get("attempt"))
        path = self.server.client.output_file(run, stage, attempt)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{run}-{stage}-attempt{attempt}.log")
        extra = {"Content-Disposition": f'attachment; filename="{name}"'}
        with contextlib.ExitStack() as stack:
            handle = None
            if path:
                with contextlib.suppress(FileNotFoundError):
                    handle = stack.enter_context(open(path, "rb"))
            # copied as it is on disk now (a running attempt's log grows): never read whole
            size = os.fstat(handle.fileno()).st_size if handle else 0
            self._send_head(HTTPStatus.OK, size, "text/plain; charset=utf-8", extra)
            if body and handle:
                _copy(handle, self.wfile, size)

    def _path_only(self) -> str:
        return urlsplit(self.path).path

    def _asset(self, path: str, body: bool) -> None:
        name, kind = ASSETS[path]
        data = resources.files("nodus.ui").joinpath("assets", name).read_bytes()
        self._send(HTTPStatus.OK, data, f"{kind}; charset=utf-8", body)

    # --- access -------------------------------------------------------------------------------

    def _host_allowed(self) -> bool:
        """On loopback, the Host header names loopback (no DNS rebinding onto the page)."""
        if not self.server.loopback:
            return True
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return is_loopback(name) if name else False

    def _token_allowed(self, query: dict[str, str], path: str, body: bool) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = query.get("token")
        if given is not None and hmac.compare_digest(given.encode(), token.encode()):
            # Into a cookie, and out of the address bar (and the browser's history).
            rest = {k: v for k, v in query.items() if k != "token"}
            cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
            target = path + ("?" + urlencode(rest) if rest else "")
            self._send(
                HTTPStatus.SEE_OTHER,
                b"",
                "text/plain",
                body,
                extra={"Set-Cookie": cookie, "Location": target},
            )
            return False
        if hmac.compare_digest(self._cookie().encode(), token.encode()):
            return True
        self._send(
            HTTPStatus.FORBIDDEN,
            b"this page needs its access token: open the address nodus ui printed\n",
            "text/plain",
            body,
        )
        return False

    def _cookie(self) -> str:
        for header in self.headers.get_all("Cookie") or []:
            for part in header.split(";"):
                name, _, value = part.strip().partition("=")
                if name == COOKIE:
                    return value
        return ""

    # --- answers ------------------------------------------------------------------------------

    def _page_error(self, status: HTTPStatus, words: str, body: bool) -> None:
        page = pages.Page(
            f"{status.value} {status.phrase}", tag("p", {"class": "error"}, words), False, ""
        )
        self._send(status, page.document("").encode(), "text/html; charset=utf-8", body)

    def _send(
        self,
        status: HTTPStatus,
        data: bytes,
        kind: str,
        body: bool,
        extra: dict[str, str] | None = None,
    ) -> None:
        self._send_head(status, len(data), kind, extra)
        if body:
            self.wfile.write(data)

    def _send_head(
        self, status: HTTPStatus, length: int, kind: str, extra: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        for name, value in {**HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.end_headers()


def _copy(source: Any, target: Any, size: int) -> None:
    """``size`` bytes of ``source`` to ``target``, a piece at a time."""
    while size > 0:
        piece = source.read(min(size, _PIECE))
        if not piece:
            break
        target.write(piece)
        size -= len(piece)


_PIECE = 1024 * 1024


def _number(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        raise UsageError(f"{text!r} is not a number") from None
