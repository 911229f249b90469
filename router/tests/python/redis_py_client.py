"""redis-py against a running Shoal router: exits non-zero (with a message) on any mismatch.

    python3 redis_py_client.py PORT [PASSWORD]
"""
import sys
import time

import redis


def main():
    port = int(sys.argv[1])
    password = sys.argv[2] if len(sys.argv) > 2 else None
    r = redis.Redis(host="127.0.0.1", port=port, password=password, decode_responses=True)
    assert r.ping() is True
    assert r.set("py:greeting", "hello") is True
    assert r.get("py:greeting") == "hello"
    assert r.set("py:greeting", "x", nx=True) is None
    assert r.set("py:ttl", "v", ex=100) and 99 <= r.ttl("py:ttl") <= 100
    keys = [f"py:k{i}" for i in range(50)]
    assert r.mset({k: k.upper() for k in keys}) is True
    assert r.mget(keys + ["py:missing"]) == [k.upper() for k in keys] + [None]
    assert r.incr("py:n") == 1 and r.incrby("py:n", 41) == 42
    assert r.incrbyfloat("py:f", 10.5) == 10.5 and r.incrbyfloat("py:f", 0.1) == 10.6
    assert r.append("py:greeting", "!") == 6
    assert r.getrange("py:greeting", 0, 0) == "h"
    assert r.exists("py:k1", "py:k2", "py:missing") == 2
    assert r.delete(*keys) == 50
    # Pipelines without a transaction: keys on any node.
    pipe = r.pipeline(transaction=False)
    for i in range(100):
        pipe.set(f"py:p{i}", i).incr(f"py:p{i}")
    results = pipe.execute()
    assert results[1::2] == [i + 1 for i in range(100)], results[:6]
    # Transactions: keys with one {hashtag} live on one node and run as one unit.
    pipe = r.pipeline(transaction=True)
    pipe.set("{py:acct}a", 100).set("{py:acct}b", 0).decrby("{py:acct}a", 30).incrby("{py:acct}b", 30)
    pipe.mget("{py:acct}a", "{py:acct}b")
    assert pipe.execute() == [True, True, 70, 30, ["70", "30"]]
    # A runtime error is one element of the result (raise_on_error=False), the rest ran.
    pipe = r.pipeline(transaction=True)
    pipe.set("{py:acct}s", "text").incr("{py:acct}s").get("{py:acct}s")
    out = pipe.execute(raise_on_error=False)
    assert out[0] is True and isinstance(out[1], redis.ResponseError) and out[2] == "text", out
    # Optimistic locking: redis-py's transaction() helper retries while a watched key changes.
    other = redis.Redis(host="127.0.0.1", port=port, password=password, decode_responses=True)
    attempts = []

    def move_ten(p):
        balance = int(p.get("{py:acct}a"))
        if not attempts:
            other.incr("{py:acct}a")  # another client writes between WATCH and EXEC: a retry
        attempts.append(balance)
        p.multi()
        p.set("{py:acct}a", balance - 10)
        p.incrby("{py:acct}b", 10)

    r.transaction(move_ten, "{py:acct}a")
    assert attempts == [70, 71], attempts
    assert r.mget("{py:acct}a", "{py:acct}b") == ["61", "40"]
    # Keys on several nodes in one transaction: applied whole (two phases over the nodes).
    pipe = r.pipeline(transaction=True)
    pipe.set("py:x1", 1).set("py:x2", 2).incr("py:x3").set("py:x4", 4)
    assert pipe.execute() == [True, True, 1, True]
    assert r.mget("py:x1", "py:x2", "py:x3", "py:x4") == ["1", "2", "1", "4"]
    # ... with WATCH over keys of several nodes: a change to one of them aborts the whole.
    with r.pipeline(transaction=True) as pipe:
        pipe.watch("py:x1", "py:x2", "py:x3")
        r.incr("py:x3")
        pipe.multi()
        pipe.set("py:x1", "lost").set("py:x4", "lost")
        try:
            pipe.execute()
            raise AssertionError("a watched key changed: EXEC must abort")
        except redis.exceptions.WatchError:
            pass
    assert r.mget("py:x1", "py:x4") == ["1", "4"]
    # A script over keys of three nodes runs whole, as on one Redis (Redis Cluster: CROSSSLOT);
    # one that names keys it did not declare (numkeys 0) too.
    swap = "local a = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], redis.call('GET', KEYS[2])) " \
        "redis.call('SET', KEYS[2], a) return redis.call('INCR', KEYS[3])"
    r.mset({"py:y1": "one", "py:y2": "two"})
    assert r.eval(swap, 3, "py:y1", "py:y2", "py:y3") == 1
    assert r.mget("py:y1", "py:y2") == ["two", "one"]
    assert r.eval("return redis.call('GET', ARGV[1]) .. redis.call('GET', ARGV[2])", 0, "py:y1", "py:y2") == "twoone"
    # SCAN iteration finds every key exactly once.
    found = list(r.scan_iter(match="py:p*", count=25))
    assert sorted(found) == sorted(f"py:p{i}" for i in range(100)), len(found)
    # Errors surface as redis-py exceptions with Redis's text.
    try:
        r.incr("py:greeting")
        raise AssertionError("INCR on text must fail")
    except redis.ResponseError as e:
        assert str(e) == "value is not an integer or out of range", str(e)
    # Hashes: a session store, as an application writes it.
    assert r.hset("py:session:1", mapping={"user": "ada", "visits": "1", "cart": ""}) == 3
    assert r.hget("py:session:1", "user") == "ada"
    assert r.hincrby("py:session:1", "visits", 4) == 5
    assert r.hincrbyfloat("py:session:1", "score", 1.5) == 1.5
    assert r.hgetall("py:session:1") == {"user": "ada", "visits": "5", "cart": "", "score": "1.5"}
    assert r.hmget("py:session:1", ["user", "nope"]) == ["ada", None]
    assert r.hdel("py:session:1", "cart", "nope") == 1 and r.hlen("py:session:1") == 3
    assert r.type("py:session:1") == "hash"
    try:
        r.get("py:session:1")
        raise AssertionError("GET on a hash must fail")
    except redis.ResponseError as e:
        assert str(e).startswith("WRONGTYPE Operation against a key holding the wrong kind of value"), str(e)
    # A large hash (table encoding) iterated with HSCAN: every field exactly once.
    big = {f"f{i}": str(i) for i in range(3000)}
    for chunk in range(0, 3000, 500):
        r.hset("py:bighash", mapping={k: big[k] for k in list(big)[chunk:chunk + 500]})
    assert r.object("encoding", "py:bighash") == "hashtable"
    assert dict(r.hscan_iter("py:bighash", count=100)) == big
    assert set(r.hrandfield("py:bighash", 5)) <= set(big)
    # A job queue in a list, a tag set, a leaderboard in a sorted set.
    assert r.rpush("py:jobs", "j1", "j2", "j3") == 3
    assert r.lpop("py:jobs") == "j1" and r.lrange("py:jobs", 0, -1) == ["j2", "j3"]
    assert r.lmove("py:jobs", "py:done", "LEFT", "RIGHT") == "j2"
    assert r.llen("py:jobs") == 1 and r.lrange("py:done", 0, -1) == ["j2"]
    # Blocking pops, as job-queue libraries use them: served at once when there is a job, after
    # the timeout (None) when there is none, and woken by a push from another connection.
    assert r.blpop(["{py:q}a", "{py:q}b"], timeout=1) is None
    r.rpush("{py:q}b", "job-1")
    assert list(r.blpop(["{py:q}a", "{py:q}b"], timeout=1)) == ["{py:q}b", "job-1"]
    import threading
    pusher = threading.Timer(0.2, lambda: redis.Redis(host="127.0.0.1", port=port, password=password)
                             .lpush("{py:q}a", "job-2"))
    pusher.start()
    assert list(r.brpop(["{py:q}a"], timeout=5)) == ["{py:q}a", "job-2"]
    pusher.join()
    r.rpush("{py:q}a", "job-3")
    assert r.blmove("{py:q}a", "{py:q}done", 1, "LEFT", "RIGHT") == "job-3"
    assert r.sadd("py:tags", "a", "b", "c") == 3 and r.sismember("py:tags", "b")
    assert r.smembers("py:tags") == {"a", "b", "c"}
    assert r.sadd("py:tags2", "b", "c", "d") == 3
    assert r.sinter("py:tags", "py:tags2") == {"b", "c"}
    assert r.sunionstore("py:alltags", ["py:tags", "py:tags2"]) == 4
    assert r.zadd("py:board", {"ada": 10, "bob": 7.5, "cy": 12}) == 3
    assert r.zincrby("py:board", 5, "bob") == 12.5
    assert r.zrevrange("py:board", 0, 1, withscores=True) == [("bob", 12.5), ("cy", 12.0)]
    assert r.zrank("py:board", "ada") == 0 and r.zscore("py:board", "nobody") is None
    assert r.zrangebyscore("py:board", 11, "+inf") == ["cy", "bob"]
    assert r.type("py:board") == "zset" and r.type("py:tags") == "set" and r.type("py:jobs") == "list"
    assert r.rename("py:board", "py:board2") and r.zcard("py:board2") == 3
    assert r.copy("py:board2", "py:board3") and r.zscore("py:board3", "cy") == 12.0
    # Lua: a rate limiter with register_script (EVALSHA, then EVAL on NOSCRIPT), alone and in
    # a transaction pipeline (which loads its scripts first with SCRIPT EXISTS / SCRIPT LOAD).
    r.script_flush()
    limiter = r.register_script(
        "local n = redis.call('incr', KEYS[1])\n"
        "if n == 1 then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
        "if n > tonumber(ARGV[2]) then return 0 end\n"
        "return 1"
    )
    allowed = [limiter(keys=["py:rate:ada"], args=[60000, 3]) for _ in range(5)]
    assert allowed == [1, 1, 1, 0, 0], allowed
    assert 0 < r.pttl("py:rate:ada") <= 60000
    assert r.script_exists(limiter.sha) == [True]
    r.script_flush()
    pipe = r.pipeline(transaction=True)
    limiter(keys=["{py:rate}bob"], args=[60000, 1], client=pipe)
    pipe.get("{py:rate}bob")
    assert pipe.execute() == [1, "1"]
    try:
        r.eval("return redis.call('incr', KEYS[1])", 1, "py:greeting")
        raise AssertionError("INCR on text must fail in a script too")
    except redis.ResponseError as e:
        assert str(e).startswith("value is not an integer or out of range script: "), str(e)
    assert r.eval("return cjson.encode({ARGV[1], tonumber(ARGV[2])})", 0, "a", "2") == '["a",2]'
    # RESP3 through HELLO 3.
    r3 = redis.Redis(host="127.0.0.1", port=port, password=password, protocol=3, decode_responses=True)
    assert r3.get("py:greeting") == "hello!"
    assert r3.get("py:missing") is None
    assert r3.hgetall("py:session:1") == {"user": "ada", "visits": "5", "score": "1.5"}
    assert r3.smembers("py:tags") == {"a", "b", "c"}
    assert r3.zrange("py:board2", 0, 0, withscores=True) == [["ada", 10.0]] or r3.zrange(
        "py:board2", 0, 0, withscores=True) == [("ada", 10.0)]
    pairs = r3.hrandfield("py:session:1", -2, withvalues=True)
    assert len(pairs) in (2, 4), pairs
    assert r3.eval("redis.setresp(3) return redis.call('hgetall', KEYS[1])", 1, "py:session:1") == {
        "user": "ada", "visits": "5", "score": "1.5"}
    assert r3.eval("return {double=1.5}", 0) == 1.5
    info = r3.info("server")
    assert "redis_version" in info, info
    check_pubsub(port, password)
    print("redis-py: all checks passed")


