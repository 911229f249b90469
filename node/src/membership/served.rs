//! The view in force and the views it replaced ([`Served`]): what every batch is checked against,
//! and what an export or a pull waits out before it may rely on no older view letting a write in.
//! Below the membership, which installs views, and the puller, which reads them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use super::view::NodeView;

#[derive(Debug)]
pub struct Served {
    view: RwLock<Arc<NodeView>>,
    /// Views replaced by newer ones; a batch checked against one may still be applying.
    retired: Mutex<Vec<Weak<NodeView>>>,
    /// The version served, for whoever tells routers about changes (the pub/sub streams).
    versions: watch::Sender<u64>,
}

impl Default for Served {
    /// No topology yet: the node serves whatever it is sent (see [`NodeView::unmanaged`]).
    fn default() -> Self {
        Served {
            view: RwLock::new(Arc::new(NodeView::unmanaged())),
            retired: Mutex::default(),
            versions: watch::channel(0).0,
        }
    }
}

impl Served {
    pub fn view(&self) -> Arc<NodeView> {
        self.view.read().clone()
    }

    pub fn version(&self) -> u64 {
        self.view.read().version()
    }

    /// Follows the version served (changes after the new view is in place).
    pub fn watch_version(&self) -> watch::Receiver<u64> {
        self.versions.subscribe()
    }

    /// Puts `view` in force (the caller serializes installs and retires the old one).
    pub(super) fn install(&self, view: Arc<NodeView>) {
        *self.view.write() = view;
    }

    /// Tells the version watchers that `version` is served now.
    pub(super) fn announce(&self, version: u64) {
        self.versions.send_replace(version);
    }

    /// Remembers `old`, just replaced by `version`: batches checked against it may still be
    /// applying, and their ops still to run get `moved` (see [`NodeView::supersede`]).
    pub(super) fn retire(&self, old: &Arc<NodeView>, version: u64) {
        old.supersede(version);
        self.retired.lock().push(Arc::downgrade(old));
    }

    /// Waits until no batch checked against a view older than the current one is still applying,
    /// so that nothing those views let in can land after this returns; false on `timeout`.
    /// Exports call this first: from then on, the slots moving out take no more writes.
    pub async fn wait_for_retired_views(&self, timeout: Duration) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let busy = {
                let mut retired = self.retired.lock();
                retired.retain(|v| v.strong_count() > 0);
                !retired.is_empty()
            };
            if !busy {
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
