//! How many CPUs the process may use: the cgroup's CPU quota rounded up (cgroup v2
//! `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), at most the CPUs it may run on;
//! without a quota, the CPUs it may run on. `server.worker_threads = 0` starts that many
//! event loops.
//!
//! Neither std nor `num_cpus` gives this figure, so the quota is read here:
//! `std::thread::available_parallelism` reads the same quotas along the ancestors but rounds
//! them down (a container limited to 1.5 CPUs gets one loop and leaves half a CPU idle);
//! `num_cpus::get` (1.17) rounds up, but reads only the process's own cgroup, not its
//! ancestors (a limit on a parent cgroup, such as a pod's or a systemd slice's, is missed),
//! prefers the v1 hierarchy where v1 and v2 both exist, and returns a bare count, while
//! start-up logs where the count came from (`docs/operations.md`). The CPUs the process may
//! run on still come from std when `/proc` says nothing.
//! Read once per process: a cgroup's quota does not change under a running container
//! without a restart that Kubernetes would do anyway (an in-place resize is picked up at the
//! next start).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What the count was derived from (logged at start-up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Source {
    /// A cgroup v2 `cpu.max` quota of this many CPUs.
    CgroupV2(f64),
    /// A cgroup v1 CFS quota of this many CPUs.
    CgroupV1(f64),
    /// No quota: the CPUs the process may run on.
    Cores,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::CgroupV2(cpus) => write!(f, "cgroup v2 cpu.max quota of {cpus} CPUs"),
            Source::CgroupV1(cpus) => write!(f, "cgroup v1 CFS quota of {cpus} CPUs"),
            Source::Cores => f.write_str("CPU cores (no CPU quota)"),
        }
    }
}

/// The CPUs available to the process and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cpus {
    /// At least 1.
    pub(crate) count: usize,
    /// Where `count` comes from.
    pub(crate) source: Source,
}

/// The process's CPUs, read once.
pub(crate) fn available() -> Cpus {
    static CPUS: OnceLock<Cpus> = OnceLock::new();
    *CPUS.get_or_init(|| {
        let cores = read("/proc/self/status")
            .and_then(|status| cpus_allowed(&status))
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(1);
        combine(quota(), cores)
    })
}

/// The count from a quota and the CPUs the process may run on: the quota rounded up, never
/// more than the cores.
fn combine(quota: Option<Source>, cores: usize) -> Cpus {
    let cores = cores.max(1);
    match quota {
        Some(source @ (Source::CgroupV2(cpus) | Source::CgroupV1(cpus))) => {
            // cpus > 0 and finite (the parsers refuse anything else); the cast saturates.
            let rounded = (cpus.ceil() as usize).max(1);
            Cpus {
                count: rounded.min(cores),
                source,
            }
        }
        _ => Cpus {
            count: cores,
            source: Source::Cores,
        },
    }
}

pub(crate) fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The process's CPU quota, if any: the smallest along its cgroup's ancestors (a parent's
/// quota binds its children too).
fn quota() -> Option<Source> {
    let cgroups = read("/proc/self/cgroup")?;
    let (v2, v1) = parse_proc_cgroup(&cgroups);
    if let Some(path) = v2 {
        let root = PathBuf::from("/sys/fs/cgroup");
        if let Some(cpus) = smallest(&root, &path, |dir| {
            read(dir.join("cpu.max")).and_then(|text| parse_cpu_max(&text))
        }) {
            return Some(Source::CgroupV2(cpus));
        }
    }
    if let Some(path) = v1 {
        let (mount_root, mount_point) =
            read("/proc/self/mountinfo").and_then(|info| parse_mountinfo_v1_cpu(&info))?;
        // Inside a container the hierarchy is mounted at the container's own cgroup.
        let relative = path
            .strip_prefix(&mount_root)
            .map(str::to_string)
            .unwrap_or(path);
        if let Some(cpus) = smallest(Path::new(&mount_point), &relative, |dir| {
            let quota = read(dir.join("cpu.cfs_quota_us"))?;
            let period = read(dir.join("cpu.cfs_period_us"))?;
            parse_cfs(&quota, &period)
        }) {
            return Some(Source::CgroupV1(cpus));
        }
    }
    None
}

/// The smallest quota that `read_quota` finds in `root/path` and its ancestors up to `root`.
pub(crate) fn smallest(
    root: &Path,
    path: &str,
    read_quota: impl Fn(&Path) -> Option<f64>,
) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut dir = root.join(path.trim_start_matches('/'));
    loop {
        if let Some(cpus) = read_quota(&dir) {
            best = Some(best.map_or(cpus, |b| b.min(cpus)));
        }
        if dir.as_path() == root || !dir.pop() || !dir.starts_with(root) {
            break;
        }
    }
    best
}

/// `/proc/self/cgroup`: the cgroup v2 path (`0::PATH`) and the v1 path of the controller
/// holding `cpu` (`N:cpu,cpuacct:PATH`).
pub(crate) fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// `/proc/self/mountinfo`: the root and mount point of the cgroup v1 hierarchy with `cpu`.
fn parse_mountinfo_v1_cpu(text: &str) -> Option<(String, String)> {
    text.lines().find_map(|line| {
        let (mount, rest) = line.split_once(" - ")?;
        let mut fs = rest.split(' ');
        if fs.next()? != "cgroup" {
            return None;
        }
        let options = fs.nth(1)?;
        if !options.split(',').any(|o| o == "cpu") {
            return None;
        }
        let mut fields = mount.split(' ');
        let root = fields.nth(3)?;
        let point = fields.next()?;
        Some((root.to_string(), point.to_string()))
    })
}

