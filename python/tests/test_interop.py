"""vLLM's MooncakeConnector sequence against real peers: a Go `kvconnect
serve` node and an unmodified Mooncake transfer_engine_bench target;
Mooncake's transfer_engine_validator against a Python kvconnect target on
a plain bytearray; two Python engines through a real etcd."""

import ctypes
import logging
import os
import subprocess
import unittest

import support

from kvconnect import TransferEngine

BLOCK = 16 << 10  # vLLM blocks are 16-64 KiB per layer


def vllm_engine(case):
    """What vLLM's MooncakeConnector does at start: initialize with
    mooncake_protocol rdma (the default), then get_rpc_port, then one
    batch_register_memory over every KV buffer."""
    e = TransferEngine()
    case.addCleanup(e.close)
    with case.assertLogs("kvconnect", logging.INFO) as logs:
        rc = e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "")
    case.assertEqual(rc, 0, e.last_error())
    warnings = [r for r in logs.records if r.levelno == logging.WARNING]
    case.assertEqual(len(warnings), 1, "the rdma diagnosis is logged once at WARNING")
    case.assertIn("ENOSYS", warnings[0].getMessage())
    case.assertGreater(e.get_rpc_port(), 0)
    layers = [bytearray(support.pattern(64 * BLOCK, i)) for i in range(4)]  # 4 "layers" of 64 blocks
    ptrs = [support.buffer_address(b) for b in layers]
    case.assertEqual(e.batch_register_memory(ptrs, [len(b) for b in layers]), 0, e.last_error())
    return e, layers, ptrs


def merged_runs(blocks, base_local, base_remote):
    """vLLM merges contiguous block runs into one op each."""
    srcs, dsts, lens = [], [], []
    for start, count in blocks:
        srcs.append(base_local + start * BLOCK)
        dsts.append(base_remote + start * BLOCK)
        lens.append(count * BLOCK)
    return srcs, dsts, lens


class VLLMSequenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binaries(cls)

    def push_and_verify(self, e, layers, ptrs, session, remote_base, remote_len):
        runs = [(0, 3), (5, 1), (8, 16), (40, 24)]
        srcs, dsts, lens = [], [], []
        for i, p in enumerate(ptrs):
            s, d, l = merged_runs(runs, p, remote_base + i * 64 * BLOCK)
            srcs += s
            dsts += d
            lens += l
        self.assertLessEqual(len(ptrs) * 64 * BLOCK, remote_len)
        ret = e.batch_transfer_sync_write(session, srcs, dsts, lens)
        self.assertEqual(ret, 0, f"Mooncake transfer engine returned {ret}: {e.last_error()}")
        # Read back into a fresh registered buffer and compare.
        back = bytearray(sum(lens))
        addr = support.buffer_address(back)
        self.assertEqual(e.register_memory(addr, len(back)), 0, e.last_error())
        offs, off = [], 0
        for n in lens:
            offs.append(addr + off)
            off += n
        self.assertEqual(e.batch_transfer_sync_read(session, offs, dsts, lens), 0, e.last_error())
        off = 0
        for i, p in enumerate(ptrs):
            for start, count in runs:
                want = bytes(layers[i][start * BLOCK:(start + count) * BLOCK])
                self.assertEqual(bytes(back[off:off + count * BLOCK]), want, f"layer {i} run {start}")
                off += count * BLOCK
        self.assertEqual(e.unregister_memory(addr), 0)

    def test_to_go_node(self):
        session, region, _ = support.serve(self, alloc="8MiB")
        e, layers, ptrs = vllm_engine(self)
        self.assertEqual(e.get_first_buffer_address(session), region)
        self.push_and_verify(e, layers, ptrs, session, region, 8 << 20)

    def test_to_mooncake_target(self):
        session, _ = support.mooncake_target(self)
        e, layers, ptrs = vllm_engine(self)
        # Its buffer is registered a moment after it listens.
        support.wait_until("the Mooncake target's buffer", lambda: e.get_first_buffer_address(session) != 0)
        self.push_and_verify(e, layers, ptrs, session, e.get_first_buffer_address(session), 64 << 20)


