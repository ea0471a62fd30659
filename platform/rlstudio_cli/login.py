"""`rlstudio login`: checks a token against the platform (one GET of /api/v1/runs/) and, once it is
accepted, saves it with the platform's URL in the config file (`client.write_config_file`, 0600); a
refused token saves nothing. Also the hint printed when a command gets a 401 (`LOGIN_HINT`). Where
the URL and token come from for the other commands is `client.resolve`.
"""
from __future__ import annotations

import getpass
import os
import sys
import urllib.parse

from .client import ApiError, Client, ClientError, Settings, config_path, normalize_url, write_config_file
from .common import err, out
from .output import clean

LOGIN_HINT = ("run `rlstudio login --url URL --token KEY` with a token from your profile page "
              "(/accounts/profile/), or set RLSTUDIO_URL and RLSTUDIO_TOKEN")


def cmd_login(args) -> int:
    if not (args.url or os.environ.get("RLSTUDIO_URL")):
        raise ClientError("give the platform's address: --url https://...", field="url", exit_code=2)
    url = normalize_url(args.url or os.environ["RLSTUDIO_URL"])
    token = args.token or os.environ.get("RLSTUDIO_TOKEN")
    if token in (None, "-"):
        if sys.stdin.isatty() and token is None:
            token = getpass.getpass("API token (from your profile page, /accounts/profile/): ")
        else:
            token = sys.stdin.readline()
    token = (token or "").strip()
    if not token:
        raise ClientError("no token given: --token KEY, or type it when asked", field="token", exit_code=2)
    client = Client(Settings(url=url, token=token))
    try:
        client.get("runs/", limit=1)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise ClientError(f"the platform refused this token ({clean(exc.message)}); nothing was saved",
                              field="token", exit_code=2) from None
        if exc.status == 404:  # another server, or a page's address rather than the site's
            raise ClientError(f"{url} has no RL Studio API ({clean(exc.message)}); nothing was saved: give the "
                              "address the platform's pages are on, e.g. https://rl.example.org",
                              field="url", exit_code=2) from None
        raise
    host = urllib.parse.urlsplit(url).hostname or ""
    if url.startswith("http://") and host not in ("localhost", "127.0.0.1", "::1"):
        err(f"warning: {url} is plain HTTP: the token travels unencrypted")
    path = config_path()
    write_config_file(path, url=url, token=token)
    out(f"logged in to {url}; saved to {path} (readable by you only)")
    return 0
