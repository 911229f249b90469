//! Streaming slots out in chunks: the `ExportSlots` RPC (a migration's pull) and a primary's
//! full sync to a replica both read the store this way.

use shoal_wire::pieces;
use shoal_wire::proto::{ExportChunk, ExportEntry};
use tonic::Status;

use crate::store::Store;

/// Streams slots `first..=last` into `tx` in chunks of about `chunk_bytes` (blocking thread).
pub fn export(
    store: &Store,
    first: u16,
    last: u16,
    chunk_bytes: usize,
    tx: tokio::sync::mpsc::Sender<Result<ExportChunk, Status>>,
) {
    let plan = store.plan(first..=last);
    let keys_estimate = (plan.memory_entries() + store.base_entries_in(first..=last)) as u64;
    // The libraries travel with the first chunk: the node taking slots over may run FCALLs
    // on their keys.
    let functions = store.libraries.get().bytes;
    let mut chunk = ExportChunk { keys_estimate, functions, ..Default::default() };
    let mut size = 0;
    let mut entries = Vec::new();
    for slot in first..=last {
        for e in store.slot_entries(slot, &plan) {
            // A large value leaves as several partial entries, over as many chunks as it needs.
            let entry = ExportEntry {
                slot: u32::from(slot),
                key: e.key,
                value: e.value,
                expire_at_ms: e.expire_at,
                partial: false,
                value_type: e.value_type,
            };
            pieces::push_entry(entry, &mut entries);
            for part in entries.drain(..) {
                size += part.key.len() + part.value.len() + 16;
                chunk.entries.push(part);
                if size >= chunk_bytes {
                    chunk.complete_below = u32::from(slot);
                    let full =
                        std::mem::replace(&mut chunk, ExportChunk { keys_estimate, ..Default::default() });
                    if tx.blocking_send(Ok(full)).is_err() {
                        return;
                    }
                    size = 0;
                }
            }
        }
    }
    chunk.complete_below = u32::from(last) + 1;
    let _ = tx.blocking_send(Ok(chunk));
}
