#!/usr/bin/python3
# Copyright (c) 2026, The ntask authors; the PostgreSQL Licence (LICENSE)
"""t/provider.py: a loopback, fault-injecting HTTP provider for the TAP tests.

Usage: provider.py [--log FILE] [--lifetime SECONDS] PORT

Listens on 127.0.0.1:PORT only (PORT 0: the kernel picks one).  The first
line on stdout is the port actually bound.  Python 3 standard library only.
It exits on SIGTERM or SIGINT, when its parent process dies, when stdout is
a pipe and its reader closes it, and after --lifetime seconds (default 900)
whatever happens.

The provider is idempotent by Idempotency-Key, like a well-behaved push
service: the first request for a key that is *accepted* has the effect; a
later request for a key that already has its effect answers 200 at once and
adds no effect (it is counted as a duplicate).

POST /send (any path that is not /status or /_admin/...; POST or PUT)
    Answered according to the rule whose prefix is the longest prefix of the
    request's Idempotency-Key (or the default rule).  A rule is a list of
    actions: request n for a key (n = 0, 1, ...) uses action
    seq[min(n, len(seq) - 1)], so [{"status": 500}, {"status": 200}] is
    "first 500, then 200".  An action:
        status       int, default 200
        retry_after  string or int: sent as the Retry-After header
        delay_ms     wait this long before answering (default 0)
        mode         "respond" (default), "drop" (read the request, record the
                     effect, close the connection without a response),
                     "reset" (same but with a TCP RST), "hang" (record the
                     effect, then never answer: wait until the client closes
                     the connection or hang_ms passes, then close)
        hang_ms      default 60000
        effect       bool; default true for a 2xx respond, drop, reset, hang
        body         response body (default {"ok":true})
GET /status (the reconcile endpoint): 200 if the request's Idempotency-Key
    has an effect, else 404.  A rule may carry "reconcile": [actions] to
    answer /status differently (e.g. 503, a delay); a scripted 2xx answer
    is still 200 only if the key has an effect, else 404.

Admin (JSON):
    POST /_admin/rules   {"default": RULE, "rules": {"prefix": RULE, ...},
                          "replace": false}
                         RULE is a list of actions, or {"seq": [actions],
                         "reconcile": [actions]}, or a single action object.
                         Rules merge into the current ones unless replace.
    POST /_admin/reset   clear rules (default: 200) and all records
    GET  /_admin/stats   {"totals": {...}, "keys": {KEY: {...}}};
                         ?prefix=P only keys starting with P, ?key=K one key
    GET  /_admin/health  "ok"

Per key the stats hold: requests, effects (0 or 1), duplicates, effect_at,
attempts (NTask-Attempt values in arrival order), task_ids, status_checks,
and reqs: one entry per request with arrival time, method, path, headers
(name/value pairs as received), body, what was done and when the connection
ended; a send's entry also has "peer", the client's port (the same port:
the same connection).
"""

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

LOCK = threading.Lock()
STOP = threading.Event()
LOGF = None

DEFAULT_ACTION = {"status": 200}


def new_state():
    return {"default": {"seq": [dict(DEFAULT_ACTION)], "reconcile": None},
            "rules": {},
            "keys": {},
            "totals": {"requests": 0, "effects": 0, "duplicates": 0,
                       "status_checks": 0, "admin": 0, "no_key": 0,
                       "bad_method": 0}}


STATE = new_state()


def log(msg):
    if LOGF is not None:
        try:
            LOGF.write("%.3f %s\n" % (time.time(), msg))
            LOGF.flush()
        except Exception:
            pass


