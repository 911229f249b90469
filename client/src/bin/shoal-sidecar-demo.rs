//! `shoal-sidecar-demo`: a sidecar app. It talks to the router in its pod over the Unix socket,
//! on the fast path, and falls back to RESP on the same socket if the router does not serve the
//! fast path. The image ships it; `charts/shoal/examples/sidecar.yaml` runs it next to a router
//! sidecar.
//!
//! ```text
//! SHOAL_SOCKET=/var/run/shoal/shoal.sock SHOAL_USER=app SHOAL_PASSWORD=... \
//!     cargo run -p shoal-client --bin shoal-sidecar-demo
//! ```
//!
//! Env: SHOAL_SOCKET (default /var/run/shoal/shoal.sock), SHOAL_USER, SHOAL_PASSWORD,
//! SHOAL_KEY_PREFIX (default `sidecar:`; a user limited to `~shop:*` needs e.g. `shop:sidecar:`),
//! SHOAL_ROUNDS (default 10, at most 1,000,000: the loop is always bounded), SHOAL_STAY (`1`:
//! after the rounds, stay up until SIGTERM or SIGINT, as a Deployment's container must).
//!
//! Each round SETs `<prefix><i>` (60 s TTL), GETs it back, and INCRs `<prefix>hits`; a value
//! read back different from the one written is an error (exit status 1).

use std::time::{Duration, Instant};

use shoal_client::{Client, Config, Endpoint, Error, Protocol, SetOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let socket = env("SHOAL_SOCKET").unwrap_or_else(|| "/var/run/shoal/shoal.sock".into());
    let user = env("SHOAL_USER");
    let password = env("SHOAL_PASSWORD");
    let prefix = env("SHOAL_KEY_PREFIX").unwrap_or_else(|| "sidecar:".into());
    let rounds: u64 = env("SHOAL_ROUNDS").and_then(|r| r.parse().ok()).unwrap_or(10).min(1_000_000);
    let stay = env("SHOAL_STAY").is_some_and(|s| s == "1" || s == "true");

    let config = |protocol| {
        Config::new(Endpoint::Unix(socket.clone().into()), protocol)
            .auth(user.clone(), password.clone())
            .timeout(Duration::from_secs(2))
    };
    // A sidecar's router may still be starting: retry the first connect a bounded number of
    // times. A refused password is final.
    let mut attempt = 0;
    let client = loop {
        attempt += 1;
        let r = match Client::connect(config(Protocol::Fast)).await {
            Err(Error::Protocol(why)) => {
                println!("fast path unavailable ({why}); using RESP");
                Client::connect(config(Protocol::Resp)).await
            }
            r => r,
        };
        match r {
            Ok(c) => break c,
            Err(e @ Error::Server(_)) => return Err(e),
            Err(e) if attempt >= 30 => return Err(e),
            Err(e) => {
                println!("router not ready ({e}); retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    println!("connected to {socket} over {:?}", client.protocol());

    let start = Instant::now();
    let hits_key = format!("{prefix}hits");
    let mut hits = 0;
    for i in 0..rounds {
        let key = format!("{prefix}{i}");
        let value = format!("value {i}");
        let ttl = SetOptions { ttl: Some(Duration::from_secs(60)), ..Default::default() };
        client.set_with(&key, &value, ttl).await?;
        let got = client.get(&key).await?;
        if got.as_deref() != Some(value.as_bytes()) {
            return Err(Error::Protocol(format!("{key}: wrote {value:?}, read back {got:?}")));
        }
        hits = client.incr_by(&hits_key, 1).await?;
        println!("{key} = {:?} (hits {hits})", got.as_deref().map(String::from_utf8_lossy));
    }
    println!("{rounds} rounds over {:?} in {:?}, {hits_key} = {hits}", client.protocol(), start.elapsed());
    if stay {
        println!("staying up until SIGTERM");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    Ok(())
}
