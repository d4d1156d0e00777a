"""What ``nodus ui`` refuses and what it never does: a bind off loopback without a token,
requests without the token, paths outside its pages, methods other than GET and HEAD, a Host
that is not loopback, writes to the catalog, and heavy imports. Quick: an empty home, the
server in a thread (the command itself where its exit matters)."""

from __future__ import annotations

import http.client
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from conftest import NODUS, UiProcess
from nodus.client import Client
from nodus.errors import CatalogError, UsageError
from nodus.runner.catalog.core import Catalog
from nodus.ui.html import Markup, tag
from nodus.ui.pages.metrics import chosen
from nodus.ui.server import HEADERS, UiServer, access_token, route

TOKEN = "t" * 24


@pytest.fixture
def served(nodus_home) -> Iterator[UiServer]:
    Client(nodus_home).runs()  # a catalog, as `nodus ui` makes sure of first
    server = UiServer(Client(nodus_home, read_only=True), "127.0.0.1", 0, None)
    # `shutdown()` waits for the loop's next poll: at socketserver's default of 0.5 s that was
    # half a second of each test's teardown (docs/benchmarks.md, "The test suite").
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def request(server: UiServer, method: str, path: str, headers: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in {"Host": f"127.0.0.1:{server.port}", **(headers or {})}.items():
        connection.putheader(name, value)
    connection.endheaders()
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer, body


def test_loopback_needs_no_token_and_anywhere_else_one_is_made_or_refused():
    assert access_token("127.0.0.1", None, {}) is None
    assert access_token("::1", None, {}) is None
    made = access_token("0.0.0.0", None, {})
    assert made is not None and len(made) >= 16
    assert access_token("0.0.0.0", None, {"NODUS_UI_TOKEN": TOKEN}) == TOKEN
    for given in ("", "short"):
        with pytest.raises(UsageError, match="at least 16 characters"):
            access_token("0.0.0.0", given, {})
    with pytest.raises(UsageError, match="NODUS_UI_TOKEN"):
        access_token("192.168.1.5", None, {"NODUS_UI_TOKEN": ""})


def test_the_command_refuses_a_non_local_bind_without_a_token_in_one_line(nodus_home):
    proc = subprocess.run(
        [*NODUS, "ui", "--host", "0.0.0.0", "--token", ""], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "at least 16 characters" in proc.stderr


def test_a_token_is_printed_and_required_then_kept_in_a_strict_cookie(nodus_home):
    server = UiProcess(nodus_home, "--host", "0.0.0.0")
    try:
        port = int(server.base.rsplit(":", 1)[1])
        token = server.url.split("?token=")[1]
        assert len(token) >= 16

        def get(path: str, headers: dict | None = None):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", path, headers=headers or {})
            answer = connection.getresponse()
            return answer, answer.read()

        assert get("/")[0].status == 403
        assert get("/assets/ui.js")[0].status == 403
        assert get("/?token=" + "x" * len(token))[0].status == 403
        assert get("/", {"Cookie": "nodus_ui_token=wrong"})[0].status == 403
        answer, _ = get("/?token=" + token)
        assert answer.status == 303 and answer.headers["Location"] == "/"
        cookie = answer.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        answer, body = get("/", {"Cookie": cookie.split(";")[0]})
        assert answer.status == 200 and b"Runs" in body
    finally:
        status, err = server.stop()
    assert status == 0 and "Traceback" not in err  # Ctrl-C stops it cleanly


@pytest.mark.parametrize(
    "path",
    [
        "/../../etc/passwd",
        "/assets/..%2f..%2fpyproject.toml",
        "/assets/%2e%2e/%2e%2e/pyproject.toml",
        "/assets/ui.css/../../../../pyproject.toml",
        "/assets/../server.py",
        "/assets/server.py",
        "/assets/ui.css%00.py",
        "/runs/..%2f..%2fetc%2fpasswd",
        "/runs/../../etc/passwd",
        "//etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/runs/x/metrics/../../../etc/passwd",
        "/etc/passwd",
        "/favicon.ico",
    ],
)
def test_nothing_outside_its_pages_is_served(served, path):
    answer, body = request(served, "GET", path)
    assert answer.status == 404
    assert b"root:" not in body and b"[project]" not in body and b"import" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
def test_other_methods_are_refused(served, method):
    answer, _ = request(served, method, "/")
    assert answer.status == 405 and answer.headers["Allow"] == "GET, HEAD"


def test_every_answer_carries_the_security_headers_and_head_has_no_body(served):
    for path in ("/", "/lineage", "/models", "/assets/ui.css", "/nope"):
        answer, _ = request(served, "GET", path)
        for name, value in HEADERS.items():
            assert answer.headers[name] == value, (path, name)
    answer, body = request(served, "HEAD", "/")
    assert answer.status == 200 and body == b"" and int(answer.headers["Content-Length"]) > 0
    assert "'unsafe-inline'" not in HEADERS["Content-Security-Policy"]


def test_a_loopback_page_answers_only_to_a_loopback_host(served):
    assert request(served, "GET", "/", {"Host": "evil.example:80"})[0].status == 403
    assert request(served, "GET", "/", {"Host": f"localhost:{served.port}"})[0].status == 200


def test_routes_are_a_fixed_list():
    assert route("/") == ("runs", ())
    assert route("/runs/run_1/metrics") == ("metrics", ("run_1",))
    assert route("/runs/nightly%20sft") == ("run", ("nightly sft",))  # a key, as links encode it
    assert route("/assets/ui.js") == ("asset", ("/assets/ui.js",))
    assert route("/runs/..") is None and route("/assets/x") is None and route("/runs/") is None


def test_the_reward_and_its_components_are_always_drawn_the_rest_on_asking():
    names = ["loss", "reward", "learning_rate", "grad_norm", "clip_ratio/high_max", "entropy"]
    names += ["rewards/digits/mean", "rewards/digits/std", "rewards/short/mean"]
    drawn, left = chosen(names, every=False)
    assert drawn == ["loss", "reward", "rewards/digits/mean", "rewards/short/mean", *names[2:4]]
    assert left == ["clip_ratio/high_max", "entropy", "rewards/digits/std"]
    assert chosen(names, every=True) == (drawn + left, [])


def test_every_value_is_escaped_unless_it_is_markup():
    built = tag("td", {"title": '"><script>'}, "<b>x</b>", Markup("<i>ok</i>"))
    assert built == '<td title="&quot;&gt;&lt;script&gt;">&lt;b&gt;x&lt;/b&gt;<i>ok</i></td>'


def test_the_read_only_catalog_refuses_writes_and_creates_nothing(nodus_home):
    with pytest.raises(CatalogError, match="no run catalog"):
        Catalog(str(nodus_home), read_only=True)
    assert list(nodus_home.iterdir()) == []
    Client(nodus_home).runs()
    catalog = Catalog(str(nodus_home), read_only=True)
    with pytest.raises(CatalogError):
        catalog.set_runner("run_x", 1, "here")


@pytest.mark.parametrize("name", ["what?mode=rw", "a#b", "100%25", "sp ace"])
def test_the_read_only_catalog_opens_a_home_whose_name_looks_like_a_uri(tmp_path, name):
    home = tmp_path / name / "home"  # its folder's name is quoted into SQLite's URI
    Client(home).runs()
    before = set(tmp_path.rglob("*"))
    with Client(home, read_only=True) as client:
        assert client.runs() == []
    made = {path.relative_to(home) for path in set(tmp_path.rglob("*")) - before}
    assert {str(path) for path in made} <= {"nodus.db-wal", "nodus.db-shm"}  # a WAL reader's


def test_serving_pages_imports_no_ml_framework(nodus_home):
    script = textwrap.dedent(f"""
        import sys, threading, urllib.request
        from nodus.client import Client
        from nodus.ui.server import UiServer
        Client({str(nodus_home)!r}).runs()
        server = UiServer(Client({str(nodus_home)!r}, read_only=True), "127.0.0.1", 0, None)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        for path in ("/", "/lineage", "/models", "/assets/ui.js"):
            urllib.request.urlopen(f"http://127.0.0.1:{{server.port}}{{path}}").read()
        heavy = ("torch", "transformers", "matplotlib", "ray", "numpy", "pydantic", "fsspec")
        print(sorted(m for m in heavy if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_port_in_use_is_one_line(nodus_home, served):
    proc = subprocess.run(
        [*NODUS, "ui", "--port", str(served.port)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and "in use" in proc.stderr and "Traceback" not in proc.stderr


def test_help_is_one_page_and_loads_no_server():
    script = textwrap.dedent("""
        import contextlib, io, sys
        from nodus.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as said:
            try:
                main(["ui", "--help"])
            except SystemExit as done:
                status = done.code
        print(status, "nodus.ui.server" in sys.modules, "--token TOKEN" in said.getvalue())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "False", "True"] and proc.stderr == ""


@pytest.mark.parametrize(
    ("port", "said"), [("99999", "give 0 to 65535"), ("-1", "give 0 to 65535"), ("x", "int")]
)
def test_a_bad_port_is_refused_without_a_traceback(nodus_home, port, said):
    proc = subprocess.run(
        [*NODUS, "ui", "--port", port], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and said in proc.stderr.splitlines()[-1]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if port != "x":  # argparse's own words come under its usage line
        assert proc.stderr.count("\n") == 1


def test_an_empty_home_is_served_and_ctrl_c_stops_it_in_one_line(tmp_path):
    home = tmp_path / "not-yet"  # no folder, no catalog: the first look makes them
    server = UiProcess(home)
    try:
        for path, words in (
            ("/", b"No runs match."),
            ("/lineage", b"No run was started from another run"),
            ("/models", b"No model is registered yet."),
        ):
            with urllib.request.urlopen(server.base + path, timeout=10) as answer:
                assert answer.status == 200 and words in answer.read()
    finally:
        status, err = server.stop()  # SIGINT: what Ctrl-C sends (started with it ignored)
    assert (status, err) == (0, "nodus ui: stopped\n")


def test_sigterm_stops_it_in_one_line(tmp_path):
    server = UiProcess(tmp_path / "home")
    assert server.stop(signal.SIGTERM) == (0, "nodus ui: stopped\n")  # systemd, kill


def test_the_upload_queue_is_said_in_words_and_its_error_stays_text():
    from nodus.ui.pages.run_tables import uploads

    # the shape `runs get --json` carries: the uploader's status (nodus.store.upload) and the
    # saves that never reached the store (the catalog's unrecorded list)
    run = {
        "upload": {
            "uploading": {
                "step": 30,
                "snapshot": "ckpt_1",
                "role": "checkpoint",
                "bytes_done": 1024,
                "bytes_total": 4096,
            },
            "waiting": 2,
            "skipped": 1,
            "uploaded": 5,
            "error": "<b>503</b> from the store",
            "retrying_until": None,
        },
        "unrecorded": [{"role": "checkpoint", "step": 10}, {"role": "outputs", "step": None}],
    }
    said = uploads(run)
    assert "uploading step 30: 1.0 KiB of 4.0 KiB" in said
    assert "2 waiting, 1 skipped, 5 uploaded" in said
    assert "last error: &lt;b&gt;503&lt;/b&gt; from the store" in said and "<b>" not in said
    assert "never reached the store: step 10, outputs" in said
    assert uploads({"upload": None, "unrecorded": []}) == ""  # a run without a remote store