def norm_rule(rule):
    """Accept a list of actions, {"seq":..., "reconcile":...} or one action."""
    if isinstance(rule, list):
        seq, rec = rule, None
    elif isinstance(rule, dict) and ("seq" in rule or "reconcile" in rule):
        seq, rec = rule.get("seq") or [dict(DEFAULT_ACTION)], rule.get("reconcile")
    elif isinstance(rule, dict):
        seq, rec = [rule], None
    else:
        raise ValueError("a rule is a list of actions or an object")
    for a in list(seq) + list(rec or []):
        if not isinstance(a, dict):
            raise ValueError("an action is an object")
        mode = a.get("mode", "respond")
        if mode not in ("respond", "drop", "reset", "hang"):
            raise ValueError("unknown mode %r" % mode)
        int(a.get("status", 200))
        int(a.get("delay_ms", 0))
        int(a.get("hang_ms", 60000))
    if not seq:
        raise ValueError("empty seq")
    return {"seq": seq, "reconcile": rec}


def find_rule(key):
    best = None
    for prefix, rule in STATE["rules"].items():
        if key is not None and key.startswith(prefix):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rule)
    return best[1] if best else STATE["default"]


def key_record(key):
    k = STATE["keys"].get(key)
    if k is None:
        k = {"requests": 0, "effects": 0, "duplicates": 0, "effect_at": None,
             "attempts": [], "task_ids": [], "status_checks": 0,
             "reqs": []}
        STATE["keys"][key] = k
    return k


