//! Streams: entries in Redis's node layout, and consumer groups.
//!
//! Entries live in listpack nodes (`super::listpack`), keyed by their first ("master") ID in an
//! ordered map, exactly as Redis keeps them in a radix tree: a node opens with its live and
//! deleted counts and the master entry's field names, and each entry stores its ID as deltas
//! from the master ID, its fields only when they differ from the master's (the SAMEFIELDS flag),
//! its values, and a trailing element count. Deleting marks an entry with a flag; a node goes
//! when its last live entry does. Nodes fill up where Redis's do (`stream-node-max-bytes`,
//! `stream-node-max-entries`), so memory per entry, `XTRIM ~` and `XINFO STREAM`'s node counts
//! match redis-server's.
//!
//! Consumer groups keep Redis's structures: a group's pending entries list (PEL) maps an ID to
//! its owner, last delivery time and delivery count; each consumer keeps the IDs it owns. The
//! commands (`crate::commands::stream`) are written over the primitives here; the rules that
//! concern a group's `entries_read` counter and lag (Redis 7.0's `streamEstimateDistance...`)
//! live here too, since they only read the stream's own counters.
//!
//! One concept: the node layout. Appending, reading, deleting and trimming all edit the same
//! listpack nodes and must keep the counters beside them (length, first ID, the nodes' memory)
//! in step, so they stay in one file; the serialized form is `pack`.

mod pack;
pub mod rdb;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bytes::Bytes;

pub use super::limits::NodeLimits;
use super::limits::alloc_size;
use super::listpack::{self, Ele};

/// A stream entry ID: milliseconds and sequence number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID (`None` past the last possible one).
    pub fn incr(self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId::new(self.ms, self.seq + 1))
        } else if self.ms < u64::MAX {
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            None
        }
    }

    /// The previous ID (`None` before 0-0).
    pub fn decr(self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId::new(self.ms, self.seq - 1))
        } else if self.ms > 0 {
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            None
        }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    fn to_be(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;
/// Redis's `STREAM_LISTPACK_MAX_SIZE`: the most bytes one node (or one entry) may hold.
pub const LISTPACK_MAX_SIZE: usize = 1 << 30;
/// A group's `entries_read` when it is not known (Redis's `SCG_INVALID_ENTRIES_READ`).
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

/// One entry as read: its ID and its fields and values, flat (`field, value, field, ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: StreamId,
    pub fields: Vec<Bytes>,
}

/// A pending entry of a group: who has it, since when, how often it was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    pub consumer: Bytes,
    pub delivery_time: i64,
    pub delivery_count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumer {
    pub seen_time: i64,
    /// The IDs this consumer owns in its group's PEL.
    pub pel: BTreeSet<StreamId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Entries the group has read, or [`ENTRIES_READ_UNKNOWN`].
    pub entries_read: i64,
    pub pel: BTreeMap<StreamId, Nack>,
    pub consumers: BTreeMap<Bytes, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group { last_id, entries_read, pel: BTreeMap::new(), consumers: BTreeMap::new() }
    }

    /// Drops `id` from the PEL and from its owner's list; whether it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pel.remove(&id) {
            Some(n) => {
                if let Some(c) = self.consumers.get_mut(&n.consumer) {
                    c.pel.remove(&id);
                }
                true
            }
            None => false,
        }
    }

    /// Gives the pending entry `id` to `consumer` (which must exist), creating the PEL entry if
    /// needed; returns it for its caller to set times and counts.
    pub fn assign(&mut self, id: StreamId, consumer: &Bytes, now: i64) -> &mut Nack {
        if let Some(old) = self.pel.get(&id).map(|n| n.consumer.clone())
            && old != *consumer
            && let Some(c) = self.consumers.get_mut(&old)
        {
            c.pel.remove(&id);
        }
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pel.insert(id);
        }
        let nack = self.pel.entry(id).or_insert_with(|| Nack {
            consumer: consumer.clone(),
            delivery_time: now,
            delivery_count: 1,
        });
        nack.consumer = consumer.clone();
        nack
    }
}

/// A stream value.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    /// Listpack nodes by master ID.
    nodes: BTreeMap<StreamId, Vec<u8>>,
    /// Live entries.
    pub length: u64,
    pub last_id: StreamId,
    /// The first live entry's ID as last recorded (Redis's `first_id`; 0-0 when empty).
    pub first_id: StreamId,
    pub max_deleted: StreamId,
    pub entries_added: u64,
    pub groups: BTreeMap<Bytes, Group>,
    /// What the nodes cost (allocations and map slots), kept as they change: the store asks
    /// for a value's memory after every write, and a sum over thousands of nodes each time
    /// would make every XADD cost as much as the stream is long.
    node_bytes: usize,
}