/// cgroup v2 `cpu.max`: `QUOTA PERIOD` in µs, or `max PERIOD` for none.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota = parts.next()?;
    let period = parts.next().unwrap_or("100000");
    ratio(quota, period)
}

/// cgroup v1: `cpu.cfs_quota_us` (-1 for none) and `cpu.cfs_period_us`.
fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    ratio(quota.trim(), period.trim())
}

/// quota / period as CPUs, when both are positive integers.
fn ratio(quota: &str, period: &str) -> Option<f64> {
    let quota: u64 = quota.parse().ok()?;
    let period: u64 = period.parse().ok()?;
    if quota == 0 || period == 0 {
        return None;
    }
    Some(quota as f64 / period as f64)
}

/// `Cpus_allowed_list:` of `/proc/self/status` (`0-3,6,8-9`): how many CPUs.
fn cpus_allowed(status: &str) -> Option<usize> {
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut count = 0usize;
    for range in list.split(',').filter(|r| !r.is_empty()) {
        count += match range.split_once('-') {
            Some((low, high)) => {
                let (low, high): (usize, usize) = (low.parse().ok()?, high.parse().ok()?);
                high.checked_sub(low)? + 1
            }
            None => {
                range.parse::<usize>().ok()?;
                1
            }
        };
    }
    (count > 0).then_some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_v2_cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("200000 100000"), Some(2.0));
        assert_eq!(parse_cpu_max("50000 100000"), Some(0.5));
        assert_eq!(parse_cpu_max("0 100000"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("garbage"), None);
        assert_eq!(parse_cpu_max("100000 0"), None);
    }

    #[test]
    fn cgroup_v1_cfs() {
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("250000\n", "100000\n"), Some(2.5));
        assert_eq!(parse_cfs("x", "100000"), None);
    }

    #[test]
    fn the_quota_is_rounded_up_and_bounded_by_the_cores() {
        let count = |quota, cores| combine(quota, cores).count;
        assert_eq!(count(Some(Source::CgroupV2(1.5)), 8), 2);
        assert_eq!(count(Some(Source::CgroupV2(0.25)), 8), 1);
        assert_eq!(count(Some(Source::CgroupV1(2.0)), 8), 2);
        assert_eq!(count(Some(Source::CgroupV2(2.01)), 8), 3);
        assert_eq!(count(Some(Source::CgroupV2(16.0)), 4), 4);
        assert_eq!(count(None, 6), 6);
        assert_eq!(count(None, 0), 1);
        assert_eq!(combine(None, 3).source, Source::Cores);
        assert_eq!(
            combine(Some(Source::CgroupV2(1.5)), 8).source,
            Source::CgroupV2(1.5)
        );
    }

    #[test]
    fn proc_self_cgroup_lines() {
        assert_eq!(
            parse_proc_cgroup("0::/kubepods/burstable/pod1/abc\n"),
            (Some("/kubepods/burstable/pod1/abc".into()), None)
        );
        let v1 = "12:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n1:name=systemd:/docker/x\n";
        assert_eq!(parse_proc_cgroup(v1), (None, Some("/docker/x".into())));
        let hybrid = "3:cpuset:/\n2:cpu,cpuacct:/a\n0::/b\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            (Some("/b".into()), Some("/a".into()))
        );
        assert_eq!(parse_proc_cgroup("nonsense\n"), (None, None));
    }

    #[test]
    fn mountinfo_finds_the_cpu_hierarchy() {
        let info = "\
25 30 0:23 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
26 30 0:24 /docker/x /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
";
        assert_eq!(
            parse_mountinfo_v1_cpu(info),
            Some(("/docker/x".into(), "/sys/fs/cgroup/cpu,cpuacct".into()))
        );
        assert_eq!(
            parse_mountinfo_v1_cpu("1 2 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
            None
        );
    }

    #[test]
    fn the_smallest_quota_along_the_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("cpu.max"), "max 100000\n").unwrap();
        std::fs::write(root.join("a/cpu.max"), "150000 100000\n").unwrap();
        std::fs::write(root.join("a/b/cpu.max"), "300000 100000\n").unwrap();
        let read = |dir: &Path| read(dir.join("cpu.max")).and_then(|t| parse_cpu_max(&t));
        assert_eq!(smallest(root, "/a/b/c", read), Some(1.5));
        assert_eq!(smallest(root, "/", read), None);
        assert_eq!(smallest(root, "/missing/path", read), None);
    }

    #[test]
    fn allowed_cpus() {
        let status = "Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,6,8-9\n";
        assert_eq!(cpus_allowed(status), Some(7));
        assert_eq!(cpus_allowed("Cpus_allowed_list:\t0\n"), Some(1));
        assert_eq!(cpus_allowed("Cpus_allowed_list:\t3-1\n"), None);
        assert_eq!(cpus_allowed("nothing\n"), None);
    }

    #[test]
    fn this_process_has_at_least_one_cpu() {
        let cpus = available();
        assert!(cpus.count >= 1);
        assert_eq!(cpus, available(), "read once");
    }
}
