//! What anonymous clients can make MySQL do, under real Spin: nothing they send costs more
//! than one MySQL connection per route and second, counted by a proxy in front of MySQL.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use reqwest::{Method, StatusCode};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use seckill_tests::drivers::app::{behind_proxy, App};

const REQUESTS: u64 = 400;
const IN_FLIGHT: usize = 64;

/// Sends `paths` as anonymous GETs, `IN_FLIGHT` at once; returns each answer's status.
async fn flood(app: &Arc<App>, paths: Vec<String>) -> Vec<(String, StatusCode)> {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = JoinSet::new();
    for path in paths {
        let (app, gate) = (app.clone(), gate.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let answer = app.call(Method::GET, &path, None, None).await;
            (path, answer.status)
        });
    }
    tasks.join_all().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn made_up_voucher_ids_and_health_checks_open_one_mysql_connection_a_second() {
    let (proxy, _manifest, app) = behind_proxy(6379).await;
    let app = Arc::new(app);
    let stats = proxy.stats();
    let before = stats.forwarded.load(Ordering::SeqCst);

    // Ids far above any the tests create, each new to Redis, interleaved with health.
    let base = 8_000_000_000_000_000_000 + (std::process::id() as u64) * 1_000_000;
    let paths: Vec<String> = (0..REQUESTS)
        .flat_map(|i| [format!("/vouchers/{}", base + i), "/health".to_string()])
        .collect();
    let started = Instant::now();
    let answers = flood(&app, paths).await;
    let seconds = started.elapsed().as_secs_f64();
    let opened = stats.forwarded.load(Ordering::SeqCst) - before;

    for (path, status) in &answers {
        let expected: &[StatusCode] = if path == "/health" {
            &[StatusCode::OK]
        } else {
            // MySQL said no, or another request is asking it this second.
            &[StatusCode::NOT_FOUND, StatusCode::SERVICE_UNAVAILABLE]
        };
        assert!(expected.contains(status), "{path}: {status}");
    }
    let found = answers
        .iter()
        .filter(|(_, status)| *status == StatusCode::NOT_FOUND)
        .count();
    assert!(found >= 1, "MySQL was never asked");
    // Two routes, one connection each per started second.
    let bound = 2 * (seconds.ceil() as u64 + 1);
    assert!(
        opened <= bound,
        "{opened} MySQL connections for {} anonymous requests in {seconds:.1} s (at most {bound})",
        answers.len()
    );
    println!(
        "{} anonymous requests in {seconds:.2} s opened {opened} MySQL connections",
        answers.len()
    );

    // An id MySQL said no to is answered from Redis for a minute, with a 404 caches keep.
    let known_absent = answers
        .iter()
        .find(|(_, status)| *status == StatusCode::NOT_FOUND)
        .map(|(path, _)| path.clone())
        .unwrap();
    let before = stats.forwarded.load(Ordering::SeqCst);
    for _ in 0..50 {
        let answer = app.call(Method::GET, &known_absent, None, None).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND);
        assert_eq!(answer.error(), "not_found");
        assert_eq!(answer.headers["cache-control"], "public, max-age=5");
    }
    assert_eq!(stats.forwarded.load(Ordering::SeqCst), before);
}
