"""The HTTP side of the client: where the platform is and who calls it (flags, environment, config
file), and JSON and multipart requests with the API's error envelope read into `ApiError`."""
from __future__ import annotations

import http.client
import json
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__

API_PREFIX = "/api/v1/"
TIMEOUT_S = 60.0
DOWNLOAD_CHUNK = 1 << 20  # bytes a download reads and writes at a time


class ClientError(Exception):
    """A refusal or failure to show the user: `message`, its `field` (or None), and the exit status
    (2: the request was refused, a 4xx or a usage error; 1: the platform could not be reached or failed)."""

    def __init__(self, message: str, *, field: str | None = None, exit_code: int = 1,
                 status: int | None = None, code: str | None = None, errors: list[dict] | None = None):
        super().__init__(message)
        self.message, self.field, self.exit_code = message, field, exit_code
        self.status, self.code, self.errors = status, code, errors or []


class ApiError(ClientError):
    """An HTTP answer of 400 or more; 4xx exit with 2, 5xx with 1."""


@dataclass
class Settings:
    url: str  # the platform's base URL, without a trailing slash and without /api/v1
    token: str

    def __repr__(self) -> str:  # never the token, not even in a traceback
        return f"Settings(url={self.url!r}, token=<hidden>)"


def config_path(environ=os.environ) -> Path:
    """~/.config/rlstudio/config.json, or under $XDG_CONFIG_HOME when it is set (and absolute)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "rlstudio" / "config.json"


def read_config_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ClientError(f"{path} is not JSON: run `rlstudio login` again") from None
    return {k: v for k, v in data.items() if k in ("url", "token") and isinstance(v, str)} if isinstance(data, dict) else {}


def write_config_file(path: Path, *, url: str, token: str) -> None:
    """The config file, readable by its owner only (0600; its folder 0700), replaced whole."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"url": url, "token": token}, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o600)  # whatever the umask
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def normalize_url(url: str) -> str:
    """`https://host[:port][/prefix]`, without a trailing slash or a trailing /api/v1."""
    url = url.strip()
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(f"the URL must start with http:// or https://, got {url!r}", field="url", exit_code=2)
    path = parts.path.rstrip("/")
    if path.endswith("/api/v1"):
        path = path[: -len("/api/v1")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def resolve(*, url: str | None, token: str | None, environ=os.environ) -> Settings:
    """The flags first, then RLSTUDIO_URL / RLSTUDIO_TOKEN, then the file `rlstudio login` wrote."""
    saved = read_config_file(config_path(environ))
    url = url or environ.get("RLSTUDIO_URL") or saved.get("url")
    token = token or environ.get("RLSTUDIO_TOKEN") or saved.get("token")
    if not url or not token:
        missing = " and ".join(n for n, v in (("URL", url), ("token", token)) if not v)
        raise ClientError(f"no {missing}: run `rlstudio login --url URL --token KEY` (create a token on your "
                          "profile page, /accounts/profile/), or set RLSTUDIO_URL and RLSTUDIO_TOKEN",
                          exit_code=2)
    return Settings(url=normalize_url(url), token=token.strip())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: the Authorization header would go along to wherever they point."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise ClientError(f"the server answered {code} redirecting to {newurl}: give that address as --url "
                          "(the client does not follow redirects, so the token goes nowhere else)")


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect())


def _error_from(status: int, body: bytes, content_type: str, *, where: str = "") -> ApiError:
    """The API's error envelope as an `ApiError`. A 404 names the request (`where`: "GET /api/v1/runs/9/"):
    the API's "Not found." alone does not say which id it was (`evaluations show RUN EVAL` has two)."""
    exit_code = 2 if 400 <= status < 500 else 1
    data: Any = None
    if "json" in content_type:
        try:
            data = json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            data = None
    err = data.get("error") if isinstance(data, dict) else None
    suffix = f" ({where})" if status == 404 and where else ""
    if isinstance(err, dict):
        errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
        return ApiError(str(err.get("message") or f"HTTP {status}") + suffix, field=err.get("field"),
                        exit_code=exit_code, status=status, code=err.get("code"), errors=errors)
    text = body.decode("utf-8", "replace").strip()
    if not text or "html" in content_type:
        text = f"the server answered HTTP {status}"
    return ApiError(text[:500] + suffix, exit_code=exit_code, status=status)


