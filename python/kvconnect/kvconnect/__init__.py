"""kvconnect: a drop-in for Mooncake's Python TransferEngine.

    from kvconnect import TransferEngine   # or: from mooncake.engine import TransferEngine
    engine = TransferEngine()
    engine.initialize("10.0.0.1", "P2PHANDSHAKE", "rdma", "")   # 0, falling back (and saying why) if rdma cannot start
    engine.batch_register_memory(addresses, lengths)
    engine.batch_transfer_sync_write("10.0.0.2:15123", srcs, dsts, lens)

Importing this package loads nothing native; the library starts with the
first engine. See docs/PYTHON.md.
"""

from ._lib import KVConnectError, KVConnectForkedError
from .engine import (EngineRef, Read, TransferEngine, TransferNotify, TransferOpcode, Write)

# Mooncake's build flags, as mooncake.engine exposes them.
SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False

__version__ = "0.1.0.dev0"


def library_version() -> str:
    """The version of the loaded native library (loads it)."""
    from . import _lib

    return _lib.lib().kvc_version().decode()


__all__ = [
    "TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write", "EngineRef", "KVConnectError",
    "KVConnectForkedError", "SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA",
    "SUPPORT_INTRA_NVLINK", "library_version", "__version__",
]
