//! A pack: byte strings laid end to end, each behind its LEB128 length. The compact encoding of
//! small hashes (Redis's listpack plays this part) and the serialized form of every typed value
//! in snapshots and slot transfers. Lookups are linear, which is what makes it small: it is only
//! used below the configured size thresholds, where a scan of a few hundred bytes is cheaper than
//! a hash table's pointers.

/// Why bytes are not a valid pack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("pack element length runs past the end of the value")]
    Truncated,
    #[error("pack holds {0} elements, which does not fit the value's type")]
    BadCount(usize),
    #[error("pack element is not a valid {0}")]
    BadElement(&'static str),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pack {
    buf: Vec<u8>,
    len: usize,
}

/// Appends `s` to `buf` behind its length.
pub fn put(buf: &mut Vec<u8>, s: &[u8]) {
    let mut n = s.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            buf.push(byte);
            break;
        }
        buf.push(byte | 0x80);
    }
    buf.extend_from_slice(s);
}

/// The length written by [`put`] at `at` in bytes this process wrote, and where what follows it
/// starts. Unchecked (it panics past the end): untrusted bytes go through [`Pack::from_bytes`].
pub fn read_len(buf: &[u8], at: usize) -> (usize, usize) {
    let (mut len, mut shift, mut i) = (0usize, 0, at);
    loop {
        let b = buf[i];
        i += 1;
        len |= usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return (len, i);
        }
    }
}

/// [`read_len`] with its common case inline: a length under 128 is one byte.
#[inline(always)]
fn short_len(buf: &[u8], at: usize) -> (usize, usize) {
    match buf[at] {
        b if b < 0x80 => (usize::from(b), at + 1),
        _ => read_len(buf, at),
    }
}

/// The element starting at `at`: its bytes and where the next one starts. Inlined: it is the
/// step of every walk over a pack (a packed hash's HSET walks its fields with it).
#[inline]
pub(super) fn next(buf: &[u8], at: usize) -> Result<(&[u8], usize), PackError> {
    let mut len = 0usize;
    let mut shift = 0;
    let mut i = at;
    loop {
        let byte = *buf.get(i).ok_or(PackError::Truncated)?;
        i += 1;
        if shift > 56 {
            return Err(PackError::Truncated);
        }
        len |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    let end = i.checked_add(len).filter(|&e| e <= buf.len()).ok_or(PackError::Truncated)?;
    Ok((&buf[i..end], end))
}

/// Iterates over the elements of well-formed pack bytes.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.at >= self.buf.len() {
            return None;
        }
        let (s, end) = next(self.buf, self.at).ok()?;
        self.at = end;
        Some(s)
    }
}

impl Pack {
    /// Checks `bytes` and takes them as a pack.
    pub fn from_bytes(bytes: &[u8]) -> Result<Pack, PackError> {
        let mut at = 0;
        let mut len = 0;
        while at < bytes.len() {
            at = next(bytes, at)?.1;
            len += 1;
        }
        Ok(Pack { buf: bytes.to_vec(), len })
    }

    pub fn from_items<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Pack {
        let mut p = Pack::default();
        for s in items {
            p.push(s);
        }
        p
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter { buf: &self.buf, at: 0 }
    }

    /// The index `i` of the pair (elements `2i` and `2i + 1`) whose first element is `first`:
    /// a packed hash's field lookup. One pass that compares each pair's first element and steps
    /// over the second.
    /// Lengths are read unchecked: a pack's bytes are well formed (checked on the way in).
    pub fn pair_position(&self, first: &[u8]) -> Option<usize> {
        let buf = &self.buf[..];
        let (mut at, mut i) = (0, 0);
        while at < buf.len() {
            let (len, start) = short_len(buf, at);
            let end = start + len;
            let (second, second_start) = short_len(buf, end);
            if len == first.len() && buf[start..end] == *first {
                return Some(i);
            }
            (at, i) = (second_start + second, i + 1);
        }
        None
    }

    pub fn push(&mut self, s: &[u8]) {
        put(&mut self.buf, s);
        self.len += 1;
    }

    /// Byte offsets `(start, end)` of element `i`.
    fn span(&self, i: usize) -> Option<(usize, usize)> {
        let mut at = 0;
        for _ in 0..i {
            at = next(&self.buf, at).ok()?.1;
        }
        (at < self.buf.len()).then(|| (at, next(&self.buf, at).expect("well-formed").1))
    }

    /// Replaces elements `i..i + count` with `with`.
    pub fn splice(&mut self, i: usize, count: usize, with: &[&[u8]]) {
        let start = self.span(i).map_or(self.buf.len(), |s| s.0);
        let mut end = start;
        for _ in 0..count {
            end = next(&self.buf, end).expect("element in range").1;
        }
        let mut new = Vec::new();
        for s in with {
            put(&mut new, s);
        }
        self.buf.splice(start..end, new);
        self.len = self.len - count + with.len();
    }

    /// Heap bytes held.
    pub fn mem(&self) -> usize {
        self.buf.capacity()
    }

    pub fn shrink(&mut self) {
        if self.buf.capacity() > self.buf.len() + self.buf.len() / 4 + 16 {
            self.buf.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_splice_and_damage() {
        let long = vec![7u8; 300];
        let mut p = Pack::from_items([&b"a"[..], b"", &long]);
        assert_eq!(p.len(), 3);
        let back = Pack::from_bytes(p.bytes()).unwrap();
        assert_eq!(back.iter().collect::<Vec<_>>(), vec![&b"a"[..], b"", &long[..]]);
        p.splice(1, 1, &[b"x", b"yy"]);
        assert_eq!(p.iter().collect::<Vec<_>>(), vec![&b"a"[..], b"x", b"yy", &long[..]]);
        p.splice(0, 2, &[]);
        assert_eq!(p.len(), 2);
        assert_eq!(p.iter().next(), Some(&b"yy"[..]));
        p.splice(2, 0, &[b"end"]);
        assert_eq!(p.iter().last(), Some(&b"end"[..]));
        let mut bad = p.bytes().to_vec();
        bad.truncate(bad.len() - 1);
        assert_eq!(Pack::from_bytes(&bad), Err(PackError::Truncated));
        assert_eq!(Pack::from_bytes(&[0xff; 12]), Err(PackError::Truncated));
    }

    #[test]
    fn pairs_are_found_by_their_first_element_only() {
        let long = vec![7u8; 300];
        let p = Pack::from_items([&b"f1"[..], b"f2", b"f2", b"v2", &long, b"", b"", &long]);
        assert_eq!(p.pair_position(b"f1"), Some(0));
        assert_eq!(p.pair_position(b"f2"), Some(1), "the first pair's value f2 is not a field");
        assert_eq!(p.pair_position(b"v2"), None, "a value is never taken for a field");
        assert_eq!(p.pair_position(&long), Some(2));
        assert_eq!(p.pair_position(b""), Some(3));
        assert_eq!(p.pair_position(b"missing"), None);
        assert_eq!(Pack::default().pair_position(b"f1"), None);
        // Each answer is the one the plain walk over every other element gives.
        for probe in [&b"f1"[..], b"f2", b"v2", &long, b"", b"missing"] {
            assert_eq!(p.pair_position(probe), p.iter().step_by(2).position(|f| f == probe));
        }
    }
}
