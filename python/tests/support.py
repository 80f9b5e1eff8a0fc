"""Helpers for kvconnect's Python tests: where the built binaries are, and
real peers (a Go `kvconnect serve` node, Mooncake's transfer_engine_bench,
a real etcd) started for a test and stopped after it.

Environment (the Makefile sets it):
  KVCONNECT_BIN           directory with kvconnect, kvconnect-transport-*, libkvconnect.so
  KVCONNECT_LIBRARY       libkvconnect.so (the package loads it from there)
  KVCONNECT_MOONCAKE_BIN  Mooncake's transfer_engine_bench/validator (optional: those tests skip)
"""

import ctypes
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("KVCONNECT_BIN", os.path.join(ROOT, "bin"))
os.environ.setdefault("KVCONNECT_LIBRARY", os.path.join(BIN, "libkvconnect.so"))
os.environ.setdefault("GORACE", "atexit_sleep_ms=0")
for p in (os.path.join(ROOT, "python", "kvconnect"), os.path.join(ROOT, "python", "mooncake")):
    if p not in sys.path:
        sys.path.insert(0, p)

MOONCAKE_BIN = os.environ.get("KVCONNECT_MOONCAKE_BIN", "")

# Engines log their fallback at WARNING; tests check it with assertLogs
# and keep it out of the output otherwise.
logging.getLogger("kvconnect").addHandler(logging.NullHandler())


def need_binaries(case: unittest.TestCase) -> None:
    for f in ("kvconnect", "libkvconnect.so", "kvconnect-transport-tcp", "kvconnect-transport-rdma"):
        if not os.path.exists(os.path.join(BIN, f)):
            case.fail(f"{f} is not in {BIN}: run make build (or set KVCONNECT_BIN)")


def mooncake_bin(case: unittest.TestCase, name: str) -> str:
    if not MOONCAKE_BIN:
        case.skipTest("set KVCONNECT_MOONCAKE_BIN to the directory of Mooncake's transfer_engine_bench and "
                      "transfer_engine_validator (../shared/mooncake/bin) to run the Mooncake interop tests")
    p = os.path.join(MOONCAKE_BIN, name)
    if not os.path.exists(p):
        case.fail(f"KVCONNECT_MOONCAKE_BIN={MOONCAKE_BIN} lacks {name}")
    return p


def buffer_address(buf) -> int:
    """The address of a writable buffer (bytearray, mmap, ctypes array)."""
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 31 + seed * 7 + (i >> 9)) & 0xFF for i in range(n)) if n < 4096 else \
        (bytes((i * 31 + seed * 7) & 0xFF for i in range(4096)) * (n // 4096 + 1))[:n]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process whose output is collected, killed at cleanup."""

    def __init__(self, case: unittest.TestCase, args, env=None, **kw):
        self.out = []
        self.lines = threading.Condition()
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True, **kw)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        case.addCleanup(self.kill)

    def _read(self):
        for line in self.p.stdout:
            with self.lines:
                self.out.append(line.decode("utf-8", "replace"))
                self.lines.notify_all()
        with self.lines:
            self.lines.notify_all()

    def wait_for(self, regex: str, timeout: float = 60):
        """The first match of regex in the output (waiting for it)."""
        rx = re.compile(regex)
        deadline = time.monotonic() + timeout
        with self.lines:
            while True:
                for line in self.out:
                    m = rx.search(line)
                    if m:
                        return m
                if self.p.poll() is not None and not self.t.is_alive():
                    raise AssertionError(f"{self.p.args[0]} exited {self.p.returncode} before printing {regex!r}:\n"
                                         + "".join(self.out))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.p.args[0]} did not print {regex!r} in {timeout}s:\n" + "".join(self.out))
                self.lines.wait(min(left, 1))

    def text(self) -> str:
        with self.lines:
            return "".join(self.out)

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.p.wait()
        self.t.join(5)
        self.p.stdout.close()


def serve(case: unittest.TestCase, alloc="8MiB", extra=()):
    """A Go `kvconnect serve` node: returns (session, region address, Proc)."""
    proc = Proc(case, [os.path.join(BIN, "kvconnect"), "serve", "--alloc", alloc, "--plugin-dir", BIN,
                       "--log-level", "warn", "--hostname", "127.0.0.1", *extra])
    m = proc.wait_for(r'^\{.*"session".*\}\s*$')
    st = json.loads(m.group(0))
    return st["session"], st["region"]["addr"], proc


def mooncake_target(case: unittest.TestCase, buffer_size=64 << 20):
    """Mooncake's transfer_engine_bench --mode=target: (session, Proc)."""
    bench = mooncake_bin(case, "transfer_engine_bench")
    proc = Proc(case, [bench, "--mode=target", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
                       "--local_server_name=127.0.0.1:12345", f"--buffer_size={buffer_size}"])
    m = proc.wait_for(r"listening on ([0-9.]+:[0-9]+)")
    return m.group(1), proc


def etcd(case: unittest.TestCase) -> str:
    """A real etcd on loopback: its client address host:port."""
    exe = shutil.which("etcd") or shutil.which("etcd-server")
    if not exe:
        case.skipTest("etcd is not installed (make deps installs etcd-server)")
    data = tempfile.mkdtemp(prefix="kvc-etcd-")
    case.addCleanup(shutil.rmtree, data, True)
    client, peer = free_port(), free_port()
    proc = Proc(case, [exe, "--name", "kvc", "--data-dir", data,
                       "--listen-client-urls", f"http://127.0.0.1:{client}",
                       "--advertise-client-urls", f"http://127.0.0.1:{client}",
                       "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                       "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                       "--initial-cluster", f"kvc=http://127.0.0.1:{peer}"],
                env=dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", "")))
    proc.wait_for(r"ready to serve client requests|serving client traffic|serving insecure client requests", 60)
    return f"127.0.0.1:{client}"


def wait_until(what: str, cond, timeout: float = 30, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def redis(case: unittest.TestCase) -> str:
    """A real Redis on loopback: its address host:port."""
    exe = shutil.which("redis-server")
    if not exe:
        case.skipTest("redis-server is not installed (make deps installs it)")
    port = free_port()
    proc = Proc(case, [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
    proc.wait_for(r"[Rr]eady to accept connections", 60)
    return f"127.0.0.1:{port}"


def http_metadata(case: unittest.TestCase) -> str:
    """`kvconnect metadata-server` (Mooncake's HTTP metadata protocol): its URL."""
    proc = Proc(case, [os.path.join(BIN, "kvconnect"), "metadata-server", "--listen", "127.0.0.1:0"])
    return json.loads(proc.wait_for(r'^\{.*"url".*\}\s*$').group(0))["url"]


def stop_group(pgid: int) -> None:
    """SIGSTOPs process group pgid and waits until every process in it is
    stopped (kill returns before a process on another CPU has stopped)."""
    os.killpg(pgid, signal.SIGSTOP)

    def stopped():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(rest) > 2 and rest[2] == str(pgid) and rest[0] not in ("T", "t", "Z"):
                return False
        return True

    wait_until(f"process group {pgid} to stop", stopped, 60)
