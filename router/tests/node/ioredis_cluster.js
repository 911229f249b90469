// ioredis's cluster client (Redis.Cluster) against a Shoal router in --cluster-mode emulated,
// RESP2 (ioredis speaks no RESP3): it reads the topology (CLUSTER SLOTS), finds one master
// owning every slot at the router, and keys of every slot, a pipeline over keys of many slots,
// multi-key commands and a transaction on one slot, and a script work.
// router/tests/cluster_mode.rs runs it, with NODE_PATH at the modules `.ci/tools/install ioredis`
// put in the cache:
//
//   node ioredis_cluster.js <router port>
//
// Prints "ok" and exits 0 when every check passed; the first failed check exits 1.
"use strict";
const assert = require("node:assert/strict");
const Redis = require("ioredis");

async function main() {
  const port = Number(process.argv[2]);
  assert.ok(port > 0, "usage: node ioredis_cluster.js PORT");
  const cluster = new Redis.Cluster([{ host: "127.0.0.1", port }], {
    // No retry on MOVED/ASK/TRYAGAIN: a wrong topology must fail here, not be papered over.
    maxRedirections: 0,
    clusterRetryStrategy: () => null,
    redisOptions: { connectTimeout: 5000, commandTimeout: 10000, maxRetriesPerRequest: 0 },
  });
  try {
    await new Promise((resolve, reject) => {
      cluster.once("ready", resolve);
      cluster.once("error", reject);
    });
    // The topology: one master of every slot, at the address the client reached.
    const slots = await cluster.cluster("SLOTS");
    assert.equal(slots.length, 1, JSON.stringify(slots));
    assert.deepEqual(slots[0].slice(0, 2), [0, 16383]);
    assert.deepEqual(slots[0][2].slice(0, 2), ["127.0.0.1", port]);
    const masters = cluster.nodes("master");
    assert.equal(masters.length, 1, "one master");
    assert.equal(masters[0].options.port, port);
    assert.match(await cluster.cluster("INFO"), /cluster_state:ok/);
    assert.equal(await cluster.cluster("KEYSLOT", "foo"), 12182);

    // Keys of many slots, one at a time.
    for (let i = 0; i < 300; i++) await cluster.set(`io:key:${i}`, String(i));
    for (let i = 0; i < 300; i++) assert.equal(await cluster.get(`io:key:${i}`), String(i));

    // A pipeline over keys of many slots: ioredis refuses a pipeline whose keys span slots on
    // different nodes; here every slot is on one node, so it goes as one pipeline.
    const pipe = cluster.pipeline();
    for (let i = 0; i < 100; i++) pipe.incr(`io:counter:${i}`);
    const replies = await pipe.exec();
    assert.equal(replies.length, 100);
    for (const [err, n] of replies) {
      assert.equal(err, null);
      assert.equal(n, 1);
    }

    // Multi-key commands and a transaction on one slot (a hashtag), as cluster clients demand.
    await cluster.mset("{io}:a", "1", "{io}:b", "2");
    assert.deepEqual(await cluster.mget("{io}:a", "{io}:b", "{io}:none"), ["1", "2", null]);
    const tx = await cluster.multi().set("{io}:n", "10").incrby("{io}:n", 5).exec();
    assert.deepEqual(tx, [[null, "OK"], [null, 15]]);

    // A script, declared keys on one slot.
    const sum = await cluster.eval(
      "return redis.call('incrby', KEYS[1], ARGV[1]) + redis.call('incrby', KEYS[2], ARGV[1])",
      2, "{io}:x", "{io}:y", 3);
    assert.equal(sum, 6);

    // Other types.
    await cluster.rpush("io:list", "a", "b", "c");
    assert.deepEqual(await cluster.lrange("io:list", 0, -1), ["a", "b", "c"]);
    await cluster.hset("io:hash", "f", "v");
    assert.deepEqual(await cluster.hgetall("io:hash"), { f: "v" });

    // The keyspace as a cluster client sees it.
    const slot = await cluster.cluster("KEYSLOT", "io:key:7");
    assert.ok((await cluster.cluster("COUNTKEYSINSLOT", slot)) >= 1);
    assert.ok((await cluster.cluster("GETKEYSINSLOT", slot, 1000)).includes("io:key:7"));
    let deleted = 0;
    for (let i = 0; i < 10; i++) deleted += await cluster.del(`io:key:${i}`);
    assert.equal(deleted, 10);
  } finally {
    cluster.disconnect();
  }
  console.log("ok");
}

main().catch((e) => {
  console.error("ioredis cluster check failed:", e);
  process.exit(1);
});
