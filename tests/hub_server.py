"""A small Hub-API-compatible server on 127.0.0.1 for the publishing tests: enough of the Hugging Face Hub for the
real `huggingface_hub` client (HfApi.create_repo / create_branch / create_commit / whoami / model_info and
hf_hub_download, hence `from_pretrained("user/name")`) to run end to end without the network.

Written with the standard library (http.server in a thread) because no installable package serves the Hub API.
What it implements, as huggingface_hub 2.x calls it:

- `GET /api/whoami-v2`                                   bearer token -> user (401 without or with a wrong token)
- `POST /api/repos/create`                               409 when the repo exists, 403 for another user's namespace
- `POST /api/validate-yaml`                              README metadata must be a YAML mapping
- `POST /api/models/{id}/preupload/{rev}`                every file "regular" (content inline in the commit)
- `POST /api/models/{id}/commit/{rev}`                   NDJSON: header + `file` lines (base64), deletions
- `POST /api/models/{id}/branch/{branch}`                a branch from main
- `GET  /api/models/{id}[/revision/{rev}]`               model info with `sha`, `siblings`, `cardData`
- `HEAD|GET /{id}/resolve/{rev}/{path}`                  with `X-Repo-Commit` and `ETag`; 404 + `X-Error-Code`

Writes need the owner's token; reading a private repo too (401 `RepoNotFound` otherwise, as the Hub does).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import yaml


@dataclass
class Repo:
    owner: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: content}
    messages: dict[str, str] = field(default_factory=dict)


def _sha(*parts: bytes) -> str:
    digest = hashlib.sha1()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


class HubState:
    def __init__(self, tokens: dict[str, str]):
        self.tokens = dict(tokens)  # token -> user name
        self.repos: dict[str, Repo] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, user) for assertions in tests

    def create(self, repo_id: str, owner: str, private: bool) -> str:
        repo = Repo(owner=owner, private=private)
        sha = _sha(repo_id.encode(), str(time.time_ns()).encode())
        # The Hub starts every repo with a commit holding .gitattributes.
        repo.commits[sha] = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}
        repo.branches["main"] = sha
        repo.messages[sha] = "initial commit"
        self.repos[repo_id] = repo
        return sha


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature; keep test output quiet
        pass

    # ------------------------------------------------------------------ plumbing
    @property
    def state(self) -> HubState:
        return self.server.state

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload=None, *, headers: dict | None = None, body: bytes | None = None,
              head: bool = False) -> None:
        if body is None:
            body = json.dumps(payload if payload is not None else {}).encode()
            content_type = "application/json"
        else:
            content_type = "application/octet-stream"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, message: str, code: str | None = None, head: bool = False) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, {"error": message}, headers=headers, head=head)

    def _user(self) -> tuple[str | None, bool]:
        """(user, a token was sent)."""
        auth = self.headers.get("Authorization", "")
        if not auth.lower().startswith("bearer "):
            return None, False
        return self.state.tokens.get(auth[7:].strip()), True

    def _need_user(self) -> str | None:
        user, sent = self._user()
        if user is None:
            if sent:
                self._error(401, "Invalid credentials in Authorization header")
            else:
                self._error(401, "You must be authenticated to access this endpoint: pass a token (Authorization: "
                                 "Bearer ...)")
        return user

    def _repo_for_write(self, repo_id: str) -> Repo | None:
        user = self._need_user()
        if user is None:
            return None
        repo = self.state.repos.get(repo_id)
        if repo is None or (repo.private and repo.owner != user):
            self._error(404, f"Repository {repo_id} not found", "RepoNotFound")
            return None
        if repo.owner != user:
            self._error(403, f"You don't have the rights to write to {repo_id}: it belongs to {repo.owner}")
            return None
        return repo

    def _repo_for_read(self, repo_id: str, head: bool = False) -> Repo | None:
        user, _ = self._user()
        repo = self.state.repos.get(repo_id)
        if repo is None or (repo.private and repo.owner != user):
            self._error(401 if repo is not None else 404, f"Repository Not Found for {repo_id}", "RepoNotFound",
                        head=head)
            return None
        return repo

    def _resolve_revision(self, repo: Repo, revision: str) -> str | None:
        revision = unquote(revision)
        if revision in repo.branches:
            return repo.branches[revision]
        return revision if revision in repo.commits else None

    # ------------------------------------------------------------------ routes
    def do_HEAD(self):  # noqa: N802 - http.server's names
        self._get(head=True)

    def do_GET(self):  # noqa: N802
        self._get(head=False)

    def _get(self, head: bool):
        path = urlparse(self.path).path
        user, _ = self._user()
        self.state.requests.append((self.command, path, user))
        if path == "/api/whoami-v2":
            user = self._need_user()
            if user is not None:
                self._send(200, {"type": "user", "name": user, "fullname": user, "orgs": [],
                                 "auth": {"type": "access_token", "accessToken": {"displayName": "test",
                                                                                  "role": "write"}}})
            return
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/(.+))?", path)
        if match:
            return self._model_info(match.group(1), match.group(2) or "main")
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
        if match:
            repo = self._repo_for_read(match.group(1))
            if repo is None:
                return
            sha = self._resolve_revision(repo, match.group(2))
            if sha is None:
                return self._error(404, "Revision not found", "RevisionNotFound")
            files = repo.commits[sha]
            return self._send(200, [{"type": "file", "path": name, "size": len(content),
                                     "oid": _sha(content)} for name, content in sorted(files.items())])
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if match:
            return self._resolve(match.group(1), match.group(2), unquote(match.group(3)), head)
        self._error(404, f"No route for {self.command} {path}", head=head)

    def _model_info(self, repo_id: str, revision: str):
        repo = self._repo_for_read(repo_id)
        if repo is None:
            return
        sha = self._resolve_revision(repo, revision)
        if sha is None:
            return self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        files = repo.commits[sha]
        card_data = None
        if "README.md" in files:
            text = files["README.md"].decode("utf-8")
            block = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.S)
            card_data = yaml.safe_load(block.group(1)) if block else None
        info = {"_id": repo_id, "id": repo_id, "modelId": repo_id, "author": repo.owner, "sha": sha,
                "private": repo.private, "disabled": False, "gated": False, "downloads": 0, "likes": 0,
                "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": name} for name in sorted(files)],
                "tags": list((card_data or {}).get("tags") or []),
                "pipeline_tag": (card_data or {}).get("pipeline_tag"),
                "library_name": (card_data or {}).get("library_name")}
        if card_data is not None:
            info["cardData"] = card_data
        config = files.get("config.json")
        if config:
            info["config"] = json.loads(config)
        self._send(200, info)

    def _resolve(self, repo_id: str, revision: str, filename: str, head: bool):
        repo = self._repo_for_read(repo_id, head=head)
        if repo is None:
            return
        sha = self._resolve_revision(repo, revision)
        if sha is None:
            return self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound", head=head)
        content = repo.commits[sha].get(filename)
        if content is None:
            return self._error(404, f"Entry not found: {filename}", "EntryNotFound", head=head)
        headers = {"X-Repo-Commit": sha, "ETag": f'"{_sha(content)}"', "Accept-Ranges": "bytes"}
        self._send(200, headers=headers, body=content, head=head)

    def do_POST(self):  # noqa: N802
        path = urlparse(self.path).path
        body = self._body()
        user, _ = self._user()
        self.state.requests.append(("POST", path, user))
        with self.state.lock:
            if path == "/api/repos/create":
                return self._create_repo(json.loads(body or b"{}"))
            if path == "/api/validate-yaml":
                return self._validate_yaml(json.loads(body or b"{}"))
            match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/preupload/(.+)", path)
            if match:
                return self._preupload(match.group(1), match.group(2), json.loads(body or b"{}"))
            match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/commit/(.+)", path)
            if match:
                return self._commit(match.group(1), unquote(match.group(2)), body)
            match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/branch/(.+)", path)
            if match:
                return self._branch(match.group(1), unquote(match.group(2)), json.loads(body or b"{}"))
        self._error(404, f"No route for POST {path}")

    def _create_repo(self, payload: dict):
        user = self._need_user()
        if user is None:
            return
        if payload.get("type", "model") not in (None, "model"):
            return self._error(400, "Only model repos are served by this test server")
        namespace = payload.get("organization") or user
        repo_id = f"{namespace}/{payload['name']}"
        if namespace != user:
            return self._error(403, f"You don't have the rights to create a model under the namespace "
                                    f"\"{namespace}\"")
        if repo_id in self.state.repos:
            return self._send(409, {"error": "You already created this model repo", "url": self._url(repo_id)})
        self.state.create(repo_id, user, bool(payload.get("private")))
        self._send(200, {"url": self._url(repo_id), "name": repo_id, "id": repo_id})

    def _validate_yaml(self, payload: dict):
        content = payload.get("content", "")
        block = re.match(r"^---\s*\n(.*?)\n---\s*\n", content, re.S)
        errors = []
        if block:
            try:
                metadata = yaml.safe_load(block.group(1))
                if not isinstance(metadata, dict):
                    errors.append({"message": "metadata must be a YAML mapping"})
                elif "model-index" in metadata and not isinstance(metadata["model-index"], list):
                    errors.append({"message": '"model-index" must be an array'})
            except yaml.YAMLError as error:
                errors.append({"message": f"YAML error: {error}"})
        if errors:
            return self._send(400, {"errors": errors, "error": errors[0]["message"]})
        self._send(200, {"errors": [], "warnings": []})

    def _preupload(self, repo_id: str, revision: str, payload: dict):
        repo = self._repo_for_write(repo_id)
        if repo is None:
            return
        sha = self._resolve_revision(repo, revision) or repo.branches["main"]
        files = repo.commits[sha]
        self._send(200, {"files": [
            {"path": item["path"], "uploadMode": "regular", "shouldIgnore": False,
             "oid": _git_blob_oid(files[item["path"]]) if item["path"] in files else None}
            for item in payload.get("files", [])]})

    def _commit(self, repo_id: str, revision: str, body: bytes):
        repo = self._repo_for_write(repo_id)
        if repo is None:
            return
        if revision not in repo.branches:
            return self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        files = dict(repo.commits[repo.branches[revision]])
        summary = ""
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                summary = value.get("summary", "")
            elif key == "file":
                if value.get("encoding") != "base64":
                    return self._error(400, "file content must be base64")
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {k: v for k, v in files.items() if not k.startswith(prefix)}
            else:
                return self._error(400, f"This test server only accepts regular files, got {key!r}")
        sha = _sha(repo.branches[revision].encode(), *(k.encode() + v for k, v in sorted(files.items())),
                   str(time.time_ns()).encode())
        repo.commits[sha] = files
        repo.messages[sha] = summary
        repo.branches[revision] = sha
        self._send(200, {"commitUrl": f"{self._url(repo_id)}/commit/{sha}", "commitOid": sha, "success": True})

    def _branch(self, repo_id: str, branch: str, payload: dict):
        repo = self._repo_for_write(repo_id)
        if repo is None:
            return
        if branch in repo.branches:
            return self._send(409, {"error": f"Reference refs/heads/{branch} already exists"})
        start = payload.get("startingPoint") or "main"
        sha = self._resolve_revision(repo, start)
        if sha is None:
            return self._error(404, f"Invalid rev id: {start}", "RevisionNotFound")
        repo.branches[branch] = sha
        self._send(200, {})

    def _url(self, repo_id: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/{repo_id}"


def _git_blob_oid(content: bytes) -> str:
    """The git blob sha1 the Hub reports as a file's `oid` (the client skips unchanged files by comparing it)."""
    return _sha(f"blob {len(content)}\0".encode(), content)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState


class HubServer:
    """`with HubServer({"hf_token...": "alice"}) as hub:` serves on `hub.url` (127.0.0.1, a free port)."""

    def __init__(self, tokens: dict[str, str]):
        self.state = HubState(tokens)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        repo = self.state.repos[repo_id]
        return repo.commits[repo.branches.get(revision, revision)]

    def __enter__(self) -> "HubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":  # python tests/hub_server.py TOKEN=user ...: serve until interrupted (manual trials)
    import sys

    pairs = dict(arg.split("=", 1) for arg in sys.argv[1:]) or {"hf_" + "x" * 34: "alice"}
    with HubServer(pairs) as hub:
        print(f"Serving a test Hub on {hub.url} for users {sorted(set(pairs.values()))}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
