"""Loading libkvconnect.so with ctypes, on first use.

Importing kvconnect loads nothing native: serving stacks import their
transfer engine at module level and fork workers afterwards, and a Go
runtime started before fork() does not survive in the child. The library
is loaded by the first engine, and a process forked after that refuses to
use it (KVConnectForkedError) instead of hanging.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Optional

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_gil_lib: Optional[ctypes.PyDLL] = None
_loaded_pid = 0
_forked = False

u64 = ctypes.c_uint64
i64 = ctypes.c_int64
u64p = ctypes.POINTER(ctypes.c_uint64)
i32p = ctypes.POINTER(ctypes.c_int32)
cstr = ctypes.c_char_p
size = ctypes.c_size_t
c_int = ctypes.c_int
# Strings the library allocates: void* so ctypes does not convert (and
# leak) them; read with string_at, then kvc_free.
owned = ctypes.c_void_p

# name: (restype, argtypes)
_SIGNATURES = {
    "kvc_version": (cstr, []),
    "kvc_last_error": (cstr, []),
    "kvc_last_error_json": (cstr, []),
    "kvc_free": (None, [ctypes.c_void_p]),
    "kvc_engine_new": (u64, []),
    "kvc_engine_set_defaults": (c_int, [u64, cstr]),
    "kvc_engine_initialize": (c_int, [u64, cstr, cstr, cstr, cstr]),
    "kvc_engine_initialize_ext": (c_int, [u64, cstr, cstr, cstr, cstr, cstr]),
    "kvc_engine_initialize_synced": (c_int, [u64, cstr, cstr, cstr, cstr, cstr]),
    "kvc_engine_close": (c_int, [u64]),
    "kvc_engine_rpc_port": (c_int, [u64]),
    "kvc_engine_session_id": (owned, [u64]),
    "kvc_engine_status_json": (owned, [u64]),
    "kvc_register_memory": (c_int, [u64, u64, u64]),
    "kvc_register_memory_batch": (c_int, [u64, u64p, u64p, size]),
    "kvc_unregister_memory": (c_int, [u64, u64]),
    "kvc_unregister_memory_batch": (c_int, [u64, u64p, size]),
    "kvc_allocate_managed": (u64, [u64, u64]),
    "kvc_free_managed": (c_int, [u64, u64]),
    "kvc_open_segment": (c_int, [u64, cstr, i64]),
    "kvc_segment_first_buffer": (u64, [u64, cstr, i64]),
    "kvc_probe": (c_int, [u64, cstr, i64]),
    "kvc_notify": (c_int, [u64, cstr, cstr, cstr, i64]),
    "kvc_get_notifies": (owned, [u64]),
    "kvc_transfer_sync": (c_int, [u64, cstr, c_int, u64p, u64p, u64p, size, i64]),
    "kvc_batch_submit": (u64, [u64, cstr, c_int, u64p, u64p, u64p, size, i64]),
    "kvc_batch_wait": (c_int, [u64, u64, i64, i32p, size]),
    "kvc_batch_free": (c_int, [u64, u64]),
    "kvc_engine_topology": (owned, [u64, cstr]),
    "kvc_sync_environ": (c_int, []),
}

# Calls that move memory in place (registration) keep the GIL: no other
# Python thread runs, and so none writes next to the buffers being moved.
_KEEP_GIL = ("kvc_register_memory", "kvc_register_memory_batch", "kvc_unregister_memory",
             "kvc_unregister_memory_batch")


class KVConnectError(RuntimeError):
    """The library cannot be used here (not found, or forked)."""


class KVConnectForkedError(KVConnectError):
    """This process was forked after kvconnect's library started."""


def _after_fork_in_child() -> None:
    global _forked
    if _lib is not None:
        _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def native_dir() -> str:
    """Where the library, the CLI and the plugin binaries are: the
    wheel's kvconnect/_native, or the directory of $KVCONNECT_LIBRARY."""
    override = os.environ.get("KVCONNECT_LIBRARY")
    if override:
        return os.path.dirname(os.path.abspath(override))
    return os.path.join(package_dir(), "_native")


def library_path() -> str:
    override = os.environ.get("KVCONNECT_LIBRARY")
    if override:
        return override
    return os.path.join(native_dir(), "libkvconnect.so")


def lib() -> ctypes.CDLL:
    """The loaded library (loading it on first call)."""
    if _forked:
        raise KVConnectForkedError(
            "kvconnect: this process was forked after the kvconnect library started; the library cannot run in a "
            "forked child. Create TransferEngine objects after forking, or start workers with the 'spawn' method "
            "(for vLLM: VLLM_WORKER_MULTIPROC_METHOD=spawn).")
    if _lib is not None:
        return _lib
    return _load()[0]


def gil_lib() -> ctypes.PyDLL:
    """The same library, through ctypes.PyDLL: calls keep the GIL."""
    lib()
    assert _gil_lib is not None
    return _gil_lib


def _load():
    global _lib, _gil_lib, _loaded_pid
    with _lock:
        if _lib is not None:
            return _lib, _gil_lib
        path = library_path()
        if not os.path.exists(path):
            raise KVConnectError(
                f"kvconnect: the native library {path} is missing: install the kvconnect wheel (make python builds it), "
                "or point KVCONNECT_LIBRARY at a libkvconnect.so (make build puts one in bin/)")
        try:
            cdll = ctypes.CDLL(path)
            gdll = ctypes.PyDLL(path)
        except OSError as e:
            raise KVConnectError(f"kvconnect: loading {path}: {e}") from e
        for name, (restype, argtypes) in _SIGNATURES.items():
            for dll in (cdll, gdll):
                try:
                    fn = getattr(dll, name)
                except AttributeError:
                    raise KVConnectError(
                        f"kvconnect: {path} has no {name}: it is not the library of this kvconnect package "
                        f"(an older or a different build); use the library of the same release "
                        f"({'unset KVCONNECT_LIBRARY, or point it at ' if os.environ.get('KVCONNECT_LIBRARY') else ''}"
                        "the wheel's own, or bin/libkvconnect.so from the same checkout after make build)") from None
                fn.restype = restype
                fn.argtypes = argtypes
        _gil_lib, _lib, _loaded_pid = gdll, cdll, os.getpid()
        return _lib, _gil_lib


def take_string(ptr) -> Optional[str]:
    """Reads and frees a string the library allocated (None for NULL)."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _lib.kvc_free(ptr)


def last_error() -> str:
    return (lib().kvc_last_error() or b"").decode("utf-8", "replace")


def last_error_json() -> str:
    return (lib().kvc_last_error_json() or b"{}").decode("utf-8", "replace")


def u64_array(values):
    n = len(values)
    return (ctypes.c_uint64 * n)(*values), n
