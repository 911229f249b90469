//! `shoal-operator`: reconciles CacheCluster resources. See the crate docs for the design.
//!
//! [`run`] reads as the process's life: settings, the ops endpoint, leader election, then the
//! controller while this replica leads, and the way out (the lease released, the endpoint
//! stopped).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Controller;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use shoal_coordinator::failover::FailoverOptions;
use shoal_operator::context::{self, Context, Settings};
use shoal_operator::controller;
use shoal_operator::crd::CacheCluster;
use shoal_operator::election::{Elector, Leadership};
use shoal_operator::resources::{self, AddressMode};
use shoal_telemetry::logging::LogFormat;
use shoal_telemetry::{http, logging, shutdown};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Parser)]
#[command(
    name = "shoal-operator",
    version,
    about = "Shoal's Kubernetes operator: reconciles CacheCluster resources (shoal.dev/v1alpha1) into nodes, \
             routers and a topology, reshards online when spec.shards changes (kubectl scale), and runs the \
             failover writer of clusters with replicas."
)]
struct Cli {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "SHOAL_OPERATOR_NAMESPACE")]
    namespace: Option<String>,
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long, env = "SHOAL_OPERATOR_METRICS_LISTEN", default_value = "0.0.0.0:8080")]
    metrics_listen: SocketAddr,
    /// How topologies address nodes: stable DNS names, or pod IPs (for an operator outside the
    /// cluster's DNS).
    #[arg(long, env = "SHOAL_OPERATOR_NODE_ADDRESSES", value_enum, default_value = "dns")]
    node_addresses: AddressMode,
    /// The Lease that elects one active replica.
    #[arg(long, env = "SHOAL_OPERATOR_LEASE_NAME", default_value = "shoal-operator")]
    lease_name: String,
    /// The operator's own Deployment, made the Lease's owner, so that removing the operator
    /// (helm uninstall) removes the Lease the operator made (the chart passes it).
    #[arg(long, env = "SHOAL_OPERATOR_LEASE_OWNER")]
    lease_owner: Option<String>,
    /// Namespace of the Lease (default: the pod's namespace, else --namespace, else "default").
    #[arg(long, env = "SHOAL_OPERATOR_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds a leader's lease lasts without renewal.
    #[arg(long, env = "SHOAL_OPERATOR_LEASE_SECONDS", default_value_t = 15)]
    lease_seconds: u64,
    /// This replica's identity in the Lease (default: the pod name, else a random one).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Give up on a resharding step after this many seconds (it is retried from the topology).
    #[arg(long, env = "SHOAL_OPERATOR_STEP_TIMEOUT_SECS", default_value_t = 3600)]
    step_timeout_secs: u64,
    /// With replicas: how long a shard's primary may be unreachable before the failover writer
    /// promotes a replica.
    #[arg(long, env = "SHOAL_OPERATOR_FAILOVER_DOWN_AFTER_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(100..))]
    failover_down_after_ms: u64,
    /// A file holding the operator's key (at least 32 bytes; the chart makes one, kept across
    /// upgrades): each cluster's node secret is derived from it. Changing it changes what the
    /// operator sends to existing clusters' nodes, whose Secrets keep the old values.
    #[arg(long, env = "SHOAL_OPERATOR_SECRET_KEY_FILE")]
    secret_key_file: PathBuf,
    /// Log format: text or json (level from RUST_LOG, default info).
    #[arg(long, env = "SHOAL_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.log_format, "info");
    shoal_telemetry::runtime::build(None)?.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let client = Client::try_default().await.context("no Kubernetes API (set KUBECONFIG or run in a pod)")?;
    let identity =
        cli.identity.clone().unwrap_or_else(|| format!("shoal-operator-{:08x}", fastrand::u32(..)));
    let settings = settings(&cli)?;
    let reporter = Reporter { controller: "shoal-operator".into(), instance: Some(identity.clone()) };
    let ctx = Arc::new(Context::new(client.clone(), settings, reporter));

    let (stop_tx, stop_rx) = watch::channel(false);
    let ops = serve_ops(cli.metrics_listen, ctx.clone(), stop_rx).await?;
    let leadership = elect(&cli, &client, &identity).await?;
    let mut leader = leadership.leading.clone();
    let mut signal = Box::pin(shutdown::signal());
    let lost = if wait_to_lead(&mut leader, &mut signal).await? {
        ctx.metrics.leader.set(1);
        tracing::info!(%identity, "leading: reconciling CacheClusters");
        let lost = reconcile_while_leading(&cli, &client, &ctx, leader.clone(), signal).await;
        ctx.stop_background();
        ctx.metrics.leader.set(0);
        lost
    } else {
        tracing::info!("stopping before leading");
        false
    };
    drop(leader);
    // Nothing of the leader's work runs now: free the Lease, which a standby takes at once.
    leadership.release().await;
    let _ = stop_tx.send(true);
    let _ = ops.await;
    if lost {
        anyhow::bail!("lost the leader lease");
    }
    Ok(())
}

