//! One subscribed client connection, as the hub sees it: its subscriptions and its bounded
//! queue of messages waiting to be written.
//!
//! The hub pushes (from a node link's task); the connection takes what is queued whenever it
//! is idle or between rounds, and writes it. The queue is bounded like Redis's
//! `client-output-buffer-limit pubsub` (hard limit, and soft limit for so many seconds): a client
//! past it is disconnected (its kill switch) and its queue dropped, never grown without bound.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::clients::ClientHandle;
use crate::resp::{Out, Protocol, Reply};

/// Which namespace a subscription is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// SUBSCRIBE; deliveries are `message`.
    Channel,
    /// PSUBSCRIBE; `pmessage`.
    Pattern,
    /// SSUBSCRIBE; `smessage`.
    Shard,
    /// CLIENT TRACKING: the key in `payload` changed (`invalidate` push in RESP3, a
    /// `__redis__:invalidate` message in RESP2, for a REDIRECT target). Never subscribed to.
    Invalidate,
    /// CLIENT TRACKING: everything may have changed (a null key list, as on FLUSHALL).
    InvalidateAll,
    /// CLIENT TRACKING REDIRECT: the target (its id, as text, in `payload`) is gone, so an
    /// invalidation could not be delivered (`tracking-redir-broken`, RESP3 only).
    RedirBroken,
    /// MONITOR: a command this router ran, `payload` its line (`crate::monitor`), written as a
    /// simple string in both protocols, as Redis does. Never subscribed to.
    Monitor,
}

/// A message waiting for its client.
#[derive(Debug, Clone)]
pub struct Message {
    pub kind: Kind,
    /// The pattern it matched (pmessage only).
    pub pattern: Bytes,
    pub channel: Bytes,
    pub payload: Bytes,
}

impl Message {
    /// About what it takes in an output buffer (what the limits count).
    pub fn size(&self) -> usize {
        self.pattern.len() + self.channel.len() + self.payload.len() + 48
    }

    /// Appends the push as Redis writes it (`>` in RESP3, an array in RESP2), without building a
    /// reply value first (the hot path of a busy subscriber).
    pub fn encode(&self, protocol: Protocol, out: &mut Out) {
        if self.kind == Kind::Monitor {
            out.put_slice(b"+");
            out.put_slice(&self.payload);
            out.put_slice(b"\r\n");
            return;
        }
        if self.kind == Kind::RedirBroken {
            // Redis's `sendTrackingMessage` sends it to RESP3 clients only.
            out.put_slice(b">2\r\n$21\r\ntracking-redir-broken\r\n:");
            out.put_slice(&self.payload);
            out.put_slice(b"\r\n");
            return;
        }
        if matches!(self.kind, Kind::Invalidate | Kind::InvalidateAll) {
            // Redis's `sendTrackingMessage`: one key per message, or a null for flush-all.
            out.put_slice(match protocol {
                Protocol::Resp3 => b">2\r\n$10\r\ninvalidate\r\n",
                Protocol::Resp2 => b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n",
            });
            match (self.kind, protocol) {
                (Kind::InvalidateAll, Protocol::Resp3) => out.put_slice(b"_\r\n"),
                (Kind::InvalidateAll, Protocol::Resp2) => out.put_slice(b"$-1\r\n"),
                _ => {
                    out.put_slice(b"*1\r\n");
                    Reply::Bulk(self.payload.clone()).encode(protocol, out);
                }
            }
            return;
        }
        let head: &[u8] = match (self.kind, protocol) {
            (Kind::Channel, Protocol::Resp2) => b"*3\r\n$7\r\nmessage\r\n",
            (Kind::Channel, Protocol::Resp3) => b">3\r\n$7\r\nmessage\r\n",
            (Kind::Pattern, Protocol::Resp2) => b"*4\r\n$8\r\npmessage\r\n",
            (Kind::Pattern, Protocol::Resp3) => b">4\r\n$8\r\npmessage\r\n",
            (Kind::Shard, Protocol::Resp2) => b"*3\r\n$8\r\nsmessage\r\n",
            (Kind::Shard, Protocol::Resp3) => b">3\r\n$8\r\nsmessage\r\n",
            (Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor, _) => {
                unreachable!("encoded above")
            }
        };
        out.put_slice(head);
        if self.kind == Kind::Pattern {
            Reply::Bulk(self.pattern.clone()).encode(protocol, out);
        }
        Reply::Bulk(self.channel.clone()).encode(protocol, out);
        Reply::Bulk(self.payload.clone()).encode(protocol, out);
    }

