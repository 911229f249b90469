//! `shoal-router`: serve clients until SIGTERM.

use clap::Parser;
use shoal_router::Router;
use shoal_router::config::{Cli, Command};
use shoal_telemetry::{logging, runtime, shutdown};

/// jemalloc, not glibc's malloc: a router's requests are short-lived buffers and boxes that
/// glibc's bins consolidate and split at a cost (docs/benchmarks.md, "The allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.serve.log_format, "info");
    let credentials = cli.serve.auth.credentials()?;
    match &cli.command {
        Some(Command::Reshard(args)) => {
            return runtime::build(Some(2))?.block_on(shoal_router::reshard::run(args, credentials));
        }
        Some(Command::Check(args)) => {
            return runtime::build(Some(1))?.block_on(shoal_router::check::run(args));
        }
        Some(Command::Failover(args)) => {
            return runtime::build(Some(2))?.block_on(shoal_router::reshard::failover(args, credentials));
        }
        None => {}
    }
    runtime::build(cli.serve.threads)?.block_on(async {
        let router = Router::start(&cli.serve).await?;
        shutdown::signal().await;
        // A second signal: stop now, without the shutdown delay or the drain.
        tokio::spawn(async {
            shutdown::signal().await;
            tracing::warn!("second shutdown signal: exiting now");
            std::process::exit(1);
        });
        router.shutdown().await;
        anyhow::Ok(())
    })
}
