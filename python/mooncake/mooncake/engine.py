"""mooncake.engine, re-exporting kvconnect's TransferEngine (docs/PYTHON.md)."""

from kvconnect import (SUPPORT_CUDA, SUPPORT_EFA, SUPPORT_HIP, SUPPORT_INTRA_NVLINK, SUPPORT_MNNVL, SUPPORT_MUSA,
                       Read, TransferEngine, TransferNotify, TransferOpcode, Write)

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write", "SUPPORT_CUDA", "SUPPORT_EFA",
           "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA", "SUPPORT_INTRA_NVLINK"]
