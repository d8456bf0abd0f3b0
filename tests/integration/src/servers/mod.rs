//! The real servers a test runs against, and how it starts, stops or breaks them.

pub mod faults;
pub mod galera;
pub mod local;
pub mod mariadb;
pub mod mysql_pair;
pub mod proxy;
pub mod redis_cluster;
pub mod spin;

use std::process::Child;
use std::time::{Duration, Instant};

/// Waits until a server process just started answers (`up`), asking every `every` for at
/// most `patience`; panics, with its `log`, once the process (`child`) has exited or if
/// it never answers. `what` names it: `redis-server on port 6390`.
pub(crate) async fn until_up(
    what: &str,
    mut child: Option<&mut Child>,
    (patience, every): (Duration, Duration),
    log: impl Fn() -> String,
    mut up: impl AsyncFnMut() -> bool,
) {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("{what} exited ({status}): {}", log());
        }
        if up().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not come up: {}",
            log()
        );
        tokio::time::sleep(every).await;
    }
}
