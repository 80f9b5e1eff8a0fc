"""The wheels a user installs: `make python`'s builder, run here on the
built binaries, then `pip install --no-index` into a fresh venv. From
there, with nothing else on disk, `from mooncake.engine import
TransferEngine` is kvconnect's, an engine starts on the bundled plugins and
moves bytes, and the `kvconnect` CLI answers."""

import glob
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import support


class WheelTest(unittest.TestCase):
    def test_install_into_a_fresh_venv(self):
        support.need_binaries(self)
        tmp = tempfile.mkdtemp(prefix="kvc-wheel-")
        self.addCleanup(subprocess.run, ["rm", "-rf", tmp])
        dist = os.path.join(tmp, "dist")
        out = subprocess.run([sys.executable, os.path.join(support.ROOT, "python", "build_wheels.py"), "--native",
                              support.BIN, "--out", dist, "--compress-level", "1"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        wheels = sorted(glob.glob(os.path.join(dist, "*.whl")))
        self.assertEqual(len(wheels), 2, wheels)
        venv = os.path.join(tmp, "venv")
        # A venv without its own pip when this Python's pip can install
        # into another interpreter (pip --python, pip >= 22.3): the same
        # install, without the seconds ensurepip takes to put pip in it.
        host_pip = subprocess.run([sys.executable, "-m", "pip", "--python", sys.executable, "--version"],
                                  capture_output=True, text=True).returncode == 0
        made = subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if host_pip else []), venv],
                              capture_output=True, text=True)
        if made.returncode != 0:
            self.skipTest(f"python3 -m venv failed (Debian: apt-get install python3-venv): {made.stderr.strip()}")
        py = os.path.join(venv, "bin", "python")
        pip_cmd = [sys.executable, "-m", "pip", "--python", py] if host_pip else [py, "-m", "pip"]
        pip = subprocess.run([*pip_cmd, "install", "--no-index", "--disable-pip-version-check", *wheels],
                             capture_output=True, text=True)
        self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
        # Nothing from this checkout: no library path, no plugin dir, run elsewhere.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVCONNECT_") and k != "PYTHONPATH"}
        env["GORACE"] = "atexit_sleep_ms=0"
        code = textwrap.dedent("""
            import ctypes, json
            from mooncake.engine import TransferEngine, TransferOpcode
            print(TransferEngine)
            a, b = TransferEngine(), TransferEngine()
            assert a.initialize('127.0.0.1', 'P2PHANDSHAKE', 'rdma', '') == 0, a.last_error()
            assert b.initialize('127.0.0.1', 'P2PHANDSHAKE', 'rdma', '') == 0, b.last_error()
            buf = bytearray(b'wheel!' * 1000)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            assert a.register_memory(addr, len(buf)) == 0, a.last_error()
            dst = b.allocate_managed_buffer(len(buf))
            peer = '127.0.0.1:%d' % b.get_rpc_port()
            assert a.transfer_sync_write(peer, addr, dst, len(buf)) == 0, a.last_error()
            assert b.read_bytes_from_buffer(dst, len(buf)) == bytes(buf)
            print(json.dumps(a.status()['transports'][0]))
        """)
        run = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=tmp, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        lines = run.stdout.splitlines()
        self.assertIn("kvconnect.engine.TransferEngine", lines[0])
        tr = json.loads(lines[1])
        self.assertEqual(tr["mode"], "plugin")
        self.assertTrue(tr["plugin"].startswith(venv), f"the plugin ran from {tr['plugin']}, not from the venv")
        cli = subprocess.run([os.path.join(venv, "bin", "kvconnect"), "doctor", "--json"], capture_output=True,
                             text=True, env=env, cwd=tmp, timeout=120)
        self.assertIn(cli.returncode, (0, 1), cli.stderr)
        report = json.loads(cli.stdout)
        self.assertIn("transports", json.dumps(report))


if __name__ == "__main__":
    unittest.main()
