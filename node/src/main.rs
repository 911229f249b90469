//! `shoal-node`: serve a storage node until SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use shoal_node::config::{BakeArgs, Cli, Command, GetArgs};
use shoal_node::snapshot::bake::{self, InputFormat};
use shoal_node::store::{Store, SystemClock};
use shoal_node::{metrics, server};
use shoal_telemetry::{http, logging, runtime, shutdown};
use shoal_wire::auth::Credentials;

/// jemalloc, not glibc's malloc: a store's many small values and the per-request buffers churn
/// glibc's bins (docs/benchmarks.md, "The allocator"); Redis ships with jemalloc too.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.serve.log_format, "info");
    shoal_wire::slot::set_colocation(&cli.colocate)?;
    match &cli.command {
        Some(Command::Bake(args)) => run_bake(args),
        Some(Command::Get(args)) => {
            let credentials = cli.auth.credentials()?;
            let result = runtime::build(Some(1))?.block_on(run_get(args, credentials));
            if let Err(e) = &result
                && let Some(not_served) = e.downcast_ref::<NotServed>()
            {
                eprintln!("Error: {not_served}");
                std::process::exit(NOT_SERVED_EXIT);
            }
            result
        }
        None => runtime::build(cli.serve.threads)?.block_on(serve(cli)),
    }
}

fn run_bake(args: &BakeArgs) -> anyhow::Result<()> {
    let format = args.format.unwrap_or_else(|| InputFormat::for_path(&args.input));
    let started = std::time::Instant::now();
    let baked = bake::bake(&args.input, &args.output, format, |n| {
        let secs = started.elapsed().as_secs_f64().max(0.001);
        eprintln!("bake: {n} records read ({:.0} records/s)", n as f64 / secs);
    })?;
    eprintln!(
        "bake: wrote {} ({} entries from {} records, {} bytes) in {:.2}s",
        baked.path.display(),
        baked.entries,
        baked.records,
        baked.bytes,
        baked.duration.as_secs_f64()
    );
    if !baked.path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("snapshot-")) {
        eprintln!("bake: note: a node loads only snapshot-<sequence>.shoal files from its --data-dir");
    }
    Ok(())
}

/// `shoal-node get`'s exit status when the node does not serve the key's slot (1 is "not found"
/// or any other error).
const NOT_SERVED_EXIT: i32 = 3;

/// The node follows a topology in which the key's slot is not its own.
#[derive(Debug, thiserror::Error)]
#[error("{key}: slot {slot} is not served by node {node} (topology version {version}{owner})")]
struct NotServed {
    key: String,
    slot: u16,
    node: String,
    version: u64,
    /// ", owned by node N at ADDR" when the topology says.
    owner: String,
}

/// What one attempt of `shoal-node get` found.
enum Found {
    Value(bytes::Bytes),
    Missing,
    NotServed(NotServed),
}

/// The topology the node at `client` serves by (`None`: it follows none and serves every key).
async fn node_topology(
    client: &mut shoal_wire::client::Client,
) -> anyhow::Result<Option<shoal_wire::Topology>> {
    match client.get_topology(shoal_wire::proto::GetTopologyRequest {}).await {
        Ok(doc) => Ok(Some(shoal_wire::Topology::from_json(&doc.into_inner().json)?)),
        Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
        Err(status) => Err(anyhow::anyhow!("GetTopology: {status}")),
    }
}

/// One GET, routed by the topology the node serves by, as a router at its version would send it.
async fn get_once(args: &GetArgs, credentials: &Credentials) -> anyhow::Result<Found> {
    use shoal_wire::proto::{Batch, Get, Op, op::Kind, reply};
    let options = shoal_wire::client::ClientOptions::default().with_credentials(credentials.clone());
    let mut client = shoal_wire::client::connect(&args.node, &options).await?;
    let key = bytes::Bytes::from(args.key.clone());
    let slot = shoal_wire::key_slot(&key);
    let mut topology = node_topology(&mut client).await?;
    // The node may adopt a newer topology between the two calls: catch up a few times.
    for _ in 0..5 {
        let version = topology.as_ref().map_or(0, |t| t.version);
        let op = Op {
            kind: Some(Kind::Get(Get { key: key.clone(), ..Default::default() })),
            ..Default::default()
        };
        let batch = Batch { id: 1, ops: vec![op], topology_version: version };
        let mut replies = client.execute(tokio_stream::iter([batch])).await?.into_inner();
        // A large value arrives in pieces, possibly over several messages.
        let mut assembler = shoal_wire::pieces::ReplyAssembler::default();
        let mut whole = None;
        while whole.is_none() {
            let message = replies.message().await?.ok_or_else(|| anyhow::anyhow!("stream ended"))?;
            for r in message.replies {
                whole = whole.or(assembler.feed(r)?);
            }
        }
        match whole.and_then(|r| r.kind) {
            Some(reply::Kind::Value(v)) => return Ok(Found::Value(v)),
            Some(reply::Kind::Nil(_)) => return Ok(Found::Missing),
            Some(reply::Kind::Moved(at)) if at == version => {
                let owner = topology
                    .as_ref()
                    .and_then(|t| t.owner_of(slot).and_then(|id| t.node(id)))
                    .map(|n| format!(", owned by node {} at {}", n.id, n.addr))
                    .unwrap_or_default();
                return Ok(Found::NotServed(NotServed {
                    key: args.key.clone(),
                    slot,
                    node: args.node.clone(),
                    version,
                    owner,
                }));
            }
            Some(reply::Kind::Moved(_)) => topology = node_topology(&mut client).await?,
            Some(reply::Kind::Error(e)) => anyhow::bail!("the node answered: {e}"),
            other => anyhow::bail!("unexpected reply {other:?}"),
        }
    }
    anyhow::bail!("the node's topology kept changing")
}

