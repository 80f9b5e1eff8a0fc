"""kvconnect.TransferEngine: Mooncake's Python TransferEngine, on kvconnect.

Every method of ``mooncake.engine.TransferEngine`` (Mooncake's
``transfer_engine_py``), with the same names, argument order, defaults and
return conventions: nothing raises by design, ints come back (0 or a
negative code), async submits return a batch id or 0, addresses are 0 on
failure. What kvconnect adds: ``initialize`` falls back along a documented
chain when the transport asked for cannot start here and logs exactly why
(logger ``kvconnect``), and ``last_error()`` says what the last failing call
met. See docs/PYTHON.md.
"""

from __future__ import annotations

import array
import bisect
import ctypes
import enum
import json
import logging
import threading
from typing import List, Optional, Sequence

from . import _lib

log = logging.getLogger("kvconnect")

# Mooncake's wildcard memory location (kWildcardLocation).
WILDCARD_LOCATION = "*"

# How long one wait inside a blocking call lasts before Python gets to
# check for signals (Ctrl-C) again.
_WAIT_SLICE_MS = 200

# A sync transfer of at most this many bytes in all runs on the calling
# thread (kvc_transfer_sync: nothing handed to another thread, the
# fastest path: a 128 x 64 KiB batch, vLLM's usual, took 60-70 us less
# than submitting it and waiting, docs/DATAPATH-ROUNDS.md, twenty-first round);
# Ctrl-C during one takes effect when it returns: at once on a healthy
# link (16 MiB is 4 ms at 4 GB/s, 130 ms at 1 Gbit/s), on a hung peer
# within its transfer timeout. A larger one is submitted and waited for
# in slices, so Ctrl-C interrupts the wait at once.
_INLINE_SYNC_MAX = 16 << 20

# Return codes (kvconnect.h).
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_ADDRESS_NOT_REGISTERED = -3
ERR_ADDRESS_OVERLAPPED = -7
ERR_METADATA = -200
ERR_CLOSED = -1002
ERR_FORKED = -1005
# A one-slot array of uint64 (the fast path's local, remote, length).
_ONE = ctypes.c_uint64 * 1

_BATCH_DONE, _BATCH_PENDING, _BATCH_FAILED, _BATCH_TIMEDOUT = 1, 0, -1, -2


class TransferOpcode(enum.IntEnum):
    """Mooncake's TransferOpcode: Read = 0, Write = 1."""

    Read = 0
    Write = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: Mooncake's TransferNotify(name, msg)."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, TransferNotify) and (self.name, self.msg) == (other.name, other.msg)


class EngineRef:
    """What get_engine returns: an opaque reference to the kvconnect engine.

    Mooncake's get_engine hands its C++ TransferEngine to other Mooncake
    components (the Mooncake Store); those cannot use kvconnect's engine.
    ``handle`` is the engine's handle in libkvconnect's C API (kvconnect.h).
    """

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __repr__(self) -> str:
        return f"<kvconnect engine {self.handle} (not a Mooncake C++ TransferEngine)>"


def _payload(src) -> "bytes | memoryview":
    """write_bytes_to_buffer's source as bytes or a byte view: bytes, str
    (UTF-8, as Mooncake's char* takes it) or any C-contiguous buffer
    (bytearray, memoryview, a numpy array). Anything else is a TypeError,
    never its repr."""
    if isinstance(src, bytes):
        return src
    if isinstance(src, str):
        return src.encode("utf-8")
    try:
        return memoryview(src).cast("B")
    except TypeError:
        raise TypeError(f"write_bytes_to_buffer: src_ptr must be bytes, str or a C-contiguous buffer (bytearray, "
                        f"memoryview, a numpy array), not {type(src).__name__}") from None


def _b(s: Optional[str]) -> bytes:
    if s is None:
        return b""
    if isinstance(s, bytes):
        return s
    return str(s).encode("utf-8")


def _describe(diag: dict) -> str:
    """One attempt's diagnosis in a sentence."""
    if not diag:
        return "no diagnosis"
    parts = [f"step {diag.get('step', '?')!r}"]
    if diag.get("native_name") or diag.get("native_code"):
        parts.append(f"native {diag.get('native_name') or ''} {diag.get('native_code') or ''}".rstrip())
    parts.append(diag.get("cause") or diag.get("message") or "")
    text = ": ".join(p for p in parts if p)
    hints = diag.get("hints") or []
    if hints:
        text += ". Hints: " + "; ".join(hints)
    return text


