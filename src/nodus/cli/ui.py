"""``nodus ui [--port N] [--host H] [--token T] [--open]``: the runs in a browser, read-only.

The server (:mod:`nodus.ui`) is imported only here, inside the handler: ``nodus ui --help`` and
every other command never load it. Bound to loopback by default; another ``--host`` needs the
access token, printed in the address to open (docs/ui.md, "Access").
"""

from __future__ import annotations

import argparse

__all__ = ["register"]

DEFAULT_PORT = 8765


def register(commands, groups, common: argparse.ArgumentParser) -> None:
    ui = commands.add_parser(
        "ui",
        parents=[common],
        help="serve a read-only page of the runs, their snapshots, lineage and models",
        description="Serve a local, read-only page of every run: progress, attempts and "
        "recoveries, snapshots, output, metric curves, lineage and the model registry. Bound to "
        "127.0.0.1; --host elsewhere requires an access token (printed in the address).",
    )
    ui.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)"
    )
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); any other needs an access token",
    )
    ui.add_argument(
        "--token",
        help="the access token (at least 16 characters; default $NODUS_UI_TOKEN, else a new "
        "one off loopback)",
    )
    ui.add_argument("--open", action="store_true", help="open the page in a browser")
    ui.set_defaults(handler=_ui)


def _ui(args: argparse.Namespace) -> int:
    import errno
    import os
    import signal
    import socket
    import sys
    import webbrowser

    from nodus.cli import output
    from nodus.client import Client
    from nodus.errors import UsageError
    from nodus.ui.server import UiServer, access_token

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: give 0 to 65535")
    token = access_token(args.host, args.token, dict(os.environ))
    # The first look creates or migrates the catalog, as `nodus runs list` would; from then on
    # every read is read-only.
    with Client(args.home, args.store) as first:
        first.runs(limit=1)
    client = Client(args.home, args.store, read_only=True)
    try:
        server = UiServer(client, args.host, args.port, token)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {args.port} on {args.host} is in use: give another with --port"
            ) from None
        if isinstance(error, socket.gaierror) or error.errno in (
            errno.EADDRNOTAVAIL,
            errno.EAFNOSUPPORT,
        ):
            raise UsageError(f"--host {args.host}: not an address of this machine") from None
        raise
    host = args.host if ":" not in args.host.strip("[]") else f"[{args.host.strip('[]')}]"
    url = f"http://{host}:{server.port}/" + (f"?token={token}" if token else "")
    try:
        # Ctrl-C and SIGTERM (systemd, kill) stop it the same way, from before the address is
        # printed, inside this try so the socket is always closed. SIGINT is taken explicitly:
        # a background job of a non-interactive shell, or nohup, inherits it ignored, and
        # Python then never turns it into KeyboardInterrupt.
        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        print(f"nodus ui: serving {client.home} read-only at {url}", flush=True)
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            output.say("other machines can reach this page; share the address only with its token")
        if args.open:
            webbrowser.open(url)
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("nodus ui: stopped", file=sys.stderr)
    finally:
        server.server_close()
        client.close()
    return 0


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
