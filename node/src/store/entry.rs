//! One stored key/value pair, laid out to keep per-key overhead low.
//!
//! The key and the value share a single heap allocation (`key ++ value ++ spare`), and the fixed
//! part is 40 bytes, so a 16-byte key with a 32-byte value costs one 48-byte allocation plus the
//! 40-byte slot and ~5 bytes of index: about what Redis spends on the same pair.

/// Bytes the fixed part of an entry occupies in a shard's slab (see `shard.rs`).
pub const ENTRY_SIZE: usize = std::mem::size_of::<Option<Entry>>();

/// Values below this size grow by doubling on APPEND/SETRANGE; larger ones by this much at a time
/// (the same greedy rule Redis's sds strings use, so appending in a loop stays linear).
const GROW_STEP: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Entry {
    /// `key ++ value`, possibly followed by spare capacity for the value to grow into.
    data: Box<[u8]>,
    /// Absolute expiry time in Unix ms; 0 means no TTL.
    pub expire_at: u64,
    key_len: u32,
    val_len: u32,
    /// Last access on the LRU clock (centiseconds, wrapping); see [`lru_now`].
    pub lru: u32,
    /// [`TOMBSTONE`] and [`IN_BASE`] bits.
    pub flags: u32,
}

/// The entry records a deletion: it hides the key's entry in the snapshot underneath, and has no
/// value of its own.
pub const TOMBSTONE: u32 = 1;
/// The snapshot underneath has an entry for this key (so removing this entry must leave a
/// tombstone while that entry could still be served).
pub const IN_BASE: u32 = 2;

/// A string edited in place (APPEND, SETRANGE, SETBIT, BITFIELD, HyperLogLogs): Redis reports
/// such a value as `raw` whatever it holds, until a write replaces it whole (SET, INCR).
pub const RAW: u32 = 1 << 5;
/// A string written whole by a command Redis never stores as an integer (INCRBYFLOAT's result is
/// `embstr`, or `raw` past 44 bytes, even when it reads as one).
pub const NOT_INT: u32 = 1 << 6;

/// Bits 2-4: the value's type (`object::ValueType`); 0 is a string, held in the entry itself.
/// Any other type lives in the shard's object table (the entry's value bytes are empty).
const TYPE_SHIFT: u32 = 2;
const TYPE_MASK: u32 = 0b111 << TYPE_SHIFT;
/// Bits 8-31: the LFU counter (8 bits) and the minute it last decayed (16); the flags below
/// them are [`LOW_FLAGS`].
const LFU_SHIFT: u32 = 8;
pub const LOW_FLAGS: u32 = (1 << LFU_SHIFT) - 1;

/// The LRU clock: store time in centiseconds, truncated to 32 bits (wraps every ~497 days; idle
/// times are compared with wrapping arithmetic).
pub fn lru_now(now_ms: u64) -> u32 {
    (now_ms / 10) as u32
}

impl Entry {
    pub fn new(key: &[u8], value: &[u8], expire_at: u64, lru: u32) -> Entry {
        let mut data = Vec::with_capacity(key.len() + value.len());
        data.extend_from_slice(key);
        data.extend_from_slice(value);
        Entry {
            data: data.into_boxed_slice(),
            expire_at,
            key_len: key.len() as u32,
            val_len: value.len() as u32,
            lru,
            flags: super::lfu::initial(lru) << LFU_SHIFT,
        }
    }

    /// The LFU counter and its minute (`super::lfu`): minute << 8 | counter.
    #[inline]
    pub fn lfu_bits(&self) -> u32 {
        self.flags >> LFU_SHIFT
    }

    pub fn set_lfu_bits(&mut self, bits: u32) {
        self.flags = (self.flags & LOW_FLAGS) | (bits << LFU_SHIFT);
    }

    /// Records an access: the LRU clock, and the LFU counter when `lfu` says it is kept.
    #[inline]
    pub fn touch(&mut self, now_ms: u64, lfu: Option<super::lfu::Lfu>) {
        let lru = lru_now(now_ms);
        self.lru = lru;
        if let Some(l) = lfu {
            self.set_lfu_bits(l.touched(self.lfu_bits(), lru, fastrand::f64()));
        }
    }

