//! DUMP payloads between redis-server 7.0 and Shoal, both ways, for values the one-connection
//! differential script (differential/dump.redis) cannot compare byte for byte or build: hashes
//! and sets in hash tables (Redis lists their members in its table's order), large lists, sorted
//! sets and strings, and streams with consumer groups, pending entries and deleted entries (whose
//! delivery and seen times differ between the two servers). Each value is built on both; the
//! payload of each is restored into the other, and the restored value reads back as the source
//! did (through order-free views); where the encoding is deterministic the payloads are equal.

mod support;

use support::Raw;

async fn cmd_bytes(c: &mut Raw, args: &[&[u8]]) -> Vec<u8> {
    c.send(&support::encode(args)).await;
    c.reply().await.expect("a reply")
}

fn bulk_payload(reply: &[u8]) -> Vec<u8> {
    assert_eq!(reply[0], b'$', "a bulk reply: {:?}", String::from_utf8_lossy(reply));
    let header = reply.iter().position(|&b| b == b'\n').expect("a bulk header") + 1;
    reply[header..reply.len() - 2].to_vec()
}

/// A script that builds a value at KEYS[1] (the same on both servers), whether its payload is the
/// same on both, and the view that must read the same from a source and its restored copy.
struct Case {
    name: &'static str,
    build: &'static str,
    same_payload: bool,
    view: &'static [&'static str],
}

const SORTED_HASH: &str = "local t = redis.call('hgetall', KEYS[1]) local r = {} \
    for i = 1, #t, 2 do r[#r + 1] = t[i] .. '=' .. t[i + 1] end table.sort(r) return r";

const CASES: &[Case] = &[
    Case {
        name: "large string (LZF)",
        build: "local s = {} for i = 1, 2000 do s[#s + 1] = tostring(i * 7919 % 1000) end \
                redis.call('set', KEYS[1], table.concat(s, ',')) return 1",
        same_payload: true,
        view: &["GET"],
    },
    Case {
        name: "list of many nodes",
        build: "for i = 1, 5000 do redis.call('rpush', KEYS[1], 'item:' .. i .. string.rep('z', i % 50)) end return 1",
        same_payload: true,
        view: &["LRANGE", "0", "-1"],
    },
    Case {
        name: "list of integers",
        build: "for i = 1, 3000 do redis.call('rpush', KEYS[1], i * 1000003 - 1500000000) end return 1",
        same_payload: true,
        view: &["LRANGE", "0", "-1"],
    },
    Case {
        name: "hash table",
        build: "for i = 1, 300 do redis.call('hset', KEYS[1], 'field' .. i, i % 3 == 0 and i or ('v' .. i)) end return 1",
        same_payload: false,
        view: &["EVAL-HASH"],
    },
    Case {
        name: "hash with a long value",
        build: "redis.call('hset', KEYS[1], 'a', '1', 'b', string.rep('x', 100)) return 1",
        same_payload: false,
        view: &["EVAL-HASH"],
    },
    Case {
        name: "set table",
        build: "for i = 1, 700 do redis.call('sadd', KEYS[1], 'm' .. i) end return 1",
        same_payload: false,
        view: &["SORT", "ALPHA"],
    },
    Case {
        name: "set of integers past the intset",
        build: "for i = 1, 600 do redis.call('sadd', KEYS[1], i * 3) end return 1",
        same_payload: false,
        view: &["SORT"],
    },
    Case {
        name: "intset",
        build: "for i = 1, 500 do redis.call('sadd', KEYS[1], i * 100003 - 25000000) end return 1",
        same_payload: true,
        view: &["SORT"],
    },
    Case {
        name: "skiplist",
        build: "for i = 1, 400 do redis.call('zadd', KEYS[1], (i * 37 % 101) / 7, 'member:' .. i) end return 1",
        same_payload: true,
        view: &["ZRANGE", "0", "-1", "WITHSCORES"],
    },
    Case {
        name: "stream with groups",
        build: "for i = 1, 500 do redis.call('xadd', KEYS[1], i .. '-1', 'f', i, 'g', string.rep('v', i % 20)) end \
                redis.call('xdel', KEYS[1], '3-1', '250-1', '251-1') \
                redis.call('xgroup', 'create', KEYS[1], 'g1', '0') \
                redis.call('xgroup', 'create', KEYS[1], 'g2', '100-1') \
                redis.call('xreadgroup', 'group', 'g1', 'alice', 'count', 20, 'streams', KEYS[1], '>') \
                redis.call('xreadgroup', 'group', 'g1', 'bob', 'count', 7, 'streams', KEYS[1], '>') \
                redis.call('xack', KEYS[1], 'g1', '1-1', '5-1', '22-1') \
                redis.call('xgroup', 'createconsumer', KEYS[1], 'g2', 'carol') \
                return 1",
        same_payload: false,
        view: &["XINFO", "STREAM", "FULL"],
    },
];