/// Equal contents (what the nodes cost in memory is not part of the value).
impl PartialEq for Stream {
    fn eq(&self, o: &Stream) -> bool {
        self.nodes == o.nodes
            && self.length == o.length
            && self.last_id == o.last_id
            && self.first_id == o.first_id
            && self.max_deleted == o.max_deleted
            && self.entries_added == o.entries_added
            && self.groups == o.groups
    }
}

impl Eq for Stream {}

/// What one node costs: its allocation and its slot in the map.
fn node_cost(_lp: &[u8], capacity: usize) -> usize {
    alloc_size(capacity) + 16 + 32
}

/// What a node holds, decoded: counts and each entry's ID, flags and where its fields are (the
/// fields themselves are read only for the entries a command returns).
struct Node<'a> {
    lp: &'a [u8],
    count: i64,
    deleted: i64,
    /// Byte offset of the deleted count.
    deleted_at: usize,
    master_fields: Vec<Ele<'a>>,
    entries: Vec<RawEntry>,
}

struct RawEntry {
    id: StreamId,
    flags: i64,
    flags_at: usize,
    /// Offset of the entry's field count (or, with SAMEFIELDS, of its first value).
    fields_at: usize,
}

impl RawEntry {
    fn live(&self) -> bool {
        self.flags & FLAG_DELETED == 0
    }
}

impl Node<'_> {
    /// The entry with its fields and values.
    fn entry(&self, e: &RawEntry) -> Entry {
        let mut c = Cursor { lp: self.lp, at: e.fields_at };
        let mut fields = Vec::new();
        let read = |c: &mut Cursor<'_>| c.ele().expect("a stream node this process wrote").to_bytes();
        if e.flags & FLAG_SAMEFIELDS != 0 {
            fields.reserve(self.master_fields.len() * 2);
            for f in &self.master_fields {
                fields.push(f.to_bytes());
                fields.push(read(&mut c));
            }
        } else {
            let n = c.count().expect("a stream node this process wrote");
            fields.reserve(n * 2);
            for _ in 0..n * 2 {
                fields.push(read(&mut c));
            }
        }
        Entry { id: e.id, fields }
    }
}

fn need<T>(v: Option<T>) -> Result<T, listpack::Malformed> {
    v.ok_or(listpack::Malformed)
}

/// Reads a node's elements in order.
struct Cursor<'a> {
    lp: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The next element and its offset.
    fn next(&mut self) -> Result<(Ele<'a>, usize), listpack::Malformed> {
        let here = self.at;
        let (e, n) = need(listpack::read(self.lp, self.at)?)?;
        self.at = n;
        Ok((e, here))
    }

    fn ele(&mut self) -> Result<Ele<'a>, listpack::Malformed> {
        Ok(self.next()?.0)
    }

    fn int(&mut self) -> Result<i64, listpack::Malformed> {
        need(self.ele()?.int())
    }

    /// A field count (at most what `u32` holds, as Redis's listpacks).
    fn count(&mut self) -> Result<usize, listpack::Malformed> {
        let n = self.int()?;
        if !(0..=i64::from(u32::MAX)).contains(&n) {
            return Err(listpack::Malformed);
        }
        Ok(n as usize)
    }

    fn at_end(&self) -> Result<bool, listpack::Malformed> {
        Ok(listpack::read(self.lp, self.at)?.is_none())
    }
}

/// A node's header (counts and master fields) and a cursor at its first entry.
fn header(lp: &[u8]) -> Result<(Node<'_>, Cursor<'_>), listpack::Malformed> {
    let mut c = Cursor { lp, at: listpack::HEADER };
    let count = c.int()?;
    let (deleted, deleted_at) = c.next()?;
    let deleted = need(deleted.int())?;
    let nmaster = c.count()?;
    let mut master_fields = Vec::with_capacity(nmaster.min(1024));
    for _ in 0..nmaster {
        master_fields.push(c.ele()?);
    }
    if c.int()? != 0 {
        return Err(listpack::Malformed);
    }
    Ok((Node { lp, count, deleted, deleted_at, master_fields, entries: Vec::new() }, c))
}

