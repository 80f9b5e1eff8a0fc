"""kvconnect.TransferEngine: every method, Mooncake's return conventions,
fallback and its log, strict mode, bad input. Two engines in this process
talk to each other over the tcp plugin (rdma cannot start here)."""

import ctypes
import json
import logging
import mmap
import os
import threading
import unittest

import support

import kvconnect
from kvconnect import TransferEngine, TransferNotify, TransferOpcode


def started(case, protocol="rdma", hostname="127.0.0.1"):
    e = TransferEngine()
    case.addCleanup(e.close)
    rc = e.initialize(hostname, "P2PHANDSHAKE", protocol, "")
    case.assertEqual(rc, 0, e.last_error())
    return e


class EngineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binaries(cls)

    def setUp(self):
        self.a = started(self)
        self.b = started(self, "tcp")
        self.peer = f"127.0.0.1:{self.b.get_rpc_port()}"

    def test_names_and_constants(self):
        self.assertEqual(int(TransferOpcode.Read), 0)
        self.assertEqual(int(TransferOpcode.Write), 1)
        self.assertIs(TransferEngine.TransferOpcode, TransferOpcode)
        self.assertEqual(kvconnect.Read, TransferOpcode.Read)
        n = TransferNotify("a", "b")
        self.assertEqual((n.name, n.msg), ("a", "b"))
        self.assertEqual((TransferNotify().name, TransferNotify().msg), ("", ""))
        for m in ("initialize", "initialize_ext", "get_rpc_port", "allocate_managed_buffer", "free_managed_buffer",
                  "register_memory", "unregister_memory", "batch_register_memory", "batch_unregister_memory",
                  "transfer_sync_write", "transfer_sync_read", "transfer_sync", "batch_transfer_sync_write",
                  "batch_transfer_sync_read", "batch_transfer_sync", "batch_transfer_async_write",
                  "batch_transfer_async_read", "batch_transfer_async", "get_batch_transfer_status",
                  "transfer_submit_write", "transfer_check_status", "get_first_buffer_address",
                  "write_bytes_to_buffer", "read_bytes_from_buffer", "get_notifies", "send_probe",
                  "get_local_topology", "warmup_efa_segment", "get_engine", "get_engine_ptr",
                  "transfer_write_on_cuda", "transfer_read_on_cuda", "batch_transfer_write_on_cuda",
                  "batch_transfer_read_on_cuda"):
            self.assertTrue(callable(getattr(TransferEngine, m)), m)
        # Keyword names where Mooncake has them; positional-only elsewhere.
        with self.assertRaises(TypeError):
            self.a.get_rpc_port(x=1)
        with self.assertRaises(TypeError):
            self.a.initialize(local_hostname="x", metadata_server="P2PHANDSHAKE", protocol="tcp", device_name="")

    def test_rpc_port_and_status(self):
        port = self.b.get_rpc_port()
        self.assertTrue(15000 <= port <= 17000, port)
        st = self.a.status()
        self.assertTrue(st["fallback"])
        self.assertEqual(st["transport"], "tcp")
        self.assertEqual(st["mode"], "plugin")
        self.assertNotEqual(st["plugin_pid"], os.getpid())
        self.assertGreater(self.a.get_engine_ptr(), 0)
        self.assertIn("kvconnect engine", repr(self.a.get_engine()))

    def test_sync_transfers_on_plain_memory(self):
        n = 1 << 20
        src = bytearray(support.pattern(n, 1))
        dst = mmap.mmap(-1, n)  # MAP_SHARED|MAP_ANONYMOUS: reached through its own file
        a_src, b_dst = support.buffer_address(src), support.buffer_address(dst)
        self.assertEqual(self.a.register_memory(a_src, n), 0, self.a.last_error())
        self.assertEqual(self.b.register_memory(b_dst, n), 0, self.b.last_error())
        self.assertEqual(self.a.transfer_sync_write(self.peer, a_src, b_dst, n), 0, self.a.last_error())
        self.assertEqual(dst[:], bytes(src))
        dst[:100] = b"z" * 100
        self.assertEqual(self.a.transfer_sync_read(self.peer, a_src + 5, b_dst, 100), 0, self.a.last_error())
        self.assertEqual(bytes(src[5:105]), b"z" * 100)
        self.assertEqual(self.a.transfer_sync(self.peer, a_src, b_dst + 1000, 10, TransferOpcode.Write), 0)
        self.assertEqual(dst[1000:1010], bytes(src[:10]))
        # With a notification after the write.
        self.assertEqual(self.a.transfer_sync(self.peer, a_src, b_dst, 4096, TransferOpcode.Write,
                                              notify=TransferNotify("kv", "req-1 done")), 0)
        got = []
        support.wait_until("the notification", lambda: got.extend(self.b.get_notifies()) or got)
        self.assertEqual(got, [TransferNotify("kv", "req-1 done")])
        self.assertEqual(self.a.unregister_memory(a_src), 0)
        self.assertEqual(self.b.unregister_memory(b_dst), 0)
        dst.close()

    def test_batches_sync_and_async(self):
        blocks, size = 32, 64 << 10
        src = bytearray(support.pattern(blocks * size, 2))
        addr = support.buffer_address(src)
        self.assertEqual(self.a.batch_register_memory([addr], [len(src)]), 0, self.a.last_error())
        remote = self.b.allocate_managed_buffer(blocks * size)
        self.assertNotEqual(remote, 0, self.b.last_error())
        self.assertEqual(self.a.get_first_buffer_address(self.peer), remote)
        srcs = [addr + i * size for i in range(blocks)]
        dsts = [remote + (blocks - 1 - i) * size for i in range(blocks)]  # reversed order
        lens = [size] * blocks
        self.assertEqual(self.a.batch_transfer_sync_write(self.peer, srcs, dsts, lens), 0, self.a.last_error())
        for i in range(blocks):
            self.assertEqual(self.b.read_bytes_from_buffer(dsts[i], size), bytes(src[i * size:(i + 1) * size]))
        self.assertEqual(self.b.write_bytes_to_buffer(remote, b"hello", 5), 0)
        ids = [self.a.batch_transfer_async_read(self.peer, srcs[:2], [remote, remote + size], [size, size]),
               # (not into what the first batch reads: the batches run concurrently)
               self.a.batch_transfer_async(self.peer, srcs[2:3], [remote + 2 * size], [4096], TransferOpcode.Write),
               self.a.transfer_submit_write(self.peer, srcs[3], remote + 3 * size, 100)]
        self.assertNotIn(0, ids)
        self.assertEqual(self.a.get_batch_transfer_status(ids), 0, self.a.last_error())
        self.assertEqual(bytes(src[:5]), b"hello")
        self.assertEqual(self.b.read_bytes_from_buffer(remote + 2 * size, 4096), bytes(src[2 * size:2 * size + 4096]))
        self.assertEqual(self.b.read_bytes_from_buffer(remote + 3 * size, 100), bytes(src[3 * size:3 * size + 100]))
        self.assertEqual(self.a.get_batch_transfer_status(ids), -1, "freed ids are unknown")
        bid = self.a.batch_transfer_async_write(self.peer, srcs, dsts, lens)
        support.wait_until("the batch", lambda: self.a.transfer_check_status(bid) != 0)
        self.assertEqual(self.a.transfer_check_status(bid), -1, "a finished batch is freed")
        self.assertEqual(self.a.batch_transfer_sync(self.peer, srcs[:1], [remote], [10], TransferOpcode.Read), 0)
        self.assertEqual(self.b.free_managed_buffer(remote, blocks * size), 0)
        self.assertEqual(self.a.batch_unregister_memory([addr]), 0)

    def test_threads_at_once(self):
        n, size = 8, 256 << 10
        srcs = [bytearray(support.pattern(size, i)) for i in range(n)]
        addrs = [support.buffer_address(s) for s in srcs]
        self.assertEqual(self.a.batch_register_memory(addrs, [size] * n), 0, self.a.last_error())
        remote = self.b.allocate_managed_buffer(n * size)
        errors = []

        def work(i):
            for k in range(20):
                op = self.a.transfer_sync_write if k % 2 == 0 else self.a.transfer_sync_read
                if op(self.peer, addrs[i], remote + i * size, size) != 0:
                    errors.append(self.a.last_error())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for i in range(n):
            self.assertEqual(bytes(srcs[i]), support.pattern(size, i))

    def test_one_op_argument_kinds(self):
        # transfer_sync_write/read take a fast path for one op of up to
        # _INLINE_SYNC_MAX bytes given as ints and a str session, and the
        # general one for anything else: both must move the same bytes.
        class Index:  # numpy.uint64 and torch's data_ptr() are not int
            def __init__(self, v):
                self.v = v

            def __index__(self):
                return self.v

        n = kvconnect.engine._INLINE_SYNC_MAX + 4096
        src = bytearray(support.pattern(n, 7))
        a_src = support.buffer_address(src)
        self.assertEqual(self.a.register_memory(a_src, n), 0, self.a.last_error())
        remote = self.b.allocate_managed_buffer(n)
        cases = [
            ("ints", self.peer, a_src, remote, 4096),
            ("bytes session", self.peer.encode(), a_src + 1, remote + 8192, 100),
            ("index objects", self.peer, Index(a_src + 2), Index(remote + 16384), Index(300)),
            ("larger than the fast path", self.peer, a_src, remote, n),
        ]
        for name, peer, local, rem, length in cases:
            with self.subTest(name):
                lo, off, size = int(local) - a_src, int(rem) - remote, int(length)
                self.assertEqual(self.a.transfer_sync_write(peer, local, rem, length), 0, self.a.last_error())
                self.assertEqual(self.b.read_bytes_from_buffer(remote + off, size), bytes(src[lo:lo + size]))
                want = support.pattern(size, 9)
                self.assertEqual(self.b.write_bytes_to_buffer(remote + off, want, size), 0)
                self.assertEqual(self.a.transfer_sync_read(peer, local, rem, length), 0, self.a.last_error())
                self.assertEqual(bytes(src[lo:lo + size]), want)
                src[:] = support.pattern(n, 7)
        # Before initialize: an error, not a crash, on either path.
        idle = kvconnect.TransferEngine()
        self.addCleanup(idle.close)
        self.assertEqual(idle.transfer_sync_write(self.peer, a_src, remote, 4096), -1)
        self.assertNotEqual(idle.last_error(), "")
        self.assertEqual(self.a.unregister_memory(a_src), 0)

    def test_batch_argument_kinds(self):
        # A batch's lists are packed by array.array when they hold ints
        # (or __index__ objects), else converted element by element; a sync
        # batch of up to _INLINE_SYNC_MAX bytes runs on the calling thread,
        # a larger one is submitted and waited for: every way must move
        # the same bytes.
        class Index:
            def __init__(self, v):
                self.v = v

            def __index__(self):
                return self.v

        size = 1 << 20
        blocks = kvconnect.engine._INLINE_SYNC_MAX // size + 1
        src = bytearray(support.pattern(blocks * size, 3))
        addr = support.buffer_address(src)
        self.assertEqual(self.a.register_memory(addr, len(src)), 0, self.a.last_error())
        remote = self.b.allocate_managed_buffer(blocks * size)
        self.assertNotEqual(remote, 0, self.b.last_error())
        self.addCleanup(self.b.free_managed_buffer, remote, blocks * size)
        self.addCleanup(self.a.unregister_memory, addr)
        cases = [
            ("ints, inline", [addr + 17 * i for i in range(3)], [remote + 4096 * i for i in range(3)], [100, 200, 300]),
            ("tuples", tuple(addr + 5 + 64 * i for i in range(2)), tuple(remote + 65536 + 8192 * i for i in range(2)),
             (999, 1)),
            ("index objects", [Index(addr + 3)], [Index(remote + 3 * 65536)], [Index(5000)]),
            ("numeric strings and floats", ["%d" % (addr + 9)], [float(remote + 4 * 65536)], ["77"]),
            ("generators, an int before a float", (a for a in [addr + 4096, float(addr + 8192)]),
             (r for r in [remote + 5 * 65536, remote + 6 * 65536]), (n for n in [10, 20])),
            ("larger than inline", [addr + i * size for i in range(blocks)],
             [remote + (blocks - 1 - i) * size for i in range(blocks)], [size] * blocks),
        ]
        for name, locs, rems, lens in cases:
            with self.subTest(name):
                self.assertEqual(self.a.batch_transfer_sync_write(self.peer, locs, rems, lens), 0, self.a.last_error())
                if name.startswith("generators"):
                    locs, rems, lens = [addr + 4096, addr + 8192], [remote + 5 * 65536, remote + 6 * 65536], [10, 20]
                for lo, re_, n in zip(locs, rems, lens):
                    lo, off, n = int(lo) - addr, int(float(re_)) - remote, int(n)
                    self.assertEqual(self.b.read_bytes_from_buffer(remote + off, n), bytes(src[lo:lo + n]))
                want = support.pattern(int(lens[0]), 11)
                off = int(float(rems[0])) - remote
                self.assertEqual(self.b.write_bytes_to_buffer(remote + off, want, len(want)), 0)
                self.assertEqual(self.a.batch_transfer_sync_read(self.peer, [locs[0]], [rems[0]], [lens[0]]), 0,
                                 self.a.last_error())
                lo = int(locs[0]) - addr
                self.assertEqual(bytes(src[lo:lo + len(want)]), want)
                src[:] = support.pattern(blocks * size, 3)
        # A negative length is refused with the error of any bad length.
        self.assertEqual(self.a.batch_transfer_sync_write(self.peer, [addr], [remote], [-1]), -1)
        self.assertNotEqual(self.a.last_error(), "")

    def test_bad_input_returns_codes(self):
        buf = bytearray(64 << 10)
        addr = support.buffer_address(buf)
        remote = self.b.allocate_managed_buffer(4096)
        self.assertEqual(self.a.register_memory(addr, len(buf)), 0)
        self.assertEqual(self.a.register_memory(addr + 100, 10), -7, "overlap")
        self.assertEqual(self.a.batch_register_memory([addr + 100], [10]), -7)
        self.assertEqual(self.a.register_memory(addr, 0), -1, "length 0")
        self.assertEqual(self.a.batch_register_memory([1, 2], [3]), -1, "lists of different lengths")
        self.assertEqual(self.a.register_memory(0x1000, 4096), -1, "unmapped memory")
        self.assertEqual(self.a.transfer_sync_write(self.peer, 0x1000, remote, 10), -1, "unregistered local memory")
        self.assertIn("no registered region", self.a.last_error())
        self.assertEqual(self.a.transfer_sync_write(self.peer, addr, remote, 0), -1, "length 0")
        self.assertEqual(self.a.transfer_sync_write(self.peer, addr, remote + 4000, 200), -1, "past the peer's buffer")
        self.assertEqual(self.a.batch_transfer_sync_write(self.peer, [addr], [remote, remote], [1]), -1)
        self.assertEqual(self.a.batch_transfer_async_write("127.0.0.1:1", [addr], [remote], [10]), 0,
                         "an unreachable peer gets batch id 0")
        self.assertEqual(self.a.transfer_submit_write("no-such-host.invalid:1", addr, remote, 10), 0)
        self.assertEqual(self.a.batch_transfer_async_write("garbage", [addr], [remote], [10]), 0)
        self.assertNotEqual(self.a.send_probe("127.0.0.1:1"), 0)
        self.assertEqual(self.a.send_probe(self.peer), 0)
        self.assertEqual(self.a.get_first_buffer_address("127.0.0.1:1"), 0)
        self.assertEqual(self.a.transfer_check_status(123456), -1, "unknown batch")
        self.assertEqual(self.a.get_batch_transfer_status([0]), -1)
        self.assertEqual(self.a.unregister_memory(addr), 0)
        self.assertEqual(self.a.unregister_memory(addr), -3, "unregister twice")
        self.assertEqual(self.a.batch_unregister_memory([addr]), -3)
        self.assertEqual(self.a.free_managed_buffer(0x1234, 10), -3)
        self.assertEqual(self.a.allocate_managed_buffer(0), 0)
        self.assertEqual(self.a.write_bytes_to_buffer(0x1000, b"x", 1), -1, "outside engine memory: refused, no crash")
        with self.assertRaises(ValueError):
            self.a.read_bytes_from_buffer(0x1000, 1)
        for m in ("transfer_write_on_cuda", "transfer_read_on_cuda"):
            with self.assertRaisesRegex(RuntimeError, "GPU memory is not supported"):
                getattr(self.a, m)(self.peer, addr, remote, 10)
        with self.assertRaisesRegex(RuntimeError, "GPU memory is not supported"):
            self.a.batch_transfer_write_on_cuda(self.peer, [addr], [remote], [10])
        with self.assertRaisesRegex(RuntimeError, "GPU memory is not supported"):
            self.a.batch_transfer_read_on_cuda(self.peer, [addr], [remote], [10])
        # The memory is the caller's again.
        buf[0] = 1

    def test_topology(self):
        topo = json.loads(self.a.get_local_topology())
        names = [t["transport"] for t in topo["transports"]]
        self.assertIn("rdma", names)
        tcp = [t for t in topo["transports"] if t["transport"] == "tcp"][0]
        self.assertTrue(tcp["available"])
        rdma = [t for t in topo["transports"] if t["transport"] == "rdma"][0]
        self.assertFalse(rdma["available"])
        self.assertTrue(rdma["diagnosis"]["cause"])


class InitializeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binaries(cls)

    def test_fallback_logged_once_at_warning(self):
        e = TransferEngine()
        self.addCleanup(e.close)
        with self.assertLogs("kvconnect", logging.INFO) as logs:
            self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", ""), 0)
        warnings = [r for r in logs.records if r.levelno == logging.WARNING]
        self.assertEqual(len(warnings), 1, logs.output)
        text = warnings[0].getMessage()
        for want in ("'rdma'", "'tcp'", "probe devices", "ENOSYS", "Hints"):
            self.assertIn(want, text)

    def test_config_warnings_reach_the_log(self):
        # The library logs at error level by default; a secret file others
        # can read must still be said, in the serving stack's log.
        import tempfile
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        path = os.path.join(d, "secret")
        with open(path, "w") as f:
            f.write("s3cret-of-enough-bytes-for-a-test\n")
        os.chmod(path, 0o644)
        os.environ["KVCONNECT_AUTH_SECRET_FILE"] = path
        try:
            e = TransferEngine()
            self.addCleanup(e.close)
            with self.assertLogs("kvconnect", logging.WARNING) as logs:
                self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0, e.last_error())
        finally:
            del os.environ["KVCONNECT_AUTH_SECRET_FILE"]
        text = "\n".join(logs.output)
        self.assertIn("other users can read it", text)
        self.assertIn("chmod 600", text)
        self.assertNotIn("s3cret", text)
        self.assertIn("other users can read it", " ".join(e.status().get("config_warnings", [])))

    def test_strict_mode_fails_with_the_diagnosis_then_retry_tcp(self):
        os.environ["KVCONNECT_FALLBACK"] = "none"
        try:
            e = TransferEngine()
            self.addCleanup(e.close)
            with self.assertLogs("kvconnect", logging.ERROR) as logs:
                self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", ""), -1)
        finally:
            del os.environ["KVCONNECT_FALLBACK"]
        self.assertIn("ENOSYS", e.last_error())
        self.assertIn("ENOSYS", logs.output[0])
        diag = e.last_error_json()
        self.assertEqual(diag["attempts"][0]["transport"], "rdma")
        self.assertEqual(diag["attempts"][0]["diagnosis"]["step"], "probe devices")
        self.assertTrue(diag["strict"])
        self.assertEqual(e.get_rpc_port(), -1, "not initialized")
        # Mooncake's own tests retry on the same object with tcp.
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0, e.last_error())
        self.assertGreater(e.get_rpc_port(), 0)
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), -1, "initialized twice")

    def test_bad_arguments(self):
        e = TransferEngine()
        self.addCleanup(e.close)
        with self.assertLogs("kvconnect", logging.ERROR):
            self.assertEqual(e.initialize("not a host!", "P2PHANDSHAKE", "tcp", ""), -1)
        self.assertIn("not a host!", e.last_error())
        with self.assertLogs("kvconnect", logging.ERROR):
            self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "rmda", ""), -1)
        self.assertIn("rdma", e.last_error(), "a typo gets a suggestion")
        with self.assertLogs("kvconnect", logging.ERROR):
            self.assertEqual(e.initialize_ext("127.0.0.1", "127.0.0.1:1", "tcp", "", "zookeeper"), -1)
        self.assertIn("zookeeper", e.last_error())
        self.assertEqual(e.register_memory(0x1000, 10), -1, "before initialize")

    def test_mc_force_tcp_and_port_range(self):
        os.environ.update(MC_FORCE_TCP="1", MC_MIN_RPC_PORT="16100", MC_MAX_RPC_PORT="16120")
        try:
            e = started(self)
        finally:
            for k in ("MC_FORCE_TCP", "MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT"):
                del os.environ[k]
        self.assertTrue(16100 <= e.get_rpc_port() <= 16120)
        st = e.status()
        self.assertFalse(st["fallback"])
        self.assertEqual([a["transport"] for a in st["attempts"]], ["tcp"], "MC_FORCE_TCP skips rdma")

    def test_mooncake_old_port_spelling_and_unread_variables(self):
        # Mooncake reads MC_MIN_PRC_PORT/MC_MAX_PRC_PORT when the RPC
        # spelling is unset; a Mooncake variable kvconnect has no use for
        # is said in the log, not silently dropped.
        os.environ.update(MC_MIN_PRC_PORT="16200", MC_MAX_PRC_PORT="16220", MC_MTU="1024")
        try:
            with self.assertLogs("kvconnect", logging.WARNING) as logs:
                e = started(self, "tcp")
        finally:
            for k in ("MC_MIN_PRC_PORT", "MC_MAX_PRC_PORT", "MC_MTU"):
                del os.environ[k]
        self.assertTrue(16200 <= e.get_rpc_port() <= 16220, e.get_rpc_port())
        text = "\n".join(logs.output)
        self.assertIn("MC_MTU", text)
        self.assertIn("kvconnect does not read", text)
        self.assertNotIn("PRC_PORT", text, "the library reads them")

    def test_a_metadata_server_in_this_process_answers_while_it_starts(self):
        # Mooncake's HTTP metadata protocol served by a thread of this very
        # process (a test harness, a one-process proxy): initialize publishes
        # the segment there, so it must let other Python threads run. It used
        # to keep the GIL throughout: the PUT waited for a thread that could
        # not run, and initialize failed when the request timed out.
        put = threading.Event()
        url = metadata_server(self, lambda: put.set())
        a, b = TransferEngine(), TransferEngine()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        self.assertEqual(a.initialize("127.0.0.1:17611", url, "tcp", ""), 0, a.last_error())
        self.assertTrue(put.is_set(), "initialize published nothing")
        self.assertEqual(b.initialize("127.0.0.1:17612", url, "tcp", ""), 0, b.last_error())
        # b's segment is found through the server, and bytes move.
        buf = bytearray(support.pattern(64 << 10, 5))
        addr = support.buffer_address(buf)
        self.assertEqual(a.register_memory(addr, len(buf)), 0)
        dst = b.allocate_managed_buffer(len(buf))
        self.assertEqual(a.transfer_sync_write("127.0.0.1:17612", addr, dst, len(buf)), 0, a.last_error())
        self.assertEqual(b.read_bytes_from_buffer(dst, len(buf)), bytes(buf))

    def test_register_while_it_starts_fails_at_once(self):
        # register_memory keeps the GIL; called while another thread's
        # initialize runs, it used to wait for that start holding the GIL,
        # so a metadata server in this process could not answer the start.
        # It now fails at once, saying why.
        arrived, release = threading.Event(), threading.Event()

        def on_put():
            arrived.set()
            release.wait(60)

        url = metadata_server(self, on_put)
        e = TransferEngine()
        self.addCleanup(e.close)
        rc = []
        t = threading.Thread(target=lambda: rc.append(e.initialize("127.0.0.1:17613", url, "tcp", "")))
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(release.set)
        self.assertTrue(arrived.wait(60), "initialize never reached the metadata server")
        buf = bytearray(4096)
        with self.assertLogs("kvconnect", logging.ERROR):
            self.assertEqual(e.register_memory(support.buffer_address(buf), len(buf)), -1)
        self.assertIn("initialize is under way", e.last_error())
        release.set()
        t.join(60)
        self.assertEqual(rc, [0], e.last_error())
        self.assertEqual(e.register_memory(support.buffer_address(buf), len(buf)), 0, e.last_error())
        self.assertEqual(e.unregister_memory(support.buffer_address(buf)), 0, e.last_error())


def metadata_server(case, on_put=None):
    """Mooncake's HTTP metadata protocol (GET/PUT/DELETE ?key=) served by a
    thread of this process; its URL. on_put runs at each PUT, before the
    answer."""
    import http.server
    from urllib.parse import parse_qs, urlparse
    store = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _key(self):
            return parse_qs(urlparse(self.path).query).get("key", [""])[0]

        def _answer(self, code, body=b""):
            try:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a request given up on: a renewal cut short by close

        def do_GET(self):
            v = store.get(self._key())
            self._answer(404 if v is None else 200, v or b"")

        def do_PUT(self):
            store[self._key()] = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if on_put:
                on_put()
            self._answer(200)

        def do_DELETE(self):
            store.pop(self._key(), None)
            self._answer(200)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    case.addCleanup(t.join)
    case.addCleanup(server.server_close)
    case.addCleanup(server.shutdown)
    return f"http://127.0.0.1:{server.server_address[1]}/metadata"

if __name__ == "__main__":
    unittest.main()
