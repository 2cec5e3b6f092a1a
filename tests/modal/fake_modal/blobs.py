"""The fake control plane's blob store: a loopback HTTP server that takes the
SDK's PUTs (mount files, large payloads) at the URLs BlobCreate hands out and
serves them back by GET. Blobs live in memory. Runs on its own thread."""

import hashlib
import http.server
import threading
import uuid
from typing import Dict


class BlobStore:
    """Blob id -> bytes, filled over HTTP; any thread may read."""

    def __init__(self):
        self._blobs: Dict[str, bytes] = {}
        self._lock = threading.Lock()
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length)
                with store._lock:
                    store._blobs[self.path.strip("/")] = data
                self.send_response(200)
                self.send_header("ETag", '"%s"' % hashlib.md5(data).hexdigest())  # as S3 answers
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                data = store.get(self.path.strip("/"))
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, blob_id: str) -> str:
        return "http://127.0.0.1:%d/%s" % (self._server.server_address[1], blob_id)

    def new_id(self) -> str:
        return "bl-" + uuid.uuid4().hex[:16]

    def get(self, blob_id: str):
        with self._lock:
            return self._blobs.get(blob_id)

    def close(self):
        self._server.shutdown()
        self._server.server_close()