class ValidatorTest(unittest.TestCase):
    def test_mooncake_validator_against_python_target_on_a_bytearray(self):
        validator = support.mooncake_bin(self, "transfer_engine_validator")
        support.need_binaries(self)
        e = TransferEngine()
        self.addCleanup(e.close)
        self.assertEqual(e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0, e.last_error())
        block, batch, threads = 65536, 16, 2
        target = bytearray(block * batch * threads)
        self.assertEqual(e.register_memory(support.buffer_address(target), len(target)), 0, e.last_error())
        session = f"127.0.0.1:{e.get_rpc_port()}"
        for env in ({}, {"MC_TCP_ENABLE_CONNECTION_POOL": "1"}):
            with self.subTest(env=env):
                out = subprocess.run(
                    [validator, "--mode=initiator", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
                     "--local_server_name=127.0.0.1:12346", f"--segment_id={session}", f"--block_size={block}",
                     f"--batch_size={batch}", f"--threads={threads}", "--duration=2"],
                    env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)
                text = out.stdout + out.stderr
                self.assertEqual(out.returncode, 0, text)
                self.assertEqual(text.count("Data validation passed"), threads, text)
        self.assertTrue(any(target), "the validator's blocks landed in the bytearray")


# Fixed RPC ports in these tests lie above 17000: an engine without one
# (and Mooncake's binaries) takes a random free port in 15000-17000, as
# Mooncake does, so a fixed port in that range collides now and then with
# a node alive in the same run ("address in use"). Linux's ephemeral
# ports start at 32768.


class EtcdTest(unittest.TestCase):
    def test_two_engines_through_etcd(self):
        support.need_binaries(self)
        endpoint = support.etcd(self)
        a, b = TransferEngine(), TransferEngine()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        self.assertEqual(a.initialize("127.0.0.1", f"etcd://{endpoint}", "tcp", ""), 0, a.last_error())
        # A bare host:port is etcd too, as in Mooncake; b is published under its name.
        self.assertEqual(b.initialize("127.0.0.1:17555", endpoint, "tcp", ""), 0, b.last_error())
        self.assertEqual(b.status()["session"], "127.0.0.1:17555")
        buf = bytearray(support.pattern(1 << 20, 5))
        addr = support.buffer_address(buf)
        self.assertEqual(a.register_memory(addr, len(buf)), 0)
        remote = b.allocate_managed_buffer(1 << 20)
        # b publishes its new buffer to etcd a moment later.
        support.wait_until("b's buffer in etcd", lambda: a.get_first_buffer_address("127.0.0.1:17555") != 0)
        self.assertEqual(a.get_first_buffer_address("127.0.0.1:17555"), remote)
        self.assertEqual(a.transfer_sync_write("127.0.0.1:17555", addr, remote, len(buf)), 0, a.last_error())
        self.assertEqual(b.read_bytes_from_buffer(remote, len(buf)), bytes(buf))
        # b finds a by the segment name a published: its bare host.
        self.assertEqual(a.status()["session"], "127.0.0.1")
        back = b.allocate_managed_buffer(4096)
        self.assertEqual(b.transfer_sync_read("127.0.0.1", back, addr, 4096), 0, b.last_error())
        self.assertEqual(b.read_bytes_from_buffer(back, 4096), bytes(buf[:4096]))
        self.assertEqual(a.send_probe("127.0.0.1:17555"), 0)
        self.assertNotEqual(a.transfer_sync_write("no-such-segment", addr, remote, 10), 0)
        self.assertEqual(a.batch_transfer_async_write("no-such-segment", [addr], [remote], [10]), 0)


class MetadataServicesTest(unittest.TestCase):
    """The other metadata services Mooncake names: redis:// and http://."""

    def pair(self, meta_a, meta_b=None, metadata_type=None):
        support.need_binaries(self)
        a, b = TransferEngine(), TransferEngine()
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        self.assertEqual(a.initialize("127.0.0.1:17601", meta_a, "tcp", ""), 0, a.last_error())
        if metadata_type:
            rc = b.initialize_ext("127.0.0.1:17602", meta_b, "tcp", "", metadata_type)
        else:
            rc = b.initialize("127.0.0.1:17602", meta_b or meta_a, "tcp", "")
        self.assertEqual(rc, 0, b.last_error())
        buf = bytearray(support.pattern(64 << 10, 9))
        addr = support.buffer_address(buf)
        self.assertEqual(a.register_memory(addr, len(buf)), 0)
        dst = b.allocate_managed_buffer(len(buf))
        self.assertEqual(a.transfer_sync_write("127.0.0.1:17602", addr, dst, len(buf)), 0, a.last_error())
        self.assertEqual(b.read_bytes_from_buffer(dst, len(buf)), bytes(buf))

    def test_redis(self):
        addr = support.redis(self)
        # A URL, and initialize_ext's metadata_type naming the service of a bare host:port.
        self.pair(f"redis://{addr}", addr, "redis")

    def test_http(self):
        self.pair(support.http_metadata(self))


if __name__ == "__main__":
    unittest.main()
