//! The Tokio runtime every binary runs on.

/// A multi-threaded runtime with `threads` workers, or one per CPU this process may use
/// (cgroup limits included) when `None`.
pub fn build(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    builder.enable_all().build()
}
