//! Small byte strings handed out as slices of a shared chunk: one allocation per chunk instead of
//! one per string (the router's fast-path number arguments, the node's small GET values). A kept
//! slice keeps its whole chunk alive, so the strings should be short-lived.

use bytes::{BufMut, Bytes, BytesMut};

/// A copy of `bytes` cut from `chunk`; when the room left in it is too small, `chunk` is first
/// replaced by a new one of `size` bytes (or of `bytes`'s length, if larger).
pub fn cut(chunk: &mut BytesMut, bytes: &[u8], size: usize) -> Bytes {
    // Everything written before was split off: `capacity` is the room left.
    if chunk.capacity() < bytes.len() {
        *chunk = BytesMut::with_capacity(size.max(bytes.len()));
    }
    chunk.put_slice(bytes);
    chunk.split().freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_share_a_chunk_until_its_room_runs_out() {
        let mut chunk = BytesMut::new();
        let a = cut(&mut chunk, b"abc", 8);
        let b = cut(&mut chunk, b"defg", 8);
        assert_eq!((&a[..], &b[..]), (&b"abc"[..], &b"defg"[..]));
        assert_eq!(a.as_ptr().wrapping_add(3), b.as_ptr(), "side by side in one chunk");
        let c = cut(&mut chunk, b"hi", 8);
        assert_eq!(&c[..], b"hi");
        assert_ne!(b.as_ptr().wrapping_add(4), c.as_ptr(), "one byte left: a new chunk");
        let big = cut(&mut chunk, &[7; 20], 8);
        assert_eq!(&big[..], &[7; 20][..], "larger than a chunk: a chunk of its own size");
    }
}
