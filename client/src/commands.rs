//! The typed API: each command encoded for the pool's protocol, and its reply checked for the
//! shape that command answers with.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_wire::fast::{self, Op, Status, set_flags};
use shoal_wire::num::IntText;

use crate::conn::{Protocol, Reply, fast_frame, fast_items_frame, lossy, resp_frame};
use crate::error::{Error, Result};
use crate::pool::Client;
use crate::resp::{self, Value};

/// SET's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Only if the key does not exist (NX).
    IfAbsent,
    /// Only if the key exists (XX).
    IfPresent,
}

/// SET's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// Expire after this long (PX; rounded up to whole milliseconds, at least 1).
    pub ttl: Option<Duration>,
    pub condition: Option<Condition>,
    /// Keep the key's current TTL (KEEPTTL; not with `ttl`).
    pub keep_ttl: bool,
    /// Answer the old value (GET).
    pub get: bool,
}

/// What a SET did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// The value was stored.
    Stored,
    /// A condition did not hold: nothing was stored.
    NotStored,
    /// With [`SetOptions::get`]: the value before (`None`: there was none).
    Previous(Option<Bytes>),
}

fn ttl_ms(d: Duration) -> Result<i64> {
    if d.is_zero() {
        return Err(Error::Protocol("a TTL must be positive".into()));
    }
    // Rounded up: a TTL asked for never ends early.
    Ok(i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX))
}

fn unexpected<T>(what: &str, got: impl std::fmt::Debug) -> Result<T> {
    Err(Error::Protocol(format!("{what} answered {got:?}")))
}

impl Client {
    async fn resp(&self, args: &[&[u8]]) -> Result<Value> {
        match self.call(resp_frame(args)).await? {
            Reply::Resp(Value::Error(e)) => Err(Error::Server(e)),
            Reply::Resp(v) => Ok(v),
            Reply::Fast(r) => unexpected("a RESP request", r.status),
        }
    }

    async fn fast(&self, frame: BytesMut) -> Result<fast::Reply> {
        match self.call(frame).await? {
            Reply::Fast(r) if r.status == Status::Err => Err(Error::Server(lossy(&r.body))),
            Reply::Fast(r) => Ok(r),
            Reply::Resp(v) => unexpected("a fast-path request", v),
        }
    }

    /// PING.
    pub async fn ping(&self) -> Result<()> {
        match self.protocol() {
            Protocol::Resp => match self.resp(&[b"PING"]).await? {
                Value::Simple(s) if s == "PONG" => Ok(()),
                other => unexpected("PING", other),
            },
            Protocol::Fast => match self.fast(fast_frame(Op::Ping, 0, b"", b"", 0)).await? {
                r if r.status == Status::Ok => Ok(()),
                r => unexpected("PING", r.status),
            },
        }
    }

