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
    fn cgroup_limits() {
        assert_eq!(parse_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None, "cgroup v1's 'unlimited'");
        // Whatever this machine has, it is a plausible size or none.
        assert!(memory_limit().is_none_or(|m| m >= 1 << 20));
    }
}