    /// A deletion marker for `key` (`in_base`: the base snapshot holds the key).
    pub fn tombstone(key: &[u8], in_base: bool) -> Entry {
        let mut e = Entry::new(key, b"", 0, 0);
        e.flags = TOMBSTONE | if in_base { IN_BASE } else { 0 };
        e
    }

    pub fn is_tombstone(&self) -> bool {
        self.flags & TOMBSTONE != 0
    }

    pub fn value_type(&self) -> super::object::ValueType {
        super::object::ValueType::from_u32((self.flags & TYPE_MASK) >> TYPE_SHIFT)
            .unwrap_or(super::object::ValueType::String)
    }

    pub fn set_value_type(&mut self, t: super::object::ValueType) {
        self.flags = (self.flags & !TYPE_MASK) | ((t as u32) << TYPE_SHIFT);
    }

    /// Redis's encoding of this string value: `raw` once edited in place ([`RAW`]), else by the
    /// value as written: `int` for a canonical integer (unless [`NOT_INT`]), `embstr` up to 44
    /// bytes, `raw` past that.
    pub fn string_encoding(&self) -> &'static str {
        let v = self.value();
        if self.flags & RAW != 0 || v.len() > 44 {
            "raw"
        } else if self.flags & NOT_INT == 0 && v.len() <= 20 && super::object::set::as_int(v).is_some() {
            "int"
        } else {
            "embstr"
        }
    }

    /// Marks the string as one Redis would report `raw` ([`RAW`]) or never `int` ([`NOT_INT`]).
    pub fn mark_string(&mut self, flag: u32) {
        debug_assert!(flag == RAW || flag == NOT_INT);
        self.flags |= flag;
    }

    pub fn in_base(&self) -> bool {
        self.flags & IN_BASE != 0
    }

    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.data[..self.key_len as usize]
    }

    #[inline]
    pub fn value(&self) -> &[u8] {
        let k = self.key_len as usize;
        &self.data[k..k + self.val_len as usize]
    }

    /// Heap bytes this entry owns (its allocation, spare capacity included).
    #[inline]
    pub fn heap_size(&self) -> usize {
        self.data.len()
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expire_at != 0 && self.expire_at <= now_ms
    }

    /// Replaces the value, reusing the allocation when the new value fits exactly or nearly.
    pub fn set_value(&mut self, value: &[u8]) {
        let k = self.key_len as usize;
        let cap = self.data.len() - k;
        if value.len() <= cap && cap - value.len() <= cap / 4 {
            self.data[k..k + value.len()].copy_from_slice(value);
        } else {
            let mut data = Vec::with_capacity(k + value.len());
            data.extend_from_slice(self.key());
            data.extend_from_slice(value);
            self.data = data.into_boxed_slice();
        }
        self.val_len = value.len() as u32;
        self.flags &= !(RAW | NOT_INT);
    }

    /// Makes the value `len` bytes long, zero-filling new bytes, growing greedily; returns the
    /// value for in-place edits (APPEND, SETRANGE).
    pub fn value_resize(&mut self, len: usize) -> &mut [u8] {
        let k = self.key_len as usize;
        let cap = self.data.len() - k;
        if len > cap {
            let new_cap = if len < GROW_STEP { len * 2 } else { len + GROW_STEP };
            let mut data = vec![0u8; k + new_cap];
            data[..k + self.val_len as usize].copy_from_slice(&self.data[..k + self.val_len as usize]);
            self.data = data.into_boxed_slice();
        } else if len > self.val_len as usize {
            self.data[k + self.val_len as usize..k + len].fill(0);
        }
        self.val_len = len as u32;
        self.flags |= RAW;
        &mut self.data[k..k + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_compact() {
        assert_eq!(ENTRY_SIZE, 40, "Option<Entry> must use the Box niche");
    }

    #[test]
    fn key_value_round_trip_and_resize() {
        let mut e = Entry::new(b"key", b"value", 0, 1);
        assert_eq!(e.key(), b"key");
        assert_eq!(e.value(), b"value");
        e.value_resize(8)[5..].copy_from_slice(b"!!!");
        assert_eq!(e.value(), b"value!!!");
        assert!(e.heap_size() >= 3 + 16, "grew greedily");
        e.set_value(b"");
        assert_eq!(e.value(), b"");
        assert_eq!(e.key(), b"key");
        e.value_resize(2);
        assert_eq!(e.value(), b"\0\0", "growth zero-fills");
    }
}
