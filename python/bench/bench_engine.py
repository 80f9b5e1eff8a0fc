#!/usr/bin/env python3
"""The Python engine's speed, side by side in one run (make bench).

Against one Go target node (`kvconnect bench --mode target`), round by
round, alternating: one 4 KiB transfer_sync_write from Python (per-op
latency) and the same op through the Go API (`kvconnect bench --mode
initiator`); batch_transfer_sync_write/read of 128 x 64 KiB from Python on
plain registered memory (a bytearray) and on managed memory, and the Go
API's batches; and, with Mooncake's binaries, the Python engine and
Mooncake's C++ transfer_engine_bench against one Mooncake target. Medians
of same-round ratios; the machine is named. Standard library only.

    python3 python/bench/bench_engine.py --bin bin --mooncake-bin ../shared/mooncake/bin --out docs/PERFORMANCE.md
"""

import argparse
import ctypes
import json
import resource
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BEGIN, END = "<!-- python-bench:begin -->", "<!-- python-bench:end -->"
BLOCK, BATCH, SMALL = 64 << 10, 128, 4096
# vLLM's MooncakeConnector sends from num_workers (10) threads at once; a
# request's blocks, merged where contiguous, make batches of a few ops.
THREADS, THREAD_BATCH = 10, 16


class Target:
    """A long-running target process that prints its session id."""

    def __init__(self, args, pattern, env=None):
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        self.session = None
        deadline = time.monotonic() + 60
        self.log = []
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = rx.search(line)
            if m:
                self.session = m.group(1)
                break
        if not self.session:
            self.stop()
            sys.exit(f"target {args[0]} did not start:\n{''.join(self.log)}")
        threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True).start()

    def stop(self):
        self.p.kill()
        self.p.wait()


def addr_of(buf) -> int:
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def py_single(e, session, local, remote, seconds):
    """p50 of one 4 KiB transfer_sync_write, in microseconds."""
    lat = []
    end = time.perf_counter() + seconds
    ns = time.perf_counter_ns
    while time.perf_counter() < end:
        t = ns()
        if e.transfer_sync_write(session, local, remote, SMALL) != 0:
            sys.exit(f"transfer_sync_write: {e.last_error()}")
        lat.append(ns() - t)
    return statistics.median(lat) / 1e3


def cpu_seconds():
    """This process's CPU time so far: the interpreter's threads and the
    library's (the Go runtime runs in this process)."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def py_batch(e, op, session, local, remote, seconds, cpu=None):
    """GB/s of batch_transfer_sync_* of BATCH x BLOCK; appends the
    process's CPU per batch (us) to cpu when given."""
    srcs = [local + i * BLOCK for i in range(BATCH)]
    dsts = [remote + i * BLOCK for i in range(BATCH)]
    lens = [BLOCK] * BATCH
    fn = e.batch_transfer_sync_write if op == "write" else e.batch_transfer_sync_read
    n = 0
    c0 = cpu_seconds()
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        if fn(session, srcs, dsts, lens) != 0:
            sys.exit(f"batch {op}: {e.last_error()}")
        n += 1
    gbps = n * BATCH * BLOCK / (time.perf_counter() - start) / 1e9
    if cpu is not None:
        cpu.append((cpu_seconds() - c0) / max(n, 1) * 1e6)
    return gbps


def py_threads(e, session, local, remote, seconds, cpu):
    """GB/s of batch_transfer_sync_write of THREAD_BATCH x BLOCK from
    THREADS threads at once, each on its own slice of local and remote;
    appends the process's CPU per batch (us) to cpu."""
    per = THREAD_BATCH * BLOCK
    counts = [0] * THREADS
    failed = []
    go = threading.Event()
    end = [0.0]

    def work(i):
        srcs = [local + i * per + j * BLOCK for j in range(THREAD_BATCH)]
        dsts = [remote + i * per + j * BLOCK for j in range(THREAD_BATCH)]
        lens = [BLOCK] * THREAD_BATCH
        go.wait()
        while time.perf_counter() < end[0]:
            if e.batch_transfer_sync_write(session, srcs, dsts, lens) != 0:
                failed.append(e.last_error())
                return
            counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    c0 = cpu_seconds()
    start = time.perf_counter()
    end[0] = start + seconds
    go.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if failed:
        sys.exit(f"batch write from {THREADS} threads: {failed[0]}")
    n = sum(counts)
    cpu.append((cpu_seconds() - c0) / max(n, 1) * 1e6)
    return n * per / elapsed / 1e9