class Client:
    def __init__(self, settings: Settings, *, timeout: float = TIMEOUT_S):
        self.settings, self.timeout = settings, timeout
        self._opener = _opener()

    def url_for(self, path: str, params: dict[str, Any] | None = None) -> str:
        if path.startswith(("http://", "https://")):
            url = path
        else:
            url = self.settings.url + API_PREFIX + path.lstrip("/")
        if params:
            query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
            url += ("&" if "?" in url else "?") + query
        return url

    def _check_same_origin(self, url: str) -> None:
        """A `next` link (or any URL) the token would be sent to must be the platform's own address."""
        want, got = urllib.parse.urlsplit(self.settings.url), urllib.parse.urlsplit(url)
        if (want.scheme, want.netloc) != (got.scheme, got.netloc):
            raise ClientError(f"the server pointed to {got.scheme}://{got.netloc}, not {self.settings.url}: "
                              "not sending the token there (is the platform's public URL set right?)")

    def _headers(self, accept: str) -> dict[str, str]:
        return {"Authorization": f"Token {self.settings.token}", "Accept": accept,
                "User-Agent": f"rlstudio-cli/{__version__}"}

    @contextmanager
    def _answer_or_error(self, method: str, url: str, failed, unreachable: tuple[type[BaseException], ...]):
        """Around one request: an HTTP error answer is an `ApiError` naming the request; a failure in
        `unreachable` (no answer, a connection broken midway) is a ClientError saying `failed(reason)`."""
        try:
            yield
        except urllib.error.HTTPError as exc:
            with exc:
                raise _error_from(exc.code, exc.read(), exc.headers.get("Content-Type", ""),
                                  where=f"{method} {urllib.parse.urlsplit(url).path}") from None
        except ClientError:
            raise
        except unreachable as exc:
            raise ClientError(failed(getattr(exc, "reason", exc))) from None

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
                data: bytes | None = None, content_type: str | None = None, raw: bool = False) -> Any:
        url = self.url_for(path, params)
        self._check_same_origin(url)
        headers = self._headers("application/json")
        if body is not None:
            data, content_type = json.dumps(body).encode("utf-8"), "application/json"
        if isinstance(data, _Body):  # streamed (an upload): its length is known, so no chunked encoding
            headers["Content-Length"] = str(data.length)
        if data is not None:
            headers["Content-Type"] = content_type or "application/octet-stream"
        elif method in ("POST", "PUT", "PATCH"):
            data = b""
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with self._answer_or_error(method, url, lambda reason: f"cannot reach {self.settings.url}: {reason}",
                                   (urllib.error.URLError, OSError)):
            with self._opener.open(req, timeout=self.timeout) as resp:
                payload = resp.read()
                ctype = resp.headers.get("Content-Type", "")
        if raw:
            return payload
        if not payload:
            return None
        if "json" not in ctype:
            raise ClientError(f"the server answered {ctype or 'no content type'}, not JSON: is {self.settings.url} "
                              "RL Studio?")
        try:
            return json.loads(payload.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ClientError("the server's answer is not valid JSON") from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def download(self, path: str, write, *, chunk_size: int | None = None) -> int:
        """GET `path` and hand its body to `write` `chunk_size` bytes at a time, never holding the whole
        of it (an export's archive can be many GiB); the bytes written. An HTTP error is an `ApiError`
        as for `request`; the connection failing midway is a `ClientError` (exit 1)."""
        chunk_size = chunk_size or DOWNLOAD_CHUNK
        url = self.url_for(path)
        self._check_same_origin(url)
        req = urllib.request.Request(url, method="GET", headers=self._headers("*/*"))
        total = 0
        with self._answer_or_error("GET", url, lambda reason: f"the download from {self.settings.url} failed "
                                   f"after {total} bytes: {reason}",
                                   (urllib.error.URLError, OSError, http.client.HTTPException)):
            with self._opener.open(req, timeout=self.timeout) as resp:
                while True:
                    chunk = resp.read(chunk_size)
                    if not chunk:
                        return total
                    write(chunk)
                    total += len(chunk)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body if body is not None else {})

    def upload(self, path: str, *, fields: dict[str, str], file_field: str, file: Path) -> Any:
        """POST `file` as multipart/form-data, streamed from the disk DOWNLOAD_CHUNK bytes at a time (a
        dataset may be GiBs: it is never read into memory whole)."""
        data, ctype = multipart(fields=fields, file_field=file_field, file=file)
        return self.request("POST", path, data=data, content_type=ctype)


class _Body:
    """A request body sent piece by piece (http.client iterates it), with its length known beforehand."""

    def __init__(self, head: bytes, file: Path, size: int, tail: bytes):
        self.head, self.file, self.size, self.tail = head, file, size, tail
        self.length = len(head) + size + len(tail)

    def __iter__(self):
        yield self.head
        left = self.size
        with open(self.file, "rb") as f:
            while left > 0:
                chunk = f.read(min(DOWNLOAD_CHUNK, left))
                if not chunk:
                    raise ClientError(f"{self.file} got shorter while it was being uploaded", exit_code=1)
                left -= len(chunk)
                yield chunk
        yield self.tail


def multipart(*, fields: dict[str, str], file_field: str, file: Path) -> tuple[_Body, str]:
    """A multipart/form-data body (RFC 7578) streaming `file` as `file_field`, and its Content-Type."""
    boundary = "rlstudio-" + secrets.token_hex(16)
    filename = file.name

    def quote(text: str) -> str:
        return text.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")

    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{quote(name)}"\r\n\r\n'.encode()
                     + value.encode("utf-8") + b"\r\n")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{quote(file_field)}"; '
                 f'filename="{quote(filename)}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode())
    size = file.stat().st_size
    return _Body(b"".join(parts), file, size, f"\r\n--{boundary}--\r\n".encode()), \
        f"multipart/form-data; boundary={boundary}"
