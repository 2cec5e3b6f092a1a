"""A fake Hugging Face Hub on loopback, for `gpubox model pull` (the real Hub
cannot be reached from here): just the endpoints huggingface_hub 2.4's
model_info and snapshot_download use, read from its source —
GET /api/models/REPO[/revision/REV] (?blobs=true: sizes), GET
/api/models/REPO/tree/REV (?recursive=true), HEAD and GET (Range too)
/REPO/resolve/REV/PATH with X-Repo-Commit, ETag and Content-Length. Every
request must carry `Authorization: Bearer TOKEN`, else 401; an unknown repo
is the Hub's 404 with X-Error-Code RepoNotFound. Counts the requests and
whether each carried the token. Serves on its own threads."""

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

REPO = r"([^/]+/[^/]+|[^/]+)"


class FakeHub:
    """repos: {repo_id: {path: bytes}}; each gets a fixed commit sha. start() binds 127.0.0.1:0."""

    def __init__(self, repos, token):
        self.repos = repos
        self.token = token
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        self.requests = []  # (method, path, token given) in arrival order
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def count(self):
        with self.lock:
            return len(self.requests)

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                hub._serve(self, body=True)

            def do_HEAD(self):
                hub._serve(self, body=False)

        return Handler

    def _reply(self, handler, status, payload=b"", headers=None, body=True, content_type="application/json"):
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if body:
            handler.wfile.write(payload)

    def _error(self, handler, status, code, message, body):
        payload = json.dumps({"error": message}).encode()
        self._reply(handler, status, payload, {"X-Error-Code": code, "X-Error-Message": message}, body)

    def _serve(self, handler, body):
        url = urlsplit(handler.path)
        path = unquote(url.path)
        given = handler.headers.get("Authorization", "") == "Bearer " + self.token
        with self.lock:
            self.requests.append((handler.command, path, given))
        if path == "/api/agent-harnesses":  # huggingface_hub's telemetry, asked without a token: none here
            return self._error(handler, 404, "EntryNotFound", "Entry not found", body)
        if not given:
            return self._error(handler, 401, "InvalidCredentials", "Invalid credentials in Authorization header", body)
        info = re.fullmatch(r"/api/models/%s(?:/(revision|tree)/([^/]+))?" % REPO, path)
        resolve = re.fullmatch(r"/%s/resolve/([^/]+)/(.+)" % REPO, path)
        if info:
            repo, revision = info.group(1), info.group(3) or "main"
        else:
            repo, revision = (resolve.group(1), resolve.group(2)) if resolve else (None, None)
        if repo not in self.repos:
            return self._error(handler, 404, "RepoNotFound", "Repository not found", body)
        files, commit = self.repos[repo], self.commits[repo]
        if revision not in ("main", commit):
            return self._error(handler, 404, "RevisionNotFound", "Invalid rev id: " + revision, body)
        if info and info.group(2) != "tree":
            siblings = [{"rfilename": name, "size": len(data), "blobId": self._oid(data)} for name, data in files.items()]
            payload = {"id": repo, "modelId": repo, "sha": commit, "private": True, "siblings": siblings}
            return self._reply(handler, 200, json.dumps(payload).encode(), body=body)
        if info:
            tree = [{"type": "file", "path": name, "size": len(data), "oid": self._oid(data)} for name, data in files.items()]
            return self._reply(handler, 200, json.dumps(tree).encode(), body=body)
        name = resolve.group(3)
        if name not in files:
            return self._error(handler, 404, "EntryNotFound", "Entry not found", body)
        data = files[name]
        headers = {"X-Repo-Commit": commit, "ETag": '"%s"' % self._oid(data), "Accept-Ranges": "bytes"}
        ranged = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", ""))
        if ranged and body:
            start = int(ranged.group(1))
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
            return self._reply(handler, 206, data[start:], headers, body, "application/octet-stream")
        return self._reply(handler, 200, data, headers, body, "application/octet-stream")

    @staticmethod
    def _oid(data):
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
