"""Hostile-input sweep over every route of a real gateway (issue 13): the goal is
zero 5xx for anything a client can send.

A real gateway (uvicorn + the FastAPI app, SQLite + LanceDB + the offline
embedder in a temporary data root, no chat model) on 127.0.0.1 receives a
bounded, seeded set of requests (at least ``MIN_REQUESTS``; at most
``DEADLINE_S`` seconds) on ``/v1/turns``, ``/telegram``, ``/onebot``,
``/wechat`` (plaintext OA, signed) and ``/webhook`` (signed): the shapes named
in issue 13 (placeholder ids, lone surrogates in text and names, blank command
text, out-of-range times, over-long text, filler names, ``sender_name: null``,
re-pushes under a new id) and generic ones (wrong types, missing fields, huge
numbers, deep nesting, non-JSON, UTF-16 and DOCTYPE XML, wrong signatures,
unknown tenants). All requests go over one keep-alive connection per route
family; a response that closes the connection is counted.

Prints the status-code counts per route and in total (a connection the server
dropped without answering counts as "reset"), every 5xx or reset with the shape
that caused it, and the number of responses that announced ``Connection:
close``. Exit status 1 when any 5xx or reset was seen. Nothing leaves the loopback interface.

Run ``python -m bench hostile`` (or ``python -m bench.hostile``).
"""

from __future__ import annotations

import collections
import copy
import json
import logging
import os
import random
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["run", "MIN_REQUESTS"]

log = logging.getLogger("bench.hostile")

MIN_REQUESTS = 600
"""Requests sent at least (the shapes are cycled with seeded variations until then)."""
DEADLINE_S = 600.0
"""The sweep stops after this many seconds even if fewer requests were sent."""
SEED = 13
TG_SECRET, OB_TOKEN, WX_TOKEN, WH_SECRET = "tg-hostile", "ob-hostile", "wx-hostile", "wh-hostile"
SURROGATES = ("\ud83c", "\udc00", "我喜欢\ud83c", "\ud800\ud800x", "a\udfffb")
PLACEHOLDERS = ("None", "null", "undefined", "0", " ", "", "NULL", "000", "nil", "NaN")
BAD_TIMES = (-1, 0, 4102444800, 10**20, -10**20, 1.5e300, "now", None, True, [], "1700000000")
FILLER_NAMES = ("\u3164", "\u200b\u200c", "\u115f\u1160", "", None, "\ud83c", "A\u200dB", "  ", "\u202eevil", 12345)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- shapes ---------------------------------------------------------------------------------


def _turn(rng: random.Random) -> dict:
    return {"platform": "tg", "message_id": str(rng.randrange(1, 10**9)), "sender_id": str(rng.randrange(1, 10**6)),
            "sender_name": "Ann", "chat_kind": "private", "chat_id": "1", "text": "我养了一只猫"}


def _tg(rng: random.Random) -> dict:
    uid = rng.randrange(1, 10**6)
    return {"update_id": rng.randrange(1, 10**9), "message": {
        "message_id": rng.randrange(1, 10**9), "date": int(time.time()), "text": "我明天考科目二",
        "chat": {"id": uid, "type": "private"},
        "from": {"id": uid, "is_bot": False, "first_name": "Ann", "language_code": "en"}}}


def _ob(rng: random.Random, group: bool = False) -> dict:
    uid = rng.randrange(10000, 10**6)
    e = {"time": int(time.time()), "self_id": 2000000001, "post_type": "message", "message_id": rng.randrange(1, 10**9),
         "user_id": uid, "message": [{"type": "text", "data": {"text": "我明天考科目二"}}], "raw_message": "我明天考科目二",
         "font": 0, "sender": {"user_id": uid, "nickname": "阿青"}}
    if group:
        e.update(message_type="group", sub_type="normal", group_id=rng.randrange(10**5, 10**6))
        e["message"].insert(0, {"type": "at", "data": {"qq": "2000000001"}})
    else:
        e.update(message_type="private", sub_type="friend")
    return e


def _wh(rng: random.Random) -> dict:
    uid = f"u{rng.randrange(1, 10**6)}"
    return {"sender_id": uid, "sender_name": "Bo", "chat_id": uid, "message_id": f"m{rng.randrange(1, 10**9)}",
            "text": "I like jazz"}


def _set(path: tuple, value):
    """A mutation: ``payload[path...] = value`` (a deep copy)."""
    def mutate(p: dict) -> dict:
        p = copy.deepcopy(p)
        node = p
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
        return p
    return mutate


_DELETE = object()


