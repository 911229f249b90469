//! `shoal-router check`: a client's-eye check of a running router, for `helm test` and for humans
//! after an install. It needs nothing but this binary (the image has no shell and no redis-cli).
//!
//! Steps, each printed as it passes: connect (retrying until the timeout), AUTH if a password is
//! given, PING, SET with EX, GET, TTL, then MSET/MGET/DEL over keys in 32 slots spread across
//! the whole slot space, so that every shard of any realistic cluster answers. With `--tls` it
//! speaks TLS (checking the router's certificate against `--tls-ca-cert-file`).

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::config::CheckArgs;

/// A reply, as far as the check needs to tell them apart.
#[derive(Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// A plain or TLS connection.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = BufReader<Box<dyn Io>>;

struct Conn {
    stream: Stream,
}

impl Conn {
    async fn cmd(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).await?;
        tokio::time::timeout(Duration::from_secs(10), read_reply(&mut self.stream))
            .await
            .context("no reply within 10 s")?
    }
}

async fn line(r: &mut Stream) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    loop {
        let b = r.read_u8().await.context("connection closed")?;
        if b == b'\n' && buf.last() == Some(&b'\r') {
            buf.pop();
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        buf.push(b);
        ensure!(buf.len() < 1 << 20, "reply line too long");
    }
}

fn read_reply(r: &mut Stream) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<Reply>> + Send + '_>> {
    Box::pin(async move {
        let l = line(r).await?;
        let (kind, rest) = l.split_at(1.min(l.len()));
        Ok(match kind {
            "+" => Reply::Simple(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse()?),
            "$" => {
                let n: i64 = rest.parse()?;
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut v = vec![0; n as usize + 2];
                    r.read_exact(&mut v).await?;
                    v.truncate(n as usize);
                    Reply::Bulk(Some(v))
                }
            }
            "*" => {
                let n: i64 = rest.parse()?;
                let mut items = Vec::new();
                for _ in 0..n.max(0) {
                    items.push(read_reply(r).await?);
                }
                Reply::Array(items)
            }
            _ => bail!("not a RESP reply: {l:?}"),
        })
    })
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

/// Keys whose slots are spread evenly over 0..16384: one per 512-slot stretch.
pub fn spread_keys(prefix: &str) -> Vec<String> {
    let mut found: Vec<Option<String>> = vec![None; 32];
    let mut i = 0u64;
    while found.iter().any(Option::is_none) {
        let key = format!("{prefix}:{i}");
        let bucket = usize::from(shoal_wire::key_slot(key.as_bytes())) / 512;
        found[bucket].get_or_insert(key);
        i += 1;
    }
    found.into_iter().flatten().collect()
}

pub async fn run(args: &CheckArgs) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let stream = loop {
        match TcpStream::connect(&args.addr).await {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("check: {} not reachable yet ({e}); retrying", args.addr);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => bail!("cannot connect to {}: {e}", args.addr),
        }
    };
    let stream: Box<dyn Io> = match &args.tls_ca_cert_file {
        None => Box::new(stream),
        Some(ca) => {
            let read = |p: &std::path::Path| {
                std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))
            };
            let identity = match (&args.tls_cert_file, &args.tls_key_file) {
                (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
                _ => None,
            };
            let identity = identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
            let config = shoal_wire::tls::client_config(&read(ca)?, identity, &[])?;
            let host = args.addr.rsplit_once(':').map_or(args.addr.as_str(), |(h, _)| h);
            let name = shoal_wire::tls::server_name(host).map_err(anyhow::Error::msg)?;
            let tls = shoal_wire::tls::TlsConnector::from(std::sync::Arc::new(config))
                .connect(name, stream)
                .await
                .with_context(|| format!("TLS handshake with {}", args.addr))?;
            println!("ok   TLS handshake ({host}'s certificate is trusted)");
            Box::new(tls)
        }
    };
    let mut c = Conn { stream: BufReader::new(stream) };
    let step = |name: &str| println!("ok   {name}");
    if let Some(pw) = &args.password {
        let r = c.cmd(&[b"AUTH", pw.as_bytes()]).await?;
        ensure!(r == Reply::Simple("OK".into()), "AUTH answered {r:?}");
        step("AUTH");
    }
    let r = c.cmd(&[b"PING"]).await?;
    ensure!(r == Reply::Simple("PONG".into()), "PING answered {r:?}");
    step("PING");

    let nonce = format!("{:x}", shoal_wire::clock::Clock::now_us(&shoal_wire::clock::SystemClock));
    let key = format!("shoal:check:{nonce}");
    let r = c.cmd(&[b"SET", key.as_bytes(), b"hello", b"EX", b"60"]).await?;
    ensure!(r == Reply::Simple("OK".into()), "SET answered {r:?}");
    let r = c.cmd(&[b"GET", key.as_bytes()]).await?;
    ensure!(r == bulk("hello"), "GET answered {r:?}");
    let r = c.cmd(&[b"TTL", key.as_bytes()]).await?;
    ensure!(matches!(r, Reply::Int(1..=60)), "TTL answered {r:?}");
    step("SET EX, GET, TTL");

    let keys = spread_keys(&format!("shoal:check:{nonce}:spread"));
    let mut mset: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    for k in &keys {
        mset.push(k.clone().into_bytes());
        mset.push(format!("value-of-{k}").into_bytes());
    }
    let r = c.cmd(&mset.iter().map(Vec::as_slice).collect::<Vec<_>>()).await?;
    ensure!(r == Reply::Simple("OK".into()), "MSET answered {r:?}");
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().map(|k| k.as_bytes()));
    let r = c.cmd(&mget).await?;
    let want = Reply::Array(keys.iter().map(|k| bulk(&format!("value-of-{k}"))).collect());
    ensure!(r == want, "MGET over {} slots answered {r:?}", keys.len());
    step(&format!("MSET/MGET over {} slots across the slot space", keys.len()));

    let mut del: Vec<&[u8]> = vec![b"DEL", key.as_bytes()];
    del.extend(keys.iter().map(|k| k.as_bytes()));
    let r = c.cmd(&del).await?;
    ensure!(r == Reply::Int(keys.len() as i64 + 1), "DEL answered {r:?}");
    step("DEL");
    println!("check passed: {} answers like a Redis server", args.addr);
    Ok(())
}
