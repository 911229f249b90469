//! A stream in Redis's RDB value encoding (`RDB_TYPE_STREAM_LISTPACKS_2`, and the older
//! `RDB_TYPE_STREAM_LISTPACKS` on reading): what DUMP writes and RESTORE reads. The nodes are
//! Redis's listpacks already, so they go out as they are; reading builds the stream and then
//! checks it exactly as a snapshot's stream is checked ([`Stream::deserialize`]), since the bytes
//! come from a client.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::{Consumer, ENTRIES_READ_UNKNOWN, Group, Nack, Stream, StreamId};
use crate::rdb::{RdbError, Reader, put_len, put_string};
use crate::store::object::pack::PackError;

/// Why a stream's RDB encoding is refused.
#[derive(Debug, thiserror::Error)]
pub enum StreamRdbError {
    #[error(transparent)]
    Rdb(#[from] RdbError),
    #[error(transparent)]
    Pack(#[from] PackError),
    #[error("malformed stream: {0}")]
    Bad(&'static str),
}

impl Stream {
    /// `rdbSaveObject`'s stream: nodes (master ID, listpack), counters, then each group with its
    /// PEL (ID, delivery time, count) and its consumers (name, seen time, the IDs they own).
    pub fn write_rdb(&self, out: &mut Vec<u8>) {
        put_len(out, self.nodes.len() as u64);
        for (id, lp) in &self.nodes {
            put_string(out, &id.to_be());
            put_string(out, lp);
        }
        put_len(out, self.length);
        for id in [self.last_id, self.first_id, self.max_deleted] {
            put_len(out, id.ms);
            put_len(out, id.seq);
        }
        put_len(out, self.entries_added);
        put_len(out, self.groups.len() as u64);
        for (name, g) in &self.groups {
            put_string(out, name);
            put_len(out, g.last_id.ms);
            put_len(out, g.last_id.seq);
            // Redis saves its signed counter as a length: -1 (unknown) becomes 2^64 - 1.
            put_len(out, g.entries_read as u64);
            put_len(out, g.pel.len() as u64);
            for (id, n) in &g.pel {
                out.extend_from_slice(&id.to_be());
                out.extend_from_slice(&n.delivery_time.to_le_bytes());
                put_len(out, n.delivery_count);
            }
            put_len(out, g.consumers.len() as u64);
            for (cname, c) in &g.consumers {
                put_string(out, cname);
                out.extend_from_slice(&c.seen_time.to_le_bytes());
                put_len(out, c.pel.len() as u64);
                for id in &c.pel {
                    out.extend_from_slice(&id.to_be());
                }
            }
        }
    }

    /// Reads [`Stream::write_rdb`]'s form (`v2`: type 19; else type 15, which has no first ID,
    /// tombstone ID, entries-added counter or groups' read counters: they are derived as Redis
    /// derives them). Every node and PEL entry is checked; a PEL entry no consumer owns is refused.
    pub fn read_rdb(r: &mut Reader<'_>, v2: bool) -> Result<Stream, StreamRdbError> {
        let mut s = Stream::default();
        for _ in 0..r.read_len()? {
            let key = r.string()?;
            let id = id_of(&key).ok_or(StreamRdbError::Bad("node key is not a stream ID"))?;
            let lp = r.string()?;
            if s.nodes.insert(id, lp).is_some() {
                return Err(StreamRdbError::Bad("node added twice"));
            }
        }
        s.length = r.read_len()?;
        s.last_id = read_id(r)?;
        if v2 {
            s.first_id = read_id(r)?;
            s.max_deleted = read_id(r)?;
            s.entries_added = r.read_len()?;
        } else {
            s.entries_added = s.length;
        }
        for _ in 0..r.read_len()? {
            let name = Bytes::from(r.string()?);
            let last_id = read_id(r)?;
            let entries_read = if v2 { r.read_len()? as i64 } else { ENTRIES_READ_UNKNOWN };
            let mut g = Group::new(last_id, entries_read);
            for _ in 0..r.read_len()? {
                let id = raw_id(r)?;
                let delivery_time = i64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
                let delivery_count = r.read_len()?;
                let nack = Nack { consumer: Bytes::new(), delivery_time, delivery_count };
                if g.pel.insert(id, nack).is_some() {
                    return Err(StreamRdbError::Bad("PEL entry added twice"));
                }
            }
            if read_consumers(r, &mut g)? != g.pel.len() {
                return Err(StreamRdbError::Bad("PEL entry without a consumer"));
            }
            if s.groups.insert(name, g).is_some() {
                return Err(StreamRdbError::Bad("group added twice"));
            }
        }
        // The snapshot reader's checks: listpacks, counts, order, owners.
        let mut s = Stream::deserialize(&{
            let mut b = Vec::new();
            s.serialize(&mut b);
            b
        })?;
        if !v2 {
            s.first_id =
                s.range(StreamId::MIN, StreamId::MAX, false, 1).first().map_or(StreamId::MIN, |e| e.id);
            let estimates: BTreeMap<Bytes, i64> = s
                .groups
                .iter()
                .map(|(n, g)| {
                    (n.clone(), s.estimate_distance(g.last_id).map_or(ENTRIES_READ_UNKNOWN, |d| d as i64))
                })
                .collect();
            for (n, e) in estimates {
                if let Some(g) = s.groups.get_mut(&n) {
                    g.entries_read = e;
                }
            }
        }
        Ok(s)
    }
}

/// A group's consumers: name, seen time and the PEL IDs each owns (which must be in the group's
/// PEL, each owned once). Returns how many PEL entries have an owner.
fn read_consumers(r: &mut Reader<'_>, g: &mut Group) -> Result<usize, StreamRdbError> {
    let mut owned = BTreeSet::new();
    for _ in 0..r.read_len()? {
        let cname = Bytes::from(r.string()?);
        let seen_time = i64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
        let mut pel = BTreeSet::new();
        for _ in 0..r.read_len()? {
            let id = raw_id(r)?;
            let nack =
                g.pel.get_mut(&id).ok_or(StreamRdbError::Bad("consumer entry not in the group's PEL"))?;
            if !owned.insert(id) {
                return Err(StreamRdbError::Bad("PEL entry owned twice"));
            }
            nack.consumer = cname.clone();
            pel.insert(id);
        }
        if g.consumers.insert(cname, Consumer { seen_time, pel }).is_some() {
            return Err(StreamRdbError::Bad("consumer added twice"));
        }
    }
    Ok(owned.len())
}

fn read_id(r: &mut Reader<'_>) -> Result<StreamId, RdbError> {
    Ok(StreamId::new(r.read_len()?, r.read_len()?))
}

/// A 16-byte big-endian ID written raw (PEL entries).
fn raw_id(r: &mut Reader<'_>) -> Result<StreamId, RdbError> {
    Ok(id_of(r.take(16)?).expect("16 bytes"))
}

fn id_of(b: &[u8]) -> Option<StreamId> {
    let b: &[u8; 16] = b.try_into().ok()?;
    Some(StreamId::new(
        u64::from_be_bytes(b[..8].try_into().expect("8")),
        u64::from_be_bytes(b[8..].try_into().expect("8")),
    ))
}
