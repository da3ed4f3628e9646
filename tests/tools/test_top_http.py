#!/usr/bin/env python3
r"""vgpu-top --listen: /metrics over HTTP, against real processes under the
shim on the simulated GPU (the helpers are test_top.py's).

usage: test_top_http.py CASE      (the environment comes from meson.build)

metrics     three idle holders and, with the kernels, a 30% tenant that
            keeps launching: GET /metrics is 200, Content-Type
            "text/plain; version=0.0.4; charset=utf-8", and the body is
            what `vgpu-top --prometheus` prints, line for line. The only
            lines allowed to differ are the samples of the compute counters
            that the launching tenant moves between two reads (COUNTERS:
            GPU time, admission waits, launches); their values must lie
            between those of a --prometheus read before and one after.
            HEAD, a query string, "/"; a process started while serving is
            in the next scrape (every scrape reads the ledgers afresh)
concurrent  32 clients x 20 requests each, a new connection per request,
            and 4 clients x 20 requests on one kept-alive connection each:
            every one 200 with the same exposition (COUNTERS masked); then
            16 clients while processes start and stop: every one 200
errors      unknown paths 404; POST (with a body), PUT, DELETE 405 with
            "Allow: GET, HEAD"; a --dir that is a file: 500 naming it
args        bad --listen values: exit 2, the exact message, the usage;
            --listen with --prometheus or --interval; a port in use: exit 1
signals     SIGTERM and SIGINT stop it with status 0 while 4 clients
            scrape without a pause
empty       no ledger directory yet: 200 and vgpu_top_ledgers 0; after a
            process has made one, the next scrape has it
slow        a host (127.0.0.2) that opens 200 connections and sends a
            header line on each every 2 s: at most 64 of them are kept
            (the rest closed by the server), and scrapes from 127.0.0.1
            are answered meanwhile; a connection silent after half a
            request is closed after 10 s (between 8 and 20 s)
ipv6        [::1]:0 and :0 (every address: reached over 127.0.0.1 and ::1);
            skipped where the host has no IPv6 loopback
Exit 77 is a skip for meson.
"""
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from test_top import (KERNELS, MIB, SKIP, TOP, Fail, World, check,
                      parse_prom, prom_get, three_holders)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The families a launching process moves between two reads.
COUNTERS = ("vgpu_gpu_time_seconds_total",
            "vgpu_admission_wait_seconds_total",
            "vgpu_process_launches_total",
            "vgpu_process_launches_throttled_total",
            "vgpu_process_admission_wait_seconds_total",
            "vgpu_process_gpu_time_seconds_total")
SAMPLE = re.compile(r"^([a-z_]+)(\{.*\})? (\S+)$")


class Server:
    """vgpu-top --listen, its stderr in a file; the address it printed."""

    def __init__(self, w, listen="127.0.0.1:0", dir=None):
        self.err_path = os.path.join(w.root, "top-http.err")
        self.err = open(self.err_path, "w")
        self.p = subprocess.Popen(
            [TOP, "--dir", dir or w.ledger, "--listen", listen],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self.err)
        w.procs.append(self.p)          # killed by w.close() if still here
        end = time.time() + 10
        while time.time() < end:
            m = re.search(r"serving http://(\S+):(\d+)/metrics",
                          self.stderr())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                check(self.port > 0, "serving on %s:%s" % m.groups())
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        self.stop(None)
        raise Fail("vgpu-top --listen did not start: %r" % self.stderr())

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def url(self, path, host=None):
        return "http://%s:%d%s" % (host or self.host, self.port, path)

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig or signal.SIGKILL)
        rc = self.p.wait(timeout=10)
        self.err.close()
        return rc


