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
    // Version 13: newer than any Redis writes (Shoal reads Redis 8.0's 12; 7.0 reads up to 10).
    newer[at] = 13;
    for bad in [&payload[..payload.len() - 1], &newer[..]] {
        assert_eq!(
            cmd_bytes(&mut shoal, &[b"RESTORE", b"bad", b"0", bad]).await,
            cmd_bytes(&mut redis, &[b"RESTORE", b"bad", b"0", bad]).await
        );
    }
    router.shutdown().await;
}

/// Hashes with field times (Redis 7.4) move between redis-server 8.0 and Shoal both ways: the
/// small one (`listpackex`) with the very bytes Redis writes (RDB type 25, version 12), the large
/// one (a table: type 24) restored with every field, value and time; OBJECT ENCODING agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashes_with_field_times_move_between_redis8_and_shoal_both_ways() {
    let (_redis8, addr) = support::redis8_server().await;
    let router = support::cluster().await;
    let mut redis = Raw::connect(addr).await;
    let mut shoal = Raw::connect(router.resp_addr()).await;
    let big_fields: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
    for c in [&mut redis, &mut shoal] {
        assert_eq!(c.cmd(&["HSET", "small", "a", "1", "b", "two", "c", "3"]).await, b":3\r\n");
        c.cmd(&["HPEXPIREAT", "small", "4000000005000", "FIELDS", "1", "a"]).await;
        c.cmd(&["HPEXPIREAT", "small", "4000000000000", "FIELDS", "1", "c"]).await;
        let mut hset: Vec<&str> = vec!["HSET", "big"];
        for f in &big_fields {
            hset.extend([f.as_str(), "value"]);
        }
        assert_eq!(c.cmd(&hset).await, b":200\r\n");
        c.cmd(&["HPEXPIREAT", "big", "4000000000000", "FIELDS", "2", "f7", "f150"]).await;
        c.cmd(&["HPEXPIREAT", "big", "4000000009999", "FIELDS", "1", "f42"]).await;
    }
    let small_payload = |reply: Vec<u8>| bulk_payload(&reply);
    assert_eq!(
        small_payload(shoal.cmd(&["DUMP", "small"]).await),
        small_payload(redis.cmd(&["DUMP", "small"]).await),
        "a listpackex hash: Shoal's payload is redis-server 8.0's"
    );
    for (key, fields) in [("small", vec!["a".to_string(), "b".into(), "c".into()]), ("big", big_fields)] {
        let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
        let n = fields.len().to_string();
        let view = |key: &str| {
            let mut values = vec!["HMGET", key];
            values.extend(&fields);
            let mut times = vec!["HPEXPIRETIME", key, "FIELDS", &n];
            times.extend(&fields);
            (
                values.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                times.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        let read = async |c: &mut Raw, k: &str| {
            let (values, times) = view(k);
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let times: Vec<&str> = times.iter().map(String::as_str).collect();
            (c.cmd(&values).await, c.cmd(&times).await, c.cmd(&["OBJECT", "ENCODING", k]).await)
        };
        let from_redis = bulk_payload(&redis.cmd(&["DUMP", key]).await);
        let from_shoal = bulk_payload(&shoal.cmd(&["DUMP", key]).await);
        let copy = format!("{key}-copy");
        let restore = |p: &[u8]| -> Vec<Vec<u8>> {
            vec![
                b"RESTORE".to_vec(),
                copy.as_bytes().to_vec(),
                b"0".to_vec(),
                p.to_vec(),
                b"REPLACE".to_vec(),
            ]
        };
        let args = restore(&from_redis);
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        assert_eq!(cmd_bytes(&mut shoal, &args).await, b"+OK\r\n", "{key}: Shoal restores Redis 8's payload");
        let args = restore(&from_shoal);
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        assert_eq!(cmd_bytes(&mut redis, &args).await, b"+OK\r\n", "{key}: Redis 8 restores Shoal's payload");
        let (redis_src, shoal_src) = (read(&mut redis, key).await, read(&mut shoal, key).await);
        assert!(redis_src.1.starts_with(b"*"), "{key}: {:?}", String::from_utf8_lossy(&redis_src.1));
        assert_eq!(redis_src, shoal_src, "{key}: the same hash on both");
        assert_eq!(read(&mut shoal, &copy).await, redis_src, "{key}: Shoal's copy of Redis 8's");
        assert_eq!(read(&mut redis, &copy).await, shoal_src, "{key}: Redis 8's copy of Shoal's");
    }
    router.shutdown().await;
}
