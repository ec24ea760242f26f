"""``roost web``'s guard and HTTP reading, without a browser: the Host, Origin and
secret checks (DNS rebinding, cross-site requests), and the limits of a request."""

from __future__ import annotations

import asyncio

import pytest

from roost_core.web.guard import Guard
from roost_core.web.httpd import HttpError, read_request

GUARD = Guard(8123, "s3cret")
COOKIE = "roost_web_8123=s3cret"


@pytest.mark.parametrize(
    ("method", "host", "origin", "cookie", "query", "status", "set_cookie"),
    [
        ("GET", "127.0.0.1:8123", None, None, "s3cret", 0, True),  # the printed link
        ("GET", "localhost:8123", None, COOKIE, None, 0, False),
        ("GET", "[::1]:8123", "http://[::1]:8123", COOKIE, None, 0, False),
        ("POST", "127.0.0.1:8123", "http://127.0.0.1:8123", COOKIE, None, 0, False),
        ("GET", "attacker.example:8123", None, COOKIE, None, 400, False),  # DNS rebinding
        ("GET", "127.0.0.1:9999", None, COOKIE, None, 400, False),
        ("GET", None, None, COOKIE, None, 400, False),
        ("POST", "127.0.0.1:8123", "http://evil.example", COOKIE, None, 403, False),  # cross-site
        ("POST", "127.0.0.1:8123", None, COOKIE, None, 403, False),  # a change with no Origin
        ("POST", "127.0.0.1:8123", "http://127.0.0.1:8123", None, "s3cret", 403, False),  # the link's secret only for a GET
        ("GET", "127.0.0.1:8123", None, None, None, 403, False),
        ("GET", "127.0.0.1:8123", None, "roost_web_8123=wrong", "nope", 403, False),
        ("GET", "127.0.0.1:8123", None, "roost_web_9999=s3cret", None, 403, False),  # another port's cookie
    ],
)
def test_the_guard_lets_through_only_this_page_with_its_secret(method, host, origin, cookie, query, status, set_cookie):
    verdict = GUARD.check(method, host, origin, cookie, query)
    assert (verdict.status, verdict.set_cookie) == (status, set_cookie), verdict.reason


def test_the_cookie_is_http_only_same_site_strict_and_named_by_the_port():
    assert GUARD.cookie_header() == "roost_web_8123=s3cret; HttpOnly; SameSite=Strict; Path=/"


def read(data: bytes):
    async def go():
        reader = asyncio.StreamReader(limit=16 * 1024)
        reader.feed_data(data)
        reader.feed_eof()
        return await read_request(reader, timeout=1)

    return asyncio.run(go())


def test_a_request_is_read_with_its_query_and_body():
    request = read(b"POST /api/answer?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Length: 2\r\n\r\n{}")
    assert (request.method, request.path, request.query, request.body, request.keep_alive) == ("POST", "/api/answer", {"x": "1"}, b"{}", True)
    assert read(b"") is None


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET /\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
    ],
)
def test_a_request_the_server_does_not_take_is_refused_with_its_status(data, status):
    with pytest.raises(HttpError) as caught:
        read(data)
    assert caught.value.status == status