# No proxy from the environment stands between the test and the server.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url, method="GET", data=None):
    """(status, headers, body) of one request on a new connection."""
    req = urllib.request.Request(url, method=method, data=data)
    try:
        with OPENER.open(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def prometheus(w):
    r = w.top("--prometheus")
    return r.stdout


def masked(text):
    """The exposition with the COUNTERS' values replaced by 'X'."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m.group(1) in COUNTERS:
            line = "%s%s X" % (m.group(1), m.group(2) or "")
        out.append(line)
    return out


def counters(text):
    """{sample without value: value} of the COUNTERS."""
    got = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m.group(1) in COUNTERS:
            got[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return got


def jobs(w):
    three_holders(w)
    if KERNELS:
        w.hold("busy", [], us=1000, VGPU_COMPUTE_LIMIT="30")
        time.sleep(0.3)


# ---- the cases ----------------------------------------------------------------


def case_metrics(w):
    jobs(w)
    srv = Server(w)
    try:
        before = prometheus(w)
        status, headers, body = fetch(srv.url("/metrics"))
        after = prometheus(w)
        check(status == 200, "GET /metrics: 200")
        check(headers["Content-Type"] == CONTENT_TYPE,
              "Content-Type " + CONTENT_TYPE)
        parse_prom(body)
        check(masked(body) == masked(before) == masked(after),
              "the body is --prometheus's output, line for line (the "
              "compute counters' values aside)")
        if not KERNELS:
            check(body == before, "the body is --prometheus's, exactly")
        c0, c1, c2 = counters(before), counters(body), counters(after)
        check(all(c0[k] <= c1[k] <= c2[k] for k in c1),
              "each counter lies between a read before and one after")
        check(any(k.startswith("vgpu_process_launches_total") and v > 0
                  for k, v in c1.items()) or not KERNELS,
              "the launching process's launches are counted")

        status, headers, head = fetch(srv.url("/metrics"), "HEAD")
        check(status == 200 and head == "" and
              headers["Content-Type"] == CONTENT_TYPE,
              "HEAD /metrics: 200, the type, no body")
        status, _, body = fetch(srv.url("/metrics?name[]=x"))
        check(status == 200 and masked(body) == masked(before),
              "a query string is ignored")
        status, headers, body = fetch(srv.url("/"))
        check(status == 200 and "/metrics" in body and
              headers["Content-Type"].startswith("text/plain"),
              "GET /: 200, pointing to /metrics")

        _, pid = w.hold("late", [4 * MIB])
        s = parse_prom(fetch(srv.url("/metrics"))[2])
        check(prom_get(s, "vgpu_process_memory_used_bytes", tenant="late",
                       pid=str(pid)) == 4 * MIB,
              "a process started while serving is in the next scrape")
        check(srv.stderr().count("\n") == 1,
              "stderr: only the line saying where it serves")
    finally:
        check(srv.stop() == 0, "SIGTERM: exit 0")


def scrape_many(srv, n, out, errors):
    for _ in range(n):
        try:
            status, headers, body = fetch(srv.url("/metrics"))
            out.append((status, headers["Content-Type"], body))
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(repr(e))


def scrape_kept_alive(srv, n, out, errors):
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=10)
    try:
        for _ in range(n):
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            out.append((r.status, r.getheader("Content-Type"),
                        r.read().decode()))
    except Exception as e:              # noqa: BLE001 - reported below
        errors.append(repr(e))
    finally:
        conn.close()


def case_concurrent(w):
    jobs(w)
    srv = Server(w)
    try:
        ref = masked(prometheus(w))
        out, errors = [], []
        threads = [threading.Thread(target=scrape_many,
                                    args=(srv, 20, out, errors))
                   for _ in range(32)]
        threads += [threading.Thread(target=scrape_kept_alive,
                                     args=(srv, 20, out, errors))
                    for _ in range(4)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        dt = time.time() - t0
        check(not errors, "no client failed: %s" % errors[:3])
        check(len(out) == 36 * 20, "%d responses, 720 expected (%.1f s)"
              % (len(out), dt))
        check(all(s == 200 and ct == CONTENT_TYPE for s, ct, _ in out),
              "every one 200 " + CONTENT_TYPE)
        bad = [b for _, _, b in out if masked(b) != ref]
        check(not bad, "every body the same exposition as --prometheus "
              "(%d differ)" % len(bad))
        parse_prom(out[-1][2])

        # Processes come and go while 16 clients scrape: every render
        # checks the new ones' pids (a memo shared by the renders).
        statuses, done = [], threading.Event()
        threads = [threading.Thread(target=scrape_until,
                                    args=(srv, done, statuses))
                   for _ in range(16)]
        for t in threads:
            t.start()
        for i in range(3):
            w.stop(w.hold("churn-%d" % i, [MIB])[0])
        done.set()
        for t in threads:
            t.join(timeout=60)
        check(statuses and all(s == 200 for s in statuses),
              "%d scrapes while processes came and went: all 200"
              % len(statuses))
    finally:
        check(srv.stop() == 0, "SIGTERM after the scrapes: exit 0")


def slow_client(host, port, n):
    """n connections from 127.0.0.2, each with half a request sent."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.2", 0))
        s.settimeout(5)
        try:
            s.connect((host, port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            pass
        socks.append(s)
    return socks


def still_open(socks):
    """Those the server has not closed: a header line each, and a read
    that times out (closed: EOF or a reset)."""
    alive = []
    for s in socks:
        try:
            s.sendall(b"X-Slow: 1\r\n")
            s.settimeout(0.01)
            if s.recv(1) == b"":
                continue
        except socket.timeout:
            alive.append(s)
            continue
        except OSError:
            continue
        alive.append(s)
    return alive


def case_slow(w):
    jobs(w)
    srv = Server(w)
    socks = []
    try:
        socks = slow_client(srv.host, srv.port, 200)
        time.sleep(1)
        times = []
        for _ in range(4):
            t0 = time.time()
            status, _, body = fetch(srv.url("/metrics"))
            times.append(time.time() - t0)
            check(status == 200 and "vgpu_top_ledgers" in body,
                  "a scrape beside 200 slow connections: 200")
            alive = still_open(socks)
            time.sleep(2)
        check(len(alive) <= 64, "%d of 200 slow connections from one "
              "address kept, at most 64" % len(alive))
        check(max(times) < 5, "scrapes answered in %.2f s at most"
              % max(times))
        for s in socks:
            s.close()
        socks = []
        # Half a request, then silence: closed after the idle timeout.
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect((srv.host, srv.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        s.settimeout(30)
        t0 = time.time()
        try:
            got = s.recv(1)
        except OSError:
            got = b""
        dt = time.time() - t0
        s.close()
        check(got == b"" and 8 <= dt <= 20, "a silent connection closed "
              "after %.1f s (10 s idle timeout)" % dt)
    finally:
        for s in socks:
            s.close()
        check(srv.stop() == 0, "SIGTERM after the slow clients: exit 0")


def case_errors(w):
    w.hold("team-a", [8 * MIB])
    srv = Server(w)
    try:
        for path in ("/nope", "/metrics/", "/metricsx", "/favicon.ico"):
            status, _, body = fetch(srv.url(path))
            check(status == 404 and "/metrics" in body, "GET %s: 404" % path)
        for method, path, data in (("POST", "/metrics", b"x" * 100000),
                                   ("PUT", "/metrics", b"{}"),
                                   ("DELETE", "/metrics", None),
                                   ("POST", "/", b"")):
            status, headers, _ = fetch(srv.url(path), method, data)
            check(status == 405 and headers["Allow"] == "GET, HEAD",
                  "%s %s: 405, Allow: GET, HEAD" % (method, path))
        status, _, _ = fetch(srv.url("/nope"), "POST", b"x")
        check(status == 404, "POST /nope: 404")
        check(fetch(srv.url("/metrics"))[0] == 200,
              "still serving after the errors")
    finally:
        check(srv.stop() == 0, "SIGTERM: exit 0")
    afile = os.path.join(w.root, "a-file")
    open(afile, "w").close()
    srv = Server(w, dir=afile)
    try:
        status, _, body = fetch(srv.url("/metrics"))
        check(status == 500 and "cannot list the ledger directory '%s'"
              % afile in body, "a --dir that cannot be listed: 500, why")
    finally:
        check(srv.stop() == 0, "SIGTERM: exit 0")


def case_args(w):
    cases = (
        ("9400", "--listen '9400': expected ADDR:PORT, e.g. 127.0.0.1:9400,"
         " [::1]:9400 or :9400"),
        ("", "--listen '': expected ADDR:PORT, e.g. 127.0.0.1:9400, "
         "[::1]:9400 or :9400"),
        ("::1:9400", "--listen '::1:9400': an IPv6 address goes in "
         "brackets, e.g. [::1]:9400"),
        ("[::1:9400", "--listen '[::1:9400': no ']' closes the IPv6 "
         "address"),
        ("[::1]9400", "--listen '[::1]9400': expected ':PORT' after ']'"),
        ("[1.2.3.4]:80", "--listen '[1.2.3.4]:80': '1.2.3.4' is not an "
         "IPv6 address"),
        ("localhost:9400", "--listen 'localhost:9400': 'localhost' is not "
         "an IPv4 address (names are not looked up; IPv6 goes in "
         "brackets)"),
        ("1.2.3:80", "--listen '1.2.3:80': '1.2.3' is not an IPv4 address "
         "(names are not looked up; IPv6 goes in brackets)"),
        ("127.0.0.1:", "--listen '127.0.0.1:': port '': expected a number "
         "from 0 to 65535 (0: any free port)"),
        ("127.0.0.1:65536", "--listen '127.0.0.1:65536': port '65536': "
         "expected a number from 0 to 65535 (0: any free port)"),
        (":-1", "--listen ':-1': port '-1': expected a number from 0 to "
         "65535 (0: any free port)"),
        (":94x", "--listen ':94x': port '94x': expected a number from 0 "
         "to 65535 (0: any free port)"),
    )
    for value, msg in cases:
        r = subprocess.run([TOP, "--listen", value], capture_output=True,
                           text=True, timeout=10)
        first = r.stderr.splitlines()[0] if r.stderr else ""
        check(r.returncode == 2 and first == "vgpu-top: " + msg and
              "usage:" in r.stderr, "--listen %r: exit 2, %r" % (value, msg))
    for args, msg in (
            (["--listen"], "vgpu-top: --listen needs a value"),
            (["--prometheus", "--listen", ":0"],
             "vgpu-top: --once, --json, --prometheus and --listen exclude "
             "each other"),
            (["--listen", ":0", "--json"],
             "vgpu-top: --once, --json, --prometheus and --listen exclude "
             "each other"),
            (["--listen", ":0", "--interval", "1"],
             "vgpu-top: --interval has no meaning with --listen (each "
             "scrape reads the ledgers once)")):
        r = subprocess.run([TOP] + args, capture_output=True, text=True,
                           timeout=10)
        check(r.returncode == 2 and r.stderr.startswith(msg + "\n"),
              "%s: exit 2, %r" % (" ".join(args), msg))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        spec = "127.0.0.1:%d" % taken.getsockname()[1]
        r = subprocess.run([TOP, "--dir", w.ledger, "--listen", spec],
                           capture_output=True, text=True, timeout=10)
        check(r.returncode == 1 and r.stderr ==
              "vgpu-top: --listen '%s': cannot listen: Address already in "
              "use\n" % spec, "a port in use: exit 1, the address named")
    r = subprocess.run([TOP, "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "--listen ADDR:PORT" in r.stdout,
          "--help names --listen")


def scrape_until(srv, done, out):
    """Scrapes until done is set; the statuses answered (a request cut
    short or refused once the server stops is no answer)."""
    while not done.is_set():
        try:
            out.append(fetch(srv.url("/metrics"))[0])
        except (OSError, http.client.HTTPException):
            pass


def case_signals(w):
    w.hold("team-a", [8 * MIB])
    for sig in (signal.SIGTERM, signal.SIGINT):
        srv = Server(w)
        out, done = [], threading.Event()
        threads = [threading.Thread(target=scrape_until,
                                    args=(srv, done, out))
                   for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.time()
        rc = srv.stop(sig)
        dt = time.time() - t0
        done.set()
        for t in threads:
            t.join(timeout=30)
        check(rc == 0 and dt < 5, "%s while 4 clients scrape: exit 0 in "
              "%.2f s" % (signal.Signals(sig).name, dt))
        check(len(out) > 0 and all(s == 200 for s in out),
              "the %d scrapes answered were all 200" % len(out))


def case_empty(w):
    srv = Server(w)
    try:
        check(not os.path.exists(w.ledger), "no ledger directory")
        status, _, body = fetch(srv.url("/metrics"))
        s = parse_prom(body)
        check(status == 200 and prom_get(s, "vgpu_top_ledgers") == 0 and
              prom_get(s, "vgpu_top_skipped_files") == 0,
              "200, vgpu_top_ledgers 0")
        check(body == prometheus(w), "the body is --prometheus's output")
        _, pid = w.hold("team-a", [8 * MIB])
        s = parse_prom(fetch(srv.url("/metrics"))[2])
        check(prom_get(s, "vgpu_top_ledgers") == 1 and
              prom_get(s, "vgpu_process_memory_used_bytes",
                       pid=str(pid)) == 8 * MIB,
              "the ledger made since is in the next scrape")
    finally:
        check(srv.stop() == 0, "SIGTERM: exit 0")


def has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def case_ipv6(w):
    if not has_ipv6_loopback():
        print("SKIP: no IPv6 loopback here")
        return SKIP
    w.hold("team-a", [8 * MIB])
    ref = masked(prometheus(w))
    srv = Server(w, "[::1]:0")
    try:
        check(srv.host == "[::1]", "bound to [::1]")
        status, _, body = fetch(srv.url("/metrics"))
        check(status == 200 and masked(body) == ref, "GET over ::1")
    finally:
        check(srv.stop() == 0, "SIGTERM: exit 0")
    srv = Server(w, ":0")
    try:
        check(srv.host == "[::]", "':0' binds every address ([::])")
        for host in ("127.0.0.1", "[::1]"):
            status, _, body = fetch(srv.url("/metrics", host))
            check(status == 200 and masked(body) == ref, "GET over " + host)
    finally:
        check(srv.stop(signal.SIGINT) == 0, "SIGINT: exit 0")


CASES = {"metrics": case_metrics, "concurrent": case_concurrent,
         "errors": case_errors, "args": case_args, "signals": case_signals,
         "empty": case_empty, "ipv6": case_ipv6, "slow": case_slow}


def main():
    w = World()
    try:
        rc = CASES[sys.argv[1]](w) or 0
    except Fail as e:
        print("FAIL: %s" % e)
        rc = 1
    finally:
        w.close()
    sys.exit(rc)


if __name__ == "__main__":
    main()