/// The entry at the cursor (`None` at the node's end), its fields walked over (and so checked).
fn next_entry(
    c: &mut Cursor<'_>,
    master: StreamId,
    nmaster: usize,
) -> Result<Option<RawEntry>, listpack::Malformed> {
    if c.at_end()? {
        return Ok(None);
    }
    let (flags, flags_at) = c.next()?;
    let flags = need(flags.int())?;
    let ms = c.int()?;
    let seq = c.int()?;
    let id = StreamId::new(master.ms.wrapping_add(ms as u64), master.seq.wrapping_add(seq as u64));
    let fields_at = c.at;
    if flags & FLAG_SAMEFIELDS != 0 {
        for _ in 0..nmaster {
            c.ele()?;
        }
    } else {
        for _ in 0..c.count()? * 2 {
            c.ele()?;
        }
    }
    let _lp_count = c.int()?;
    Ok(Some(RawEntry { id, flags, flags_at, fields_at }))
}

fn decode(master: StreamId, lp: &[u8]) -> Result<Node<'_>, listpack::Malformed> {
    let (mut node, mut c) = header(lp)?;
    let nmaster = node.master_fields.len();
    while let Some(e) = next_entry(&mut c, master, nmaster)? {
        node.entries.push(e);
    }
    Ok(node)
}

/// A node's master entry alone: live and deleted counts and the master fields (what an append
/// needs, without decoding the node's entries).
fn master_entry(lp: &[u8]) -> (i64, i64, Vec<Ele<'_>>) {
    let read = || -> Result<(i64, i64, Vec<Ele<'_>>), listpack::Malformed> {
        let mut c = Cursor { lp, at: listpack::HEADER };
        let count = c.int()?;
        let deleted = c.int()?;
        let n = c.count()?;
        let mut fields = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            fields.push(c.ele()?);
        }
        Ok((count, deleted, fields))
    };
    read().expect("a stream node this process wrote")
}

/// A node this process wrote (always well formed).
fn decoded(master: StreamId, lp: &[u8]) -> Node<'_> {
    decode(master, lp).expect("a stream node this process wrote")
}

/// How a stream is trimmed (XADD/XTRIM `MAXLEN` or `MINID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

