"""The process model: importing loads nothing native; a child forked after
the library started gets a clear error, never a hang; plugin processes die
with Python, even on SIGKILL; Ctrl-C interrupts a blocking wait; threads
share an engine."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest

import support

PRELUDE = textwrap.dedent(f"""
    import sys, os, ctypes, json, time
    sys.path[:0] = [{os.path.join(support.ROOT, 'python', 'kvconnect')!r}, {os.path.join(support.ROOT, 'python', 'mooncake')!r}]
""")


def run_python(case, code, timeout=120, **kw):
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, **kw)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class ProcessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binaries(cls)

    def test_import_loads_nothing_native(self):
        out = run_python(self, """
            import threading
            from mooncake.engine import TransferEngine, TransferOpcode
            import kvconnect
            maps = open('/proc/self/maps').read()
            threads = int([l for l in open('/proc/self/status') if l.startswith('Threads:')][0].split()[1])
            e = kvconnect.TransferEngine()   # the constructor starts nothing either
            maps2 = open('/proc/self/maps').read()
            print(json.dumps({'lib': 'libkvconnect' in maps or 'libkvconnect' in maps2, 'threads': threads,
                              'name': TransferEngine.__module__ + '.' + TransferEngine.__name__}))
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = __import__("json").loads(out.stdout)
        self.assertFalse(got["lib"], "importing (or constructing) loaded libkvconnect")
        self.assertEqual(got["threads"], 1, "importing started threads")
        self.assertEqual(got["name"], "kvconnect.engine.TransferEngine")

    def test_a_library_of_another_build_is_refused_clearly(self):
        # KVCONNECT_LIBRARY naming a libkvconnect.so of an older release,
        # which lacks a call this package makes.
        import shutil
        import tempfile
        gcc = shutil.which("gcc") or shutil.which("cc")
        if not gcc:
            self.skipTest("no C compiler (gcc) to build a stand-in library")
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        src, so = os.path.join(d, "old.c"), os.path.join(d, "libkvconnect.so")
        with open(src, "w") as f:
            f.write('const char *kvc_version(void) { return "0.0.1"; }\n')
        subprocess.run([gcc, "-shared", "-fPIC", "-o", so, src], check=True)
        out = run_python(self, """
            import kvconnect
            e = kvconnect.TransferEngine()
            try:
                e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '')
            except kvconnect.KVConnectError as err:
                print(err)
        """, env={**os.environ, "KVCONNECT_LIBRARY": so})
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(so, out.stdout)
        self.assertIn("is not the library of this kvconnect package", out.stdout)
        self.assertIn("unset KVCONNECT_LIBRARY", out.stdout)

    def test_fork_after_start_fails_clearly(self):
        out = run_python(self, """
            import logging
            logging.basicConfig(level=logging.ERROR)
            from kvconnect import TransferEngine
            e = TransferEngine()
            assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, e.last_error()
            buf = bytearray(b'p' * 65536)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            assert e.register_memory(addr, len(buf)) == 0
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                c = TransferEngine()
                rc = c.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '')
                rc2 = e.get_rpc_port()
                buf[0:4] = b'kid!'   # the child's write stays the child's
                os.write(w, json.dumps({'rc': rc, 'rc2': rc2, 'err': c.last_error()}).encode())
                os._exit(0)
            os.close(w)
            got = json.loads(os.read(r, 65536))
            os.waitpid(pid, 0)
            got['parent'] = bytes(buf[0:4]).decode()
            got['port'] = e.get_rpc_port()
            print(json.dumps(got))
        """, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = __import__("json").loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(got["rc"], -1)
        self.assertEqual(got["rc2"], -1)
        self.assertIn("forked", got["err"])
        self.assertEqual(got["parent"], "pppp", "the child's write reached the parent's registered memory")
        self.assertGreater(got["port"], 0, "the parent's engine still works")

    def test_copies_racing_free_and_close_never_touch_unmapped_memory(self):
        # Threads copy into and out of a managed buffer (64 MiB copies,
        # without the GIL) while the main thread frees it, then while it
        # closes the engine: every copy either finishes on mapped memory
        # or is refused, and the process does not crash.
        out = run_python(self, """
            import threading
            from kvconnect import TransferEngine
            e = TransferEngine()
            assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, e.last_error()
            n = 64 << 20
            data = b'x' * n
            counts = {'done': 0, 'refused': 0}
            mu = threading.Lock()
            def copier(addr, go, stop):
                go.wait()
                while not stop.is_set():
                    ok = e.write_bytes_to_buffer(addr, data, n) == 0
                    with mu:
                        counts['done' if ok else 'refused'] += 1
                    try:
                        e.read_bytes_from_buffer(addr, n)
                    except ValueError:
                        pass
            for last in ('free', 'close'):
                addr = e.allocate_managed_buffer(n)
                assert addr, e.last_error()
                go, stop = threading.Event(), threading.Event()
                ts = [threading.Thread(target=copier, args=(addr, go, stop)) for _ in range(2)]
                for t in ts:
                    t.start()
                base = counts['done']
                go.set()
                while counts['done'] < base + 2:  # copies under way
                    time.sleep(0.001)
                rc = e.free_managed_buffer(addr, n) if last == 'free' else e.close()
                assert rc == 0, (last, rc, e.last_error())
                stop.set()
                for t in ts:
                    t.join()
                assert e.write_bytes_to_buffer(addr, data, 16) == -1, 'a copy into freed memory was accepted'
            print(json.dumps(counts))
        """, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr[-4000:])
        got = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertGreaterEqual(got["done"], 4)

    def test_calls_after_close_fail_as_closed(self):
        out = run_python(self, """
            from kvconnect import TransferEngine
            e = TransferEngine()
            assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, e.last_error()
            assert e.close() == 0
            got = {'port': e.get_rpc_port(), 'kind': e.last_error_json().get('kind'),
                   'init': e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', ''), 'handle': e.get_engine_ptr(),
                   'alloc': e.allocate_managed_buffer(4096), 'close': e.close()}
            print(json.dumps(got))
        """, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr[-4000:])
        got = json.loads(out.stdout.strip().splitlines()[-1])
        # A closed engine stays closed: no call makes a new one.
        self.assertEqual(got, {"port": -1, "kind": "closed", "init": -1, "handle": 0, "alloc": 0, "close": 0})

    def test_plugins_die_with_python_on_sigkill(self):
        p = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent("""
            import threading
            from kvconnect import TransferEngine
            e = TransferEngine()
            # initialize from a short-lived thread: plugins must outlive it
            t = threading.Thread(target=lambda: e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', ''))
            t.start(); t.join()
            time.sleep(0.5)
            print(json.dumps(e.status()), flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
        self.addCleanup(p.kill)
        line = p.stdout.readline()
        st = __import__("json").loads(line)
        pid = st["plugin_pid"]
        self.assertTrue(pid_alive(pid), "the plugin died with the thread that started it")
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        support.wait_until(f"plugin {pid} to exit after Python was killed", lambda: not pid_alive(pid), 30)

    def hung_peer_child(self, then):
        """A child Python with an engine that moved bytes to a Go node, then
        the node stopped (SIGSTOP): the child runs `then` (code using e,
        addr, session and region), whose batches to the node cannot end.
        Returns the child, past its setup."""
        session, region, node = support.serve(self)
        p = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(f"""
            from kvconnect import TransferEngine
            os.environ['KVCONNECT_TRANSFER_TIMEOUT'] = '300s'
            e = TransferEngine()
            assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, e.last_error()
            buf = bytearray(64 << 20)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            assert e.register_memory(addr, len(buf)) == 0
            session, region = {session!r}, {region}
            assert e.transfer_sync_write(session, addr, region, 4096) == 0, e.last_error()
            print('ready', flush=True)
            sys.stdin.readline()   # the node is stopped now
        """) + textwrap.dedent(then)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.kill)
        self.assertEqual(p.stdout.readline().strip(), "ready", p.stderr.read() if p.poll() is not None else "")
        support.stop_group(node.p.pid)  # the peer hangs: a batch to it cannot end
        self.addCleanup(lambda: os.killpg(node.p.pid, signal.SIGCONT))
        p.stdin.write("go\n")
        p.stdin.flush()
        return p

    def test_ctrl_c_interrupts_a_blocked_wait(self):
        p = self.hung_peer_child("""
            try:
                bid = e.batch_transfer_async_write(session, [addr] * 8, [region] * 8, [1 << 20] * 8)
                print('waiting', bid, flush=True)
                e.get_batch_transfer_status([bid])
                print('returned', flush=True)
            except KeyboardInterrupt:
                print('interrupted', flush=True)
        """)
        self.assertTrue(p.stdout.readline().startswith("waiting"))
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertIn("interrupted", out, err)

    def test_exit_with_a_batch_to_a_hung_peer_does_not_wait_for_it(self):
        # An interpreter exiting (a Ctrl-C that landed before any wait, an
        # error) with an async batch to a hung peer: close() at exit used to
        # unregister the memory first, which waits for the batches using it
        # (transfer_timeout, 300s here). It now cancels them first.
        p = self.hung_peer_child("""
            bid = e.batch_transfer_async_write(session, [addr] * 8, [region] * 8, [1 << 20] * 8)
            print('submitted', bid, flush=True)
        """)
        out, err = p.communicate(timeout=30)  # the old close waited 38 s here, the new one under 1 s
        self.assertIn("submitted", out, err)
        self.assertEqual(p.returncode, 0, err)

    def test_mc_transfer_timeout_bounds_a_sync_transfer(self):
        session, region, node = support.serve(self)
        self.addCleanup(lambda: os.killpg(node.p.pid, signal.SIGCONT))
        r = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(f"""
            from kvconnect import TransferEngine
            os.environ['MC_TRANSFER_TIMEOUT'] = '2'
            e = TransferEngine()
            assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, e.last_error()
            buf = bytearray(1 << 20)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            assert e.register_memory(addr, len(buf)) == 0
            assert e.transfer_sync_write({session!r}, addr, {region}, 4096) == 0, e.last_error()
            print('ready', flush=True)
            sys.stdin.readline()
            rc = e.transfer_sync_write({session!r}, addr, {region}, 1 << 20)
            print(json.dumps({{'rc': rc, 'kind': e.last_error_json().get('kind'), 'err': e.last_error()}}), flush=True)
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(r.kill)
        self.assertEqual(r.stdout.readline().strip(), "ready")
        support.stop_group(node.p.pid)  # the node hangs: the write can only end by the timeout
        r.stdin.write("go\n")
        r.stdin.flush()
        stdout, stderr = r.communicate(timeout=120)
        got = __import__("json").loads(stdout.strip().splitlines()[-1])
        self.assertEqual(got["rc"], -1, stderr)
        self.assertEqual(got["kind"], "timeout", got["err"])

    def test_unregister_that_times_out_can_be_retried(self):
        # A batch (a READ) with a long timeout of its own holds the memory
        # while its peer hangs; unregister gives up after the engine's timeout (2 s)
        # and the memory stays registered, so unregistering again once the
        # peer runs again and the batch has ended frees it.
        session, region, node = support.serve(self)
        self.addCleanup(lambda: os.killpg(node.p.pid, signal.SIGCONT))
        r = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(f"""
            from kvconnect import TransferEngine, _lib
            os.environ['MC_TRANSFER_TIMEOUT'] = '2'
            e = TransferEngine()
            assert e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0, e.last_error()
            buf = bytearray(1 << 20)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            assert e.register_memory(addr, len(buf)) == 0
            assert e.transfer_sync_write({session!r}, addr, {region}, 4096) == 0, e.last_error()
            print('ready', flush=True)
            sys.stdin.readline()
            l, n = _lib.u64_array([addr])
            rr, _ = _lib.u64_array([{region}])
            ln, _ = _lib.u64_array([1 << 20])
            # A READ: its op waits to write the peer's answer into the
            # memory, which a hung peer never sends (a WRITE may be done
            # with the memory once its bytes sit in socket buffers).
            lib = _lib.lib()
            def end(bid):
                while lib.kvc_batch_wait(e.get_engine_ptr(), bid, 200, None, 0) == 0:
                    pass
                lib.kvc_batch_free(e.get_engine_ptr(), bid)
            for attempt in range(20):
                bid = e._call('kvc_batch_submit', {session!r}.encode(), 0, l, rr, ln, n, 6000)
                assert bid, e.last_error()
                first = e.unregister_memory(addr)
                if first != 0:
                    break
                # The deregistration reached the plugin before the batch
                # did (they travel apart), so the batch fails instead:
                # again.
                end(bid)
                assert e.register_memory(addr, len(buf)) == 0, e.last_error()
            kind = e.last_error_json().get('kind')
            print(json.dumps({{'first': first, 'kind': kind, 'attempts': attempt + 1}}), flush=True)
            sys.stdin.readline()  # the node runs again
            end(bid)
            second = e.unregister_memory(addr)
            print(json.dumps({{'second': second, 'err': e.last_error()}}), flush=True)
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(r.kill)
        self.assertEqual(r.stdout.readline().strip(), "ready")
        support.stop_group(node.p.pid)  # the node hangs: the batch holds the memory until its own timeout
        r.stdin.write("go\n")
        r.stdin.flush()
        line = r.stdout.readline()
        if not line:
            self.fail(r.communicate(timeout=60)[1][-4000:])
        got = json.loads(line)
        self.assertEqual((got["first"], got["kind"]), (-1, "timeout"))
        os.killpg(node.p.pid, signal.SIGCONT)  # the op in the plugin ends, and with it the batch
        r.stdin.write("go\n")
        r.stdin.flush()
        stdout, stderr = r.communicate(timeout=120)
        got = json.loads(stdout.strip().splitlines()[-1])
        self.assertEqual(got["second"], 0, got["err"])


if __name__ == "__main__":
    unittest.main()