def _json_shapes() -> dict[str, list[tuple[str, callable]]]:
    """Route family → [(shape name, mutation of a valid payload)]."""
    turn = [("valid", lambda p: p)]
    turn += [(f"sender_id={v!r}", _set(("sender_id",), v)) for v in PLACEHOLDERS]
    turn += [(f"text surrogate {i}", _set(("text",), v)) for i, v in enumerate(SURROGATES)]
    turn += [(f"sender_name={v!r}", _set(("sender_name",), v)) for v in FILLER_NAMES]
    turn += [("blank command", lambda p: {**p, "is_command": True, "text": "   "}),
             ("empty command", lambda p: {**p, "is_command": True, "text": ""}),
             ("command only", lambda p: {**p, "is_command": True, "text": "/memory"}),
             ("text 20001", _set(("text",), "a" * 20_001)), ("text 200k", _set(("text",), "猫" * 200_000)),
             ("timestamp 0001", _set(("timestamp",), "0001-01-01T00:00:00Z")),
             ("timestamp 9999", _set(("timestamp",), "9999-12-31T23:59:59Z")),
             ("timestamp junk", _set(("timestamp",), "yesterday")), ("timestamp int", _set(("timestamp",), -1)),
             ("chat_kind junk", _set(("chat_kind",), "channel")), ("platform junk", _set(("platform",), "TG!")),
             ("platform empty", _set(("platform",), "")), ("chat_id injection", _set(("chat_id",), "1' OR 1=1")),
             ("message_id 200", _set(("message_id",), "x" * 200)), ("text null", _set(("text",), None)),
             ("text list", _set(("text",), ["a"])), ("sender_id int", _set(("sender_id",), 42)),
             ("no text", _set(("text",), _DELETE)), ("no sender", _set(("sender_id",), _DELETE)),
             ("mentions junk", _set(("mentions",), [None, {"a": 1}])), ("reply_to junk", _set(("reply_to",), "x")),
             ("reply_to surrogate", _set(("reply_to",), {"message_id": "1", "text": "\ud83c"})),
             ("thread in private", _set(("thread_id",), "7")), ("NUL text", _set(("text",), "a\x00b")),
             ("group no mention", lambda p: {**p, "chat_kind": "group", "chat_id": "-100"}),
             ("group mention surrogate", lambda p: {**p, "chat_kind": "group", "chat_id": "-100",
                                                    "mentions_bot": True, "text": "\ud83c\ud83c"}),
             ("edit surrogate", lambda p: {**p, "is_edit": True, "text": "改成\ud83c"}),
             ("language junk", _set(("language",), "\ud83c" * 3)), ("role junk", _set(("sender_role",), ["x"]))]
    tg = [("valid", lambda p: p)]
    tg += [(f"from.id={v!r}", _set(("message", "from", "id"), v)) for v in (0, "0", None, "None", -1, 2**70, True)]
    tg += [(f"text surrogate {i}", _set(("message", "text"), v)) for i, v in enumerate(SURROGATES)]
    tg += [(f"first_name={v!r}", _set(("message", "from", "first_name"), v)) for v in FILLER_NAMES]
    tg += [(f"date={v!r}", _set(("message", "date"), v)) for v in BAD_TIMES]
    tg += [("text 5000", _set(("message", "text"), "猫" * 5000)), ("text 30000", _set(("message", "text"), "a" * 30_000)),
           ("text 300k", _set(("message", "text"), "a" * 300_000)),
           ("blank command", lambda p: _set(("message", "entities"), [{"type": "bot_command", "offset": 0,
                                                                       "length": 1}])(_set(("message", "text"), " ")(p))),
           ("command surrogate", lambda p: _set(("message", "entities"), [{"type": "bot_command", "offset": 0,
                                                                           "length": 7}])(
               _set(("message", "text"), "/memory \ud83c")(p))),
           ("entity out of range", _set(("message", "entities"), [{"type": "mention", "offset": 10**9, "length": 5}])),
           ("entity junk", _set(("message", "entities"), [None, "x", {"type": "mention", "offset": "a"}])),
           ("chat junk", _set(("message", "chat"), "x")), ("chat type junk", _set(("message", "chat", "type"), 5)),
           ("from junk", _set(("message", "from"), [])), ("message list", _set(("message",), [1, 2])),
           ("edited surrogate", lambda p: {"update_id": p["update_id"], "edited_message": {
               **p["message"], "text": "改\ud83c", "edit_date": int(time.time())}}),
           ("migrate junk", _set(("message", "migrate_to_chat_id"), "x")),
           ("migrate placeholder", _set(("message", "migrate_to_chat_id"), 0)),
           ("group anonymous bot", _set(("message", "from", "id"), 1087968824)),
           ("reply junk", _set(("message", "reply_to_message"), {"message_id": None, "from": "x"})),
           ("thread junk", lambda p: _set(("message", "message_thread_id"), "\ud83c")(
               _set(("message", "is_topic_message"), True)(p))),
           ("language surrogate", _set(("message", "from", "language_code"), "\ud83c")),
           ("update only", lambda p: {"update_id": 1}), ("empty object", lambda p: {})]
    ob = [("valid", lambda p: p)]
    ob += [(f"user_id={v!r}", _set(("user_id",), v)) for v in (0, "0", None, "null", -1, 2**70, 80000000)]
    ob += [(f"text surrogate {i}", _set(("message",), [{"type": "text", "data": {"text": v}}])) for i, v in
           enumerate(SURROGATES)]
    ob += [(f"nickname={v!r}", _set(("sender", "nickname"), v)) for v in FILLER_NAMES]
    ob += [(f"card={v!r}", _set(("sender", "card"), v)) for v in FILLER_NAMES]
    ob += [(f"time={v!r}", _set(("time",), v)) for v in BAD_TIMES]
    ob += [("text 30000", _set(("message",), [{"type": "text", "data": {"text": "a" * 30_000}}])),
           ("cq string surrogate", _set(("message",), "[CQ:at,qq=2000000001] 你好\ud83c")),
           ("cq string junk", _set(("message",), "[CQ:" * 1000)), ("segments junk", _set(("message",), [None, 1, "x"])),
           ("segment data junk", _set(("message",), [{"type": "text", "data": None}, {"type": "at", "data": []}])),
           ("blank command", _set(("message",), [{"type": "text", "data": {"text": "/ "}}])),
           ("reply seg junk", _set(("message",), [{"type": "reply", "data": {"id": "\ud83c"}},
                                                  {"type": "text", "data": {"text": "hi"}}])),
           ("sender junk", _set(("sender",), "x")), ("message_type junk", _set(("message_type",), ["x"])),
           ("post_type junk", _set(("post_type",), {"a": 1})), ("meta", lambda p: {"post_type": "meta_event"}),
           ("self_id junk", _set(("self_id",), "\ud83c"))]
    wh = [("valid", lambda p: p)]
    wh += [(f"sender_id={v!r}", _set(("sender_id",), v)) for v in PLACEHOLDERS]
    wh += [(f"text surrogate {i}", _set(("text",), v)) for i, v in enumerate(SURROGATES)]
    wh += [(f"sender_name={v!r}", _set(("sender_name",), v)) for v in FILLER_NAMES]
    wh += [("text 16001", _set(("text",), "a" * 16_001)), ("blank text", _set(("text",), "   ")),
           ("blank command", _set(("text",), "/ ")), ("timestamp 9999", _set(("timestamp",), "9999-01-01T00:00:00Z")),
           ("timestamp 0001", _set(("timestamp",), "0001-01-01T00:00:00+00:00")),
           ("timestamp junk", _set(("timestamp",), "x")), ("extra field", _set(("evil",), 1)),
           ("group surrogate", lambda p: {**p, "chat_type": "group", "mentions_bot": True, "text": "\ud83c"}),
           ("reply_to surrogate", _set(("reply_to",), {"message_id": "1", "text": "\ud83c"})),
           ("mentions junk", _set(("mentions",), [1, None]))]
    return {"turns": turn, "telegram": tg, "onebot": ob, "webhook": wh}