impl Stream {
    pub fn len(&self) -> usize {
        self.length as usize
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Listpack nodes (`XINFO STREAM`'s `radix-tree-keys`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes a radix tree over the node keys has (`radix-tree-nodes`): the root, every
    /// branch point, and every node a branch or a key starts, as Redis's rax compresses chains.
    pub fn rax_nodes(&self) -> usize {
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(|k| k.to_be()).collect();
        if keys.is_empty() { 1 } else { trie_nodes(&keys, 0, false) }
    }

    /// The ID XADD `*` makes at `now_ms` (`None`: the stream is at the last possible ID).
    pub fn next_id(&self, now_ms: u64) -> Option<StreamId> {
        if now_ms > self.last_id.ms { Some(StreamId::new(now_ms, 0)) } else { self.last_id.incr() }
    }

    /// Appends an entry with ID `id` (greater than `last_id`: the caller checked) and the flat
    /// field/value list `fields`.
    pub fn append(&mut self, id: StreamId, fields: &[Bytes], limits: NodeLimits) {
        let numfields = (fields.len() / 2) as i64;
        let total: usize = fields.iter().map(|f| f.len()).sum();
        let max_bytes = if limits.max_bytes == 0 || limits.max_bytes > LISTPACK_MAX_SIZE {
            LISTPACK_MAX_SIZE
        } else {
            limits.max_bytes
        };
        let mut tail = self.nodes.last_key_value().map(|(k, _)| *k);
        if let Some(master) = tail {
            let lp = &self.nodes[&master];
            let (count, deleted, _) = master_entry(lp);
            if lp.len() + total >= max_bytes
                || (limits.max_entries > 0 && count + deleted >= limits.max_entries as i64)
            {
                tail = None;
            }
        }
        if tail.is_none()
            && let Some(lp) = self.nodes.values_mut().next_back()
        {
            // A full node takes no more entries: give back what growing it reserved (Redis's
            // `lpShrinkToFit`).
            let before = node_cost(lp, lp.capacity());
            lp.shrink_to_fit();
            self.node_bytes = self.node_bytes - before + node_cost(lp, lp.capacity());
        }
        let mut flags = 0;
        let (master, lp, cap_before_append) = match tail {
            None => {
                let mut lp = listpack::new();
                listpack::append_int(&mut lp, 1);
                listpack::append_int(&mut lp, 0);
                listpack::append_int(&mut lp, numfields);
                for f in fields.iter().step_by(2) {
                    listpack::append_str(&mut lp, f);
                }
                listpack::append_int(&mut lp, 0);
                flags |= FLAG_SAMEFIELDS;
                self.node_bytes += node_cost(&lp, 0);
                self.nodes.insert(id, lp);
                (id, self.nodes.get_mut(&id).expect("just inserted"), 0)
            }
            Some(master) => {
                let lp = self.nodes.get_mut(&master).expect("the tail node");
                let cap = lp.capacity();
                let (count, same) = {
                    let (count, _, master_fields) = master_entry(lp);
                    let same = master_fields.len() == fields.len() / 2
                        && master_fields.iter().zip(fields.iter().step_by(2)).all(|(m, f)| m.eq_bytes(f));
                    (count, same)
                };
                listpack::replace_int(lp, listpack::HEADER, count + 1);
                if same {
                    flags |= FLAG_SAMEFIELDS;
                }
                (master, lp, cap)
            }
        };
        listpack::append_int(lp, flags);
        listpack::append_int(lp, id.ms.wrapping_sub(master.ms) as i64);
        listpack::append_int(lp, id.seq.wrapping_sub(master.seq) as i64);
        if flags & FLAG_SAMEFIELDS == 0 {
            listpack::append_int(lp, numfields);
        }
        for (i, f) in fields.iter().enumerate() {
            if flags & FLAG_SAMEFIELDS == 0 || i % 2 == 1 {
                listpack::append_str(lp, f);
            }
        }
        let lp_count = numfields + 3 + if flags & FLAG_SAMEFIELDS == 0 { numfields + 1 } else { 0 };
        listpack::append_int(lp, lp_count);
        // (A new node was counted at capacity 0 above: its real allocation is added here.)
        let (cap_before, cap_after) = (cap_before_append, lp.capacity());
        self.node_bytes = self.node_bytes + alloc_size(cap_after) - alloc_size(cap_before);
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
    }

    /// Live entries from `start` to `end` (inclusive), backwards if `rev`, at most `count` of
    /// them (0: all).
    pub fn range(&self, start: StreamId, end: StreamId, rev: bool, count: usize) -> Vec<Entry> {
        let mut out = Vec::new();
        if start > end {
            return out;
        }
        let first_node = self.nodes.range(..=start).next_back().map(|(k, _)| *k).unwrap_or(StreamId::MIN);
        let nodes = self.nodes.range(first_node..=end);
        let full = |out: &Vec<Entry>| count > 0 && out.len() >= count;
        let visit = |master: &StreamId, lp: &Vec<u8>, out: &mut Vec<Entry>| {
            if !rev {
                // Forwards: entries read one by one, up to what is wanted.
                let (n, mut c) = header(lp).expect("a stream node this process wrote");
                let nmaster = n.master_fields.len();
                while let Some(e) =
                    next_entry(&mut c, *master, nmaster).expect("a stream node this process wrote")
                {
                    if e.id > end || full(out) {
                        break;
                    }
                    if e.live() && e.id >= start {
                        out.push(n.entry(&e));
                    }
                }
                return;
            }
            let n = decoded(*master, lp);
            let mut take = |e: &RawEntry| {
                if e.live() && e.id >= start && e.id <= end && !full(out) {
                    out.push(n.entry(e));
                }
            };
            if rev {
                n.entries.iter().rev().for_each(&mut take);
            } else {
                n.entries.iter().for_each(&mut take);
            }
        };
        if rev {
            for (m, lp) in nodes.rev() {
                visit(m, lp, &mut out);
                if full(&out) {
                    break;
                }
            }
        } else {
            for (m, lp) in nodes {
                visit(m, lp, &mut out);
                if full(&out) {
                    break;
                }
            }
        }
        out
    }

    /// The live entry `id`.
    pub fn get(&self, id: StreamId) -> Option<Entry> {
        self.range(id, id, false, 1).pop()
    }

    /// The last live entry's ID (Redis's `streamLastValidID`).
    pub fn last_valid_id(&self) -> Option<StreamId> {
        self.nodes
            .iter()
            .rev()
            .find_map(|(m, lp)| decoded(*m, lp).entries.iter().rev().find(|e| e.live()).map(|e| e.id))
    }

    fn first_valid_id(&self) -> Option<StreamId> {
        self.nodes.iter().find_map(|(m, lp)| decoded(*m, lp).entries.iter().find(|e| e.live()).map(|e| e.id))
    }

    /// Marks the live entry `id` deleted (a node whose last live entry goes is dropped).
    fn delete_one(&mut self, id: StreamId) -> bool {
        let Some((&master, _)) = self.nodes.range(..=id).next_back() else { return false };
        let lp = self.nodes.get_mut(&master).expect("found");
        let (flags_at, flags, count, deleted, deleted_at) = {
            let n = decoded(master, lp);
            let Some(e) = n.entries.iter().find(|e| e.id == id && e.live()) else { return false };
            (e.flags_at, e.flags, n.count, n.deleted, n.deleted_at)
        };
        self.length -= 1;
        let before = node_cost(lp, lp.capacity());
        if count == 1 {
            self.nodes.remove(&master);
            self.node_bytes -= before;
            return true;
        }
        // Later offsets first: a resized count must not move what is still to be replaced.
        listpack::replace_int(lp, flags_at, flags | FLAG_DELETED);
        listpack::replace_int(lp, deleted_at, deleted + 1);
        listpack::replace_int(lp, listpack::HEADER, count - 1);
        self.node_bytes = self.node_bytes - before + node_cost(lp, lp.capacity());
        true
    }

    /// XDEL: deletes the live entries among `ids`; how many there were.
    pub fn delete(&mut self, ids: &[StreamId]) -> u64 {
        let mut deleted = 0;
        let mut first = false;
        for &id in ids {
            if self.delete_one(id) {
                first |= id == self.first_id;
                self.max_deleted = self.max_deleted.max(id);
                deleted += 1;
            }
        }
        if deleted > 0 {
            if self.length == 0 {
                self.first_id = StreamId::MIN;
            } else if first {
                self.first_id = self.first_valid_id().unwrap_or(StreamId::MAX);
            }
        }
        deleted
    }

    /// Trims as Redis's `streamTrim`: whole nodes first; with `approx` only whole nodes; at most
    /// `limit` entries (0: no limit). Returns how many entries went.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: u64) -> u64 {
        let mut deleted = 0u64;
        let masters: Vec<StreamId> = self.nodes.keys().copied().collect();
        for master in masters {
            if let Trim::MaxLen(max) = how
                && self.length <= max
            {
                break;
            }
            let lp = self.nodes.get_mut(&master).expect("listed");
            let (entries, remove) = {
                let n = decoded(master, lp);
                let remove = match how {
                    Trim::MaxLen(max) => self.length - n.count as u64 >= max,
                    Trim::MinId(min) => n.entries.last().is_some_and(|e| e.id < min),
                };
                (n.count as u64, remove)
            };
            if limit > 0 && deleted + entries > limit {
                break;
            }
            if remove {
                if let Some(lp) = self.nodes.remove(&master) {
                    self.node_bytes -= node_cost(&lp, lp.capacity());
                }
                self.length -= entries;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            // Mark entries deleted from the front of this node until the target is met.
            let (marks, node_deleted, deleted_at) = {
                let n = decoded(master, lp);
                let mut marks = Vec::new();
                let mut length = self.length;
                for e in &n.entries {
                    let stop = match how {
                        Trim::MaxLen(max) => length <= max,
                        Trim::MinId(min) => e.id >= min,
                    };
                    if stop {
                        break;
                    }
                    if e.live() {
                        marks.push((e.flags_at, e.flags | FLAG_DELETED));
                        length -= 1;
                    }
                }
                (marks, n.deleted, n.deleted_at)
            };
            let from_node = marks.len() as u64;
            let before = node_cost(lp, lp.capacity());
            for &(at, flags) in marks.iter().rev() {
                listpack::replace_int(lp, at, flags);
            }
            listpack::replace_int(lp, deleted_at, node_deleted + from_node as i64);
            listpack::replace_int(lp, listpack::HEADER, (entries - from_node) as i64);
            self.node_bytes = self.node_bytes - before + node_cost(lp, lp.capacity());
            self.length -= from_node;
            deleted += from_node;
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.first_valid_id().unwrap_or(StreamId::MAX);
        }
        deleted
    }

    /// Whether a tombstone may lie between `start` and `end` (Redis's
    /// `streamRangeHasTombstones`, which only looks at `max_deleted`).
    pub fn range_has_tombstones(&self, start: StreamId, end: StreamId) -> bool {
        if self.length == 0 || self.max_deleted.is_zero() || self.first_id > self.max_deleted {
            return false;
        }
        start <= self.max_deleted && self.max_deleted <= end
    }

    /// An ID's logical read counter, when it can be known (Redis's
    /// `streamEstimateDistanceFromFirstEverEntry`; `None` for its "invalid").
    pub fn estimate_distance(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.length == 0 && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        } else if id > self.last_id {
            return None;
        }
        if self.max_deleted.is_zero() || self.max_deleted < self.first_id {
            if id < self.first_id {
                return Some(self.entries_added - self.length);
            } else if id == self.first_id {
                return Some(self.entries_added - self.length + 1);
            }
        }
        None
    }

    /// A group's lag (`None`: not known, Redis's null).
    pub fn lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != ENTRIES_READ_UNKNOWN && !self.range_has_tombstones(g.last_id, StreamId::MAX) {
            return Some(self.entries_added as i64 - g.entries_read);
        }
        self.estimate_distance(g.last_id).map(|read| self.entries_added as i64 - read as i64)
    }

