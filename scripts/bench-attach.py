#!/usr/bin/env python3
"""PTY harness of scripts/bench-attach: keystroke-to-echo and attach times of a session client.

Prints one line: airlock key median p90 p99 mean (µs), tmux key median p90 p99 mean (µs),
airlock attach median mean (ms), tmux attach median mean (ms).
"""

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import statistics
import struct
import termios
import time

ESCAPES = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|.)")
KEYS = b"xyzw"
BLOCK = 50
LIMIT = 20.0


class Client:
    """A client program on a PTY of 24x80."""

    def __init__(self, argv):
        pid, fd = pty.fork()
        if pid == 0:
            os.execvp(argv[0], argv)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.pid, self.fd = pid, fd

    def read(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return b""
        try:
            return os.read(self.fd, 65536)
        except OSError:
            return b""

    def wait_for(self, needle, strip=True):
        """Reads until `needle` shows in the output (escape sequences stripped)."""
        seen = b""
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            seen += self.read(0.5)
            text = ESCAPES.sub(b"", seen) if strip else seen
            if needle in text:
                return
        raise SystemExit(f"bench-attach: {needle!r} never appeared; got {seen[-300:]!r}")

    def drain(self):
        while self.read(0.05):
            pass

    def key(self, byte):
        """Writes one key; returns the µs until it came back."""
        start = time.perf_counter_ns()
        os.write(self.fd, byte)
        seen = b""
        while True:
            chunk = self.read(LIMIT)
            if not chunk:
                raise SystemExit(f"bench-attach: no echo of {byte!r}")
            seen += chunk
            if byte in ESCAPES.sub(b"", seen):
                return (time.perf_counter_ns() - start) / 1000

    def close(self):
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(values):
    return [statistics.median(values), percentile(values, 90), percentile(values, 99),
            statistics.fmean(values)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--airlock", required=True)
    parser.add_argument("--tmux-socket", required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--attaches", type=int, default=20)
    args = parser.parse_args()
    airlock_argv = [args.airlock, "attach"]
    tmux_argv = ["tmux", "-L", args.tmux_socket, "attach-session", "-t", "bench"]

    # The airlock session runs a shell: turn it into cat, as the tmux one is.
    airlock = Client(airlock_argv)
    airlock.wait_for(b"$ ")
    os.write(airlock.fd, b"exec cat\r")
    time.sleep(0.5)
    os.write(airlock.fd, b"ready-marker\r")
    airlock.wait_for(b"ready-marker\r\nready-marker")
    tmux = Client(tmux_argv)
    os.write(tmux.fd, b"ready-marker\r")
    tmux.wait_for(b"ready-marker")
    for client in (airlock, tmux):
        client.drain()

    times = {"airlock": [], "tmux": []}
    warmup = 100
    total = warmup + args.keys
    done = 0
    while done < total:
        for name, client in (("airlock", airlock), ("tmux", tmux)):
            for i in range(BLOCK):
                if done + i >= total:
                    break
                key = bytes([KEYS[(done + i) % len(KEYS)]])
                took = client.key(key)
                if done + i >= warmup:
                    times[name].append(took)
            os.write(client.fd, b"\r")
            client.drain()
        done += BLOCK

    # Attach until the screen shows the session, then detach.
    attach = {"airlock": [], "tmux": []}
    for client in (airlock, tmux):
        os.write(client.fd, b"attach-marker\r")
        client.wait_for(b"attach-marker")
        client.close()
    for n in range(3 + args.attaches):
        for name, argv in (("airlock", airlock_argv), ("tmux", tmux_argv)):
            start = time.perf_counter_ns()
            client = Client(argv)
            client.wait_for(b"attach-marker")
            took = (time.perf_counter_ns() - start) / 1e6
            if n >= 3:
                attach[name].append(took)
            if name == "airlock":
                os.write(client.fd, b"\x1d")
                client.wait_for(b"detached")
                os.waitpid(client.pid, 0)
                os.close(client.fd)
            else:
                client.close()

    out = summary(times["airlock"]) + summary(times["tmux"])
    out += [statistics.median(attach["airlock"]), statistics.fmean(attach["airlock"])]
    out += [statistics.median(attach["tmux"]), statistics.fmean(attach["tmux"])]
    print(" ".join(f"{v:.1f}" for v in out))


if __name__ == "__main__":
    main()