def go_bench(cli, session, op, block, batch, seconds, plugin_dir, threads=1):
    out = subprocess.run([cli, "bench", "--mode", "initiator", "--segment-id", session, "--operation", op,
                          "--block-size", str(block), "--batch-size", str(batch), "--threads", str(threads),
                          "--duration", f"{seconds}s", "--json", "--plugin-dir", plugin_dir, "--hostname",
                          "127.0.0.1"], capture_output=True, text=True, timeout=seconds + 120)
    if out.returncode != 0:
        sys.exit(f"kvconnect bench: {out.stderr}")
    return json.loads(out.stdout)


def mooncake_bench(binary, session, op, block, batch, seconds, pool):
    env = dict(os.environ)
    if pool:
        env["MC_TCP_ENABLE_CONNECTION_POOL"] = "1"
    out = subprocess.run([binary, "--mode=initiator", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
                          "--local_server_name=127.0.0.1:12346", f"--segment_id={session}", f"--operation={op}",
                          f"--block_size={block}", f"--batch_size={batch}", "--threads=1", f"--duration={seconds}"],
                         capture_output=True, text=True, env=env, timeout=seconds + 120)
    m = re.search(r"duration ([0-9.]+), batch count ([0-9]+), throughput ([0-9.]+)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"transfer_engine_bench: {out.stdout}{out.stderr}")
    dur, batches, gbps = float(m.group(1)), int(m.group(2)), float(m.group(3))
    return {"gb_per_s": gbps, "mean_us": dur / max(batches, 1) * 1e6}


def cpu_model():
    """The CPU as kvconnect bench names machine types (Machine.CPUType):
    the first processor's model name, with its family and model numbers
    where /proc/cpuinfo gives them (a hypervisor may show Zen 1 and Zen 5
    alike as "AMD EPYC")."""
    info = {}
    try:
        for line in open("/proc/cpuinfo"):
            if ":" not in line:
                if info:
                    break  # the end of the first processor's block
                continue
            k, v = line.split(":", 1)
            info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    name = info.get("model name", "unknown")
    if info.get("cpu family") and info.get("model"):
        return f"{name} (family {info['cpu family']}, model {info['model']})"
    return name


def machine_key():
    """The machine type, as kvconnect bench names it (MachineKey)."""
    return f"{cpu_model()} x{len(os.sched_getaffinity(0))}"


def machine():
    return (f"{cpu_model()}, {len(os.sched_getaffinity(0))} vCPUs, Linux {platform.release()}, Python "
            f"{platform.python_version()}, load average at start {os.getloadavg()[0]:.2f}")


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin"))
    ap.add_argument("--mooncake-bin", default=os.environ.get("KVCONNECT_MOONCAKE_BIN", ""))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    ap.add_argument("--out", help="markdown file to write the section into (between its markers, else appended)")
    args = ap.parse_args()
    binp = os.path.abspath(args.bin)
    os.environ.setdefault("KVCONNECT_LIBRARY", os.path.join(binp, "libkvconnect.so"))
    sys.path.insert(0, os.path.join(ROOT, "python", "kvconnect"))
    from kvconnect import TransferEngine

    cli = os.path.join(binp, "kvconnect")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    who = machine()
    go_t = Target([cli, "bench", "--mode", "target", "--buffer-size", "256MiB", "--hostname", "127.0.0.1",
                   "--plugin-dir", binp], r"session=(\S+)")
    mc_t = None
    mc_bench = os.path.join(args.mooncake_bin, "transfer_engine_bench") if args.mooncake_bin else ""
    if mc_bench and os.path.exists(mc_bench):
        mc_t = Target([mc_bench, "--mode=target", "--protocol=tcp", "--metadata_server=P2PHANDSHAKE",
                       "--local_server_name=127.0.0.1:12345", "--buffer_size=268435456"],
                      r"listening on ([0-9.]+:[0-9]+)")
    try:
        e = TransferEngine()
        if e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
            sys.exit(e.last_error())
        plain = bytearray(BATCH * BLOCK)
        p_addr = addr_of(plain)
        if e.register_memory(p_addr, len(plain)) != 0:
            sys.exit(e.last_error())
        m_addr = e.allocate_managed_buffer(BATCH * BLOCK)
        plain_t = bytearray(THREADS * THREAD_BATCH * BLOCK)
        t_addr = addr_of(plain_t)
        if e.register_memory(t_addr, len(plain_t)) != 0:
            sys.exit(e.last_error())
        remote = e.get_first_buffer_address(go_t.session)
        mc_remote = 0
        if mc_t:
            deadline = time.monotonic() + 30
            while not mc_remote and time.monotonic() < deadline:
                mc_remote = e.get_first_buffer_address(mc_t.session)
                time.sleep(0.1)
        d = args.duration
        r = {k: [] for k in ("py1", "go1", "pyw", "pyr", "mw", "mr", "gow", "gor", "pyt", "got", "cpu_pyw",
                              "cpu_gow", "cpu_pyt", "cpu_got", "mc_py1", "mc_1", "mc_1p", "mc_pyw", "mc_w", "mc_wp")}
        for rnd in range(args.rounds):
            r["py1"].append(py_single(e, go_t.session, p_addr, remote, d))
            r["go1"].append(go_bench(cli, go_t.session, "write", SMALL, 1, d, binp)["batch_latency_p50_us"])
            r["pyw"].append(py_batch(e, "write", go_t.session, p_addr, remote, d, r["cpu_pyw"]))
            r["mw"].append(py_batch(e, "write", go_t.session, m_addr, remote, d))
            g = go_bench(cli, go_t.session, "write", BLOCK, BATCH, d, binp)
            r["gow"].append(g["gb_per_s"])
            r["cpu_gow"].append(g["host_cpu_s"] / max(g["batches"], 1) * 1e6)
            r["pyr"].append(py_batch(e, "read", go_t.session, p_addr, remote, d))
            r["mr"].append(py_batch(e, "read", go_t.session, m_addr, remote, d))
            r["gor"].append(go_bench(cli, go_t.session, "read", BLOCK, BATCH, d, binp)["gb_per_s"])
            r["pyt"].append(py_threads(e, go_t.session, t_addr, remote, d, r["cpu_pyt"]))
            g = go_bench(cli, go_t.session, "write", BLOCK, THREAD_BATCH, d, binp, threads=THREADS)
            r["got"].append(g["gb_per_s"])
            r["cpu_got"].append(g["host_cpu_s"] / max(g["batches"], 1) * 1e6)
            if mc_t and mc_remote:
                r["mc_py1"].append(py_single(e, mc_t.session, p_addr, mc_remote, d))
                r["mc_1"].append(mooncake_bench(mc_bench, mc_t.session, "write", SMALL, 1, int(d), False)["mean_us"])
                r["mc_1p"].append(mooncake_bench(mc_bench, mc_t.session, "write", SMALL, 1, int(d), True)["mean_us"])
                r["mc_pyw"].append(py_batch(e, "write", mc_t.session, p_addr, mc_remote, d))
                r["mc_w"].append(mooncake_bench(mc_bench, mc_t.session, "write", BLOCK, BATCH, int(d), False)["gb_per_s"])
                r["mc_wp"].append(mooncake_bench(mc_bench, mc_t.session, "write", BLOCK, BATCH, int(d), True)["gb_per_s"])
            print(f"round {rnd + 1}/{args.rounds}: py 4KiB p50 {r['py1'][-1]:.1f} us, go {r['go1'][-1]:.1f} us; "
                  f"py batch write {r['pyw'][-1]:.2f} GB/s, go {r['gow'][-1]:.2f}", file=sys.stderr)
        e.close()
    finally:
        go_t.stop()
        if mc_t:
            mc_t.stop()

    def ratio(a, b):
        return med([x / y for x, y in zip(r[a], r[b]) if y])

    def diff(a, b):
        return med([x - y for x, y in zip(r[a], r[b])])

    n = args.rounds
    lines = [BEGIN, "", "### The Python engine (kvconnect.TransferEngine)", "",
             f"Measured {started} on {who}: `python3 python/bench/bench_engine.py` ({n} rounds of {d:g} s per "
             "measurement, variants alternating within each round; medians, and medians of same-round ratios). "
             "Target: one Go node (`kvconnect bench --mode target`), tcp as a plugin on both sides, loopback; "
             f"1 thread, except the row that says {THREADS}.", "",
             "| measurement | Python | Go API (same round) | Python / Go |", "|---|---:|---:|---:|",
             f"| one 4 KiB transfer_sync_write, p50 | {med(r['py1']):.1f} us | {med(r['go1']):.1f} us | "
             f"{diff('py1', 'go1'):+.1f} us, median of same-round differences (goal: at most +10 us) |",
             f"| batch_transfer_sync_write 128 x 64 KiB, plain memory | {med(r['pyw']):.2f} GB/s | "
             f"{med(r['gow']):.2f} GB/s | {ratio('pyw', 'gow'):.2f} (goal: at least 0.95) |",
             f"| batch_transfer_sync_read 128 x 64 KiB, plain memory | {med(r['pyr']):.2f} GB/s | "
             f"{med(r['gor']):.2f} GB/s | {ratio('pyr', 'gor'):.2f} |",
             f"| batch_transfer_sync_write {THREAD_BATCH} x 64 KiB from {THREADS} threads at once (vLLM's "
             f"send threads), plain memory | {med(r['pyt']):.2f} GB/s | {med(r['got']):.2f} GB/s "
             f"({THREADS} goroutines) | {ratio('pyt', 'got'):.2f} |", "",
             "The initiator process's CPU per batch (Python: the interpreter and the library's Go runtime, "
             "`getrusage`; Go: `kvconnect bench`'s `host_cpu_s`; the plugin's is apart in both):", "",
             "| batches | Python | Go API | Python / Go |", "|---|---:|---:|---:|",
             f"| 128 x 64 KiB WRITE, 1 thread | {med(r['cpu_pyw']):.0f} us | {med(r['cpu_gow']):.0f} us | "
             f"{ratio('cpu_pyw', 'cpu_gow'):.2f} |",
             f"| {THREAD_BATCH} x 64 KiB WRITE, {THREADS} threads | {med(r['cpu_pyt']):.0f} us | "
             f"{med(r['cpu_got']):.0f} us | {ratio('cpu_pyt', 'cpu_got'):.2f} |", "",
             "| memory registered | WRITE 128 x 64 KiB | READ 128 x 64 KiB |", "|---|---:|---:|",
             f"| plain (a bytearray, moved in place) | {med(r['pyw']):.2f} GB/s | {med(r['pyr']):.2f} GB/s |",
             f"| managed (allocate_managed_buffer) | {med(r['mw']):.2f} GB/s | {med(r['mr']):.2f} GB/s |",
             f"| plain / managed (same round) | {ratio('pyw', 'mw'):.2f} | {ratio('pyr', 'mr'):.2f} |", ""]
    if r["mc_py1"]:
        lines += ["Against one unmodified Mooncake target (`transfer_engine_bench --mode=target`), the Python "
                  "engine and Mooncake's C++ initiator (`transfer_engine_bench --mode=initiator --threads=1`, "
                  "pool off = its default, and `MC_TCP_ENABLE_CONNECTION_POOL=1`); Mooncake reports a mean per "
                  "batch, Python a p50:", "",
                  "| measurement | Python kvconnect | Mooncake C++ | Mooncake C++, pool | Python / Mooncake pool |",
                  "|---|---:|---:|---:|---:|",
                  f"| one 4 KiB WRITE | {med(r['mc_py1']):.1f} us p50 | {med(r['mc_1']):.1f} us mean | "
                  f"{med(r['mc_1p']):.1f} us mean | {ratio('mc_py1', 'mc_1p'):.2f} (latency) |",
                  f"| WRITE 128 x 64 KiB | {med(r['mc_pyw']):.2f} GB/s | {med(r['mc_w']):.2f} GB/s | "
                  f"{med(r['mc_wp']):.2f} GB/s | {ratio('mc_pyw', 'mc_wp'):.2f} (throughput) |", ""]
    lines += ["Per round: " + json.dumps({k: [round(x, 3) for x in v] for k, v in r.items() if v}), "", END]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.out:
        write_section(args.out, section)


def write_section(path, section):
    """Puts section into this machine's section of the performance
    document (kvconnect bench --suite --out makes it), replacing an earlier
    Python part there; a machine without a section gets one."""
    text = open(path).read() if os.path.exists(path) else ""
    key = machine_key()
    begin, end = f"<!-- machine: {key} -->", f"<!-- /machine: {key} -->"
    if begin not in text or end not in text:
        text = text.rstrip("\n") + f"\n\n{begin}\n## Machine type: {key}\n\n{end}\n"
    i, j = text.index(begin), text.index(end)
    part = text[i:j]
    if BEGIN in part and END in part:
        part = part[:part.index(BEGIN)] + section.rstrip("\n") + part[part.index(END) + len(END):]
    else:
        part = part.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    with open(path, "w") as f:
        f.write(text[:i] + part + text[j:])


if __name__ == "__main__":
    main()
