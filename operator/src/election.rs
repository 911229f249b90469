//! Leader election on a `coordination.k8s.io` Lease, with a hand-over measured in milliseconds.
//!
//! Why not a polling elector: a standby that sleeps until the lease's expiry learns of a
//! leader's voluntary release only then (up to the lease's duration, 15 s). During a rolling
//! upgrade of the operator that is how long the cluster has no failover writer, and a primary
//! with replicas whose writer lease runs out (one down-after) stops serving until a writer
//! confirms it: clients saw ten seconds of `the cluster topology is changing`. Here a standby
//! watches the Lease and takes it the moment it is released, and the leader releases it as soon
//! as it has stopped (see `main.rs`).
//!
//! The rules are client-go's: the holder named in `holderIdentity` holds the Lease until
//! `leaseDurationSeconds` after the record last changed, judged on *this* process's clock from
//! when it saw the change (never by comparing clocks across machines). Every write is a
//! compare-and-swap on the Lease's resourceVersion, so two candidates never both win. The
//! leader renews every third of the duration and counts itself deposed when it has not renewed
//! within two thirds of it: before any standby, which waits the whole duration from the last
//! renewal it saw, may take over.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams, WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Why the election could not start.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    #[error("reading or creating Lease {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Who takes part, in which Lease, for how long.
#[derive(Clone)]
pub struct Elector {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

/// A running election: `leading` says whether this process holds the Lease, as it changes.
pub struct Leadership {
    pub leading: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Leadership {
    /// Leaves the election; if this process holds the Lease, frees it for a standby to take at
    /// once. Call it only once nothing of the leader's work is running.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Leadership {
    /// Stops taking part without freeing the Lease: what a crash leaves (for tests of the
    /// standby's patience).
    pub fn abandon(self) {
        self.task.abort();
    }
}

/// How long a failed API call waits before the next try.
const RETRY: Duration = Duration::from_millis(500);

impl Elector {
    /// Makes sure the Lease exists (free, if this process creates it: the first candidate's
    /// loop then takes it like any free Lease), then runs the election in the background.
    pub async fn start(self) -> Result<Leadership, ElectionError> {
        if self.api.get_opt(&self.name).await.map_err(|e| self.error(e))?.is_none() {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec::default()),
            };
            match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {}
                // Another candidate made it first.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(self.error(e)),
            }
        }
        let (leading_tx, leading) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(self.run(leading_tx, stop_rx));
        Ok(Leadership { leading, stop, task })
    }

    fn error(&self, source: kube::Error) -> ElectionError {
        ElectionError::Api { name: self.name.clone(), source }
    }

    async fn run(self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut seen = Seen::default();
        // When this process last renewed (or took) the Lease, while it leads.
        let mut renewed: Option<Instant> = None;
        while !*stop.borrow() {
            let lease = match self.api.get(&self.name).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "reading the leader Lease");
                    self.deposed_if_late(&leading, &mut renewed);
                    pause(&mut stop, RETRY).await;
                    continue;
                }
            };
            let now = Instant::now();
            seen.note(&lease, now);
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
            let held_for = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            match holder {
                Some(h) if h == self.identity => {
                    if renewed.is_none() {
                        // Held under this name from before (a restart within the duration).
                        renewed = Some(now);
                        leading.send_replace(true);
                    }
                    pause(&mut stop, self.duration / 3).await;
                    if *stop.borrow() {
                        break;
                    }
                    match self.write(lease, true).await {
                        Ok(_) => renewed = Some(Instant::now()),
                        Err(e) => {
                            tracing::warn!(lease = %self.name, error = %e, "renewing the leader Lease");
                            self.deposed_if_late(&leading, &mut renewed);
                        }
                    }
                }
                Some(h) if now < seen.at + held_for => {
                    if renewed.take().is_some() {
                        tracing::error!(lease = %self.name, holder = %h, "another process holds the leader Lease");
                        leading.send_replace(false);
                    }
                    tracing::debug!(lease = %self.name, holder = %h, "held by another; watching it");
                    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
                    self.wait_for_change(&rv, seen.at + held_for, &mut stop).await;
                }
                // Free (released, or never taken) or expired: take it.
                _ => match self.write(lease, false).await {
                    Ok(_) => {
                        tracing::info!(lease = %self.name, identity = %self.identity, "took the leader Lease");
                        renewed = Some(Instant::now());
                        leading.send_replace(true);
                    }
                    // Someone else wrote first: look again.
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => {
                        tracing::warn!(lease = %self.name, error = %e, "taking the leader Lease");
                        pause(&mut stop, RETRY).await;
                    }
                },
            }
        }
        if renewed.is_some() {
            self.free().await;
        }
        leading.send_replace(false);
    }

    /// Counts this process deposed when it leads and has not renewed within two thirds of the
    /// duration: a standby may take over once the whole duration has passed.
    fn deposed_if_late(&self, leading: &watch::Sender<bool>, renewed: &mut Option<Instant>) {
        if let Some(at) = *renewed
            && at.elapsed() >= self.duration * 2 / 3
        {
            tracing::error!(lease = %self.name, "could not renew the leader Lease in time");
            *renewed = None;
            leading.send_replace(false);
        }
    }

    /// Writes `lease` back held by this process: renewed (`renew`), or taken (a new holder: the
    /// acquire time and the transition count move). A compare-and-swap on its resourceVersion.
    async fn write(&self, mut lease: Lease, renew: bool) -> kube::Result<Lease> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if !renew {
            // A Lease held before (by another, or freed) changes hands; a new one starts at 0.
            if spec.acquire_time.is_some() && spec.holder_identity.as_deref() != Some(self.identity.as_str())
            {
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.acquire_time = Some(now.clone());
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.duration.as_secs().clamp(1, i32::MAX as u64) as i32);
        self.api.replace(&self.name, &PostParams::default(), &lease).await
    }

    /// Frees the Lease if this process still holds it (a standby watching takes it at once).
    async fn free(&self) {
        for _ in 0..3 {
            let Ok(mut lease) = self.api.get(&self.name).await else { continue };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return;
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                Ok(_) => {
                    tracing::info!(lease = %self.name, "released the leader Lease");
                    return;
                }
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "releasing the leader Lease"),
            }
        }
    }

    /// Returns when the Lease changes from resourceVersion `rv`, at `until`, or at a stop,
    /// whichever is first.
    async fn wait_for_change(&self, rv: &str, until: Instant, stop: &mut watch::Receiver<bool>) {
        let params = WatchParams::default().fields(&format!("metadata.name={}", self.name)).timeout(290);
        let changed = async {
            match self.api.watch(&params, rv).await {
                Ok(events) => {
                    let mut events = std::pin::pin!(events);
                    while let Some(event) = events.next().await {
                        match event {
                            Ok(WatchEvent::Bookmark(_)) => continue,
                            // Modified, deleted, or an error (e.g. the version is too old):
                            // look again.
                            _ => return,
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(lease = %self.name, error = %e, "watching the leader Lease");
                    tokio::time::sleep(RETRY).await;
                }
            }
        };
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(until) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }
}

/// When the Lease's record last changed, as this process saw it.
struct Seen {
    version: String,
    at: Instant,
}

impl Default for Seen {
    fn default() -> Self {
        Seen { version: String::new(), at: Instant::now() }
    }
}

impl Seen {
    fn note(&mut self, lease: &Lease, now: Instant) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if version != self.version {
            self.version = version;
            self.at = now;
        }
    }
}

/// Sleeps `d`, or until a stop.
async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
}