    /// GET: the value, or `None` if the key does not exist.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        let key = key.as_ref();
        match self.protocol() {
            Protocol::Resp => match self.resp(&[b"GET", key]).await? {
                Value::Bulk(b) => Ok(Some(b)),
                Value::Nil => Ok(None),
                other => unexpected("GET", other),
            },
            Protocol::Fast => {
                let r = self.fast(fast_frame(Op::Get, 0, key, b"", 0)).await?;
                match r.status {
                    Status::Value => Ok(Some(r.body)),
                    Status::Nil => Ok(None),
                    other => unexpected("GET", other),
                }
            }
        }
    }

    /// SET without options.
    pub async fn set(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        match self.set_with(key, value, SetOptions::default()).await? {
            SetOutcome::Stored => Ok(()),
            other => unexpected("SET", other),
        }
    }

    /// SET with a TTL, a condition, KEEPTTL or GET.
    pub async fn set_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: SetOptions,
    ) -> Result<SetOutcome> {
        let (key, value) = (key.as_ref(), value.as_ref());
        let ttl = opts.ttl.map(ttl_ms).transpose()?;
        let not_done = || if opts.get { SetOutcome::Previous(None) } else { SetOutcome::NotStored };
        match self.protocol() {
            Protocol::Resp => {
                let ms = ttl.map(IntText::new);
                let mut args: Vec<&[u8]> = vec![b"SET", key, value];
                if let Some(ms) = &ms {
                    args.extend([&b"PX"[..], ms.as_bytes()]);
                }
                match opts.condition {
                    Some(Condition::IfAbsent) => args.push(b"NX"),
                    Some(Condition::IfPresent) => args.push(b"XX"),
                    None => {}
                }
                if opts.keep_ttl {
                    args.push(b"KEEPTTL");
                }
                if opts.get {
                    args.push(b"GET");
                }
                match self.resp(&args).await? {
                    Value::Simple(s) if s == "OK" && !opts.get => Ok(SetOutcome::Stored),
                    Value::Nil => Ok(not_done()),
                    Value::Bulk(b) if opts.get => Ok(SetOutcome::Previous(Some(b))),
                    other => unexpected("SET", other),
                }
            }
            Protocol::Fast => {
                let mut flags = 0;
                match opts.condition {
                    Some(Condition::IfAbsent) => flags |= set_flags::NX,
                    Some(Condition::IfPresent) => flags |= set_flags::XX,
                    None => {}
                }
                if opts.keep_ttl {
                    flags |= set_flags::KEEPTTL;
                }
                if opts.get {
                    flags |= set_flags::GET;
                }
                let r = self.fast(fast_frame(Op::Set, flags, key, value, ttl.unwrap_or(0))).await?;
                match r.status {
                    Status::Ok if !opts.get => Ok(SetOutcome::Stored),
                    Status::Nil => Ok(not_done()),
                    Status::Value if opts.get => Ok(SetOutcome::Previous(Some(r.body))),
                    other => unexpected("SET", other),
                }
            }
        }
    }

    /// DEL of one key: 1 if it existed, else 0. (DEL of many keys: [`Client::cmd`].)
    pub async fn del(&self, key: impl AsRef<[u8]>) -> Result<i64> {
        let key = key.as_ref();
        match self.protocol() {
            Protocol::Resp => self.resp_int("DEL", &[b"DEL", key]).await,
            Protocol::Fast => self.fast_int("DEL", fast_frame(Op::Del, 0, key, b"", 0)).await,
        }
    }

    /// INCRBY: the new value.
    pub async fn incr_by(&self, key: impl AsRef<[u8]>, delta: i64) -> Result<i64> {
        let key = key.as_ref();
        match self.protocol() {
            Protocol::Resp => {
                let d = IntText::new(delta);
                self.resp_int("INCRBY", &[b"INCRBY", key, d.as_bytes()]).await
            }
            Protocol::Fast => self.fast_int("INCRBY", fast_frame(Op::IncrBy, 0, key, b"", delta)).await,
        }
    }

    /// PEXPIRE: whether the key exists (and now expires after `ttl`, rounded to milliseconds).
    pub async fn expire(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<bool> {
        let key = key.as_ref();
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let n = match self.protocol() {
            Protocol::Resp => {
                let ms = IntText::new(ms);
                self.resp_int("PEXPIRE", &[b"PEXPIRE", key, ms.as_bytes()]).await?
            }
            Protocol::Fast => self.fast_int("EXPIRE", fast_frame(Op::Expire, 0, key, b"", ms)).await?,
        };
        Ok(n == 1)
    }

    /// MGET: one value (or `None`) per key, in order.
    pub async fn mget<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Bytes>>> {
        match self.protocol() {
            Protocol::Resp => {
                let mut args: Vec<&[u8]> = vec![b"MGET"];
                args.extend(keys.iter().map(|k| k.as_ref()));
                match self.resp(&args).await? {
                    Value::Array(items) if items.len() == keys.len() => items
                        .into_iter()
                        .map(|v| match v {
                            Value::Bulk(b) => Ok(Some(b)),
                            Value::Nil => Ok(None),
                            other => unexpected("MGET's item", other),
                        })
                        .collect(),
                    other => unexpected("MGET", other),
                }
            }
            Protocol::Fast => {
                let r = self.fast(fast_items_frame(Op::MGet, 0, keys)).await?;
                match r.status {
                    Status::Array if r.int as usize == keys.len() => Ok(r.items()?),
                    other => unexpected("MGET", (other, r.int)),
                }
            }
        }
    }

    /// MSET of (key, value) pairs.
    pub async fn mset<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<()> {
        let mut flat: Vec<&[u8]> = Vec::with_capacity(1 + pairs.len() * 2);
        if self.protocol() == Protocol::Resp {
            flat.push(b"MSET");
        }
        for (k, v) in pairs {
            flat.extend([k.as_ref(), v.as_ref()]);
        }
        match self.protocol() {
            Protocol::Resp => match self.resp(&flat).await? {
                Value::Simple(s) if s == "OK" => Ok(()),
                other => unexpected("MSET", other),
            },
            Protocol::Fast => match self.fast(fast_items_frame(Op::MSet, 0, &flat)).await? {
                r if r.status == Status::Ok => Ok(()),
                r => unexpected("MSET", r.status),
            },
        }
    }

    /// Any Redis command, e.g. `cmd(&["HSET", "h", "f", "v"])`: its reply, RESP2. An error reply
    /// is [`Error::Server`]; errors nested in an array (EXEC's) stay [`Value::Error`].
    pub async fn cmd<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Value> {
        if args.is_empty() {
            return Err(Error::Protocol("a command needs a name".into()));
        }
        match self.protocol() {
            Protocol::Resp => {
                let args: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
                self.resp(&args).await
            }
            Protocol::Fast => {
                let r = self.fast(fast_items_frame(Op::Cmd, 0, args)).await?;
                if r.status != Status::Resp {
                    return unexpected("CMD", r.status);
                }
                // Parsed where it lies: bulk strings are slices of the reply's body.
                match resp::decode_exact(&r.body)? {
                    Some(Value::Error(e)) => Err(Error::Server(e)),
                    Some(v) => Ok(v),
                    None => Err(Error::Protocol("CMD's body is not exactly one RESP reply".into())),
                }
            }
        }
    }

    async fn resp_int(&self, what: &str, args: &[&[u8]]) -> Result<i64> {
        match self.resp(args).await? {
            Value::Int(i) => Ok(i),
            other => unexpected(what, other),
        }
    }

    async fn fast_int(&self, what: &str, frame: BytesMut) -> Result<i64> {
        let r = self.fast(frame).await?;
        match r.status {
            Status::Int => Ok(r.int),
            other => unexpected(what, other),
        }
    }
}