def next_message(p, deadline):
    """The next message (not a (un)subscribe confirmation) before `deadline`, or fail."""
    while time.monotonic() < deadline:
        m = p.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if m is not None:
            return m
    raise AssertionError("no message in time")


def check_pubsub(port, password):
    """redis-py's pubsub(): subscribe, psubscribe, get_message and listen(), bounded in time, in
    RESP2 and RESP3, with the publisher on another connection."""
    for protocol in (2, 3):
        r = redis.Redis(host="127.0.0.1", port=port, password=password, protocol=protocol,
                        decode_responses=True)
        p = r.pubsub()
        p.subscribe("py:news")
        p.psubscribe("py:n*")
        confirmations = [p.get_message(timeout=5) for _ in range(2)]
        assert [(c["type"], c["channel"]) for c in confirmations] == [
            ("subscribe", "py:news"), ("psubscribe", "py:n*")], confirmations
        # The publisher counts a client once per matching subscription.
        assert r.publish("py:news", "hello") == 2
        assert r.publish("py:nope", "x") == 1
        deadline = time.monotonic() + 10
        got = [next_message(p, deadline) for _ in range(3)]
        # One channel's messages arrive in publish order; messages to channels on different nodes
        # in no particular order (docs/compatibility.md, "Pub/sub"): py:news's two first, py:nope's
        # wherever it lands.
        assert sorted((m["type"], m["channel"], m["data"]) for m in got) == [
            ("message", "py:news", "hello"), ("pmessage", "py:news", "hello"),
            ("pmessage", "py:nope", "x")], got
        news = [m for m in got if m["channel"] == "py:news"]
        assert [m["type"] for m in news] == ["message", "pmessage"], got
        assert news[1]["pattern"] == "py:n*"
        assert r.pubsub_numsub("py:news") == [("py:news", 1)]
        assert r.pubsub_numpat() == 1
        assert "py:news" in r.pubsub_channels("py:*")
        # A handler thread, as applications run it.
        received = []
        handled = r.pubsub()
        handled.subscribe(**{"py:jobs": lambda m: received.append(m["data"])})
        worker = handled.run_in_thread(sleep_time=0.05, daemon=True)
        try:
            deadline = time.monotonic() + 5
            while r.pubsub_numsub("py:jobs") != [("py:jobs", 1)]:
                assert time.monotonic() < deadline, "the handler's subscription never showed"
                time.sleep(0.02)
            for i in range(50):
                r.publish("py:jobs", f"job{i}")
            while len(received) < 50:
                assert time.monotonic() < deadline + 5, received
                time.sleep(0.02)
        finally:
            worker.stop()
            worker.join(timeout=5)
            handled.close()
        assert received == [f"job{i}" for i in range(50)], received
        # listen(), bounded: the first message it yields, within the deadline.
        p2 = r.pubsub(ignore_subscribe_messages=True)
        p2.subscribe("py:once")
        deadline = time.monotonic() + 5
        while r.pubsub_numsub("py:once") != [("py:once", 1)]:
            assert time.monotonic() < deadline, "the subscription never showed"
            p2.get_message(timeout=0.05)  # reads (and skips) the confirmation
        assert r.publish("py:once", "one") == 1
        deadline = time.monotonic() + 5
        for m in p2.listen():
            if m is not None and m["type"] == "message":
                assert m["data"] == "one", m
                break
            assert time.monotonic() < deadline, "listen() yielded nothing in time"
        p2.close()
        p.close()
        # A closed connection's subscriptions go when the router sees it close: wait (bounded).
        deadline = time.monotonic() + 5
        while r.pubsub_numsub("py:news", "py:jobs") != [("py:news", 0), ("py:jobs", 0)]:
            assert time.monotonic() < deadline, r.pubsub_numsub("py:news", "py:jobs")
            time.sleep(0.02)


if __name__ == "__main__":
    main()