def _xml_shapes() -> list[tuple[str, bytes | str]]:
    """WeChat bodies (``{now}`` is replaced by the current time)."""
    ok = ("<xml><ToUserName>gh_1</ToUserName><FromUserName>{user}</FromUserName><CreateTime>{time}</CreateTime>"
          "<MsgType>text</MsgType><Content>{text}</Content><MsgId>{mid}</MsgId></xml>")
    shapes: list[tuple[str, bytes | str]] = [("valid", ok)]
    shapes += [(f"FromUserName={v!r}", ok.replace("{user}", v)) for v in ("0", "None", "null", "", "a b", "x" * 200)]
    shapes += [(f"CreateTime={v}", ok.replace("{time}", v)) for v in ("4102444800", "-1", "99999999999999999999",
                                                                       "x", "", "1.5")]
    shapes += [("text 30000", ok.replace("{text}", "a" * 30_000)), ("text char ref surrogate",
                                                                    ok.replace("{text}", "&#xD83C;")),
               ("blank text", ok.replace("{text}", "   ")), ("blank command", ok.replace("{text}", "/ ")),
               ("doctype", '<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY a "aaaa">]>' + ok.replace("{text}", "&a;")),
               ("utf-16 doctype", ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE xml [<!ENTITY a "aaaa">]>'
                                   + ok.replace("{text}", "&a;")).encode("utf-16")),
               ("utf-16 plain", ('<?xml version="1.0" encoding="UTF-16"?>' + ok).encode("utf-16")),
               ("broken", "<xml><MsgType>text</MsgType>"), ("foreign root", "<notxml/>"), ("empty", ""),
               ("binary", bytes(range(256))), ("event", ok.replace("<MsgType>text</MsgType>",
                                                                   "<MsgType>event</MsgType><Event>subscribe</Event>"))]
    return shapes


