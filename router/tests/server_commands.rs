//! INFO commandstats, SLOWLOG and CONFIG through a real client: the values depend on timing, so
//! they are checked here rather than byte for byte against Redis (the deterministic parts are in
//! `differential/server.redis`).

mod support;

use redis::AsyncCommands;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commandstats_slowlog_and_config() {
    let router = support::cluster().await;
    let mut con = support::redis_conn(router.resp_addr).await;
    for i in 0..7 {
        let _: () = con.hset("stats:h", format!("f{i}"), i).await.unwrap();
    }
    let _: redis::RedisResult<String> = con.get("stats:h").await; // WRONGTYPE: a failed call
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut con).await.unwrap();
    let line =
        |name: &str| info.lines().find(|l| l.starts_with(&format!("cmdstat_{name}:"))).map(str::to_string);
    let hset = line("hset").expect("hset listed");
    assert!(hset.starts_with("cmdstat_hset:calls=7,usec="), "{hset}");
    assert!(line("get").unwrap().ends_with("failed_calls=1"), "{info}");
    let all: String = redis::cmd("INFO").arg("everything").query_async(&mut con).await.unwrap();
    assert!(
        all.contains("# Commandstats") && all.contains("# Keyspace"),
        "INFO everything has every section"
    );
    let default: String = redis::cmd("INFO").query_async(&mut con).await.unwrap();
    assert!(!default.contains("# Commandstats"), "not a default section, as in Redis");

    // Latency per command: a histogram of cumulative counts, and percentiles in INFO.
    let hist: redis::Value =
        redis::cmd("LATENCY").arg("HISTOGRAM").arg("hset").query_async(&mut con).await.unwrap();
    let text = format!("{hist:?}");
    assert!(text.contains("hset") && text.contains("calls") && text.contains("int(7)"), "{text}");
    let lat: String = redis::cmd("INFO").arg("latencystats").query_async(&mut con).await.unwrap();
    assert!(lat.contains("latency_percentiles_usec_hset:p50="), "{lat}");
    // MEMORY USAGE grows with the value.
    let small: i64 = redis::cmd("MEMORY").arg("USAGE").arg("stats:h").query_async(&mut con).await.unwrap();
    let _: () = con.hset("stats:h", "big", "x".repeat(10_000)).await.unwrap();
    let big: i64 = redis::cmd("MEMORY").arg("USAGE").arg("stats:h").query_async(&mut con).await.unwrap();
    assert!(small > 50 && big >= small + 10_000, "{small} then {big}");

    // Every command is slow past a 0 µs threshold; the log keeps the newest, bounded.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(3).query_async(&mut con).await.unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut con).await.unwrap();
    let _: () = con.set("slow:key", "x".repeat(300)).await.unwrap();
    let entries: Vec<redis::Value> =
        redis::cmd("SLOWLOG").arg("GET").arg(-1).query_async(&mut con).await.unwrap();
    assert!(!entries.is_empty() && entries.len() <= 3, "{entries:?}");
    let text = format!("{entries:?}");
    assert!(
        text.contains("slow:key") && text.contains("(172 more bytes)"),
        "args kept, long ones cut: {text}"
    );
    for _ in 0..5 {
        let _: () = con.set("slow:other", 1).await.unwrap();
    }
    let len: usize = redis::cmd("SLOWLOG").arg("LEN").query_async(&mut con).await.unwrap();
    assert_eq!(len, 3, "bounded by slowlog-max-len");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut con).await.unwrap();
    let _: () = con.set("slow:off", 1).await.unwrap();
    let len: usize = redis::cmd("SLOWLOG").arg("LEN").query_async(&mut con).await.unwrap();
    assert_eq!(len, 0, "a negative threshold turns the log off");

    // CONFIG RESETSTAT clears the command stats; node parameters are read-only here.
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut con).await.unwrap();
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut con).await.unwrap();
    assert!(!info.contains("cmdstat_hset"), "{info}");
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1mb")
        .query_async::<()>(&mut con)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("can't set immutable config"), "{err}");
    let got: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("maxmemory").query_async(&mut con).await.unwrap();
    assert_eq!(got, vec!["maxmemory".to_string(), "0".to_string()]);
    router.shutdown().await;
}
