"""The kernel's own cost of moving a megabyte on this machine: the floor under replication.

    python tests/benchmarks/bench_kernel_floor.py          # ~20 s

A broker can do no less for each megabyte than the kernel does for it: receive it over TCP
(loopback here: the sender's and the receiver's halves) and write it into the page cache.
This measures those costs with plain system calls and no broker, as CPU milliseconds per MB
(the thread's own user + system time), and prints what they imply for bench_replication.py
on one machine, where every process shares the same cores:

- RF=1 moves each megabyte over one loopback hop (client to leader) and writes it once;
- RF=3 moves it over three hops (client to leader, leader to each follower) and writes it
  three times.

So with the CPU as the bound, RF=3 / RF=1 throughput can be no more than
(client + hop + write) / (client + 3 hops + 3 writes) however little the brokers add.
`write` is a new file's pages; `write, recycled pages` the same after a file of the same
size was deleted (a fresh virtual machine's first touch of a page is several times dearer).
"""
from __future__ import annotations

import argparse
import os
import resource
import socket
import tempfile
import threading

MB = 1_000_000
CHUNK = 1 << 20


def thread_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def loopback(mib: int) -> tuple[float, float]:
    """(send, receive) CPU ms per MB for `mib` MiB over one loopback TCP connection."""
    out: dict[str, float] = {}
    with socket.create_server(("127.0.0.1", 0)) as server:
        def receive() -> None:
            conn, _ = server.accept()
            with conn:
                start = thread_cpu()
                buf = bytearray(CHUNK)
                got = 0
                while got < mib * CHUNK:
                    n = conn.recv_into(buf)
                    if not n:
                        break
                    got += n
                out["recv"] = thread_cpu() - start
        reader = threading.Thread(target=receive)
        reader.start()
        data = b"x" * CHUNK
        with socket.create_connection(server.getsockname()) as conn:
            start = thread_cpu()
            for _ in range(mib):
                conn.sendall(data)
            out["send"] = thread_cpu() - start
        reader.join()
    mb = mib * CHUNK / MB
    return out["send"] * 1000 / mb, out["recv"] * 1000 / mb


def write(directory: str, mib: int) -> tuple[float, float]:
    """(new pages, recycled pages) CPU ms per MB for writing `mib` MiB to a file."""
    data = b"x" * CHUNK
    costs = []
    for _ in range(2):
        path = os.path.join(directory, "floor")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        start = thread_cpu()
        for _ in range(mib):
            os.write(fd, data)
        costs.append(thread_cpu() - start)
        os.close(fd)
        os.unlink(path)
    mb = mib * CHUNK / MB
    return costs[0] * 1000 / mb, costs[1] * 1000 / mb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=2048, help="MiB per measurement (default 2048)")
    ap.add_argument("--client", type=float, default=2.7, metavar="MS",
                    help="the producer's own CPU per MB (bench_replication.py prints it; default 2.7)")
    args = ap.parse_args()
    send, recv = loopback(args.mib)
    with tempfile.TemporaryDirectory() as d:
        new, recycled = write(d, args.mib)
    hop = send + recv
    print(f"loopback TCP: send {send:.2f} + receive {recv:.2f} = {hop:.2f} ms per MB")
    print(f"write: {new:.2f} ms per MB (new pages), {recycled:.2f} (recycled pages)")
    for name, w in (("new pages", new), ("recycled pages", recycled)):
        rf1 = args.client + hop + w
        rf3 = args.client + 3 * hop + 3 * w
        print(f"RF=3 / RF=1 at most {rf1 / rf3:.2f} with {name} "
              f"(client {args.client:.2f}; RF=1 {rf1:.2f}, RF=3 {rf3:.2f} ms per MB before any broker work)")


if __name__ == "__main__":
    main()
