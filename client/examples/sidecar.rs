//! A sidecar app: talks to the router in its pod over the Unix socket, on the fast path, and
//! falls back to RESP on the same socket if the router does not serve the fast path.
//!
//! ```text
//! SHOAL_SOCKET=/var/run/shoal/shoal.sock SHOAL_USER=app SHOAL_PASSWORD=... \
//!     cargo run -p shoal-client --example sidecar
//! ```
//!
//! Env: SHOAL_SOCKET (default /var/run/shoal/shoal.sock), SHOAL_USER, SHOAL_PASSWORD,
//! SHOAL_ROUNDS (default 10, at most 1,000,000: the loop is always bounded).

use std::time::{Duration, Instant};

use shoal_client::{Client, Config, Endpoint, Error, Protocol, SetOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let socket = std::env::var("SHOAL_SOCKET").unwrap_or_else(|_| "/var/run/shoal/shoal.sock".into());
    let user = std::env::var("SHOAL_USER").ok().filter(|u| !u.is_empty());
    let password = std::env::var("SHOAL_PASSWORD").ok().filter(|p| !p.is_empty());
    let rounds: u64 =
        std::env::var("SHOAL_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(10).min(1_000_000);

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
    for i in 0..rounds {
        let key = format!("sidecar:{i}");
        let ttl = SetOptions { ttl: Some(Duration::from_secs(60)), ..Default::default() };
        client.set_with(&key, format!("value {i}"), ttl).await?;
        let got = client.get(&key).await?;
        let hits = client.incr_by("sidecar:hits", 1).await?;
        println!("{key} = {:?} (hits {hits})", got.as_deref().map(String::from_utf8_lossy));
    }
    println!("{rounds} rounds in {:?}", start.elapsed());
    Ok(())
}
