//! The Tokio runtime every binary runs on.

/// The runtime for `threads` worker threads, or one per CPU this process may use (cgroup limits
/// included) when `None`.
///
/// One thread gets Tokio's current-thread scheduler: every task runs on the thread that called
/// `block_on`, so waking a task is a push onto a local queue. The multi-threaded scheduler with
/// one worker keeps that thread apart from the worker and pays for cross-thread queues, wake-ups
/// and work stealing with nothing to steal: a router given one CPU spends about a tenth less CPU
/// per request on the current-thread scheduler (docs/benchmarks.md, "Sidecar").
pub fn build(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let available = || std::thread::available_parallelism().map_or(1, usize::from);
    if threads.unwrap_or_else(available) <= 1 {
        return tokio::runtime::Builder::new_current_thread().enable_all().build();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n);
    }
    builder.enable_all().build()
}

/// The memory limit of this process's cgroup (a container's limit), if it has one: cgroup v2's
/// `memory.max` or v1's `memory.limit_in_bytes`, for the process's own cgroup or, in a cgroup
/// namespace (containers), the root of the mount.
pub fn memory_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut candidates = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if controllers.is_empty() {
            candidates.push(format!("/sys/fs/cgroup{path}/memory.max"));
        } else if controllers.split(',').any(|c| c == "memory") {
            candidates.push(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"));
        }
    }
    candidates.push("/sys/fs/cgroup/memory.max".into());
    candidates.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".into());
    candidates.iter().find_map(|file| parse_limit(&std::fs::read_to_string(file).ok()?))
}

/// A cgroup memory limit file's value: `max` (v2) or a huge number (v1) mean none.
fn parse_limit(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    (n > 0 && n < 1 << 60).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_is_the_current_thread_scheduler() {
        use tokio::runtime::RuntimeFlavor;
        for (threads, flavor) in [
            (Some(1), RuntimeFlavor::CurrentThread),
            (Some(0), RuntimeFlavor::CurrentThread),
            (Some(2), RuntimeFlavor::MultiThread),
        ] {
            let rt = build(threads).unwrap();
            assert_eq!(rt.handle().runtime_flavor(), flavor, "{threads:?}");
            // Whatever the scheduler: tasks, timers, I/O and blocking work all run.
            let answer = rt.block_on(async {
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    tx.send(tokio::task::spawn_blocking(|| 40).await.unwrap() + 2).unwrap();
                });
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (_client, accepted) =
                    tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
                accepted.unwrap();
                rx.await.unwrap()
            });
            assert_eq!(answer, 42);
        }
        let flavor = build(None).unwrap().handle().runtime_flavor();
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(flavor == RuntimeFlavor::CurrentThread, cpus == 1, "{cpus} CPUs");
    }

    #[test]
    fn cgroup_limits() {
        assert_eq!(parse_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None, "cgroup v1's 'unlimited'");
        // Whatever this machine has, it is a plausible size or none.
        assert!(memory_limit().is_none_or(|m| m >= 1 << 20));
    }
}
