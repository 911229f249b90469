"""redis-py's RedisCluster against a router in `--cluster-mode emulated` (argv[1]: its port).

Run by router/tests/cluster_mode.rs. Exits non-zero (an assertion) on the first difference.
"""
import sys

import redis
from redis.cluster import RedisCluster

port = int(sys.argv[1])

for protocol in (2, 3):
    rc = RedisCluster(host="127.0.0.1", port=port, protocol=protocol, decode_responses=True)
    nodes = rc.get_nodes()
    assert len(nodes) == 1, nodes
    assert nodes[0].port == port, nodes[0]
    assert rc.cluster_info()["cluster_state"] == "ok"
    assert rc.keyslot("foo") == 12182

    # Keys of many slots: the client sends each to the one node that owns them all.
    for i in range(300):
        assert rc.set(f"p{protocol}:key:{i}", i)
    for i in range(300):
        assert rc.get(f"p{protocol}:key:{i}") == str(i)
    # Multi-key commands: redis-py splits MGET/MSET by slot itself, or they share a hashtag.
    assert all(rc.mset_nonatomic({f"p{protocol}:m:{i}": i for i in range(50)}))
    assert rc.mget_nonatomic([f"p{protocol}:m:{i}" for i in range(50)]) == [str(i) for i in range(50)]
    assert rc.mset({f"{{p{protocol}}}:h:{i}": i for i in range(10)})
    assert rc.mget([f"{{p{protocol}}}:h:{i}" for i in range(10)]) == [str(i) for i in range(10)]
    # A pipeline over keys of several slots.
    pipe = rc.pipeline()
    for i in range(100):
        pipe.incr(f"p{protocol}:counter:{i}")
    assert pipe.execute() == [1] * 100
    # Other types, and the keyspace as the client sees it.
    rc.rpush(f"p{protocol}:list", "a", "b", "c")
    assert rc.lrange(f"p{protocol}:list", 0, -1) == ["a", "b", "c"]
    rc.hset(f"p{protocol}:hash", mapping={"f": "v"})
    assert rc.hgetall(f"p{protocol}:hash") == {"f": "v"}
    slot = rc.keyslot(f"p{protocol}:key:7")
    assert rc.cluster_countkeysinslot(slot) >= 1
    assert f"p{protocol}:key:7" in rc.cluster_get_keys_in_slot(slot, 1000)
    assert rc.delete(*[f"p{protocol}:key:{i}" for i in range(10)]) == 10
    rc.close()

print("ok")
