// Lettuce (the most used Java Redis client) against two Shoal routers that share one cluster:
// the data types, a transaction, pipelining, errors, and Lettuce's server-assisted client-side
// cache (ClientSideCaching over RESP3 CLIENT TRACKING, default and BCAST modes) invalidated by
// writes through the other router. router/tests/lettuce.rs compiles and runs it:
//
//   java -cp <classes>:<lettuce jars>/* LettuceCheck <port of router A> <port of router B>
//
// Prints "ok" and exits 0 when every check passed; any failed check throws (exit 1).

import io.lettuce.core.KeyValue;
import io.lettuce.core.LettuceFutures;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.RedisURI;
import io.lettuce.core.ScoredValue;
import io.lettuce.core.TrackingArgs;
import io.lettuce.core.TransactionResult;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.RedisAsyncCommands;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.support.caching.CacheAccessor;
import io.lettuce.core.support.caching.CacheFrontend;
import io.lettuce.core.support.caching.ClientSideCaching;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

public class LettuceCheck {
    /** How long an invalidation may take to reach the client (a loaded 2-core machine). */
    static final long ARRIVES_MS = 5_000;

    static void eq(Object want, Object got, String what) {
        if (!Objects.equals(want, got)) {
            throw new AssertionError(what + ": expected " + want + ", got " + got);
        }
    }

