"""kvconnect.TransferEngine: what write_bytes_to_buffer takes, reads of
any length, a registration's failure in the log (what vLLM users see),
and a batch waited on in a forked child."""

import array
import os
import unittest

import support

from test_engine import started


class BufferTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binaries(cls)

    def setUp(self):
        self.e = started(self, "tcp")

    def test_write_bytes_takes_any_byte_buffer(self):
        addr = self.e.allocate_managed_buffer(4096)
        self.assertNotEqual(addr, 0, self.e.last_error())
        ro = memoryview(b"read-only view")
        for src, want in [(b"bytes", b"bytes"), ("text é", "text é".encode()), (bytearray(b"xyz123"), b"xyz123"),
                          (memoryview(bytearray(b"a view")), b"a view"), (ro, b"read-only view"),
                          (array.array("H", [0x4241, 0x4443]), b"ABCD")]:
            self.assertEqual(self.e.write_bytes_to_buffer(addr, src, len(want)), 0, self.e.last_error())
            self.assertEqual(self.e.read_bytes_from_buffer(addr, len(want)), want, type(src).__name__)
        with self.assertRaisesRegex(TypeError, "src_ptr must be bytes"):
            self.e.write_bytes_to_buffer(addr, 12345, 2)
        self.assertEqual(self.e.write_bytes_to_buffer(addr, bytearray(b"ab"), 3), -1, "longer than the source")

    def test_unregister_waits_for_copies_under_way(self):
        # Unregistering moves the pages back; a copy running meanwhile
        # (ctypes.memmove releases the GIL) would be lost. A copy under way
        # is held here, the way write_bytes_to_buffer counts one.
        import ctypes
        import threading
        for batch in (False, True):
            buf = bytearray(1 << 16)
            addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
            self.assertEqual(self.e.register_memory(addr, len(buf)), 0, self.e.last_error())
            self.assertTrue(self.e._copy_begins(addr, 16))
            out = []
            if batch:
                t = threading.Thread(target=lambda: out.append(self.e.batch_unregister_memory([addr])))
            else:
                t = threading.Thread(target=lambda: out.append(self.e.unregister_memory(addr)))
            t.start()
            t.join(0.3)  # (not a bound: it must still wait whatever the machine's speed)
            still = t.is_alive()
            self.e._copy_ends()
            t.join(60)
            self.assertTrue(still, f"batch={batch}: unregistered while a copy into the memory was under way")
            self.assertEqual(out, [0], self.e.last_error())
            self.assertEqual(self.e.write_bytes_to_buffer(addr, b"x", 1), -1, "a copy into unregistered memory")

    def test_registration_failure_is_logged_with_the_cause(self):
        # 0x1000 is never mapped: what a GPU pointer looks like from here.
        with self.assertLogs("kvconnect", "ERROR") as logs:
            self.assertEqual(self.e.register_memory(0x1000, 4096), -1)
            self.assertEqual(self.e.batch_register_memory([0x1000], [4096]), -1)
        self.assertEqual(len(logs.records), 2, logs.output)
        for line in logs.output:
            self.assertIn("register_memory failed", line)
            self.assertIn("not mapped in this process", line)
            self.assertIn("kv_buffer_device", line)

    def test_batch_status_in_a_forked_child_is_minus_one(self):
        src = self.e.allocate_managed_buffer(4096)
        dst = self.e.allocate_managed_buffer(4096)
        peer = f"127.0.0.1:{self.e.get_rpc_port()}"
        bid = self.e.batch_transfer_async_write(peer, [src], [dst], [4096])
        self.assertNotEqual(bid, 0, self.e.last_error())
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report the call's outcome, never raise
            try:
                rc = self.e.get_batch_transfer_status([bid])
                os.write(w, str(rc).encode())
            except BaseException as exc:  # noqa: BLE001 - the test wants to see it
                os.write(w, f"raised {type(exc).__name__}".encode())
            os._exit(0)
        os.close(w)
        got = os.read(r, 100).decode()
        os.close(r)
        os.waitpid(pid, 0)
        self.assertEqual(got, "-1")
        self.assertEqual(self.e.get_batch_transfer_status([bid]), 0, self.e.last_error())


if __name__ == "__main__":
    unittest.main()
