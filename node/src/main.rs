//! `shoal-node`: serve a storage node until SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hyper::Method;
use shoal_node::config::Cli;
use shoal_node::service::NodeState;
use shoal_node::store::{Store, SystemClock};
use shoal_node::{metrics, server};
use shoal_telemetry::{http, logging, runtime, shutdown};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.serve.log_format, "info");
    runtime::build(cli.serve.threads)?.block_on(serve(cli))
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
    let args = cli.serve;
    let store = Arc::new(Store::new(args.store_config(), Arc::new(SystemClock)));
    let state = Arc::new(NodeState::new(store));
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
        tokio::spawn(http::serve(
            ops_listener,
            move |req: hyper::Request<hyper::body::Incoming>, _peer| {
                let st = st.clone();
                async move {
                    if req.method() != Method::GET {
                        return http::text(hyper::StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
                    }
                    http::ops_endpoint(req.uri().path(), || true, || metrics::render(&st))
                        .unwrap_or_else(|| http::text(hyper::StatusCode::NOT_FOUND, "not found\n"))
                }
            },
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
            Duration::from_secs(2),
        ));
        tracing::info!(%addr, "node metrics on http://{addr}/metrics");
    }
    let options = server::ServeOptions { expire_interval: args.expire_interval(), ..Default::default() };
    server::run(listener, state, options, async move {
        shutdown::signal().await;
        let _ = stop_tx.send(true);
    })
    .await?;
    Ok(())
}