def effect_of(action):
    if "effect" in action:
        return bool(action["effect"])
    mode = action.get("mode", "respond")
    if mode in ("drop", "reset", "hang"):
        return True
    return 200 <= int(action.get("status", 200)) < 300


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ntask-test-provider/1"

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):
        log("%s %s" % (self.client_address, fmt % args))

    # ---- plumbing

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def answer(self, status, body=b"", headers=None, ctype="application/json"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for name, value in (headers or []):
            self.send_header(name, str(value))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def answer_json(self, status, obj):
        self.answer(status, json.dumps(obj, sort_keys=True))

    def wait_client_gone(self, ms):
        """Wait until the client closes the connection, ms pass or we stop.
        Returns 'client_closed', 'timeout' or 'stopped'."""
        sock = self.connection
        end = time.monotonic() + ms / 1000.0
        sock.settimeout(0.1)
        try:
            while True:
                if STOP.is_set():
                    return "stopped"
                if time.monotonic() >= end:
                    return "timeout"
                try:
                    data = sock.recv(4096, socket.MSG_PEEK)
                    if data == b"":
                        return "client_closed"
                    # a pipelined request: discard it, keep waiting
                    sock.recv(len(data))
                except socket.timeout:
                    continue
                except OSError:
                    return "client_closed"
        finally:
            try:
                sock.settimeout(None)
            except OSError:
                pass

    def sleep_ms(self, ms):
        STOP.wait(ms / 1000.0)

    def close_now(self, rst=False):
        self.close_connection = True
        try:
            if rst:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           b"\x01\x00\x00\x00\x00\x00\x00\x00")
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass

    # ---- dispatch

    def do_GET(self):
        self.route()

    def do_POST(self):
        self.route()

    def do_PUT(self):
        self.route()

    def do_DELETE(self):
        self.route()

    def do_PATCH(self):
        self.route()

    def do_HEAD(self):
        self.route()

    def route(self):
        path = urlsplit(self.path).path
        try:
            body = self.read_body()
        except Exception as e:
            self.answer(400, "bad body: %s" % e, ctype="text/plain")
            return
        if path.startswith("/_admin/"):
            with LOCK:
                STATE["totals"]["admin"] += 1
            self.admin(path, body)
        elif path == "/status":
            self.status_check()
        else:
            self.send_task(path, body)

    # ---- admin

    def admin(self, path, body):
        global STATE
        q = parse_qs(urlsplit(self.path).query)
        if path == "/_admin/health":
            self.answer(200, "ok", ctype="text/plain")
        elif path == "/_admin/reset" and self.command == "POST":
            with LOCK:
                STATE = new_state()
            self.answer_json(200, {"reset": True})
        elif path == "/_admin/rules" and self.command == "POST":
            try:
                spec = json.loads(body or b"{}")
                rules = {p: norm_rule(r) for p, r in (spec.get("rules") or {}).items()}
                default = norm_rule(spec["default"]) if "default" in spec else None
            except Exception as e:
                self.answer_json(400, {"error": str(e)})
                return
            with LOCK:
                if spec.get("replace"):
                    STATE["rules"] = {}
                    STATE["default"] = norm_rule([dict(DEFAULT_ACTION)])
                STATE["rules"].update(rules)
                if default is not None:
                    STATE["default"] = default
                out = {"rules": STATE["rules"], "default": STATE["default"]}
            self.answer_json(200, out)
        elif path == "/_admin/rules" and self.command == "GET":
            with LOCK:
                out = {"rules": STATE["rules"], "default": STATE["default"]}
            self.answer_json(200, out)
        elif path == "/_admin/stats" and self.command == "GET":
            with LOCK:
                keys = STATE["keys"]
                if "key" in q:
                    keys = {k: v for k, v in keys.items() if k in q["key"]}
                elif "prefix" in q:
                    keys = {k: v for k, v in keys.items()
                            if any(k.startswith(p) for p in q["prefix"])}
                out = json.dumps({"totals": STATE["totals"], "keys": keys},
                                 sort_keys=True)
            self.answer(200, out)
        else:
            self.answer_json(404, {"error": "no such admin endpoint"})

    # ---- the reconcile endpoint

    def status_check(self):
        key = self.headers.get("Idempotency-Key")
        now = time.time()
        with LOCK:
            STATE["totals"]["status_checks"] += 1
            rec = key_record(key if key is not None else "")
            rec["status_checks"] += 1
            n = rec["status_checks"] - 1
            has_effect = rec["effects"] > 0
            rule = find_rule(key)
            racts = rule.get("reconcile")
            action = racts[min(n, len(racts) - 1)] if racts else None
            # every key exists up front: /_admin/stats may serialize this
            # entry while perform() fills it in
            rec["reqs"].append({"t": now, "method": self.command,
                                "path": self.path, "kind": "status",
                                "headers": [[k, v] for k, v in self.headers.items()],
                                "mode": None, "answer": None, "end": None,
                                "ended": None})
            entry = rec["reqs"][-1]
        if key is None:
            entry["answer"] = 400
            entry["end"] = "answered"
            self.answer_json(400, {"error": "Idempotency-Key missing"})
            return
        if action is None:
            status = 200 if has_effect else 404
            entry["answer"] = status
            entry["end"] = "answered"
            self.answer_json(status, {"effect": has_effect})
            return
        if action.get("mode", "respond") == "respond" and \
                200 <= int(action.get("status", 200)) < 300:
            # a scripted success still tells the truth: the provider never
            # says "done" for a key whose request never reached it (a
            # worker killed between its invoked commit and the send, or a
            # lease that ran out first, is then resent, not "reconciled")
            action = dict(action, status=200 if has_effect else 404)
        self.perform(action, entry, is_status=True)

    # ---- the send endpoint

    def send_task(self, path, body):
        key = self.headers.get("Idempotency-Key")
        now = time.time()
        with LOCK:
            STATE["totals"]["requests"] += 1
            if key is None:
                STATE["totals"]["no_key"] += 1
            if self.command not in ("POST", "PUT"):
                STATE["totals"]["bad_method"] += 1
            rec = key_record(key if key is not None else "")
            n = rec["requests"]
            rec["requests"] += 1
            rec["attempts"].append(self.headers.get("NTask-Attempt"))
            rec["task_ids"].append(self.headers.get("NTask-Task-Id"))
            entry = {"t": now, "method": self.command, "path": self.path,
                     "kind": "send", "peer": self.client_address[1],
                     "headers": [[k, v] for k, v in self.headers.items()],
                     "body": body.decode("utf-8", "replace"),
                     "mode": None, "answer": None, "effect": False,
                     "duplicate": False, "ended": None, "end": None}
            rec["reqs"].append(entry)
            if rec["effects"] > 0 and key is not None:
                # idempotent provider: already done, say so, no new effect
                rec["duplicates"] += 1
                STATE["totals"]["duplicates"] += 1
                entry["duplicate"] = True
                action = {"status": 200, "effect": False,
                          "body": '{"ok":true,"duplicate":true}'}
            else:
                rule = find_rule(key)
                seq = rule["seq"]
                action = seq[min(n, len(seq) - 1)]
                if effect_of(action) and key is not None:
                    rec["effects"] = 1
                    rec["effect_at"] = now
                    STATE["totals"]["effects"] += 1
                    entry["effect"] = True
        log("send key=%s n=%d attempt=%s action=%s" %
            (key, n, self.headers.get("NTask-Attempt"), json.dumps(action)))
        self.perform(action, entry)

    def perform(self, action, entry, is_status=False):
        mode = action.get("mode", "respond")
        entry["mode"] = mode
        status = int(action.get("status", 200))
        delay = int(action.get("delay_ms", 0))
        if delay > 0 and mode == "respond":
            self.sleep_ms(delay)
        try:
            if mode == "respond":
                hdrs = []
                if action.get("retry_after") is not None:
                    hdrs.append(("Retry-After", action["retry_after"]))
                body = action.get("body", '{"ok":true}')
                self.answer(status, body, hdrs)
                entry["answer"] = status
                entry["end"] = "answered"
            elif mode in ("drop", "reset"):
                if delay > 0:
                    self.sleep_ms(delay)
                self.close_now(rst=(mode == "reset"))
                entry["end"] = mode
            elif mode == "hang":
                entry["end"] = self.wait_client_gone(int(action.get("hang_ms", 60000)))
                self.close_now()
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            self.close_connection = True
            entry["end"] = "client_gone: %s" % e.__class__.__name__
        entry["ended"] = time.time()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        log("error from %s: %r" % (client_address, sys.exc_info()[1]))