# -- the sweep ------------------------------------------------------------------------------


def _sweep(base: str, min_requests: int, deadline_s: float) -> tuple[collections.Counter, list[str], int, int]:
    import httpx

    from bridges.webhook.protocol import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
    from bridges.wechat.callback import sha1_signature

    rng = random.Random(SEED)
    shapes = _json_shapes()
    xml = _xml_shapes()
    counts: collections.Counter = collections.Counter()
    fives: list[str] = []
    closed = 0
    sent = 0
    stop = time.monotonic() + deadline_s
    base_of = {"turns": _turn, "telegram": _tg, "onebot": _ob, "webhook": _wh}

    def record(route: str, shape: str, r: httpx.Response | str) -> None:
        nonlocal closed, sent
        sent += 1
        if isinstance(r, str):  # the server dropped the connection instead of answering
            counts[(route, r)] += 1
            fives.append(f"{route} {shape!r} -> {r}")
            return
        counts[(route, r.status_code)] += 1
        if r.status_code >= 500:
            fives.append(f"{route} {shape!r} -> {r.status_code} {r.text[:200]}")
        if r.headers.get("connection", "").lower() == "close":
            closed += 1

    class Guarded(httpx.Client):
        """A client whose transport errors become the answer "reset" (counted, then a fresh connection)."""

        def request(self, *args, **kwargs):  # type: ignore[override]
            try:
                return super().request(*args, **kwargs)
            except httpx.TransportError as exc:
                return f"reset ({type(exc).__name__})"

    with Guarded(base_url=base, timeout=60.0) as http:
        round_no = 0
        while sent < min_requests and time.monotonic() < stop:
            round_no += 1
            for route, items in shapes.items():
                for name, mutate in items:
                    if time.monotonic() > stop:
                        break
                    if route == "onebot" and round_no % 2 == 0:
                        payload = mutate(_ob(rng, group=True))
                    else:
                        payload = mutate(base_of[route](rng))
                    raw = json.dumps(payload).encode("ascii")  # surrogates travel as \ud83c escapes
                    if route == "turns":
                        body = json.dumps({"message": payload, "background_capture": round_no % 2 == 0}).encode()
                        r = http.post("/v1/turns", content=body, headers={"content-type": "application/json"})
                    elif route == "telegram":
                        r = http.post("/telegram/default", content=raw,
                                      headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET})
                    elif route == "onebot":
                        r = http.post("/onebot/default", content=raw, headers={"Authorization": f"Bearer {OB_TOKEN}"})
                    else:
                        ts = str(int(time.time()))
                        r = http.post("/webhook/default", content=raw, headers={
                            TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(WH_SECRET, ts, raw),
                            "content-type": "application/json"})
                    record(route, name, r)
                    if name == "valid" and route == "onebot":  # the re-push: same event, new id
                        again = dict(payload, message_id=payload["message_id"] + 15358246 - 8101)
                        r = http.post("/onebot/default", content=json.dumps(again).encode(),
                                      headers={"Authorization": f"Bearer {OB_TOKEN}"})
                        record(route, "re-push new id", r)
            for name, body in xml:
                if time.monotonic() > stop:
                    break
                if isinstance(body, str):
                    body = (body.replace("{user}", f"o{rng.randrange(10**6)}").replace("{time}", str(int(time.time())))
                            .replace("{text}", "我明天考科目二").replace("{mid}", str(rng.randrange(1, 10**12))))
                    body = body.encode("utf-8", "surrogatepass")
                ts, nonce = str(int(time.time())), secrets.token_hex(8)
                query = {"signature": sha1_signature(WX_TOKEN, ts, nonce), "timestamp": ts, "nonce": nonce}
                record("wechat", name, http.post("/wechat/default", params=query, content=body))
            # generic hostility on every route: wrong secrets, junk bodies, unknown tenants
            for path, headers in (("/v1/turns", {}), ("/telegram/default", {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}),
                                  ("/onebot/default", {"Authorization": f"Bearer {OB_TOKEN}"})):
                for name, body in (("not json", b"{oops"), ("list", b"[1,2]"), ("empty", b""), ("null", b"null"),
                                   ("deep", b"[" * 50_000 + b"]" * 50_000), ("utf-16", '{"a":1}'.encode("utf-16")),
                                   ("huge int", b'{"message": {"message_id": 1' + b"0" * 5000 + b"}}"),
                                   ("nan", b'{"message": NaN}'), ("surrogate key", b'{"\\ud83c": 1}')):
                    route = {"v1": "turns"}.get(path.split("/")[1], path.split("/")[1])
                    record(route, name, http.post(path, content=body, headers=headers))
            for name, (method, path, kw) in {
                "telegram wrong secret": ("POST", "/telegram/default", {"json": {}, "headers": {
                    "X-Telegram-Bot-Api-Secret-Token": "nope"}}),
                "onebot no token": ("POST", "/onebot/default", {"json": _ob(rng)}),
                "webhook bad sig": ("POST", "/webhook/default", {"content": b"{}", "headers": {
                    TIMESTAMP_HEADER: "1", SIGNATURE_HEADER: "sha256=00"}}),
                "wechat no sig": ("POST", "/wechat/default", {"content": b"<xml/>"}),
                "wechat verify junk": ("GET", "/wechat/default?echostr=%ED%A0%BC&timestamp=x", {}),
                "unknown tenant": ("POST", "/telegram/nobody", {"json": {}}),
                "tenant surrogate": ("POST", "/webhook/%ED%A0%BC", {"content": b"{}"}),
            }.items():
                record("misc", name, http.request(method, path, **kw))
    return counts, fives, closed, sent


