//! `shoal-router`: serve clients until SIGTERM.

use clap::Parser;
use shoal_router::Router;
use shoal_router::config::Cli;
use shoal_telemetry::{logging, shutdown};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.serve.log_format, "info");
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = cli.serve.threads {
        builder.worker_threads(n.max(1));
    }
    let runtime = builder.enable_all().build()?;
    runtime.block_on(async {
        let router = Router::start(&cli.serve).await?;
        shutdown::signal().await;
        router.shutdown().await;
        anyhow::Ok(())
    })
}