/// `shoal-node get`: one GET over the node's Execute stream, retried while `--wait` allows.
async fn run_get(args: &GetArgs, credentials: Credentials) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(args.wait.max(0.0));
    loop {
        let outcome = get_once(args, &credentials).await;
        let done = match (&outcome, &args.expect) {
            (Ok(Found::Value(v)), Some(want)) => v.as_ref() == want.as_bytes(),
            (Ok(Found::Value(_)), None) => true,
            _ => false,
        };
        if done || std::time::Instant::now() >= deadline {
            return match outcome {
                Ok(Found::Value(v)) if done => {
                    println!("{}", String::from_utf8_lossy(&v));
                    Ok(())
                }
                Ok(Found::NotServed(e)) => Err(e.into()),
                Err(e) => Err(e.context(format!("GET {} from {}", args.key, args.node))),
                Ok(_) => anyhow::bail!("{} not found on {}", args.key, args.node),
            };
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
    let secret = cli.auth.secret()?;
    let link_tls = match cli.auth.link_tls_files()? {
        Some(files) => Some(shoal_wire::tls::LinkTls::load(&files).context("node-link TLS")?),
        None => None,
    };
    let args = cli.serve;
    match (secret.is_some() || link_tls.is_some(), args.no_auth) {
        (true, true) => {
            anyhow::bail!("--no-auth with a cluster secret or node-link certificates: choose one")
        }
        (false, false) => anyhow::bail!(
            "shoal-node needs the cluster secret every member of the cluster shares (set \
             SHOAL_CLUSTER_SECRET or --cluster-secret-file) or node-link certificates \
             (--link-tls-cert-file, --link-tls-key-file, --link-tls-ca-file); or --no-auth, only \
             on a network nobody else reaches"
        ),
        (false, true) => tracing::warn!(
            "serving without a cluster secret (--no-auth): anyone who reaches the port has the data"
        ),
        (true, false) => {}
    }
    let store = Arc::new(Store::new(args.store_config(), Arc::new(SystemClock)));
    store.events.changes.set_backlog_bytes(usize::try_from(args.repl_backlog_size).unwrap_or(usize::MAX));
    let options = server::ServeOptions {
        expire_interval: args.expire_interval(),
        snapshot_interval: args.snapshot_interval(),
        data_dir: args.data_dir.clone(),
        snapshot_keep: args.snapshot_keep,
        node_id: args.node_id,
        topology_file: args.topology_file.clone(),
        migrate_rate: args.migrate_rate,
        lua_memory_limit: usize::try_from(args.lua_memory_limit).unwrap_or(usize::MAX),
        busy_reply_threshold: args.busy_reply_threshold,
        stall_fence: Duration::from_millis(args.stall_fence_ms),
        handover_linger: Duration::from_millis(args.handover_linger_ms),
        cluster_secret: secret,
        link_tls,
        ..Default::default()
    };
    let state = server::open_state(
        store,
        args.advertise.clone().unwrap_or_else(|| args.listen.to_string()),
        &options,
    )
    .context("opening the data directory")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(addr) = args.metrics_listen {
        let ops_listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} for metrics"))?;
        let st = state.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(http::serve_ops(ops_listener, || true, move || metrics::render(&st), async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
        tracing::info!(%addr, "node metrics on http://{addr}/metrics");
    }
    server::run(listener, state, options, async move {
        shutdown::signal().await;
        let _ = stop_tx.send(true);
        // The drain deadline bounds a graceful shutdown; a second signal is the operator saying
        // not to wait even for that (nor for the final snapshot).
        tokio::spawn(async {
            shutdown::signal().await;
            tracing::warn!("second shutdown signal: exiting now");
            std::process::exit(1);
        });
    })
    .await?;
    Ok(())
}
