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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.serve.log_format, "info");
    match &cli.command {
        Some(Command::Bake(args)) => run_bake(args),
        Some(Command::Get(args)) => runtime::build(Some(1))?.block_on(run_get(args)),
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

/// `shoal-node get`: one GET over the node's Execute stream, retried while `--wait` allows.
async fn run_get(args: &GetArgs) -> anyhow::Result<()> {
    use shoal_wire::proto::{Batch, Get, Op, node_client::NodeClient, op::Kind, reply};
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(args.wait.max(0.0));
    let key = bytes::Bytes::from(args.key.clone());
    loop {
        let attempt = async {
            let mut client = NodeClient::connect(format!("http://{}", args.node)).await?;
            // Newest possible version: a direct read is allowed wherever the node holds the slot.
            let op = Op { kind: Some(Kind::Get(Get { key: key.clone() })), ..Default::default() };
            let batch = Batch { id: 1, ops: vec![op], topology_version: u64::MAX };
            let mut replies = client.execute(tokio_stream::iter([batch])).await?.into_inner();
            let reply = replies.message().await?.ok_or_else(|| anyhow::anyhow!("stream ended"))?;
            anyhow::Ok(reply.replies.into_iter().next().and_then(|r| r.kind))
        };
        let outcome = attempt.await;
        let value = match &outcome {
            Ok(Some(reply::Kind::Value(v))) => Some(v.clone()),
            _ => None,
        };
        let done = match (&value, &args.expect) {
            (Some(v), Some(want)) => v.as_ref() == want.as_bytes(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if done || std::time::Instant::now() >= deadline {
            return match (value, outcome) {
                (Some(v), _) if done => {
                    println!("{}", String::from_utf8_lossy(&v));
                    Ok(())
                }
                (_, Err(e)) => Err(e.context(format!("GET {} from {}", args.key, args.node))),
                _ => anyhow::bail!("{} not found on {}", args.key, args.node),
            };
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
    let args = cli.serve;
    let store = Arc::new(Store::new(args.store_config(), Arc::new(SystemClock)));
    let options = server::ServeOptions {
        expire_interval: args.expire_interval(),
        snapshot_interval: args.snapshot_interval(),
        data_dir: args.data_dir.clone(),
        snapshot_keep: args.snapshot_keep,
        node_id: args.node_id,
        topology_file: args.topology_file.clone(),
        migrate_rate: args.migrate_rate,
        ..Default::default()
    };
    let state =
        server::open_state(store, args.listen.to_string(), &options).context("opening the data directory")?;
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
    })
    .await?;
    Ok(())
}
