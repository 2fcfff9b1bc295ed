"""Serve a bolt app over HTTP (`hsx bot --http PORT`): a threaded WSGI server."""

from __future__ import annotations

import socketserver
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slack_bolt.adapter.wsgi import SlackRequestHandler

PATH = "/slack/events"


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass


def make_http_server(app, port: int, host: str = "0.0.0.0") -> WSGIServer:
    """Bound and ready; call serve_forever(). Port 0 picks a free port (server.server_port)."""
    return make_server(host, port, SlackRequestHandler(app, path=PATH), _ThreadingServer, _QuietHandler)
