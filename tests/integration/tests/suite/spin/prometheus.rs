//! `GET /metrics` as an operator uses it: a real Prometheus (Debian's, from `PATH`: see
//! `scripts/prometheus.sh`) scrapes the component under real Spin once a second during a
//! small sale, and what it stored afterwards must equal what MySQL holds and what the
//! buyers were told, exactly. Prometheus holds the metrics token, as an operator's
//! should, not the admin's. `promtool` lints the exposition, and without a metrics token
//! the endpoint is the admin's alone.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::Queryable;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use seckill_core::outcomes::PURCHASE_OUTCOMES;
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::app::{buyer_token, manifest, Answer, App, ADMIN_TOKEN};
use seckill_tests::servers::faults::{free_port, TempDir};
use seckill_tests::servers::local::mysql;

/// The Prometheus job that scrapes the component.
const JOB: &str = "seckill";

/// The `metrics_token` Prometheus scrapes with: a token that can do nothing else.
const METRICS_TOKEN: &str = "integration-test-metrics-token";

/// A tool from `PATH`; a missing one is a failure that says how to install it.
fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("no `{name}` on PATH: run scripts/prometheus.sh"))
}

/// A real Prometheus scraping one target every second, on a free loopback port, with its
/// config and storage in a temp dir. Killed on drop.
struct Prometheus {
    child: Option<Child>,
    dir: TempDir,
    base: String,
    client: reqwest::Client,
}

impl Prometheus {
    /// Scrapes `target` (`host:port`) at `/metrics` with `token` as a bearer token;
    /// returns once Prometheus says it is ready.
    async fn start(target: &str, token: &str) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: {JOB}\n    metrics_path: /metrics\n\
             \x20   authorization:\n      type: Bearer\n      credentials: '{token}'\n\
             \x20   static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let mut prometheus = Prometheus {
            child: None,
            dir,
            base: String::new(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        // Prometheus binds the port itself: one taken between our probe and its bind is
        // tried again on another.
        for _ in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            prometheus.base = format!("http://{addr}");
            if prometheus.serve(&addr).await {
                return prometheus;
            }
        }
        panic!("Prometheus found no free port in five tries")
    }

