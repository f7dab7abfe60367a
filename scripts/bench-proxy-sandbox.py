#!/usr/bin/env python3
"""B5 from inside a sandbox (the half of scripts/bench-proxy that runs `airlock run`).

Starts a loopback HTTP server (each request `GET /<bytes>` is answered with that many bytes,
`Connection: close`), makes a throw-away XDG world whose user config allows `bench.test:<port>`
(mapped to 127.0.0.1 by `[network.hosts]`), then in interleaved rounds measures
- download throughput: `curl -o /dev/null` of SIZE bytes, on the host straight to the server
  ("direct") and inside `airlock run` through the egress proxy, as a CONNECT tunnel (`curl -p`
  to 127.0.0.1:<port>, allowed by an exact rule) and as forwarded plain HTTP;
- fresh-request latency: a small Python client making N sequential fresh requests (connect,
  [CONNECT], GET of 1 byte, read to close), on the host straight to the server and inside the
  sandbox through 127.0.0.1:3128; "added" is the median through the proxy minus the median of
  the direct client.
Each `--airlock LABEL=PATH` is measured in every round (order alternating), so binaries compare
within one run. Prints the markdown section (without its markers) on stdout.
"""

import argparse
import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CHUNK = memoryview(b"\0" * (1 << 20))

CLIENT = r'''
import socket, sys, time
mode, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def read_to_close(s):
    while s.recv(65536):
        pass
def get(s, target):
    s.sendall(b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (target, host.encode(), port))
    read_to_close(s)
out = []
for _ in range(n):
    t0 = time.perf_counter()
    if mode == "direct":
        s = socket.create_connection(("127.0.0.1", port))
        get(s, b"/1")
    elif mode == "forward":
        s = socket.create_connection(("127.0.0.1", 3128))
        get(s, b"http://%s:%d/1" % (host.encode(), port))
    else:
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
        get(s, b"/1")
    s.close()
    out.append((time.perf_counter() - t0) * 1e6)
print(mode, " ".join("%.1f" % x for x in out))
'''

def answer(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(4096)
            if not data:
                return
            head += data
        target = head.split(b" ", 2)[1]
        size = int(target.rsplit(b"/", 1)[1] or b"0")
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        left = size
        while left > 0:
            n = min(left, len(CHUNK))
            conn.sendall(CHUNK[:n])
            left -= n


def serve(listener):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer_quietly, args=(conn,), daemon=True).start()


def answer_quietly(conn):
    try:
        answer(conn)
    except OSError:
        pass


def world(port):
    root = tempfile.mkdtemp(prefix="airlock-bench-b5-")
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": os.path.join(root, "home"),
        "XDG_CONFIG_HOME": os.path.join(root, "config"),
        "XDG_STATE_HOME": os.path.join(root, "state"),
        "XDG_DATA_HOME": os.path.join(root, "data"),
        "XDG_CACHE_HOME": os.path.join(root, "cache"),
        "XDG_RUNTIME_DIR": os.path.join(root, "run"),
    }
    for key in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
                "XDG_RUNTIME_DIR"):
        os.makedirs(env[key], mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(env["XDG_CONFIG_HOME"], "airlock"), exist_ok=True)
    with open(os.path.join(env["XDG_CONFIG_HOME"], "airlock", "config.toml"), "w") as f:
        # An IP-literal target needs an exact allow rule; a tunnel to it carries any bytes
        # (the SNI check applies to names), so the tunnel row measures the data path alone.
        f.write('[network]\npreset = "none"\nallow = ["bench.test:%d", "127.0.0.1:%d"]\n'
                '[network.hosts]\n"bench.test" = "127.0.0.1"\n' % (port, port))
    project = os.path.join(root, "project")
    os.makedirs(project)
    subprocess.run(["git", "init", "-q", project], check=True)
    with open(os.path.join(project, "client.py"), "w") as f:
        f.write(CLIENT)
    return root, env, project


def curl_speed(args):
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [float(x) / (1 << 20) for x in out.split()]


