"""An HTTP proxy in front of a real S3 server that drops conditional-write headers: a store that
ignores ``If-None-Match`` (and, optionally, ``If-Match``), as many S3-compatible servers did for years.

Everything else is forwarded as is (the servers used here do not check signatures, so removing a
header is invisible to them). Used by the ``lv doctor`` and write-guard tests; a mock of nothing: the
requests reach the real server, only the two headers are lost on the way.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator
from urllib.parse import urlparse

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "expect"}


class ConditionalDroppingProxy:
    """``with ConditionalDroppingProxy(upstream, drop=("if-none-match",)) as url: ...``"""

    def __init__(self, upstream: str, drop: tuple[str, ...] = ("if-none-match", "if-match")) -> None:
        self.upstream = urlparse(upstream)
        self.drop = {h.lower() for h in drop}
        self.dropped = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {}
                for k, v in self.headers.items():
                    if k.lower() in HOP:
                        continue
                    if k.lower() in proxy.drop:
                        proxy.dropped += 1
                        continue
                    headers[k] = v
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    head = self.command == "HEAD"  # its Content-Length is the object's, not of an empty body
                    for k, v in resp.getheaders():
                        if k.lower() not in HOP and (head or k.lower() != "content-length"):
                            self.send_header(k, v)
                    if not head:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_port}"

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(upstream: str, drop: tuple[str, ...]) -> Iterator[str]:
    with ConditionalDroppingProxy(upstream, drop) as url:
        yield url
