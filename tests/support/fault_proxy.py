"""A loopback HTTP proxy in front of an S3-compatible store that counts every request and fails a
share of them the way object storage does: ``503 SlowDown``, a connection reset before the
request reaches the store, a reset *after* the store applied it (the client never hears that
its PUT landed), a slow answer. For the fault cases and for counting what a delta costs in
requests (PUT, GET, HEAD, LIST, DELETE, POST).

What flows through: HTTP/1.1 requests from S3 clients (Iceberg's S3FileIO, PyIceberg's pyarrow
FileIO) pointed at `endpoint`; each one either goes to the store and its answer comes back byte
for byte (body re-framed with a Content-Length), or gets the fault its number picks.

What this module guarantees:

* Faults are deterministic: request number i (counted from `arm()`) gets fault
  ``kinds[(i // every) % len(kinds)]`` when ``i % every == every - 1``, else none; so faults are
  ``1/every`` of the requests and never hit two requests in a row (a client retrying at once
  gets through), until `max_faults` were injected. `disarm()` stops injecting (counting goes on).
* Every upstream call has a timeout (`timeout`). The proxy binds 127.0.0.1 only, runs in daemon
  threads of the calling process, and `stop()` closes it.
* `counts` holds requests per operation as they reached the proxy, `faults` the injected ones
  per kind, `requests` every request in order; `retries()` pairs each fault with the client's
  next attempt at the same request.
* `refuse(suffix)` answers *every* PUT of a key ending in `suffix` with ``500 InternalError``,
  armed or not, until `refuse(None)`; `refused` counts them. With ``.metadata.json`` in front of
  a REST catalog server, each commit fails after its writer uploaded its data files and manifests:
  the server answers 500, so the writer cannot know whether it committed and leaves its files,
  as a writer killed there does (orphans for maintenance to find).

Nothing here imports Dagster or an S3 client.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["FAULT_KINDS", "FaultProxy", "operation"]

FAULT_KINDS = ("503", "reset", "reset_after", "delay")
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
INTERNAL_ERROR = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
                  b"<Message>We encountered an internal error. Please try again.</Message></Error>")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}


def operation(method: str, target: str) -> str:
    """What an S3 request does: LIST (a GET of a bucket with a listing query), else its method."""
    parts = urlsplit(target)
    path = parts.path.strip("/")
    if method == "GET" and "/" not in path and ("list-type" in parts.query or "prefix=" in parts.query
                                                 or not parts.query):
        return "LIST"
    return method


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A client that drops its connection (a read it abandons, a reset we sent) is no error of
        # the proxy's; anything else is still printed.
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FaultProxy:
    """The proxy: `start()`, point clients at `endpoint`, `arm()` to inject faults, `stop()`."""

    def __init__(self, upstream: str, *, every: int = 5, kinds: tuple[str, ...] = FAULT_KINDS,
                 max_faults: int = 1_000, delay_seconds: float = 0.5, timeout: float = 30.0):
        target = urlsplit(upstream)
        if target.scheme != "http" or not target.hostname or not target.port:
            raise ValueError(f"the proxy forwards to http://host:port, got {upstream!r}")
        if every < 2 or not set(kinds) <= set(FAULT_KINDS):
            raise ValueError(f"every must be >= 2 and kinds among {FAULT_KINDS}")
        self.upstream = (target.hostname, target.port)
        self.every, self.kinds, self.max_faults = every, tuple(kinds), max_faults
        self.delay_seconds, self.timeout = delay_seconds, timeout
        self.error_bodies = {"503": SLOW_DOWN, "refused": INTERNAL_ERROR}
        self.statuses = {"503": (503, "Slow Down"), "refused": (500, "Internal Server Error")}
        self.counts: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.requests: list[tuple[float, str, str, str | None]] = []  # (when, operation, target, fault)
        self.refused = 0
        self._refuse: str | None = None
        self._armed = False
        self._seen = 0  # requests since arm()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def arm(self) -> None:
        with self._lock:
            self._armed, self._seen = True, 0

    def disarm(self) -> None:
        with self._lock:
            self._armed = False

    def refuse(self, suffix: str | None) -> None:
        with self._lock:
            self._refuse = suffix

    def _plan(self, op: str, target: str) -> str | None:
        with self._lock:
            self.counts[op] += 1
            kind = None
            if self._refuse and op == "PUT" and urlsplit(target).path.endswith(self._refuse):
                self.refused += 1
                self.requests.append((time.monotonic(), op, target, "refused"))
                return "refused"
            if self._armed:
                i, self._seen = self._seen, self._seen + 1
                if i % self.every == self.every - 1 and sum(self.faults.values()) < self.max_faults:
                    kind = self.kinds[(i // self.every) % len(self.kinds)]
                    self.faults[kind] += 1
            self.requests.append((time.monotonic(), op, target, kind))
            return kind

    def retries(self) -> list[tuple[str, str, str, float]]:
        """Per injected fault, the request that came again after it: (kind, operation, target,
        seconds between the fault and the retry); a fault no request followed is left out."""
        out, pending = [], {}
        for at, op, target, kind in self.requests:
            key = (op, target)
            if key in pending:
                fault_at, fault_kind = pending.pop(key)
                out.append((fault_kind, op, target, at - fault_at))
            if kind is not None:
                pending[key] = (at, kind)
        return out

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered for the client

            def log_message(self, *args) -> None:  # quiet: the counts say what went through
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reset(self) -> None:
                # SO_LINGER 0: close() sends RST, as a load balancer dropping the connection does.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _relay(self) -> None:
                body = self._body()
                fault = proxy._plan(operation(self.command, self.path), self.path)
                if fault in ("503", "refused"):
                    body = b"" if self.command == "HEAD" else proxy.error_bodies[fault]
                    self.send_response(*proxy.statuses[fault])
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if fault == "reset":
                    return self._reset()
                if fault == "delay":
                    time.sleep(proxy.delay_seconds)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=proxy.timeout)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    if fault == "reset_after":  # applied by the store; the client never hears so
                        return self._reset()
                    self.send_response(response.status, response.reason)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP_BY_HOP and (key.lower() != "content-length" or
                                                               self.command == "HEAD"):
                            self.send_header(key, value)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