def inside(airlock, env, project, ports, size, downloads, n):
    """One `airlock run`: tunnelled and forwarded downloads, then both latency series."""
    port = ports
    curl = "curl -sS -o /dev/null -w '%%{speed_download}\\n' %s"
    # NO_PROXY names 127.0.0.1: name the proxy explicitly for the tunnel.
    tunnel = curl % ("-p --proxy http://127.0.0.1:3128 --noproxy '' http://127.0.0.1:%d/%d"
                     % (port, size))
    forward = curl % ("http://bench.test:%d/%d" % (port, size))
    # PID 1's CPU time (utime + stime, in clock ticks) around the downloads.
    pid1 = "echo pid1 $(cut -d' ' -f14,15 /proc/1/stat)"
    script = "; ".join(
        [pid1]
        + ["echo tunnel $(%s)" % tunnel] * downloads
        + ["echo forward $(%s)" % forward] * downloads
        + [pid1]
        + ["python3 client.py tunnel bench.test %d %d" % (port, n),
           "python3 client.py forward bench.test %d %d" % (port, n)])
    run = subprocess.run([airlock, "run", "--", "sh", "-c", script], cwd=project, env=env,
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("bench-proxy: airlock run failed (%d): %s" % (run.returncode, run.stderr))
    got = {"tunnel": [], "forward": [], "lat-tunnel": [], "lat-forward": [], "pid1": []}
    ticks = []
    for line in run.stdout.splitlines():
        words = line.split()
        if words and words[0] == "pid1":
            ticks.append(sum(int(w) for w in words[1:]))
        elif len(words) == 2 and words[0] in ("tunnel", "forward"):
            got[words[0]].append(float(words[1]) / (1 << 20))
        elif words and words[0] in ("tunnel", "forward"):
            got["lat-" + words[0]].extend(float(x) for x in words[1:])
    if len(ticks) == 2:
        # milliseconds of PID 1 CPU per GiB downloaded through it
        gib = 2 * downloads * size / (1 << 30)
        got["pid1"].append((ticks[1] - ticks[0]) * 1000 / os.sysconf("SC_CLK_TCK") / gib)
    if min(got["tunnel"] + got["forward"], default=0) <= 0:
        sys.exit("bench-proxy: a download in the sandbox failed: %s %s" % (run.stdout, run.stderr))
    return got


def direct(env, project, port, size, downloads, n):
    got = {"direct": []}
    for _ in range(downloads):
        got["direct"] += curl_speed(["curl", "--noproxy", "*", "-sS", "-o", "/dev/null", "-w",
                                     "%{speed_download}\n", "http://127.0.0.1:%d/%d" % (port, size)])
    out = subprocess.run([sys.executable, "client.py", "direct", "bench.test", str(port), str(n)],
                         cwd=project, env=env, check=True, capture_output=True,
                         text=True).stdout.split()
    got["lat-direct"] = [float(x) for x in out[1:]]
    return got


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--airlock", action="append", required=True, metavar="LABEL=PATH")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--downloads", type=int, default=2, help="per mode per round")
    ap.add_argument("--requests", type=int, default=100, help="fresh requests per series")
    args = ap.parse_args()
    binaries = [tuple(a.split("=", 1)) if "=" in a else (a, a) for a in args.airlock]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    ports = listener.getsockname()[1]
    root, env, project = world(ports)
    size = args.size_mib << 20
    results = {"direct": {"direct": [], "lat-direct": []}}
    for label, _ in binaries:
        results[label] = {"tunnel": [], "forward": [], "lat-tunnel": [], "lat-forward": [],
                          "pid1": []}
    try:
        for r in range(args.rounds):
            order = binaries if r % 2 == 0 else list(reversed(binaries))
            for k, v in direct(env, project, ports, size, args.downloads, args.requests).items():
                results["direct"][k] += v
            for label, path in order:
                got = inside(path, env, project, ports, size, args.downloads, args.requests)
                for k, v in got.items():
                    results[label][k] += v
    finally:
        subprocess.run(["rm", "-rf", root], check=False)
    report(args, binaries, results)


def report(args, binaries, results):
    d = results["direct"]
    base = statistics.median(d["direct"])
    lat0 = statistics.median(d["lat-direct"])
    name = {"tunnel": "CONNECT tunnel", "forward": "forwarded HTTP"}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    labels = ", ".join("`%s`" % label for label, _ in binaries)
    print("## B5 from inside a sandbox — download throughput and added latency\n")
    print("Measured by `scripts/bench-proxy --sandbox-only`, %s: %d interleaved rounds of %s. "
          "Machine: %d CPUs, kernel %s, load average at the end %s (shared with other work)."
          % (now, args.rounds, labels, os.cpu_count(), platform.release(),
             " ".join("%.2f" % x for x in os.getloadavg())))
    print("A loopback HTTP server on the host (Python, a thread per connection) answers "
          "`GET /<bytes>`. `curl` downloads %d MiB from it on the host directly and inside "
          "`airlock run` through the egress path (127.0.0.1:3128 → the proxy → the server), %d "
          "downloads per mode per round: as a CONNECT tunnel (`curl -p` to `127.0.0.1:<port>`, "
          "allowed by an exact rule; the tunnel carries the bytes as they are, as for HTTPS) and "
          "as plain HTTP the proxy forwards (`bench.test`, mapped to 127.0.0.1)."
          "\n" % (args.size_mib, args.downloads))
    print("| download | MiB/s (median) | min–max | vs direct |")
    print("| --- | ---: | ---: | ---: |")
    print("| host, direct | %.0f | %.0f–%.0f | 100%% |" % (base, min(d["direct"]), max(d["direct"])))
    for mode in ("tunnel", "forward"):
        for label, _ in binaries:
            v = results[label][mode]
            m = statistics.median(v)
            print("| `%s` in the sandbox, %s | %.0f | %.0f–%.0f | %.0f%% |"
                  % (label, name[mode], m, min(v), max(v), 100 * m / base))
    print("\n| CPU time of the sandbox's PID 1 (from `/proc/1/stat`) | ms per GiB downloaded "
          "(median of rounds) |")
    print("| --- | ---: |")
    for label, _ in binaries:
        print("| `%s` | %.0f |" % (label, statistics.median(results[label]["pid1"])))
    print("\n| fresh request: connect, [CONNECT], GET 1 byte, read to close (%d sequential per "
          "round, Python client) | median µs | p90 µs | added median µs |" % args.requests)
    print("| --- | ---: | ---: | ---: |")
    print("| host, direct | %.0f | %.0f | 0 |" % (lat0, pct(d["lat-direct"], 0.9)))
    for mode in ("tunnel", "forward"):
        for label, _ in binaries:
            v = results[label]["lat-" + mode]
            m = statistics.median(v)
            print("| `%s` in the sandbox, %s | %.0f | %.0f | %.0f |"
                  % (label, name[mode], m, pct(v, 0.9), m - lat0))
    print("\nTargets (issue 13): from inside a sandbox, tunnelled download ≥ 80% of direct; "
          "≤ 0.3 ms (300 µs) added per fresh request.")


if __name__ == "__main__":
    main()
