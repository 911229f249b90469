//! MONITOR: every command this router runs, as a line to each monitoring client, in Redis's
//! format (`+<secs>.<micros> [<db> <client>] "arg" ...`, arguments escaped as `sdscatrepr`
//! escapes them, AUTH's and HELLO AUTH's secrets redacted).
//!
//! A monitoring connection's queue is its pub/sub queue ([`Subscriber`], bounded by the
//! `client-output-buffer-limit pubsub` limits: a monitor that does not read is cut off, never
//! grown without bound). The list holds them weakly: a connection that closes or RESETs drops
//! its queue and leaves the list at the next line. With nobody monitoring, a request pays one
//! relaxed load ([`Monitors::active`]). Lines are fed when a command is answered (the record
//! stage), so a command's line follows its execution, as in Redis 7.0.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::pubsub::subscriber::{Kind, Limits, Message, Subscriber};

#[derive(Debug, Default)]
pub struct Monitors {
    /// Monitoring connections now (an upper bound: a closed one leaves at the next line).
    live: AtomicUsize,
    queues: Mutex<Vec<Weak<Subscriber>>>,
}

impl Monitors {
    /// Whether anyone monitors (the check every answered request makes).
    #[inline]
    pub fn active(&self) -> bool {
        self.live.load(Ordering::Relaxed) != 0
    }

    /// MONITOR: `queue`'s connection gets every line from now on.
    pub fn add(&self, queue: &Arc<Subscriber>) {
        let mut queues = self.queues.lock();
        queues.retain(|w| w.strong_count() > 0);
        if !queues.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(queue))) {
            queues.push(Arc::downgrade(queue));
        }
        self.live.store(queues.len(), Ordering::Relaxed);
    }

    /// Sends `line` to every monitoring connection.
    pub fn feed(&self, line: Bytes, limits: &Limits) {
        let message =
            Message { kind: Kind::Monitor, pattern: Bytes::new(), channel: Bytes::new(), payload: line };
        let mut queues = self.queues.lock();
        queues.retain(|w| match w.upgrade() {
            Some(queue) => {
                queue.push_all(std::slice::from_ref(&message), limits);
                true
            }
            None => false,
        });
        self.live.store(queues.len(), Ordering::Relaxed);
    }
}

/// A monitor line without its `+` and CRLF: `<secs>.<micros> [<db> <client>] "arg" ...`, the
/// client `ip:port` (TCP) or `unix:<path>`.
pub fn line(unix_micros: u128, client: &str, args: &[Bytes]) -> Bytes {
    let mut out =
        format!("{}.{:06} [0 {client}]", unix_micros / 1_000_000, unix_micros % 1_000_000).into_bytes();
    let redacted = redacted(args);
    for (i, arg) in args.iter().enumerate() {
        out.push(b' ');
        if redacted.contains(&i) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            repr(arg, &mut out);
        }
    }
    Bytes::from(out)
}

/// Which arguments Redis hides: every one of AUTH's, and HELLO's two after `AUTH`.
fn redacted(args: &[Bytes]) -> Vec<usize> {
    let Some(name) = args.first() else { return Vec::new() };
    if name.eq_ignore_ascii_case(b"auth") {
        return (1..args.len()).collect();
    }
    if name.eq_ignore_ascii_case(b"hello")
        && let Some(at) = args.iter().position(|a| a.eq_ignore_ascii_case(b"auth"))
    {
        return (at + 1..(at + 3).min(args.len())).collect();
    }
    Vec::new()
}

/// Redis's `sdscatrepr`: the bytes quoted, `\` and `"` escaped, the usual control characters by
/// name, other non-printable bytes as `\xHH`.
fn repr(arg: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in arg {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&[u8]]) -> Vec<Bytes> {
        a.iter().map(|x| Bytes::copy_from_slice(x)).collect()
    }

    #[test]
    fn lines_are_redis_s() {
        // (The texts redis-server 7.0.15 printed for the same commands.)
        let l = line(1_796_491_814_832_365, "127.0.0.1:45454", &args(&[b"SET", b"a\"b", b"x\x92\n"]));
        assert_eq!(&l[..], &b"1796491814.832365 [0 127.0.0.1:45454] \"SET\" \"a\\\"b\" \"x\\x92\\n\""[..]);
        let l = line(5, "unix:/tmp/s", &args(&[b"AUTH", b"u", b"p"]));
        assert_eq!(&l[..], &b"0.000005 [0 unix:/tmp/s] \"AUTH\" \"(redacted)\" \"(redacted)\""[..]);
        let l = line(0, "c", &args(&[b"HELLO", b"3", b"AUTH", b"default", b"pw", b"SETNAME", b"n"]));
        assert_eq!(
            &l[..],
            &b"0.000000 [0 c] \"HELLO\" \"3\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"n\""[..]
        );
        let l = line(0, "c", &args(&[b"GET", b"a\\x\x07\x08\t\r"]));
        assert_eq!(&l[..], &b"0.000000 [0 c] \"GET\" \"a\\\\x\\a\\b\\t\\r\""[..]);
    }
}