    /// The push as Redis writes it: `message`, `pmessage` or `smessage` (the reference the tests
    /// hold [`encode`](Self::encode) to).
    #[cfg(test)]
    pub fn reply(&self) -> Reply {
        let b = |s: &'static str| Reply::Bulk(Bytes::from_static(s.as_bytes()));
        Reply::Push(match self.kind {
            Kind::Channel => {
                vec![b("message"), Reply::Bulk(self.channel.clone()), Reply::Bulk(self.payload.clone())]
            }
            Kind::Pattern => vec![
                b("pmessage"),
                Reply::Bulk(self.pattern.clone()),
                Reply::Bulk(self.channel.clone()),
                Reply::Bulk(self.payload.clone()),
            ],
            Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor => {
                unreachable!("not a pub/sub message")
            }
            Kind::Shard => {
                vec![b("smessage"), Reply::Bulk(self.channel.clone()), Reply::Bulk(self.payload.clone())]
            }
        })
    }
}

/// `client-output-buffer-limit pubsub`: hard bytes, soft bytes and soft seconds (0: no limit).
#[derive(Debug)]
pub struct Limits {
    pub hard: AtomicU64,
    pub soft: AtomicU64,
    pub soft_seconds: AtomicU64,
}

impl Default for Limits {
    /// Redis's default: `32mb 8mb 60`.
    fn default() -> Self {
        Limits {
            hard: AtomicU64::new(32 << 20),
            soft: AtomicU64::new(8 << 20),
            soft_seconds: AtomicU64::new(60),
        }
    }
}

/// A client's subscriptions, each in the order it made them.
#[derive(Debug, Default)]
pub struct Subscriptions {
    pub channels: Vec<Bytes>,
    pub patterns: Vec<Bytes>,
    pub shard: Vec<Bytes>,
}

impl Subscriptions {
    pub fn of(&mut self, kind: Kind) -> &mut Vec<Bytes> {
        match kind {
            Kind::Channel | Kind::Invalidate | Kind::InvalidateAll | Kind::RedirBroken | Kind::Monitor => {
                &mut self.channels
            }
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }

    /// Redis's count in (P)SUBSCRIBE/(P)UNSUBSCRIBE replies: channels and patterns; shard
    /// channels count on their own.
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Shard => self.shard.len(),
            _ => self.channels.len() + self.patterns.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty() && self.shard.is_empty()
    }
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Message>,
    bytes: usize,
    /// Since when the queue has been above the soft limit.
    over_soft_since: Option<Instant>,
    /// Disconnected for passing a limit: nothing is queued any more.
    dead: bool,
}

#[derive(Debug)]
pub struct Subscriber {
    pub client: Arc<ClientHandle>,
    /// What it is subscribed to (changed by its connection, under the hub's lock).
    pub subs: Mutex<Subscriptions>,
    queue: Mutex<Queue>,
    ready: Notify,
}

impl Subscriber {
    pub fn new(client: Arc<ClientHandle>) -> Arc<Subscriber> {
        Arc::new(Subscriber { client, subs: Mutex::default(), queue: Mutex::default(), ready: Notify::new() })
    }

    /// Queues `messages`; a client past its output limit is disconnected instead. Returns
    /// whether it was cut off by this push.
    pub fn push_all(&self, messages: &[Message], limits: &Limits) -> bool {
        let mut q = self.queue.lock();
        if q.dead {
            return false;
        }
        for m in messages {
            q.bytes += m.size();
            q.items.push_back(m.clone());
        }
        let hard = limits.hard.load(Ordering::Relaxed) as usize;
        let soft = limits.soft.load(Ordering::Relaxed) as usize;
        let over_hard = hard > 0 && q.bytes > hard;
        // Over the soft limit: the first time starts its clock (as Redis does); past its seconds,
        // the client is cut off.
        let over_soft = soft > 0
            && q.bytes > soft
            && match q.over_soft_since {
                None => {
                    q.over_soft_since = Some(Instant::now());
                    false
                }
                Some(since) => {
                    since.elapsed() > Duration::from_secs(limits.soft_seconds.load(Ordering::Relaxed))
                }
            };
        if over_hard || over_soft {
            q.dead = true;
            q.items = VecDeque::new();
            q.bytes = 0;
            drop(q);
            tracing::warn!(
                client = self.client.id,
                peer = %self.client.peer,
                "pub/sub client over client-output-buffer-limit; disconnecting"
            );
            self.client.kill();
            return true;
        }
        drop(q);
        self.ready.notify_one();
        false
    }

