//! A topology kept in a JSON file: read, atomic replace, watch. Used by `shoal-router reshard`
//! (the coordinator's file store), by routers and nodes that follow a `--topology-file`, by the
//! copy a node keeps in its data directory, and by the embedded cluster's `--data-dir`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::{Topology, TopologyError};

/// Why a topology file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Invalid { path: PathBuf, source: TopologyError },
}

/// Reads and validates the file (`None` if it does not exist).
pub fn read(path: &Path) -> Result<Option<Topology>, FileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Topology::from_json(&text)
            .map(Some)
            .map_err(|source| FileError::Invalid { path: path.to_path_buf(), source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Io { path: path.to_path_buf(), source }),
    }
}

/// Replaces the file with `t` atomically and durably: a temporary file is written and fsynced,
/// renamed over the old one, and the directory fsynced, so a crash leaves the old document or the
/// new one, never a mix or nothing.
pub fn write(path: &Path, t: &Topology) -> Result<(), FileError> {
    let io = |source| FileError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, t.to_json()).map_err(io)?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}

/// Calls `on_new` with the file's topology whenever the file changes (checked every `every`), until
/// `stop` resolves. Unreadable or invalid contents are logged and skipped (the writer replaces the
/// file atomically, so they are a mistake, not a half-written file).
pub async fn watch(
    path: PathBuf,
    every: Duration,
    mut on_new: impl FnMut(Topology),
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut seen: Option<SystemTime> = None;
    loop {
        let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        if mtime.is_some() && mtime != seen {
            seen = mtime;
            match read(&path) {
                Ok(Some(t)) => on_new(t),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "cannot use the topology file"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut stop => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_round_trips_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/topology.json");
        assert!(read(&path).unwrap().is_none());
        let t = Topology::even(&["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
        write(&path, &t).unwrap();
        assert_eq!(read(&path).unwrap(), Some(t));
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["topology.json"]);
        std::fs::write(&path, "{ not json").unwrap();
        assert!(matches!(read(&path), Err(FileError::Invalid { .. })));
    }

    #[tokio::test]
    async fn watch_reports_each_new_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("topology.json");
        let mut t = Topology::even(&["127.0.0.1:1".into()]);
        write(&path, &t).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(watch(
            path.clone(),
            Duration::from_millis(5),
            move |t| {
                let _ = tx.send(t.version);
            },
            async {
                let _ = stop_rx.await;
            },
        ));
        assert_eq!(rx.recv().await, Some(1));
        // Make sure the modification time moves even on coarse-grained file systems.
        tokio::time::sleep(Duration::from_millis(20)).await;
        t.version = 2;
        write(&path, &t).unwrap();
        let v = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap();
        assert_eq!(v, Some(2));
        stop_tx.send(()).unwrap();
        task.await.unwrap();
    }
}