    /// Spawns Prometheus on `addr`; false when the address was taken.
    async fn serve(&mut self, addr: &str) -> bool {
        let dir = self.dir.path();
        let mut child = Command::new(tool("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("prometheus cannot start: {e}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = self
                .client
                .get(format!("{}/-/ready", self.base))
                .send()
                .await;
            if ready.is_ok_and(|r| r.status() == StatusCode::OK) {
                self.child = Some(child);
                return true;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let log = self.log();
                if log.contains("address already in use") {
                    return false;
                }
                panic!("prometheus exited ({status}) before it was ready:\n{log}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("prometheus was not ready within 60 s:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What Prometheus logged so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query through the HTTP API: each series' labels and value.
    async fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let response = self
            .client
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", promql)])
            .send()
            .await
            .expect("Prometheus answers");
        let status = response.status();
        let body: Value = response.json().await.expect("a JSON answer");
        assert!(
            status == StatusCode::OK && body["status"] == "success",
            "{promql}: {status} {body}"
        );
        assert_eq!(body["data"]["resultType"], "vector", "{promql}: {body}");
        body["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|series| {
                let labels = series["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let value = series["value"][1].as_str().unwrap().parse().unwrap();
                (labels, value)
            })
            .collect()
    }

    /// The value of a query that must give exactly one series.
    async fn value(&self, promql: &str) -> f64 {
        let result = self.query(promql).await;
        assert_eq!(result.len(), 1, "{promql} gave {result:?}");
        result[0].1
    }

    /// The value of the one series of `family` that `selector` (`{...}`) picks.
    async fn value_of(&self, family: &str, selector: &str) -> f64 {
        self.value(&format!("{family}{selector}")).await
    }

    /// The value of a query that must give one series, or none yet.
    async fn value_if_any(&self, promql: &str) -> Option<f64> {
        let result = self.query(promql).await;
        assert!(result.len() <= 1, "{promql} gave {result:?}");
        result.first().map(|(_, value)| *value)
    }

    /// What Prometheus says of its scrape targets (health and last error), for messages.
    async fn targets(&self) -> String {
        match self
            .client
            .get(format!("{}/api/v1/targets", self.base))
            .send()
            .await
        {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(e) => e.to_string(),
        }
    }

    /// Waits until the job has been scraped at a time after `after` (Unix seconds).
    async fn scraped_after(&self, after: f64) {
        let promql = format!("timestamp(up{{job=\"{JOB}\"}})");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self
                .value_if_any(&promql)
                .await
                .is_some_and(|at| at > after)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no scrape within 30 s; targets: {}\nlog:\n{}",
                self.targets().await,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The `outcome` label admission gave a purchase, by the answer the buyer heard. In a
/// sale where each buyer presses once and nothing fails, these are the only answers.
fn heard(answer: &Answer) -> &'static str {
    match (answer.status, answer.error()) {
        (StatusCode::CREATED, _) if answer.order_id().is_some() => "admitted",
        (StatusCode::CONFLICT, "sold_out") => "sold_out",
        (StatusCode::TOO_MANY_REQUESTS, "throttled") => "throttled",
        _ => panic!("unexpected answer to a purchase: {answer:?}"),
    }
}

/// `GET /metrics` with `token`.
async fn metrics(app: &App, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(format!("{}/metrics", app.base));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("Spin answers")
}

#[tokio::test]
async fn prometheus_scraping_a_sale_sees_what_mysql_holds_and_the_buyers_heard() {
    const STOCK: u64 = 50;
    const BUYERS: u64 = 150;
    const IN_FLIGHT: usize = 32;

    let env = vec![(
        "SPIN_VARIABLE_METRICS_TOKEN".to_string(),
        METRICS_TOKEN.to_string(),
    )];
    let app = Arc::new(App::start_with(manifest(), env).await);
    let voucher = app.live_voucher(STOCK).await;
    let prometheus = Prometheus::start(&app.addr().to_string(), METRICS_TOKEN).await;
    // Scraped before the sale, so the counters are seen from 0.
    prometheus.scraped_after(unix_now()).await;
    let series = format!("{{voucher_id=\"{voucher}\"}}");
    assert_eq!(
        prometheus
            .value(&format!("seckill_voucher_orders_total{series}"))
            .await,
        0.0
    );

    // The sale: every buyer presses once; one told `throttled` presses again after
    // Retry-After, as a storefront would.
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = JoinSet::new();
    for buyer in 0..BUYERS {
        let (app, gate) = (app.clone(), gate.clone());
        tasks.spawn(async move {
            let mut heard_all = Vec::new();
            loop {
                let permit = gate.acquire().await.unwrap();
                let answer = app.buy(voucher, 8_800_000 + buyer).await;
                drop(permit);
                let outcome = heard(&answer);
                heard_all.push(outcome);
                if outcome != "throttled" {
                    return heard_all;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    let mut told: BTreeMap<String, f64> = PURCHASE_OUTCOMES
        .iter()
        .map(|outcome| (outcome.to_string(), 0.0))
        .collect();
    while let Some(done) = tasks.join_next().await {
        for outcome in done.expect("a buyer") {
            *told.get_mut(outcome).unwrap() += 1.0;
        }
    }
    println!("the buyers heard {told:?}");

    // MySQL.
    let pool = mysql();
    let mut conn = pool.get_conn().await.unwrap();
    let orders: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?",
            (voucher,),
        )
        .await
        .unwrap()
        .unwrap();
    let (initial_stock, stock): (u64, u64) = conn
        .exec_first(
            "SELECT initial_stock, stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher,),
        )
        .await
        .unwrap()
        .expect("the voucher in MySQL");
    drop(conn);
    pool.disconnect().await.unwrap();
    assert_eq!((orders, stock, initial_stock), (STOCK, 0, STOCK), "MySQL");
    assert_eq!(told["admitted"], orders as f64, "201s == orders in MySQL");

    // Prometheus, from a scrape that began after the last buyer had her answer.
    prometheus.scraped_after(unix_now()).await;
    let up = prometheus.value(&format!("up{{job=\"{JOB}\"}}")).await;
    assert_eq!(up, 1.0, "target down: {}", prometheus.targets().await);
    let value = |family: &'static str| prometheus.value_of(family, &series);
    assert_eq!(
        value("seckill_voucher_orders_total").await,
        orders as f64,
        "orders"
    );
    assert_eq!(
        value("seckill_units_sold_total").await,
        orders as f64,
        "units sold, one an order"
    );
    assert_eq!(
        value("seckill_voucher_units_left").await,
        stock as f64,
        "units left"
    );
    assert_eq!(
        value("seckill_voucher_units_initial").await,
        initial_stock as f64,
        "initial units"
    );
    assert_eq!(value("seckill_queue_depth").await, 0.0, "queue depth");

    let by_outcome = |family: &'static str| {
        let prometheus = &prometheus;
        let promql = format!("{family}{series}");
        async move {
            let mut counts = BTreeMap::new();
            for (labels, value) in prometheus.query(&promql).await {
                let outcome = labels["outcome"].clone();
                assert!(
                    counts.insert(outcome.clone(), value).is_none(),
                    "{family}: two series for outcome {outcome}"
                );
            }
            counts
        }
    };
    // Every outcome label present, each as many times as the buyers heard it.
    assert_eq!(
        by_outcome("seckill_purchase_outcomes_total").await,
        told,
        "purchase outcomes: Prometheus (left) vs what the buyers heard (right)"
    );
    let committed = by_outcome("seckill_commit_outcomes_total").await;
    // Every verdict's label, and all of them `ordered`.
    let expected: BTreeMap<String, f64> = Verdict::tags()
        .into_iter()
        .map(|tag| {
            let count = if tag == Verdict::Ordered.tag() {
                orders
            } else {
                0
            };
            (tag.to_string(), count as f64)
        })
        .collect();
    assert_eq!(committed, expected, "commit outcomes");

    // The batch-size histogram: every admitted purchase went through one batch.
    let batches = value("seckill_commit_batch_size_count").await;
    assert_eq!(
        value("seckill_commit_batch_size_sum").await,
        orders as f64,
        "purchases in batches"
    );
    assert!(
        (1.0..=orders as f64).contains(&batches),
        "{batches} batches"
    );
    let mut buckets = BTreeMap::new();
    for (labels, value) in prometheus
        .query(&format!("seckill_commit_batch_size_bucket{series}"))
        .await
    {
        buckets.insert(labels["le"].clone(), value);
    }
    let bounds = ["1", "4", "16", "64", "256", "+Inf"];
    let mut labels: Vec<&str> = buckets.keys().map(String::as_str).collect();
    labels.sort_by_key(|le| bounds.iter().position(|bound| bound == le));
    assert_eq!(labels, bounds, "bucket bounds");
    for pair in bounds.windows(2) {
        assert!(
            buckets[pair[0]] <= buckets[pair[1]],
            "cumulative buckets: {buckets:?}"
        );
    }
    assert_eq!(buckets["+Inf"], batches, "+Inf bucket == count");
    // Batches are at most 64 purchases here (a stock of 50).
    assert_eq!(buckets["64"], batches, "{buckets:?}");
}

#[tokio::test]
async fn promtool_finds_no_problem_in_the_exposition() {
    let app = App::start().await;
    let voucher = app.live_voucher(3).await;
    // Figures other than zero: three orders, a sold-out press and a repeat.
    for buyer in [8_900_001, 8_900_002, 8_900_003, 8_900_004, 8_900_001] {
        app.buy(voucher, buyer).await;
    }

    let response = metrics(&app, Some(ADMIN_TOKEN)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        header("content-type"),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(header("cache-control"), "no-store");
    let body = response.text().await.unwrap();
    assert!(
        body.contains(&format!(
            "seckill_voucher_orders_total{{voucher_id=\"{voucher}\"}} 3"
        )),
        "voucher {voucher}'s three orders:\n{body}"
    );

    // promtool reads the exposition on its stdin: from a file of it.
    let dir = TempDir::new("exposition");
    let exposition = dir.path().join("metrics.txt");
    std::fs::write(&exposition, &body).unwrap();
    let output = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(File::open(&exposition).unwrap())
        .output()
        .expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && said.trim().is_empty(),
        "promtool check metrics: {} {said}\n--- the exposition:\n{body}",
        output.status
    );
}

#[tokio::test]
async fn metrics_are_for_the_admin_alone() {
    let app = App::start().await;
    for (token, status, error) in [
        (None, StatusCode::UNAUTHORIZED, "unauthorized"),
        (
            Some("not-the-admin-token"),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            Some(buyer_token(8_900_100).as_str()),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
    ] {
        let answer = seckill_tests::drivers::app::answer(metrics(&app, token).await).await;
        assert_eq!(
            (answer.status, answer.error()),
            (status, error),
            "token {token:?}: {answer:?}"
        );
    }
    let admin = app.get("/metrics", ADMIN_TOKEN).await;
    assert_eq!(admin.status, StatusCode::OK, "{admin:?}");
}