def stdout_reader_gone(poller):
    """True when stdout is a pipe whose reading end was closed."""
    if poller is None:
        return False
    try:
        for _fd, ev in poller.poll(0):
            if ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                return True
    except OSError:
        return True
    return False


def watchdog(ppid, deadline, server):
    poller = None
    try:
        import stat
        if stat.S_ISFIFO(os.fstat(1).st_mode):
            poller = select.poll()
            poller.register(1, select.POLLERR | select.POLLHUP)
    except OSError:
        poller = None
    while not STOP.wait(0.2):
        if os.getppid() != ppid or time.monotonic() > deadline:
            log("parent gone or lifetime over: exiting")
            STOP.set()
            break
        if stdout_reader_gone(poller):
            log("stdout closed by the reader: exiting")
            STOP.set()
            break
    threading.Thread(target=server.shutdown, daemon=True).start()
    # do not wait for hanging handlers
    time.sleep(0.5)
    os._exit(0)


def main():
    global LOGF
    ap = argparse.ArgumentParser(description="ntask test provider")
    ap.add_argument("port", type=int)
    ap.add_argument("--log")
    ap.add_argument("--lifetime", type=float, default=900.0)
    args = ap.parse_args()
    if args.log:
        LOGF = open(args.log, "a", buffering=1)

    ppid = os.getppid()
    server = Server(("127.0.0.1", args.port), Handler)

    def on_signal(signum, frame):
        log("signal %d: exiting" % signum)
        STOP.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    port = server.server_address[1]
    sys.stdout.write("%d\n" % port)
    sys.stdout.flush()
    log("listening on 127.0.0.1:%d (parent %d)" % (port, ppid))

    threading.Thread(target=watchdog,
                     args=(ppid, time.monotonic() + args.lifetime, server),
                     daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        STOP.set()
        os._exit(0)


if __name__ == "__main__":
    main()