    static void eventually(BooleanSupplier done, String what) throws InterruptedException {
        long deadline = System.currentTimeMillis() + ARRIVES_MS;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError(what + " did not happen within " + ARRIVES_MS + " ms");
            }
            Thread.sleep(5);
        }
    }

    static RedisClient client(String port) {
        // Every command is bounded: a hung router fails the check instead of hanging it.
        return RedisClient.create(RedisURI.builder().withHost("127.0.0.1").withPort(Integer.parseInt(port))
                .withTimeout(Duration.ofSeconds(10)).build());
    }

    public static void main(String[] args) throws Exception {
        RedisClient a = client(args[0]);
        RedisClient b = client(args[1]);
        try (StatefulRedisConnection<String, String> conn = a.connect();
                StatefulRedisConnection<String, String> writer = b.connect()) {
            dataTypes(conn.sync());
            pipelined(a);
            clientSideCache(a, writer.sync());
            broadcastCache(a, writer.sync());
        } finally {
            a.shutdown();
            b.shutdown();
        }
        System.out.println("ok");
    }

    static void dataTypes(RedisCommands<String, String> c) {
        // Lettuce negotiates RESP3 with HELLO 3 (client-side caching below needs it).
        String info = c.clientInfo();
        if (!info.contains(" resp=3 ")) {
            throw new AssertionError("RESP3 was not negotiated: " + info);
        }
        eq("OK", c.set("lt:s", "v"), "SET");
        eq("v", c.get("lt:s"), "GET");
        eq(true, c.expire("lt:s", 100), "EXPIRE");
        long ttl = c.ttl("lt:s");
        if (ttl < 90 || ttl > 100) {
            throw new AssertionError("TTL: " + ttl);
        }
        eq(5L, c.incrby("lt:n", 5), "INCRBY");
        eq(2L, c.hset("lt:h", Map.of("f1", "a", "f2", "b")), "HSET");
        eq(Map.of("f1", "a", "f2", "b"), c.hgetall("lt:h"), "HGETALL (a RESP3 map)");
        eq(3L, c.rpush("lt:l", "1", "2", "3"), "RPUSH");
        eq(List.of("1", "2", "3"), c.lrange("lt:l", 0, -1), "LRANGE");
        eq("1", c.lpop("lt:l"), "LPOP");
        eq(2L, c.sadd("lt:set", "x", "y"), "SADD");
        eq(Set.of("x", "y"), c.smembers("lt:set"), "SMEMBERS (a RESP3 set)");
        eq(2L, c.zadd("lt:z", 1.5, "a", 2.5, "b"), "ZADD");
        List<ScoredValue<String>> z = c.zrangeWithScores("lt:z", 0, -1);
        eq(List.of(ScoredValue.just(1.5, "a"), ScoredValue.just(2.5, "b")), z, "ZRANGE WITHSCORES (RESP3 doubles)");
        eq(2.5, c.zscore("lt:z", "b"), "ZSCORE");
        eq(1L, c.pfadd("lt:hll", "u1", "u2", "u1") > 0 ? 1L : 0L, "PFADD");
        eq(2L, c.pfcount("lt:hll"), "PFCOUNT");

        // Keys on every node in one MSET/MGET (the router splits and joins them).
        Map<String, String> many = new HashMap<>();
        String[] keys = new String[40];
        for (int i = 0; i < keys.length; i++) {
            keys[i] = "lt:m" + i;
            many.put(keys[i], "v" + i);
        }
        eq("OK", c.mset(many), "MSET");
        List<KeyValue<String, String>> got = c.mget(keys);
        for (int i = 0; i < keys.length; i++) {
            eq(KeyValue.just(keys[i], "v" + i), got.get(i), "MGET " + keys[i]);
        }

        // Errors reach Lettuce with Redis's text.
        try {
            c.lpush("lt:h", "x");
            throw new AssertionError("LPUSH on a hash succeeded");
        } catch (RedisCommandExecutionException e) {
            eq("WRONGTYPE Operation against a key holding the wrong kind of value", e.getMessage(), "WRONGTYPE");
        }

        // A transaction on one slot (hash tags), then a discarded one.
        eq("OK", c.multi(), "MULTI");
        c.set("{lt}a", "1");
        c.incr("{lt}b");
        c.get("{lt}a");
        TransactionResult tx = c.exec();
        eq(false, tx.wasDiscarded(), "EXEC ran");
        eq(List.of("OK", 1L, "1"), tx.stream().toList(), "EXEC replies");
        eq("OK", c.multi(), "MULTI");
        c.set("{lt}a", "2");
        eq("OK", c.discard(), "DISCARD");
        eq("1", c.get("{lt}a"), "a discarded SET is not applied");
    }

    /** 1000 commands written before any reply is read (Lettuce's manual flushing). */
    static void pipelined(RedisClient a) throws Exception {
        try (StatefulRedisConnection<String, String> conn = a.connect()) {
            RedisAsyncCommands<String, String> as = conn.async();
            conn.setAutoFlushCommands(false);
            List<RedisFuture<?>> sets = new ArrayList<>();
            for (int i = 0; i < 500; i++) {
                sets.add(as.set("lt:p" + i, "v" + i));
            }
            conn.flushCommands();
            eq(true, LettuceFutures.awaitAll(10, TimeUnit.SECONDS, sets.toArray(new RedisFuture[0])), "pipelined SETs");
            List<RedisFuture<String>> gets = new ArrayList<>();
            for (int i = 0; i < 500; i++) {
                gets.add(as.get("lt:p" + i));
            }
            conn.flushCommands();
            for (int i = 0; i < 500; i++) {
                eq("v" + i, gets.get(i).get(10, TimeUnit.SECONDS), "pipelined GET lt:p" + i);
            }
        }
    }

    /** Default tracking mode: the keys this connection read are invalidated when they change. */
    static void clientSideCache(RedisClient a, RedisCommands<String, String> writer) throws Exception {
        Map<String, String> near = new ConcurrentHashMap<>();
        try (StatefulRedisConnection<String, String> own = a.connect()) {
            CacheFrontend<String, String> cache =
                    ClientSideCaching.enable(CacheAccessor.forMap(near), own, TrackingArgs.Builder.enabled());
            writer.set("lt:c", "v1");
            eq("v1", cache.get("lt:c"), "first read");
            eq("v1", near.get("lt:c"), "the value is cached");
            eq("v1", cache.get("lt:c"), "a cached read");

            // A write through the other router.
            writer.set("lt:c", "v2");
            eventually(() -> !near.containsKey("lt:c"), "invalidation of a write through router B");
            eq("v2", cache.get("lt:c"), "the read after the invalidation");

            // A write through this connection (tracking without NOLOOP tells the writer too).
            own.sync().set("lt:c", "v3");
            eventually(() -> !near.containsKey("lt:c"), "invalidation of this connection's own write");
            eq("v3", cache.get("lt:c"), "the read after its own write");

            // Other ways a value changes: a typed write replacing it, expiry.
            writer.set("lt:c2", "x");
            eq("x", cache.get("lt:c2"), "read");
            writer.del("lt:c2");
            writer.hset("lt:c2", "f", "1");
            eventually(() -> !near.containsKey("lt:c2"), "invalidation of DEL then HSET");
            writer.set("lt:c3", "short", io.lettuce.core.SetArgs.Builder.px(200));
            eq("short", cache.get("lt:c3"), "read of a key with a TTL");
            eventually(() -> !near.containsKey("lt:c3"), "invalidation of an expired key");
            cache.close();
        }
    }

    /** BCAST mode: every key under the prefixes is announced, read by this connection or not. */
    static void broadcastCache(RedisClient a, RedisCommands<String, String> writer) throws Exception {
        Map<String, String> near = new ConcurrentHashMap<>();
        try (StatefulRedisConnection<String, String> own = a.connect()) {
            CacheFrontend<String, String> cache = ClientSideCaching.enable(
                    CacheAccessor.forMap(near), own, TrackingArgs.Builder.enabled().bcast().prefixes("lt:b:"));
            for (int i = 0; i < 20; i++) {
                writer.set("lt:b:" + i, "x" + i);
                eq("x" + i, cache.get("lt:b:" + i), "BCAST read");
            }
            writer.set("lt:other", "x");
            eq("x", cache.get("lt:other"), "a key outside the prefix is cached too");
            writer.set("lt:other", "z"); // not under the prefixes: no invalidation
            for (int i = 0; i < 20; i++) {
                writer.set("lt:b:" + i, "y" + i);
            }
            eventually(() -> near.keySet().stream().noneMatch(k -> k.startsWith("lt:b:")),
                    "BCAST invalidation of every key under the prefix");
            eq("x", near.get("lt:other"), "a key outside the prefixes is not invalidated");
            eq("y7", cache.get("lt:b:7"), "the read after a BCAST invalidation");
            cache.close();
        }
    }
}