/// The view of `key`: `view` with the key put after its first words (or the sorted-hash script).
async fn view(c: &mut Raw, case: &Case, key: &str) -> Vec<u8> {
    if case.view == ["EVAL-HASH"] {
        return c.cmd(&["EVAL", SORTED_HASH, "1", key]).await;
    }
    let at = if case.view[0] == "XINFO" { 2 } else { 1 };
    let mut args: Vec<&str> = case.view[..at].to_vec();
    args.push(key);
    args.extend_from_slice(&case.view[at..]);
    c.cmd(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_move_between_redis_and_shoal_both_ways() {
    let (_redis, redis_addr) = support::redis_server().await;
    let router = support::cluster().await;
    let mut redis = Raw::connect(redis_addr).await;
    let mut shoal = Raw::connect(router.resp_addr()).await;
    for (i, case) in CASES.iter().enumerate() {
        let (src, dst) = (format!("src{i}"), format!("dst{i}"));
        for c in [&mut redis, &mut shoal] {
            assert_eq!(c.cmd(&["EVAL", case.build, "1", &src]).await, b":1\r\n", "{}", case.name);
        }
        let from_redis = bulk_payload(&redis.cmd(&["DUMP", &src]).await);
        let from_shoal = bulk_payload(&shoal.cmd(&["DUMP", &src]).await);
        if case.same_payload {
            assert!(from_redis == from_shoal, "{}: Shoal's payload is redis-server's", case.name);
        }
        let (d, r) = (dst.as_bytes(), b"REPLACE".as_slice());
        assert_eq!(
            cmd_bytes(&mut shoal, &[b"RESTORE", d, b"0", &from_redis, r]).await,
            b"+OK\r\n",
            "{}",
            case.name
        );
        assert_eq!(
            cmd_bytes(&mut redis, &[b"RESTORE", d, b"0", &from_shoal, r]).await,
            b"+OK\r\n",
            "{}",
            case.name
        );
        let (redis_src, shoal_src) = (view(&mut redis, case, &src).await, view(&mut shoal, case, &src).await);
        assert!(redis_src.len() > 20, "{}: a real view", case.name);
        let (redis_dst, shoal_dst) = (view(&mut redis, case, &dst).await, view(&mut shoal, case, &dst).await);
        assert!(shoal_dst == redis_src, "{}: Shoal restores redis-server's value", case.name);
        assert!(redis_dst == shoal_src, "{}: redis-server restores Shoal's value", case.name);
        let encoding = ["OBJECT", "ENCODING", &dst];
        assert_eq!(shoal.cmd(&encoding).await, redis.cmd(&encoding).await, "{}: encoding", case.name);
    }
    // A payload cut short, or from a newer RDB version, is refused with Redis's words.
    let payload = bulk_payload(&shoal.cmd(&["DUMP", "src1"]).await);
    let mut newer = payload.clone();
    let at = newer.len() - 10;
    newer[at] = 11;
    for bad in [&payload[..payload.len() - 1], &newer[..]] {
        assert_eq!(
            cmd_bytes(&mut shoal, &[b"RESTORE", b"bad", b"0", bad]).await,
            cmd_bytes(&mut redis, &[b"RESTORE", b"bad", b"0", bad]).await
        );
    }
    router.shutdown().await;
}
