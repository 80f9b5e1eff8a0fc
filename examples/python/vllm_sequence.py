#!/usr/bin/env python3
"""What vLLM's MooncakeConnector does, on kvconnect: a decode engine and a
prefill engine (here in one process), the prefill side pushing merged block
runs of its KV layers into the decode side's, then checking them.

    make python && pip install --no-index dist/*.whl   # or: KVCONNECT_LIBRARY=bin/libkvconnect.so PYTHONPATH=python/kvconnect:python/mooncake
    python3 examples/python/vllm_sequence.py

On a host without RDMA, initialize("rdma") still returns 0: the engine falls
back to tcp and says why at WARNING (logger "kvconnect").
"""

import ctypes
import logging
import sys

from mooncake.engine import TransferEngine  # kvconnect's, with the kvconnect-mooncake wheel

BLOCK, BLOCKS, LAYERS = 16 << 10, 64, 4


def start(name):
    e = TransferEngine()
    if e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") != 0:
        sys.exit(f"{name}: Mooncake Transfer Engine initialization failed.\n{e.last_error()}")
    layers = [bytearray(BLOCK * BLOCKS) for _ in range(LAYERS)]
    ptrs = [ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b)) for b in layers]
    if e.batch_register_memory(ptrs, [len(b) for b in layers]) != 0:
        sys.exit(f"{name}: Mooncake batch memory registration failed.\n{e.last_error()}")
    return e, layers, ptrs


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    decode, d_layers, d_ptrs = start("decode")
    prefill, p_layers, p_ptrs = start("prefill")
    for i, layer in enumerate(p_layers):
        layer[:] = bytes((i * 37 + j) & 0xFF for j in range(256)) * (len(layer) // 256)
    peer = f"127.0.0.1:{decode.get_rpc_port()}"
    runs = [(0, 8), (10, 22), (40, 24)]  # contiguous block runs, merged into one op each
    srcs, dsts, lens = [], [], []
    for p, d in zip(p_ptrs, d_ptrs):
        for first, count in runs:
            srcs.append(p + first * BLOCK)
            dsts.append(d + first * BLOCK)
            lens.append(count * BLOCK)
    ret = prefill.batch_transfer_sync_write(peer, srcs, dsts, lens)
    if ret != 0:
        sys.exit(f"Mooncake transfer engine returned {ret}: {prefill.last_error()}")
    for i in range(LAYERS):
        for first, count in runs:
            a, b = first * BLOCK, (first + count) * BLOCK
            assert d_layers[i][a:b] == p_layers[i][a:b], f"layer {i} blocks {first}..{first + count} differ"
    print(f"pushed {sum(lens)} bytes in {len(lens)} ops to {peer} on {prefill.status()['transport']}; "
          "every block verified")
    prefill.close()
    decode.close()


if __name__ == "__main__":
    main()