    /// Advances a group past `id`, just delivered (Redis's read-counter rule in
    /// `streamReplyWithRange`).
    pub fn deliver(&self, g: &mut Group, id: StreamId) {
        if id <= g.last_id {
            return;
        }
        if g.entries_read != ENTRIES_READ_UNKNOWN && !self.range_has_tombstones(id, StreamId::MAX) {
            g.entries_read += 1;
        } else if self.entries_added > 0 {
            g.entries_read = self.estimate_distance(id).map_or(ENTRIES_READ_UNKNOWN, |n| n as i64);
        }
        g.last_id = id;
    }

    /// Heap bytes held. Costs O(groups + consumers), not O(entries): the store asks after every
    /// write (the nodes' share is kept as they change; pending entries are counted, not walked).
    pub fn mem(&self) -> usize {
        let groups: usize = self
            .groups
            .iter()
            .map(|(name, g)| {
                alloc_size(name.len())
                    + 96
                    + g.pel.len() * (16 + 40 + 32)
                    + g.consumers
                        .iter()
                        .map(|(n, c)| alloc_size(n.len()) + 64 + c.pel.len() * 24)
                        .sum::<usize>()
            })
            .sum();
        std::mem::size_of::<Stream>() + self.node_bytes + groups
    }

    /// Every live entry in order (tests, fuzzing).
    pub fn entries(&self) -> Vec<Entry> {
        self.range(StreamId::MIN, StreamId::MAX, false, 0)
    }
}

