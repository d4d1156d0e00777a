"""Remote stores: does training wait on uploads, and do uploads go as fast as `s3fs put`?

    .venv/bin/python benchmarks/remote.py [--state-mb 32] [--steps 40] [--save-every 5]
        [--sleep 0.05] [--mbps 20] [--files 4] [--file-mb 32] [--rounds 3]

1. Step time. The shipped counter with ``--state-mb`` of state per save runs through the real
   `nodus run`, once with a local store and once with a remote one (moto's S3 server on
   loopback) whose writes are throttled to ``--mbps`` MB/s (``NODUS_STORE_THROTTLE_MBPS``).
   The program times its own steps (its wall time divided by its steps), so the final upload
   the runner waits for at the end is not counted: the question is whether training waits.
   Target: remote / local <= 1.02.
2. Upload throughput. ``--files`` files of ``--file-mb`` MB, captured into a staging store,
   uploaded by nodus's Uploader to a fresh prefix vs ``s3fs put`` of the same files to another.
   Target: nodus / s3fs >= 0.9 (throughput ratio of the medians).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

TIMED_COUNTER = """
import json, sys, time
from nodus.testing import counter
started = time.perf_counter()
status = counter.main(sys.argv[1:])
with open({timing!r}, "w") as handle:
    json.dump({"seconds": time.perf_counter() - started}, handle)
sys.exit(status)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    os.environ.update(env)
    return server, env


def new_bucket() -> str:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    name = f"bench-{uuid.uuid4().hex[:10]}"
    s3fs.S3FileSystem().mkdir(name)
    return name


def step_time(args, store: str | None, env: dict) -> float:
    """Seconds per step of one `nodus run` of the counter, as the program measured it."""
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        code = os.path.join(root, "code")
        os.makedirs(os.path.join(code, "out"))
        with open(os.path.join(code, "timed.py"), "w") as handle:
            handle.write(TIMED_COUNTER.replace("{timing!r}", repr(os.path.join(root, "t.json"))))
        command = [sys.executable, "timed.py", "--steps", str(args.steps)]
        command += ["--save-every", str(args.save_every), "--sleep", str(args.sleep)]
        command += ["--state-bytes", str(args.state_mb << 20), "--keep", "2"]
        with open(os.path.join(code, "workload.toml"), "w") as handle:
            handle.write(f'name = "bench"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n')
        full_env = {**os.environ, **env, "NODUS_HOME": os.path.join(root, "home")}
        store_args = ["--store", store] if store else []
        subprocess.run(
            [sys.executable, "-m", "nodus", *store_args, "run", "workload.toml"],
            cwd=code,
            env=full_env,
            check=True,
            capture_output=True,
        )
        with open(os.path.join(root, "t.json")) as handle:
            return json.load(handle)["seconds"] / args.steps


def upload_times(args) -> tuple[list[float], list[float]]:
    """(nodus Uploader seconds, `s3fs put` seconds) for the same files, round by round."""
    import s3fs

    from nodus.store import SnapshotInfo, open_store
    from nodus.store.upload import Uploader

    ours, theirs = [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        live = os.path.join(root, "live")
        os.makedirs(live)
        for number in range(args.files):
            with open(os.path.join(live, f"part-{number}.bin"), "wb") as handle:
                handle.write(os.urandom(args.file_mb << 20))
        for round_ in range(args.rounds):
            bucket = new_bucket()
            staging = open_store("file://" + os.path.join(root, f"staging-{round_}"))
            info = SnapshotInfo(run="bench", stage="main", attempt=1, step=round_)
            manifest = staging.capture(live, ["."], info=info)
            remote = open_store(f"s3://{bucket}/nodus")
            # Timed to the remote commit: dropping the staged copy afterwards is local work.
            committed: list[float] = []
            uploader = Uploader(
                staging, remote, on_commit=lambda _m, at=committed: at.append(time.perf_counter())
            )
            started = time.perf_counter()
            uploader.submit(manifest, keep=True)
            assert uploader.finish(0.0) == []
            ours.append(committed[0] - started)

            fs = s3fs.S3FileSystem()
            started = time.perf_counter()
            fs.put(live + "/", f"{bucket}/s3fs/", recursive=True)
            theirs.append(time.perf_counter() - started)
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-mb", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--mbps", type=float, default=20.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mb", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where temporary folders go")
    args = parser.parse_args()
    server, env = start_server()
    try:
        local, remote = [], []
        for _ in range(args.rounds):  # alternating, so neither always runs on a warmer machine
            local.append(step_time(args, None, env))
            url = f"s3://{new_bucket()}/runs"
            throttled = {**env, "NODUS_STORE_THROTTLE_MBPS": str(args.mbps)}
            remote.append(step_time(args, url, throttled))
        ratio = statistics.median(remote) / statistics.median(local)
        print(f"step time, local store:  {[round(s * 1000, 1) for s in local]} ms")
        print(f"step time, remote store: {[round(s * 1000, 1) for s in remote]} ms")
        print(f"remote / local (medians): {ratio:.3f}x (target <= 1.02x)")
        ours, theirs = upload_times(args)
        total_mb = args.files * args.file_mb
        print(f"upload, nodus Uploader: {[round(s, 2) for s in ours]} s for {total_mb} MB")
        print(f"upload, s3fs put:       {[round(s, 2) for s in theirs]} s for {total_mb} MB")
        speed = statistics.median(theirs) / statistics.median(ours)
        print(f"nodus / s3fs throughput (medians): {speed:.2f}x (target >= 0.9x)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
