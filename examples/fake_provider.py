#!/usr/bin/env python3
"""A fake push provider for the example push services (stdlib only).

    python3 examples/fake_provider.py [--port 8099]

It listens on 127.0.0.1 only and prints "fake provider: listening on
http://127.0.0.1:PORT" (port 0: a free one).  It stands for a real push
provider (APNs, FCM) with an idempotency key, the part of its protocol
that lets a worker that lost an answer ask instead of sending again:

  POST /v1/push            Idempotency-Key: <the task key>
                           {"device": "d-...", "body": "..."}
       200 {"id": "pm-N"}  accepted (the effect); a key that already took
                           effect answers 200 with its first id and
                           "duplicate": true, and has no second effect
       429 Retry-After: 1  rate limited: not taken
       500                 an error: not taken (a worker cannot know that)
       410                 the device is unregistered: never will be
  GET  /v1/push/<key>      200 {"id": ...} if that key took effect, else 404
  GET  /stats              what it saw, per key: sends (and their
                           times, sent_at), effects, duplicates, lookups, id

Like a payment provider's test card numbers, the device says how a send
goes (the first send of a key; later sends of that key are accepted):
  d-429-*   429, Retry-After: 1
  d-500-*   500
  d-hang-*  accepted, and the answer never comes (it holds the connection
            until the client gives up): the worker cannot tell
  d-slow-*  accepted, answered after 3 s
  d-gone-*  410 on every send
  any other 200
"""
import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

LOCK = threading.Lock()
KEYS = {}          # key -> {"sends", "sent_at", "effects", "duplicates", "lookups", "id"}
STOP = threading.Event()
SLOW_S = 3.0
HANG_S = 60.0


def record(key):
    return KEYS.setdefault(key, {"sends": 0, "sent_at": [], "effects": 0, "duplicates": 0,
                                 "lookups": 0, "id": None})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, obj=None, headers=()):
        body = json.dumps(obj if obj is not None else {}, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/stats":
            with LOCK:
                self.answer(200, {"keys": KEYS})
        elif self.path.startswith("/v1/push/"):
            key = unquote(self.path[len("/v1/push/"):])
            with LOCK:
                rec = record(key)
                rec["lookups"] += 1
                found = rec["id"]
            if found:
                self.answer(200, {"id": found})
            else:
                self.answer(404, {"error": "no push with this idempotency key"})
        else:
            self.answer(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.answer(400, {"error": "bad json"})
            return
        key = self.headers.get("Idempotency-Key")
        if self.path != "/v1/push" or not key:
            self.answer(400, {"error": "POST /v1/push with an Idempotency-Key"})
            return
        device = str(body.get("device", ""))
        with LOCK:
            rec = record(key)
            first = rec["sends"] == 0
            rec["sends"] += 1
            rec["sent_at"].append(time.time())
            if rec["id"] is not None:
                rec["duplicates"] += 1
                self.answer(200, {"id": rec["id"], "duplicate": True})
                return
            if device.startswith("d-gone-"):
                self.answer(410, {"error": "unregistered device"})
                return
            if first and device.startswith("d-429-"):
                self.answer(429, {"error": "rate limited"}, [("Retry-After", "1")])
                return
            if first and device.startswith("d-500-"):
                self.answer(500, {"error": "internal error"})
                return
            # accepted: the effect happens now, whatever the answer does
            rec["effects"] += 1
            rec["id"] = "pm-%d" % sum(r["effects"] for r in KEYS.values())
            pid = rec["id"]
        if first and device.startswith("d-hang-"):
            self.hang()
            return
        if first and device.startswith("d-slow-"):
            STOP.wait(SLOW_S)
        self.answer(200, {"id": pid})

    def hang(self):
        """Hold the connection, answering nothing, until the client closes
        it (or HANG_S pass, or we stop)."""
        sock = self.connection
        sock.settimeout(0.1)
        end = time.monotonic() + HANG_S
        while not STOP.is_set() and time.monotonic() < end:
            try:
                if sock.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=8099)
    args = ap.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)

    def on_signal(signum, frame):
        STOP.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("fake provider: listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
