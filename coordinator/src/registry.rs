//! The topology registry: where the published topology lives (a file, memory, a Kubernetes
//! ConfigMap in the operator). The coordinator is its only writer; routers and nodes read (and
//! watch) it.

use std::future::Future;
use std::path::{Path, PathBuf};

use shoal_wire::topology_file::{self, FileError};

use shoal_wire::Topology;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("refusing to publish version {new}: the store already has version {current}")]
    Stale { current: u64, new: u64 },
    #[error("{0}")]
    Other(String),
}

/// A place to load and publish topologies.
pub trait Registry: Send + Sync {
    /// The current topology, if one was ever published.
    fn load(&self) -> impl Future<Output = Result<Option<Topology>, RegistryError>> + Send;
    /// Publishes `t`, whose version must be higher than the stored one.
    fn publish(&self, t: &Topology) -> impl Future<Output = Result<(), RegistryError>> + Send;
}

impl<T: Registry> Registry for std::sync::Arc<T> {
    async fn load(&self) -> Result<Option<Topology>, RegistryError> {
        self.as_ref().load().await
    }

    async fn publish(&self, t: &Topology) -> Result<(), RegistryError> {
        self.as_ref().publish(t).await
    }
}

/// A topology in a JSON file, replaced atomically (`shoal_wire::topology_file`).
#[derive(Debug, Clone)]
pub struct FileRegistry {
    path: PathBuf,
}

impl FileRegistry {
    pub fn new(path: impl Into<PathBuf>) -> FileRegistry {
        FileRegistry { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and validates the file (`None` if it does not exist).
    pub fn read(path: &Path) -> Result<Option<Topology>, RegistryError> {
        Ok(topology_file::read(path)?)
    }

    /// Writes `t` atomically, without the version check (for bootstrapping a cluster).
    pub fn write(path: &Path, t: &Topology) -> Result<(), RegistryError> {
        Ok(topology_file::write(path, t)?)
    }
}

impl Registry for FileRegistry {
    async fn load(&self) -> Result<Option<Topology>, RegistryError> {
        FileRegistry::read(&self.path)
    }

    /// Compare-and-swap across processes (`shoal-router reshard` and `shoal-router failover`
    /// may both publish): the version check and the write happen under an exclusive lock on
    /// `<file>.lock`, so of two writers of the same version one gets `Stale`.
    async fn publish(&self, t: &Topology) -> Result<(), RegistryError> {
        let (path, t) = (self.path.clone(), t.clone());
        tokio::task::spawn_blocking(move || {
            let mut name = path.clone().into_os_string();
            name.push(".lock");
            let lock =
                std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&name).map_err(
                    |e| RegistryError::Other(format!("cannot open {}: {e}", name.to_string_lossy())),
                )?;
            lock.lock()
                .map_err(|e| RegistryError::Other(format!("cannot lock {}: {e}", name.to_string_lossy())))?;
            if let Some(current) = FileRegistry::read(&path)?
                && current.version >= t.version
            {
                return Err(RegistryError::Stale { current: current.version, new: t.version });
            }
            FileRegistry::write(&path, &t)
            // The lock is released when `lock` is dropped.
        })
        .await
        .map_err(|e| RegistryError::Other(e.to_string()))?
    }
}

/// A topology in memory, for a coordinator running inside a router (the embedded cluster).
/// Subscribers see every published version.
#[derive(Debug)]
pub struct MemoryRegistry {
    tx: watch::Sender<Option<Topology>>,
}

impl MemoryRegistry {
    pub fn new(initial: Option<Topology>) -> MemoryRegistry {
        MemoryRegistry { tx: watch::channel(initial).0 }
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<Topology>> {
        self.tx.subscribe()
    }
}

impl Registry for MemoryRegistry {
    async fn load(&self) -> Result<Option<Topology>, RegistryError> {
        Ok(self.tx.borrow().clone())
    }

    async fn publish(&self, t: &Topology) -> Result<(), RegistryError> {
        // Checked and replaced under the channel's lock: two publishers of one version (the
        // failover writer and a move in the embedded cluster) cannot both succeed.
        let mut stale = None;
        self.tx.send_if_modified(|current| match current.as_ref().map(|c| c.version) {
            Some(v) if v >= t.version => {
                stale = Some(v);
                false
            }
            _ => {
                *current = Some(t.clone());
                true
            }
        });
        match stale {
            Some(current) => Err(RegistryError::Stale { current, new: t.version }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_store_publishes_atomically_and_refuses_going_back() {
        let d = tempfile::tempdir().unwrap();
        let store = FileRegistry::new(d.path().join("topology.json"));
        assert_eq!(store.load().await.unwrap(), None);
        let mut t = Topology::even(&["127.0.0.1:1".into()]);
        store.publish(&t).await.unwrap();
        assert_eq!(store.load().await.unwrap(), Some(t.clone()));
        assert!(matches!(store.publish(&t).await, Err(RegistryError::Stale { current: 1, new: 1 })));
        t.version = 2;
        store.publish(&t).await.unwrap();
        std::fs::write(store.path(), "{ not json").unwrap();
        assert!(matches!(store.load().await, Err(RegistryError::File(FileError::Invalid { .. }))));
    }

    #[tokio::test]
    async fn memory_store_notifies_subscribers() {
        let store = MemoryRegistry::new(None);
        let mut rx = store.subscribe();
        store.publish(&Topology::even(&["a:1".into()])).await.unwrap();
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow().as_ref().unwrap().version, 1);
    }
}
