//! A router built without the `embedded` feature has no embedded cluster: this type has no values,
//! so the code paths that use one compile to nothing.

use std::sync::Arc;

use shoal_wire::Topology;
use tokio::sync::watch;

use super::{EmbeddedError, EmbeddedOptions, ScaleStatus};

#[derive(Debug)]
pub enum EmbeddedCluster {}

impl EmbeddedCluster {
    pub async fn start(_options: EmbeddedOptions) -> Result<Arc<EmbeddedCluster>, EmbeddedError> {
        Err(EmbeddedError::NotBuilt)
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<Topology>> {
        match *self {}
    }

    pub fn status(&self) -> ScaleStatus {
        match *self {}
    }

    pub async fn scale(self: Arc<Self>, _n: usize) -> Result<(), String> {
        match *self {}
    }

    pub fn remember_settings(&self, _change: &shoal_wire::proto::NodeSettings) {
        match *self {}
    }

    pub async fn shutdown(&self) {
        match *self {}
    }
}