def run(min_requests: int = MIN_REQUESTS, deadline_s: float = DEADLINE_S) -> int:
    """Start a gateway in a temporary data root, sweep it, print the counts; returns
    the number of 5xx answers (0 is the goal)."""
    from gateway.config import TenantSettings, load_settings
    from gateway.http.app import create_app
    from gateway.http.serving import gateway_server, server_config

    workdir = Path(tempfile.mkdtemp(prefix="huiyi-hostile-"))
    quiet = {name: logging.getLogger(name).level for name in ("gateway", "bridges")}
    for name in quiet:  # hundreds of expected refusals; restored afterwards
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        settings = load_settings(
            data_dir=workdir, database_url=f"sqlite:///{workdir / 'huiyi.db'}", index_uri=str(workdir / "index"),
            onebot={"access_token": OB_TOKEN},
            tenants={"default": TenantSettings(telegram={"webhook_secret": TG_SECRET},
                                               wechat={"kind": "oa", "token": WX_TOKEN, "reply_within": 30},
                                               webhook={"secret": WH_SECRET})})
        port = _free_port()
        server = gateway_server(server_config(create_app(settings), host="127.0.0.1", port=port,
                                              log_level="critical", access_log=False))  # serve's server
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        started = time.time()
        while not server.started:
            if time.time() - started > 300 or not thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.05)
        t0 = time.perf_counter()
        try:
            counts, fives, closed, sent = _sweep(f"http://127.0.0.1:{port}", min_requests, deadline_s)
        finally:
            server.should_exit = True
            thread.join(timeout=60)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)
    routes = sorted({r for r, _ in counts})
    codes = sorted({c for _, c in counts}, key=str)
    print(f"hostile sweep: {sent} requests in {wall:.0f} s, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    widths = [max(6, len(str(c)) + 2) for c in codes]
    print(f"{'route':<10}" + "".join(f"{c!s:>{w}}" for c, w in zip(codes, widths)) + f"{'total':>8}")
    for route in routes:
        row = [counts.get((route, c), 0) for c in codes]
        print(f"{route:<10}" + "".join(f"{n:>{w}}" for n, w in zip(row, widths)) + f"{sum(row):>8}")
    total = [sum(counts.get((r, c), 0) for r in routes) for c in codes]
    print(f"{'all':<10}" + "".join(f"{n:>{w}}" for n, w in zip(total, widths)) + f"{sum(total):>8}")
    print(f"5xx or dropped connections: {len(fives)}; responses that announced Connection: close: {closed}")
    for line in fives:
        print("  " + line)
    return len(fives)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    sys.exit(1 if run() else 0)
