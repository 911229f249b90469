//! Where the published topology lives. The coordinator is its only writer; routers and nodes read
//! (and watch) it.

use std::future::Future;
use std::path::{Path, PathBuf};

use shoal_wire::{Topology, TopologyError};
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Invalid { path: PathBuf, source: TopologyError },
    #[error("refusing to publish version {new}: the store already has version {current}")]
    Stale { current: u64, new: u64 },
    #[error("{0}")]
    Other(String),
}

/// A place to load and publish topologies.
pub trait TopologyStore: Send + Sync {
    /// The current topology, if one was ever published.
    fn load(&self) -> impl Future<Output = Result<Option<Topology>, StoreError>> + Send;
    /// Publishes `t`, whose version must be higher than the stored one.
    fn publish(&self, t: &Topology) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<T: TopologyStore> TopologyStore for std::sync::Arc<T> {
    async fn load(&self) -> Result<Option<Topology>, StoreError> {
        self.as_ref().load().await
    }

    async fn publish(&self, t: &Topology) -> Result<(), StoreError> {
        self.as_ref().publish(t).await
    }
}

/// A topology in a JSON file, replaced atomically (write a temp file, fsync, rename).
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and validates the file (`None` if it does not exist).
    pub fn read(path: &Path) -> Result<Option<Topology>, StoreError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Topology::from_json(&text)
                .map(Some)
                .map_err(|source| StoreError::Invalid { path: path.to_path_buf(), source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Io { path: path.to_path_buf(), source }),
        }
    }

    /// Writes `t` atomically, without the version check (for bootstrapping a cluster).
    pub fn write(path: &Path, t: &Topology) -> Result<(), StoreError> {
        let io = |source| StoreError::Io { path: path.to_path_buf(), source };
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, t.to_json()).map_err(io)?;
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

impl TopologyStore for FileStore {
    async fn load(&self) -> Result<Option<Topology>, StoreError> {
        FileStore::read(&self.path)
    }

    async fn publish(&self, t: &Topology) -> Result<(), StoreError> {
        if let Some(current) = FileStore::read(&self.path)?
            && current.version >= t.version
        {
            return Err(StoreError::Stale { current: current.version, new: t.version });
        }
        FileStore::write(&self.path, t)
    }
}

/// A topology in memory, for a coordinator running inside a router (the embedded cluster).
/// Subscribers see every published version.
#[derive(Debug)]
pub struct MemoryStore {
    tx: watch::Sender<Option<Topology>>,
}

impl MemoryStore {
    pub fn new(initial: Option<Topology>) -> MemoryStore {
        MemoryStore { tx: watch::channel(initial).0 }
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<Topology>> {
        self.tx.subscribe()
    }
}

impl TopologyStore for MemoryStore {
    async fn load(&self) -> Result<Option<Topology>, StoreError> {
        Ok(self.tx.borrow().clone())
    }

    async fn publish(&self, t: &Topology) -> Result<(), StoreError> {
        let current = self.tx.borrow().as_ref().map(|c| c.version);
        if let Some(current) = current.filter(|&c| c >= t.version) {
            return Err(StoreError::Stale { current, new: t.version });
        }
        self.tx.send_replace(Some(t.clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_store_publishes_atomically_and_refuses_going_back() {
        let d = tempfile::tempdir().unwrap();
        let store = FileStore::new(d.path().join("topology.json"));
        assert_eq!(store.load().await.unwrap(), None);
        let mut t = Topology::even(&["127.0.0.1:1".into()]);
        store.publish(&t).await.unwrap();
        assert_eq!(store.load().await.unwrap(), Some(t.clone()));
        assert!(matches!(store.publish(&t).await, Err(StoreError::Stale { current: 1, new: 1 })));
        t.version = 2;
        store.publish(&t).await.unwrap();
        std::fs::write(store.path(), "{ not json").unwrap();
        assert!(matches!(store.load().await, Err(StoreError::Invalid { .. })));
    }

    #[tokio::test]
    async fn memory_store_notifies_subscribers() {
        let store = MemoryStore::new(None);
        let mut rx = store.subscribe();
        store.publish(&Topology::even(&["a:1".into()])).await.unwrap();
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow().as_ref().unwrap().version, 1);
    }
}
