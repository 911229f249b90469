//! Starts a real router in this process (embedded nodes, RESP on a free loopback port, and a
//! Unix socket in a temp dir), as the router's own tests do.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use shoal_router::Router;
use shoal_router::config::Cli;

/// A router with one embedded node, serving RESP on 127.0.0.1 and on the Unix socket `socket`.
pub async fn router(socket: &Path, extra: &[&str]) -> Router {
    let mut argv = vec![
        "shoal-router",
        "--resp",
        "127.0.0.1:0",
        "--http",
        "off",
        "--embedded-nodes",
        "1",
        "--unix-socket",
        socket.to_str().unwrap(),
    ];
    argv.extend_from_slice(extra);
    let cli = Cli::try_parse_from(argv).expect("valid flags");
    let router = Router::start(&cli.serve).await.expect("router starts");
    let start = Instant::now();
    while !router.state.backend.all_up() {
        assert!(start.elapsed() < Duration::from_secs(10), "nodes not up within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    router
}
