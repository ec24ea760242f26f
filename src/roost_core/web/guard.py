"""Who may ask the page anything: the checks every request passes first.

The page is served on 127.0.0.1 only, but a browser is a confused deputy: any site it
visits may make it send requests to 127.0.0.1 (cross-site requests), or point a name of
its own at 127.0.0.1 (DNS rebinding) and read the answers as same-origin. So:

- the ``Host`` must name this server (``127.0.0.1:PORT``, ``localhost:PORT`` or
  ``[::1]:PORT``), else 400: a rebound name never matches;
- an ``Origin``, when the browser sends one, must be this server's, else 403; a request
  that changes something (a POST) must carry one;
- the secret ``roost web`` printed must come with the request: once in the link's
  ``?t=`` (answered by a cookie and a redirect, so the secret leaves the address bar),
  then in that cookie (``HttpOnly; SameSite=Strict``, its name holding the port, since
  cookies ignore ports), compared in constant time; else 403.

Pure functions of the request's parts: no I/O.
"""

from __future__ import annotations

import hmac
import secrets
from http.cookies import CookieError, SimpleCookie

import attrs

#: Headers every answer carries: no referrer leaves the page, nothing is framed (a dialog
#: answer cannot be clickjacked), no script or style from elsewhere, nothing cached.
SECURITY_HEADERS = (
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def new_secret() -> str:
    """The secret a ``roost web`` prints in its link."""
    return secrets.token_urlsafe(32)


@attrs.frozen
class Verdict:
    """What the guard says of a request: ``status`` 0 lets it through; else the status
    and a short reason to answer with. ``set_cookie``: the request brought the secret in
    its link, so the answer sets the cookie (and redirects to drop it from the link)."""

    status: int = 0
    reason: str = ""
    set_cookie: bool = False


@attrs.frozen
class Guard:
    """The checks for one server: its ``port`` and its ``secret``."""

    port: int
    secret: str

    @property
    def cookie_name(self) -> str:
        return f"roost_web_{self.port}"

    @property
    def origins(self) -> tuple[str, ...]:
        return tuple(f"http://{host}:{self.port}" for host in LOCAL_HOSTS)

    def cookie_header(self) -> str:
        """The ``Set-Cookie`` value that carries the secret from now on."""
        return f"{self.cookie_name}={self.secret}; HttpOnly; SameSite=Strict; Path=/"

    def check(self, method: str, host: str | None, origin: str | None, cookie: str | None, query_secret: str | None) -> Verdict:
        """The verdict on a request with these headers (None: absent) and the ``t`` of
        its query string."""
        if host is None or host.lower() not in {f"{name}:{self.port}" for name in LOCAL_HOSTS}:
            return Verdict(400, "the Host is not this server's (127.0.0.1, localhost or [::1] with its port)")
        if origin is not None and origin.lower() not in self.origins:
            return Verdict(403, "a request from another site (its Origin is not this page's)")
        if method not in ("GET", "HEAD") and origin is None:
            return Verdict(403, "a change must come from the page itself (no Origin)")
        if self._same(self._cookie_secret(cookie)):
            return Verdict()
        if method == "GET" and self._same(query_secret):
            return Verdict(set_cookie=True)
        return Verdict(403, "no secret: open the link `roost web` printed")

    def _cookie_secret(self, cookie: str | None) -> str | None:
        if not cookie:
            return None
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(cookie)
        except CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        return None if morsel is None else morsel.value

    def _same(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.secret.encode())