/// The reconciler's settings from the command line, the operator key read from its file.
fn settings(cli: &Cli) -> anyhow::Result<Settings> {
    let key = std::fs::read(&cli.secret_key_file)
        .with_context(|| format!("cannot read the operator key {}", cli.secret_key_file.display()))?;
    let key: Vec<u8> = key.trim_ascii().to_vec();
    anyhow::ensure!(
        key.len() >= 32,
        "the operator key in {} has {} bytes; it needs at least 32",
        cli.secret_key_file.display(),
        key.len()
    );
    Ok(Settings {
        node_addresses: cli.node_addresses,
        step_timeout: Duration::from_secs(cli.step_timeout_secs),
        busy_requeue: Duration::from_secs(2),
        failover: FailoverOptions {
            down_after: Duration::from_millis(cli.failover_down_after_ms),
            ..FailoverOptions::default()
        },
        secret_key: Arc::from(key),
    })
}

/// Serves /metrics, /healthz and /readyz until `stop` turns true.
async fn serve_ops(
    addr: SocketAddr,
    ctx: Arc<Context>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    // Ready as soon as it runs: a standby replica is healthy too.
    let ops =
        tokio::spawn(http::serve_ops(listener, || true, move || context::render_metrics(&ctx), async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
    tracing::info!(%addr, "operator metrics on /metrics");
    Ok(ops)
}

/// Leader election on the Lease (`election`): only its holder reconciles.
async fn elect(cli: &Cli, client: &Client, identity: &str) -> anyhow::Result<Leadership> {
    let lease_ns = cli
        .lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| cli.namespace.clone())
        .unwrap_or_else(|| "default".into());
    let leadership = Elector {
        api: Api::namespaced(client.clone(), &lease_ns),
        name: cli.lease_name.clone(),
        identity: identity.to_string(),
        duration: Duration::from_secs(cli.lease_seconds.max(3)),
    }
    .start()
    .await
    .context("setting up leader election")?;
    if let Some(owner) = &cli.lease_owner {
        // Best effort: without it the Lease outlives an uninstall, as it always did.
        if let Err(e) = own_lease(client, &lease_ns, &cli.lease_name, owner).await {
            tracing::warn!(error = %format!("{e:#}"), lease = %cli.lease_name, %owner, "could not make the Deployment the Lease's owner");
        }
    }
    tracing::info!(%identity, lease = %cli.lease_name, namespace = %lease_ns, "waiting to lead");
    Ok(leadership)
}

/// Makes Deployment `owner` the owner of the Lease: the Lease is made at run time (by the first
/// replica to start), not by the chart, so only the garbage collector, following this reference,
/// removes it when the Deployment goes.
async fn own_lease(client: &Client, ns: &str, lease: &str, owner: &str) -> anyhow::Result<()> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(owner)
        .await
        .with_context(|| format!("reading Deployment {ns}/{owner}"))?;
    let uid = deployment.metadata.uid.context("the Deployment has no uid")?;
    let patch = serde_json::json!({ "metadata": { "ownerReferences": [
        { "apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "uid": uid }
    ] } });
    Api::<Lease>::namespaced(client.clone(), ns)
        .patch(lease, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching Lease {ns}/{lease}"))?;
    Ok(())
}

/// Waits until this replica leads (true), or a shutdown signal comes first (false).
async fn wait_to_lead(
    leader: &mut watch::Receiver<bool>,
    signal: &mut Pin<Box<impl Future<Output = ()>>>,
) -> anyhow::Result<bool> {
    loop {
        if *leader.borrow_and_update() {
            return Ok(true);
        }
        tokio::select! {
            changed = leader.changed() => changed.context("leader election stopped")?,
            _ = &mut *signal => return Ok(false),
        }
    }
}

/// Runs the controller until SIGTERM, or until the lease is lost (another replica leads then);
/// returns whether it was lost. A lost lease stops moves and failover writers at once: only the
/// leader may publish topologies, and the next leader starts its own (the topology's
/// compare-and-swap refuses a late publish anyway). On SIGTERM they run on until the controller
/// has stopped (this process still leads): the failover writers' probes keep the primaries'
/// writer leases alive until the Lease goes to the next leader, whose writers take over before
/// those leases run out, so no primary stops serving for want of a writer.
async fn reconcile_while_leading(
    cli: &Cli,
    client: &Client,
    ctx: &Arc<Context>,
    mut leader: watch::Receiver<bool>,
    signal: Pin<Box<impl Future<Output = ()> + Send + Sync + 'static>>,
) -> bool {
    let lost = Arc::new(AtomicBool::new(false));
    let lost_flag = lost.clone();
    let stop_ctx = ctx.clone();
    let stop = async move {
        tokio::select! {
            _ = signal => tracing::info!("shutting down"),
            // Also when the election task is gone: then nobody renews the lease either.
            _ = leader.wait_for(|held| !*held) => {
                lost_flag.store(true, Ordering::SeqCst);
                tracing::error!("lost the leader lease; stopping");
                stop_ctx.stop_background();
            }
        }
    };
    let (cc_api, sts_api, dep_api, cm_api, pod_api) = match &cli.namespace {
        Some(ns) => (
            Api::<CacheCluster>::namespaced(client.clone(), ns),
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            Api::<Deployment>::namespaced(client.clone(), ns),
            Api::<ConfigMap>::namespaced(client.clone(), ns),
            Api::<Pod>::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    // The failover writers first: the primaries' writer leases run out a down-after after the
    // previous leader's last probe, sooner than the controller's first reconcile gets to them.
    // (Bounded: a slow API server must not hold the controller back; it starts them too.)
    let _ =
        tokio::time::timeout(Duration::from_secs(5), controller::start_failover_writers(ctx, &cc_api)).await;
    let managed_by = format!("app.kubernetes.io/managed-by={}", resources::OPERATOR_NAME_LABEL);
    let managed = watcher::Config::default().labels(&managed_by);
    Controller::new(cc_api, watcher::Config::default())
        .owns(sts_api, managed.clone())
        .owns(dep_api, managed.clone())
        .owns(cm_api, managed.clone())
        // Node pods becoming ready (or not) matter to scaling; they belong to the StatefulSet,
        // so map them to their CacheCluster by the instance label.
        .watches(pod_api, managed, |pod: Pod| {
            let ns = pod.namespace()?;
            let instance = pod.labels().get("app.kubernetes.io/instance")?.clone();
            Some(ObjectRef::<CacheCluster>::new(&instance).within(&ns))
        })
        .graceful_shutdown_on(stop)
        .run(controller::reconcile, controller::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    lost.load(Ordering::SeqCst)
}
