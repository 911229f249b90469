//! Encoded replies waiting to be written. Small parts are copied into one buffer; a large bulk
//! value is kept as the `Bytes` the node sent and written in place with vectored writes, so a
//! 512 MiB GET costs the router no copy of its value.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Values at least this large are written where they lie instead of being copied.
const SHARE_FROM: usize = 16 * 1024;
/// Buffers with more spare room than this are let go after a write.
const KEEP_CAPACITY: usize = 256 * 1024;
/// Slices handed to one vectored write.
const MAX_SLICES: usize = 64;

#[derive(Debug, Default)]
pub struct Out {
    /// Finished parts, in order, before `buf`.
    parts: VecDeque<Bytes>,
    buf: BytesMut,
    /// Bytes in `parts`.
    parts_len: usize,
}

impl Out {
    pub fn new() -> Out {
        Out::default()
    }

    pub fn len(&self) -> usize {
        self.parts_len + self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reserve(&mut self, n: usize) {
        self.buf.reserve(n);
    }

    pub fn put_u8(&mut self, b: u8) {
        self.buf.put_u8(b);
    }

    pub fn put_slice(&mut self, s: &[u8]) {
        self.buf.put_slice(s);
    }

    /// Appends `b`, shared rather than copied when it is large.
    pub fn put_bytes(&mut self, b: &Bytes) {
        if b.len() < SHARE_FROM {
            self.buf.put_slice(b);
            return;
        }
        self.seal();
        self.parts_len += b.len();
        self.parts.push_back(b.clone());
    }

    /// Appends everything `other` holds (its shared values stay shared; the fast path frames a
    /// RESP-encoded reply this way once it knows its length).
    pub fn append(&mut self, mut other: Out) {
        if other.parts.is_empty() {
            self.buf.put_slice(&other.buf);
            return;
        }
        other.seal();
        self.seal();
        self.parts_len += other.parts_len;
        self.parts.append(&mut other.parts);
    }

    /// Moves what `buf` holds into `parts` (no copy: it keeps its allocation).
    fn seal(&mut self) {
        if !self.buf.is_empty() {
            let done = self.buf.split().freeze();
            self.parts_len += done.len();
            self.parts.push_back(done);
        }
    }

    /// Everything as one buffer (tests, one-off replies).
    pub fn into_bytes(mut self) -> Bytes {
        if self.parts.is_empty() {
            return self.buf.freeze();
        }
        self.seal();
        let mut all = BytesMut::with_capacity(self.parts_len);
        self.parts.iter().for_each(|p| all.put_slice(p));
        all.freeze()
    }

    /// Writes everything to `w` and empties `self`: one plain write when nothing is shared
    /// (the common case: small replies), vectored writes otherwise.
    pub async fn write_to<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.parts.is_empty() {
            w.write_all(&self.buf).await?;
            self.buf.clear();
        } else {
            self.seal();
            self.write_parts(w).await?;
        }
        // A no-op on sockets; a TLS stream may still hold the last record until flushed.
        w.flush().await?;
        if self.buf.capacity() > KEEP_CAPACITY {
            self.buf = BytesMut::new();
        }
        Ok(())
    }

    async fn write_parts<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> std::io::Result<()> {
        while !self.parts.is_empty() {
            let slices: Vec<IoSlice<'_>> =
                self.parts.iter().take(MAX_SLICES).map(|p| IoSlice::new(p)).collect();
            let mut n = w.write_vectored(&slices).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.parts_len -= n;
            while n > 0 {
                let front = self.parts.front_mut().expect("written bytes came from parts");
                if front.len() <= n {
                    n -= front.len();
                    self.parts.pop_front();
                } else {
                    front.advance(n);
                    n = 0;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_values_are_shared_and_everything_is_written_in_order() {
        let big = Bytes::from(vec![b'x'; 100_000]);
        let mut out = Out::new();
        out.put_slice(b"$100000\r\n");
        out.put_bytes(&big);
        out.put_slice(b"\r\n:1\r\n");
        assert_eq!(out.len(), 9 + 100_000 + 6);
        assert_eq!(out.parts.back().unwrap().as_ptr(), big.as_ptr(), "the value is not copied");
        let (mut a, mut b) = tokio::io::duplex(4096);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut b, &mut got).await.unwrap();
            got
        });
        out.write_to(&mut a).await.unwrap();
        drop(a);
        let got = reader.await.unwrap();
        assert!(out.is_empty());
        assert_eq!(&got[..9], b"$100000\r\n");
        assert!(got[9..100_009].iter().all(|&c| c == b'x'));
        assert_eq!(&got[100_009..], b"\r\n:1\r\n");
    }

    #[test]
    fn append_keeps_shared_values_shared_and_the_order() {
        let big = Bytes::from(vec![b'y'; SHARE_FROM]);
        let mut body = Out::new();
        body.put_slice(b"$16384\r\n");
        body.put_bytes(&big);
        body.put_slice(b"\r\n");
        let mut out = Out::new();
        out.put_slice(b"head");
        out.append(body);
        out.put_slice(b"tail");
        assert!(out.parts.iter().any(|p| p.as_ptr() == big.as_ptr()), "the value is not copied");
        let all = out.into_bytes();
        assert!(all.starts_with(b"head$16384\r\nyy") && all.ends_with(b"yy\r\ntail"));
        assert_eq!(all.len(), 4 + 8 + SHARE_FROM + 2 + 4);
        let mut small = Out::new();
        small.put_slice(b"x");
        let mut out = Out::new();
        out.append(small);
        assert_eq!(&out.into_bytes()[..], b"x");
    }
}