    /// Takes queued messages, up to about `max_bytes` of them (at least one).
    pub fn take(&self, max_bytes: usize, limits: &Limits) -> Vec<Message> {
        let mut q = self.queue.lock();
        let mut out = Vec::new();
        let mut taken = 0;
        while taken < max_bytes {
            let Some(m) = q.items.pop_front() else { break };
            taken += m.size();
            out.push(m);
        }
        q.bytes -= taken.min(q.bytes);
        // Back under the soft limit: its clock starts again next time (as Redis's does).
        if q.bytes <= limits.soft.load(Ordering::Relaxed) as usize {
            q.over_soft_since = None;
        }
        out
    }

    /// Whether messages are waiting.
    pub fn has_messages(&self) -> bool {
        !self.queue.lock().items.is_empty()
    }

    /// Bytes queued (tests; CLIENT LIST shows `omem=0`, as it counts no reply buffers either).
    #[cfg(test)]
    pub fn queued_bytes(&self) -> usize {
        self.queue.lock().bytes
    }

    /// Completes when a message has been queued since the last call (or is queued now).
    pub async fn ready(&self) {
        self.ready.notified().await
    }
}

/// Counts the messages the hub delivered (for /metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub delivered: AtomicU64,
    pub disconnected: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: usize) -> Message {
        Message {
            kind: Kind::Channel,
            pattern: Bytes::new(),
            channel: Bytes::from_static(b"c"),
            payload: Bytes::from(vec![b'x'; payload]),
        }
    }

    fn client() -> Arc<ClientHandle> {
        Arc::new(ClientHandle::new(1, "a".into(), "l".into(), false))
    }

    #[test]
    fn the_hard_limit_disconnects_and_drops_the_queue() {
        let limits = Limits::default();
        limits.hard.store(10_000, Ordering::Relaxed);
        limits.soft.store(0, Ordering::Relaxed);
        let sub = Subscriber::new(client());
        assert!(!sub.push_all(&[message(4_000)], &limits));
        assert!(!sub.push_all(&[message(4_000)], &limits));
        assert!(!sub.client.is_killed());
        // Taken by the connection: room again.
        assert_eq!(sub.take(1 << 20, &limits).len(), 2);
        assert!(!sub.push_all(&[message(4_000), message(4_000)], &limits));
        assert!(sub.push_all(&[message(4_000)], &limits), "past 10,000 bytes");
        assert!(sub.client.is_killed());
        assert_eq!(sub.queued_bytes(), 0, "its queue is dropped");
        assert!(!sub.push_all(&[message(1)], &limits), "nothing is queued for it any more");
        assert!(!sub.has_messages());
    }

    #[test]
    fn the_soft_limit_disconnects_only_after_its_seconds() {
        let limits = Limits::default();
        limits.hard.store(0, Ordering::Relaxed);
        limits.soft.store(1_000, Ordering::Relaxed);
        limits.soft_seconds.store(0, Ordering::Relaxed);
        let sub = Subscriber::new(client());
        assert!(!sub.push_all(&[message(2_000)], &limits), "over soft: its clock starts");
        std::thread::sleep(Duration::from_millis(5));
        assert!(sub.push_all(&[message(1)], &limits), "still over soft after its 0 seconds");
        let sub = Subscriber::new(client());
        limits.soft_seconds.store(60, Ordering::Relaxed);
        assert!(!sub.push_all(&[message(2_000)], &limits));
        sub.take(1 << 20, &limits);
        assert!(!sub.push_all(&[message(2_000)], &limits), "drained below soft: the clock started again");
        assert!(!sub.client.is_killed());
    }

    #[test]
    fn pushes_are_redis_s_frames() {
        let m = Message {
            kind: Kind::Pattern,
            pattern: Bytes::from_static(b"n*"),
            channel: Bytes::from_static(b"news"),
            payload: Bytes::from_static(b"hi"),
        };
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            let mut direct = Out::new();
            m.encode(protocol, &mut direct);
            assert_eq!(
                direct.into_bytes(),
                m.reply().to_bytes(protocol),
                "the fast path writes what the reply would"
            );
        }
        let mut out = Out::new();
        m.encode(Protocol::Resp3, &mut out);
        assert_eq!(&out.into_bytes()[..], b">4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n");
    }
}