/// The rax nodes under the trie node that `keys` (sorted, sharing their first `depth` bytes)
/// pass through: it is a rax node of its own if it is the root or a leaf, if its parent
/// branches, or if it branches itself; a chain of single-child nodes is one compressed node.
fn trie_nodes(keys: &[[u8; 16]], depth: usize, parent_branches: bool) -> usize {
    if depth == 16 {
        return 1;
    }
    let mut groups = Vec::new();
    let mut from = 0;
    for i in 1..=keys.len() {
        if i == keys.len() || keys[i][depth] != keys[from][depth] {
            groups.push(&keys[from..i]);
            from = i;
        }
    }
    let branches = groups.len() >= 2;
    let own = usize::from(depth == 0 || parent_branches || branches);
    own + groups.iter().map(|g| trie_nodes(g, depth + 1, branches)).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<Bytes> {
        pairs.iter().flat_map(|(f, v)| [Bytes::from(f.to_string()), Bytes::from(v.to_string())]).collect()
    }

    fn ids(s: &Stream) -> Vec<u64> {
        s.entries().iter().map(|e| e.id.ms).collect()
    }

    #[test]
    fn entries_fill_nodes_as_redis_does_and_read_back() {
        let mut s = Stream::default();
        for i in 1..=250u64 {
            let f = if i % 3 == 0 {
                fields(&[("a", "1"), ("other", "x")])
            } else {
                fields(&[("a", &i.to_string())])
            };
            s.append(StreamId::new(i, 0), &f, NodeLimits::default());
        }
        assert_eq!(s.len(), 250);
        assert_eq!(s.node_count(), 3, "100 entries per node");
        let e = s.get(StreamId::new(3, 0)).unwrap();
        assert_eq!(e.fields, fields(&[("a", "1"), ("other", "x")]));
        assert_eq!(s.get(StreamId::new(4, 0)).unwrap().fields, fields(&[("a", "4")]));
        let back = s.range(StreamId::new(95, 0), StreamId::new(105, 0), true, 3);
        assert_eq!(back.iter().map(|e| e.id.ms).collect::<Vec<_>>(), vec![105, 104, 103]);
        // Bytes: a small node limit splits by size.
        let mut small = Stream::default();
        for i in 1..=10u64 {
            small.append(
                StreamId::new(i, 0),
                &fields(&[("field", &"v".repeat(40))]),
                NodeLimits { max_bytes: 200, max_entries: 100 },
            );
        }
        assert!(small.node_count() > 2, "{} nodes", small.node_count());
    }

    #[test]
    fn deletes_mark_and_drop_nodes_and_trims_follow_redis() {
        let mut s = Stream::default();
        for i in 1..=10u64 {
            s.append(
                StreamId::new(i, 0),
                &fields(&[("f", "v")]),
                NodeLimits { max_bytes: 4096, max_entries: 3 },
            );
        }
        assert_eq!(s.node_count(), 4);
        assert_eq!(s.delete(&[StreamId::new(1, 0), StreamId::new(1, 0), StreamId::new(99, 0)]), 1);
        assert_eq!(s.first_id, StreamId::new(2, 0));
        assert_eq!(s.max_deleted, StreamId::new(1, 0));
        assert_eq!(s.delete(&[StreamId::new(2, 0), StreamId::new(3, 0)]), 2);
        assert_eq!(s.node_count(), 3, "a node whose entries all went is dropped");
        // Approximate trimming removes whole nodes only.
        assert_eq!(s.trim(Trim::MaxLen(5), true, 0), 0, "the first node (3) cannot go whole");
        assert_eq!(s.trim(Trim::MaxLen(4), true, 0), 3);
        assert_eq!(ids(&s), vec![7, 8, 9, 10]);
        assert_eq!(s.trim(Trim::MinId(StreamId::new(9, 0)), false, 0), 2);
        assert_eq!(ids(&s), vec![9, 10]);
        assert_eq!(s.first_id, StreamId::new(9, 0));
        let back = Stream::deserialize(&{
            let mut b = Vec::new();
            s.serialize(&mut b);
            b
        })
        .unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn the_kept_node_cost_is_the_sum_over_nodes() {
        let sum = |s: &Stream| s.nodes.values().map(|lp| node_cost(lp, lp.capacity())).sum::<usize>();
        let mut s = Stream::default();
        for i in 1..=500u64 {
            s.append(
                StreamId::new(i, 0),
                &fields(&[("f", &"x".repeat((i % 50) as usize))]),
                NodeLimits::default(),
            );
            assert_eq!(s.node_bytes, sum(&s), "after appending {i}");
        }
        s.delete(&(1..=150).map(|i| StreamId::new(i * 3, 0)).collect::<Vec<_>>());
        assert_eq!(s.node_bytes, sum(&s));
        s.trim(Trim::MaxLen(120), false, 0);
        assert_eq!(s.node_bytes, sum(&s));
        s.trim(Trim::MinId(StreamId::new(480, 0)), true, 0);
        assert_eq!(s.node_bytes, sum(&s));
        let mut b = Vec::new();
        s.serialize(&mut b);
        let back = Stream::deserialize(&b).unwrap();
        assert_eq!(back.node_bytes, sum(&back));
        assert!(s.mem() > s.length as usize * 10, "entries are counted");
    }

    #[test]
    fn groups_survive_serialization_and_garbage_is_refused() {
        let mut s = Stream::default();
        s.append(StreamId::new(5, 1), &fields(&[("f", "v")]), NodeLimits::default());
        let mut g = Group::new(StreamId::MIN, 0);
        g.consumers.insert(Bytes::from("alice"), Consumer::default());
        g.assign(StreamId::new(5, 1), &Bytes::from("alice"), 77).delivery_count = 3;
        s.groups.insert(Bytes::from("g"), g);
        let mut b = Vec::new();
        s.serialize(&mut b);
        assert_eq!(Stream::deserialize(&b).unwrap(), s);
        for cut in 0..b.len() {
            assert!(Stream::deserialize(&b[..cut]).is_err(), "a cut at {cut} is refused");
        }
        assert_eq!(s.rax_nodes(), 2);
    }
}
