//! Shared by the workspace tests and their helper binaries.

use sluicegate_core::{FixedWindow, SECOND};

/// The limit the crash test's child decides against: far more than it can reach.
pub fn crash_limit() -> FixedWindow {
    FixedWindow::new(1_000_000_000, 24 * 3600 * SECOND).unwrap()
}

/// The key the crash test's child hammers.
pub const CRASH_KEY: &[u8] = b"quota";

/// The frozen instant the crash test's child decides at.
pub const CRASH_NOW: u64 = 1_700_000_000 * SECOND;

/// The README's and the guide's examples, compiled and run as doc tests (here, where
/// every crate they use is a dependency).
macro_rules! doctests {
    ($($name:ident = $path:literal),* $(,)?) => {$(
        #[cfg(doctest)]
        #[doc = include_str!($path)]
        struct $name;
    )*};
}
doctests!(
    Readme = "../../README.md",
    Introduction = "../../docs/introduction.md",
    Algorithms = "../../docs/algorithms.md",
    CommandLine = "../../docs/cli.md",
    InProcess = "../../docs/in-process.md",
    Leases = "../../docs/leases.md",
    LocksFamily = "../../docs/locks-family.md",
    Quotas = "../../docs/quotas.md",
    Redis = "../../docs/redis.md",
    Etcd = "../../docs/etcd.md",
    MovingFromEnvoyRatelimit = "../../docs/moving-from-envoy-ratelimit.md",
    MovingFromLimitador = "../../docs/moving-from-limitador.md",
    RedisModule = "../../docs/redis-module.md",
    Sled = "../../docs/sled.md",
    Wasm = "../../docs/wasm.md",
    Service = "../../docs/service.md",
    Deploying = "../../docs/deploying.md",
    ManagementPage = "../../docs/management-page.md",
    Middleware = "../../docs/middleware.md",
    Architecture = "../../docs/architecture.md",
    Tests = "../../docs/tests.md",
    OneConceptOnePlace = "../../docs/design/one-concept-one-place.md",
    Benchmarks = "../../BENCHMARKS.md",
);
