//! A stream's serialized form (snapshots, slot transfers, replication): its counters, its
//! listpack nodes as they are, and its groups with their PELs and consumers. Reading it back
//! checks every node and every PEL owner, since the bytes may come from a file or a peer.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::{Consumer, Group, Nack, Stream, StreamId, decode, decoded, listpack, node_cost};
use crate::store::object::PackError;
use crate::store::object::pack;

impl Stream {
    /// The serialized form (snapshots, slot transfers, replication): counters, nodes as they
    /// are, groups with their PELs and consumers.
    pub fn serialize(&self, out: &mut Vec<u8>) {
        out.push(1); // format version
        for n in [self.length, self.entries_added] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for id in [self.last_id, self.first_id, self.max_deleted] {
            put_id(out, id);
        }
        out.extend_from_slice(&(self.nodes.len() as u64).to_le_bytes());
        for (id, lp) in &self.nodes {
            put_id(out, *id);
            pack::put(out, lp);
        }
        out.extend_from_slice(&(self.groups.len() as u64).to_le_bytes());
        for (name, g) in &self.groups {
            pack::put(out, name);
            put_id(out, g.last_id);
            out.extend_from_slice(&g.entries_read.to_le_bytes());
            out.extend_from_slice(&(g.consumers.len() as u64).to_le_bytes());
            for (cname, c) in &g.consumers {
                pack::put(out, cname);
                out.extend_from_slice(&c.seen_time.to_le_bytes());
            }
            out.extend_from_slice(&(g.pel.len() as u64).to_le_bytes());
            for (id, n) in &g.pel {
                put_id(out, *id);
                pack::put(out, &n.consumer);
                out.extend_from_slice(&n.delivery_time.to_le_bytes());
                out.extend_from_slice(&n.delivery_count.to_le_bytes());
            }
        }
    }

    /// Reads [`Stream::serialize`]'s form, checking every node and the PEL's owners.
    pub fn deserialize(bytes: &[u8]) -> Result<Stream, PackError> {
        let bad = PackError::BadElement("stream");
        let mut r = Reader { b: bytes, at: 0 };
        if r.take(1)? != [1] {
            return Err(bad);
        }
        let mut s = Stream { length: r.u64()?, entries_added: r.u64()?, ..Stream::default() };
        s.last_id = r.id()?;
        s.first_id = r.id()?;
        s.max_deleted = r.id()?;
        let mut live = 0u64;
        for _ in 0..r.count()? {
            let id = r.id()?;
            let lp = r.bytes()?;
            listpack::validate(lp).map_err(|_| bad.clone())?;
            let n = decode(id, lp).map_err(|_| bad.clone())?;
            let alive = n.entries.iter().filter(|e| e.live()).count();
            if n.count < 0 || n.count as usize != alive || n.entries.first().is_none_or(|e| e.id != id) {
                return Err(bad);
            }
            if n.entries.windows(2).any(|w| w[0].id >= w[1].id)
                || n.entries.last().is_some_and(|e| e.id > s.last_id)
            {
                return Err(bad);
            }
            if s.nodes
                .last_key_value()
                .is_some_and(|(pm, prev)| decoded(*pm, prev).entries.last().is_some_and(|e| e.id >= id))
            {
                return Err(bad);
            }
            live += alive as u64;
            let lp = lp.to_vec();
            s.node_bytes += node_cost(&lp, lp.capacity());
            s.nodes.insert(id, lp);
        }
        if live != s.length || s.entries_added < s.length {
            return Err(bad);
        }
        for _ in 0..r.count()? {
            let name = Bytes::copy_from_slice(r.bytes()?);
            let mut g = Group::new(r.id()?, r.i64()?);
            for _ in 0..r.count()? {
                let cname = Bytes::copy_from_slice(r.bytes()?);
                g.consumers.insert(cname, Consumer { seen_time: r.i64()?, pel: BTreeSet::new() });
            }
            for _ in 0..r.count()? {
                let id = r.id()?;
                let consumer = Bytes::copy_from_slice(r.bytes()?);
                let (delivery_time, delivery_count) = (r.i64()?, r.u64()?);
                g.consumers.get_mut(&consumer).ok_or(bad.clone())?.pel.insert(id);
                g.pel.insert(id, Nack { consumer, delivery_time, delivery_count });
            }
            s.groups.insert(name, g);
        }
        if r.at != bytes.len() {
            return Err(bad);
        }
        Ok(s)
    }
}

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    out.extend_from_slice(&id.ms.to_le_bytes());
    out.extend_from_slice(&id.seq.to_le_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PackError> {
        let s = self
            .b
            .get(self.at..self.at.checked_add(n).ok_or(PackError::Truncated)?)
            .ok_or(PackError::Truncated)?;
        self.at += n;
        Ok(s)
    }

    fn u64(&mut self) -> Result<u64, PackError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn i64(&mut self) -> Result<i64, PackError> {
        Ok(self.u64()? as i64)
    }

    fn id(&mut self) -> Result<StreamId, PackError> {
        Ok(StreamId::new(self.u64()?, self.u64()?))
    }

    /// A count of items that follow, bounded by the bytes left (each item takes at least one).
    fn count(&mut self) -> Result<u64, PackError> {
        let n = self.u64()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(PackError::Truncated);
        }
        Ok(n)
    }

    /// A length-prefixed string, as `pack::put` writes it.
    fn bytes(&mut self) -> Result<&'a [u8], PackError> {
        let (s, end) = pack::next(self.b, self.at)?;
        self.at = end;
        Ok(s)
    }
}