def _attempts_text(attempts: list) -> str:
    lines = []
    for a in attempts or []:
        state = "started" if a.get("ok") else "failed: " + _describe(a.get("diagnosis") or {})
        lines.append(f"  - {a.get('transport')}: {state}")
    return "\n".join(lines)


class _EngineClosed(Exception):
    """Raised inside the engine by a call after close()."""


class TransferEngine:
    """Mooncake's ``mooncake.engine.TransferEngine``, backed by kvconnect.

    The constructor starts nothing; ``initialize`` brings the engine up.
    Methods are safe to call from several threads at once; the GIL is
    released while kvconnect moves bytes.
    """

    TransferOpcode = TransferOpcode

    def __init__(self) -> None:
        self._handle = 0
        self._closed = False  # close() ran: no call makes a new engine
        self._lock = threading.Lock()
        self._memory = {}  # registered caller memory: address -> length
        self._managed = {}  # managed buffers: address -> length
        # Batches submitted and not freed yet (guarded by _lock): close()
        # cancels them before it unregisters the memory they use, which
        # would otherwise wait for them (up to transfer_timeout: an
        # interpreter exiting on Ctrl-C with a batch to a hung peer).
        self._submitted = set()
        # _tables guards _memory and _managed and counts the copies under
        # way (write_bytes_to_buffer, read_bytes_from_buffer: they run
        # without the GIL). Freeing a managed buffer and close take the
        # memory out of the tables first, so that no new copy starts on
        # it, then wait for the copies under way before it is unmapped.
        self._tables = threading.Condition()
        self._copies = 0
        self._last_error = ""
        self._last_error_json = "{}"
        # The one-op fast path (_sync1): each thread's own three one-slot
        # C arrays, and sessions already encoded.
        self._local = threading.local()
        self._sessions = {}

    # ---- plumbing -------------------------------------------------------

    def _engine(self) -> int:
        """The engine's handle, created on first use."""
        if self._handle:
            return self._handle
        with self._lock:
            if self._closed:
                raise _EngineClosed()
            if not self._handle:
                lib = _lib.lib()
                h = lib.kvc_engine_new()
                if not h:
                    raise _lib.KVConnectError(_lib.last_error())
                rc = lib.kvc_engine_set_defaults(h, json.dumps({"plugin_dir": _lib.native_dir()}).encode())
                if rc != 0:
                    raise _lib.KVConnectError(_lib.last_error())
                self._handle = h
        return self._handle

    def _record(self, rc: int = -1) -> int:
        """Keeps the calling thread's last error on the engine and returns
        rc as Mooncake would: its own codes as they are, kvconnect's own
        (below -1000: timeout, closed, not initialized, ...) as -1; the
        exact code stays in last_error_json()."""
        if not _lib._forked:  # in a forked child, _call recorded why already
            self._last_error = _lib.last_error()
            self._last_error_json = _lib.last_error_json()
        return -1 if rc < -1000 else rc

    def _failed(self, what: str, rc: Optional[int] = None) -> int:
        """_record for calls whose failure a serving stack reports only as
        a bare "registration failed": the cause is logged at ERROR too,
        as Mooncake logs its own. rc None: the call was not made (_call
        recorded why)."""
        rc = -1 if rc is None else self._record(rc)
        log.error("%s failed: %s", what, self._last_error)
        return rc

    def _call(self, name: str, *args, keep_gil: bool = False):
        try:
            h = self._engine()
            lib = _lib.gil_lib() if keep_gil else _lib.lib()
        except _lib.KVConnectForkedError as e:
            self._last_error, self._last_error_json = str(e), json.dumps({"code": ERR_FORKED, "kind": "forked"})
            log.error("%s", e)
            return None
        except _EngineClosed:
            self._last_error = f"{name}: this engine was closed (close()); make a new TransferEngine"
            self._last_error_json = json.dumps({"code": ERR_CLOSED, "kind": "closed", "message": self._last_error})
            return None
        return getattr(lib, name)(h, *args)

    def last_error(self) -> str:
        """What the last failing call on this engine met, in full (for a
        failed initialize: every transport tried, with its diagnosis)."""
        return self._last_error

    def last_error_json(self) -> dict:
        """The same as a dict: code, kind, message and, for initialize,
        attempts (transport, step, native code, cause, hints)."""
        try:
            return json.loads(self._last_error_json or "{}")
        except ValueError:
            return {}

    def status(self) -> dict:
        """The engine's status (transports up, the chain's attempts,
        fallback, plugin pids); {} before initialize."""
        if not self._handle:
            return {}
        text = _lib.take_string(self._call("kvc_engine_status_json"))
        return json.loads(text) if text else {}

    # ---- lifecycle ------------------------------------------------------

    def initialize(self, local_hostname, metadata_server, protocol, device_name, /) -> int:
        """Starts the engine; 0 when a transport is up, -1 otherwise."""
        return self._initialize(local_hostname, metadata_server, protocol, device_name, None)

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name, metadata_type, /) -> int:
        """initialize, with the metadata service type a bare host:port names."""
        return self._initialize(local_hostname, metadata_server, protocol, device_name, metadata_type)

    def _initialize(self, local_hostname, metadata_server, protocol, device_name, metadata_type) -> int:
        args = (_b(local_hostname), _b(metadata_server), _b(protocol), _b(device_name), _b(metadata_type))
        # The library reads the process environment (variables set in
        # os.environ since it loaded apply) with the GIL kept, so no Python
        # thread changes the environment, and frees what it walks, meanwhile.
        # The engine then starts with the GIL released: other threads run
        # while plugins start, the fallback chain runs and the metadata
        # service answers (which may be a thread of this process).
        try:
            _lib.gil_lib().kvc_sync_environ()
        except _lib.KVConnectForkedError:
            pass  # said by the call below
        rc = self._call("kvc_engine_initialize_synced", *args)
        if rc is None:
            return -1
        if rc != 0:
            # This thread's error, read from the library (per thread), not
            # back from the engine's fields, which another thread's failure
            # may have replaced meanwhile.
            text, js = _lib.last_error(), _lib.last_error_json()
            try:
                diag = json.loads(js or "{}")
            except ValueError:
                diag = {}
            attempts = _attempts_text(diag.get("attempts") or [])
            if attempts:
                text = f"{text}\nEvery transport tried:\n{attempts}"
            self._last_error, self._last_error_json = text, js
            log.error("kvconnect: the transfer engine could not start (protocol %r, device_name %r): %s",
                      protocol, device_name, text)
            return -1
        self._report_fallback(protocol)
        return 0

    def _report_fallback(self, protocol) -> None:
        st = self.status()
        # The library logs at error level unless asked; the configuration's
        # warnings (a secret file others can read, an unknown key) are shown
        # here, in the serving stack's log.
        for w in st.get("config_warnings") or []:
            log.warning("kvconnect: %s", w)
        if not st.get("fallback"):
            log.info("kvconnect: engine up on %s (%s), session %s", st.get("transport"), st.get("mode"),
                     st.get("session"))
            return
        failed = [a for a in st.get("attempts") or [] if not a.get("ok")]
        why = "; ".join(f"{a.get('transport')} failed at {_describe(a.get('diagnosis') or {})}" for a in failed)
        log.warning(
            "kvconnect: protocol %r could not start here, so this engine runs on %r instead (fallback chain; set "
            "fallback: [] or KVCONNECT_FALLBACK=none to fail instead). %s. Session %s.",
            protocol or "rdma", st.get("transport"), why, st.get("session"))

    def close(self) -> int:
        """Stops the engine (kvconnect's addition: Mooncake's engine ends
        with the object). Registered memory goes back to the caller as it
        was; managed buffers are unmapped. Idempotent."""
        with self._lock:
            h, self._handle = self._handle, 0
            self._closed = True
            submitted, self._submitted = self._submitted, set()
        if not h:
            return 0
        if _lib._forked:
            return 0  # the parent owns the engine
        for bid in submitted:
            # Canceled first: unregistering waits for the batches that use
            # the memory (the GIL released: a batch ends within seconds).
            _lib.lib().kvc_batch_free(h, bid)
        with self._tables:
            registered = list(self._memory)
            self._memory.clear()
            self._managed.clear()
            while self._copies:
                self._tables.wait()
        close = _lib.lib().kvc_engine_close  # the GIL is released: closing can take seconds
        if registered:
            # Registered memory goes back to the caller (its pages moved
            # back, the edge pages copied) with the GIL held, as
            # unregister_memory does: a write another thread makes to a
            # heap neighbour on an edge page meanwhile would be lost.
            a, n = _lib.u64_array(registered)
            if _lib.gil_lib().kvc_unregister_memory_batch(h, a, n) != 0:
                close = _lib.gil_lib().kvc_engine_close  # some stay registered: close moves them back
        rc = close(h)
        return rc if rc == 0 else self._record(rc)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._handle and not _lib._forked:
                self.close()
        except Exception:  # interpreter shutdown: nothing left to report to
            pass

    def get_rpc_port(self, /) -> int:
        rc = self._call("kvc_engine_rpc_port")
        if rc is None:
            return -1  # _call recorded why
        if rc < 0:
            return self._record(-1)
        return rc

    def get_engine(self, /) -> EngineRef:
        return EngineRef(self._handle)

    def get_engine_ptr(self, /) -> int:
        return self._handle

    # ---- memory ---------------------------------------------------------

    def register_memory(self, buffer_addr, capacity, location=WILDCARD_LOCATION) -> int:
        """Registers memory this process owns, in place; 0 or a negative
        code (-1 invalid, -7 overlapping a registered range, ...)."""
        rc = self._call("kvc_register_memory", int(buffer_addr), int(capacity), keep_gil=True)
        if rc is None:
            return self._failed('register_memory')
        if rc != 0:
            return self._failed('register_memory', rc)
        with self._tables:
            self._memory[int(buffer_addr)] = int(capacity)
        return 0

    def batch_register_memory(self, buffer_addresses, capacities, location=WILDCARD_LOCATION) -> int:
        """Registers many buffers at once, all or none."""
        addrs, lens = list(map(int, buffer_addresses)), list(map(int, capacities))
        if len(addrs) != len(lens) or not addrs:
            self._last_error = (f"batch_register_memory: {len(addrs)} addresses and {len(lens)} capacities: the lists "
                                "must be non-empty and the same length")
            return -1
        a, n = _lib.u64_array(addrs)
        l, _ = _lib.u64_array(lens)
        rc = self._call("kvc_register_memory_batch", a, l, n, keep_gil=True)
        if rc is None:
            return self._failed('batch_register_memory')
        if rc != 0:
            return self._failed('batch_register_memory', rc)
        with self._tables:
            self._memory.update(zip(addrs, lens))
        return 0

    def _retire(self, addrs) -> dict:
        """Takes addrs out of the registered table, so no copy
        (write_bytes_to_buffer, read_bytes_from_buffer) starts on them, and
        waits for the copies under way: unregistering moves the pages back,
        and a copy running meanwhile (ctypes.memmove releases the GIL)
        would be lost. Returns what was taken, for _restore."""
        with self._tables:
            taken = {a: self._memory.pop(a) for a in addrs if a in self._memory}
            while self._copies:
                self._tables.wait()
        return taken

    def _restore(self, taken: dict) -> None:
        """Puts back what _retire took (the unregistration failed)."""
        with self._tables:
            self._memory.update(taken)

    def unregister_memory(self, buffer_addr, /) -> int:
        taken = self._retire([int(buffer_addr)])
        rc = self._call("kvc_unregister_memory", int(buffer_addr), keep_gil=True)
        if rc is None:
            self._restore(taken)
            return self._failed('unregister_memory')
        if rc != 0:
            self._restore(taken)
            return self._failed('unregister_memory', rc)
        return 0

    def batch_unregister_memory(self, buffer_addresses, /) -> int:
        addrs = list(map(int, buffer_addresses))
        if not addrs:
            self._last_error = "batch_unregister_memory: no addresses"
            return -1
        a, n = _lib.u64_array(addrs)
        taken = self._retire(addrs)
        rc = self._call("kvc_unregister_memory_batch", a, n, keep_gil=True)
        if rc is None:
            self._restore(taken)
            return self._failed('batch_unregister_memory')
        if rc != 0:
            # (the ones that did unregister are back in the table too: still
            # the caller's memory, so a copy there is as safe as before)
            self._restore(taken)
            return self._failed('batch_unregister_memory', rc)
        return 0

    def allocate_managed_buffer(self, length, /) -> int:
        """Shared memory of length bytes, registered; its address or 0."""
        addr = self._call("kvc_allocate_managed", int(length), keep_gil=True)
        if not addr:
            return self._record(0) if addr is not None else 0
        with self._tables:
            self._managed[addr] = int(length)
        return addr

    def free_managed_buffer(self, buffer_addr, length, /) -> int:
        addr = int(buffer_addr)
        with self._tables:
            # No copy starts on it from here; those under way end first.
            had = self._managed.pop(addr, None)
            while self._copies:
                self._tables.wait()
        rc = self._call("kvc_free_managed", addr, keep_gil=True)
        if rc != 0 and had is not None:
            with self._tables:
                self._managed[addr] = had  # still mapped
        if rc is None:
            return -1
        if rc != 0:
            return self._record(rc)
        return 0

    def _copy_begins(self, addr: int, length: int) -> bool:
        """Whether [addr, addr+length) lies in memory registered with (or
        allocated by) this engine; if so, a copy on it is counted under
        way until _copy_ends."""
        with self._tables:
            if not self._owned(addr, length):
                return False
            self._copies += 1
            return True

    def _copy_ends(self) -> None:
        with self._tables:
            self._copies -= 1
            if not self._copies:
                self._tables.notify_all()

    def _owned(self, addr: int, length: int) -> bool:
        """Whether [addr, addr+length) lies in memory registered with (or
        allocated by) this engine. The caller holds _tables."""
        for table in (self._memory, self._managed):
            starts = sorted(table)
            i = bisect.bisect_right(starts, addr) - 1
            if i >= 0 and addr + length <= starts[i] + table[starts[i]]:
                return True
        return False

    def write_bytes_to_buffer(self, dest_address, src_ptr, length, /) -> int:
        """Copies length bytes of src_ptr (bytes) to dest_address, which must
        lie in memory registered with or allocated by this engine (Mooncake
        copies anywhere; kvconnect refuses what would crash)."""
        data = _payload(src_ptr)
        dest, length = int(dest_address), int(length)
        if length < 0 or length > len(data):
            self._last_error = f"write_bytes_to_buffer: length {length} but {len(data)} bytes given"
            return -1
        if not self._copy_begins(dest, length):
            self._last_error = (f"write_bytes_to_buffer: [0x{dest:x}, +{length}) is not in memory registered with or "
                                "allocated by this engine")
            return -1
        try:
            if isinstance(data, memoryview):
                # (memmove takes bytes or an address: a writable view lends
                # its memory, a read-only one is copied once)
                data = (ctypes.c_char * len(data)).from_buffer(data) if not data.readonly else data.tobytes()
            ctypes.memmove(dest, data, length)
        finally:
            self._copy_ends()
        return 0

    def read_bytes_from_buffer(self, source_address, length, /) -> bytes:
        """The length bytes at source_address, which must lie in memory
        registered with or allocated by this engine (else ValueError: a
        read elsewhere could crash the process)."""
        src, length = int(source_address), int(length)
        if length < 0 or not self._copy_begins(src, length):
            raise ValueError(f"read_bytes_from_buffer: [0x{src:x}, +{length}) is not in memory registered with or "
                             "allocated by this engine")
        try:
            # (string_at takes its length as a C int: 2 GiB and more would
            # come back truncated)
            return (ctypes.c_char * length).from_address(src).raw
        finally:
            self._copy_ends()

    # ---- transfers -------------------------------------------------------

    def _batch_args(self, buffers, peer_addresses, lengths):
        """The batch as C arrays (n, local, remote, lengths, total bytes),
        or None (with the error recorded) when the lists do not match.

        Lists of ints (or of objects with __index__: numpy's integers,
        torch's data_ptr()) are packed by array.array in C, about 10 us
        for 3 x 128 entries against 40-70 us for ctypes' per-element
        conversion (docs/DATAPATH-ROUNDS.md, twenty-first round); anything else
        (floats, numeric strings, negative numbers) takes int() on each
        element, as it always did."""
        # An iterator (a generator) is read once, into a list, so the
        # element-by-element conversion sees all of it too.
        buffers, peer_addresses, lengths = (list(x) if iter(x) is x else x
                                            for x in (buffers, peer_addresses, lengths))
        try:
            local, remote, lens = array.array("Q", buffers), array.array("Q", peer_addresses), array.array("Q", lengths)
        except (TypeError, OverflowError):
            local, remote, lens = list(map(int, buffers)), list(map(int, peer_addresses)), list(map(int, lengths))
        if not (len(local) == len(remote) == len(lens)) or not local:
            self._last_error = (f"{len(local)} buffers, {len(remote)} peer addresses and {len(lens)} lengths: the "
                                "lists must be non-empty and the same length")
            return None
        n = len(local)
        arr = ctypes.c_uint64 * n
        if isinstance(local, array.array):
            return n, arr.from_buffer(local), arr.from_buffer(remote), arr.from_buffer(lens), sum(lens)
        return n, arr(*local), arr(*remote), arr(*lens), sum(lens)

    def _submit(self, target_hostname, op: int, buffers, peer_addresses, lengths) -> int:
        """Submits a batch; its id, or 0 (with the error recorded)."""
        args = self._batch_args(buffers, peer_addresses, lengths)
        if args is None:
            return 0
        n, local, remote, lens, _ = args
        bid = self._call("kvc_batch_submit", _b(target_hostname), op, local, remote, lens, n, -1)
        if not bid:
            return self._record(0) if bid is not None else 0
        with self._lock:
            self._submitted.add(bid)
        return bid

    def _free(self, lib, h: int, bid: int) -> None:
        """Frees batch bid (canceling it if it still runs)."""
        with self._lock:
            self._submitted.discard(bid)
        lib.kvc_batch_free(h, bid)

    def _wait(self, bid: int) -> int:
        """Waits for batch bid in slices (so Ctrl-C gets through), frees
        it, and returns its outcome (1 done, -1 failed, -2 timed out)."""
        try:
            lib = _lib.lib()
        except _lib.KVConnectForkedError as e:
            self._last_error, self._last_error_json = str(e), json.dumps({"code": ERR_FORKED, "kind": "forked"})
            log.error("%s", e)
            return -1
        h = self._handle
        try:
            while True:
                rc = lib.kvc_batch_wait(h, bid, _WAIT_SLICE_MS, None, 0)
                if rc != _BATCH_PENDING:
                    break
        except BaseException:
            self._free(lib, h, bid)  # cancels the batch, then re-raise
            raise
        if rc != _BATCH_DONE:
            rc = self._record(rc)
        self._free(lib, h, bid)
        return rc

    def _sync(self, target_hostname, op: int, buffers, peer_addresses, lengths, notify=None) -> int:
        args = self._batch_args(buffers, peer_addresses, lengths)
        if args is None:
            return -1
        n, local, remote, lens, total = args
        if total <= _INLINE_SYNC_MAX:
            rc = self._call("kvc_transfer_sync", _b(target_hostname), op, local, remote, lens, n, -1)
            if rc != 0:
                if rc is not None:
                    self._record(rc)
                return -1
        else:
            bid = self._call("kvc_batch_submit", _b(target_hostname), op, local, remote, lens, n, -1)
            if not bid:
                if bid is not None:
                    self._record(0)
                return -1
            with self._lock:
                self._submitted.add(bid)
            if self._wait(bid) != _BATCH_DONE:
                return -1
        if notify is not None:
            rc = self._call("kvc_notify", _b(target_hostname), _b(notify.name), _b(notify.msg), -1)
            if rc != 0:
                return self._record(-1)
        return 0

    def _sync1(self, target_hostname, op: int, buffer, peer_address, length) -> int:
        """One small op, the call serving stacks make most: what _sync
        does, without building lists and C arrays per call (the calling
        thread's one-slot arrays are reused, the session's bytes cached).
        Anything unusual (a large op, a forked child, no handle yet, bad
        input) takes _sync, which also says what was wrong."""
        h = self._handle
        n = length if type(length) is int else 0
        if not h or _lib._forked or not 0 < n <= _INLINE_SYNC_MAX or type(target_hostname) is not str:
            return self._sync(target_hostname, op, [buffer], [peer_address], [length])
        slots = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = (_ONE(), _ONE(), _ONE())
        local, remote, lens = slots
        try:
            local[0], remote[0] = buffer, peer_address
        except TypeError:  # not an int: _sync converts or explains
            return self._sync(target_hostname, op, [buffer], [peer_address], [length])
        lens[0] = n
        session = self._sessions.get(target_hostname)
        if session is None:
            if len(self._sessions) >= 4096:
                self._sessions.clear()
            session = self._sessions[target_hostname] = target_hostname.encode("utf-8")
        rc = _lib.lib().kvc_transfer_sync(h, session, op, local, remote, lens, 1, -1)
        if rc != 0:
            self._record(rc)
            return -1
        return 0

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint="") -> int:
        return self._sync1(target_hostname, 1, buffer, peer_buffer_address, length)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length, transport_hint="") -> int:
        return self._sync1(target_hostname, 0, buffer, peer_buffer_address, length)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode, notify=None,
                      transport_hint="") -> int:
        return self._sync(target_hostname, int(opcode), [buffer], [peer_buffer_address], [length], notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  transport_hint="") -> int:
        return self._sync(target_hostname, 1, buffers, peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                 transport_hint="") -> int:
        return self._sync(target_hostname, 0, buffers, peer_buffer_addresses, lengths)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode, notify=None,
                            transport_hint="") -> int:
        return self._sync(target_hostname, int(opcode), buffers, peer_buffer_addresses, lengths, notify)

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                   transport_hint="") -> int:
        return self._submit(target_hostname, 1, buffers, peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  transport_hint="") -> int:
        return self._submit(target_hostname, 0, buffers, peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode,
                             transport_hint="") -> int:
        return self._submit(target_hostname, int(opcode), buffers, peer_buffer_addresses, lengths)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length, transport_hint="") -> int:
        return self._submit(target_hostname, 1, [buffer], [peer_buffer_address], [length])

    def get_batch_transfer_status(self, batch_ids, /) -> int:
        """Waits for every batch to end and frees them: 0 if all completed,
        -1 otherwise (an unknown id included)."""
        ok = True
        for bid in list(batch_ids):
            if int(bid) == 0 or self._wait(int(bid)) != _BATCH_DONE:
                ok = False
        return 0 if ok else -1

    def transfer_check_status(self, batch_id, /) -> int:
        """1 done, 0 pending, -1 failed, -2 timed out; a batch that ended is
        freed."""
        bid = int(batch_id)
        rc = self._call("kvc_batch_wait", bid, 0, None, 0)
        if rc is None:
            return -1
        if rc == _BATCH_PENDING:
            return 0
        if rc not in (_BATCH_DONE, _BATCH_FAILED, _BATCH_TIMEDOUT):
            return self._record(-1)  # unknown batch
        if rc != _BATCH_DONE:
            self._record(rc)
        self._free(_lib.lib(), self._handle, bid)
        return rc

    # ---- peers and notifications ------------------------------------------

    def get_first_buffer_address(self, segment_name, /) -> int:
        addr = self._call("kvc_segment_first_buffer", _b(segment_name), -1)
        if not addr:
            return self._record(0) if addr is not None else 0
        return addr

    def warmup_efa_segment(self, segment_name) -> int:
        """Opens the peer ahead of the first transfer (any transport)."""
        rc = self._call("kvc_open_segment", _b(segment_name), -1)
        if rc is None:
            return -1
        return rc if rc == 0 else self._record(rc)

    def send_probe(self, peer_server_name) -> int:
        rc = self._call("kvc_probe", _b(peer_server_name), -1)
        if rc is None:
            return -1
        return rc if rc == 0 else self._record(rc)

    def get_notifies(self, /) -> List[TransferNotify]:
        text = _lib.take_string(self._call("kvc_get_notifies"))
        if text is None:
            self._record()
            return []
        return [TransferNotify(n.get("name", ""), n.get("msg", "")) for n in json.loads(text)]

    def get_local_topology(self, device_name=None) -> str:
        """What every transport would do on this host, as JSON (kvconnect's
        doctor; Mooncake returns its NIC topology here)."""
        text = _lib.take_string(self._call("kvc_engine_topology", None if device_name is None else _b(device_name)))
        if text is None:
            self._record()
            return "{}"
        return text

    # ---- GPU memory: not supported yet ------------------------------------

    def _no_cuda(self, name: str):
        raise RuntimeError(f"kvconnect: {name}: GPU memory is not supported yet (kvconnect moves host memory "
                           "only); use host buffers, or Mooncake for GPU-triggered transfers")

    def transfer_write_on_cuda(self, target_hostname, buffer, peer_buffer_address, length, stream_ptr=0,
                               transport_hint=""):
        self._no_cuda("transfer_write_on_cuda")

    def transfer_read_on_cuda(self, target_hostname, buffer, peer_buffer_address, length, stream_ptr=0,
                              transport_hint=""):
        self._no_cuda("transfer_read_on_cuda")

    def batch_transfer_write_on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr=0,
                                     transport_hint=""):
        self._no_cuda("batch_transfer_write_on_cuda")

    def batch_transfer_read_on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr=0,
                                    transport_hint=""):
        self._no_cuda("batch_transfer_read_on_cuda")
