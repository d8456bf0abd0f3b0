//! HTTP load from wrk: a fixed number of keep-alive connections, each sending its next
//! request as soon as the previous one is answered, for a fixed time. wrk (C, epoll)
//! leaves more of the two cores to the server than a client written for this would.
//! `wrk/outcomes.lua` counts outcomes and prints the figures as one JSON line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use tokio::process::Command;

use crate::results::{Latency, Run};

const OUTCOMES: &str = include_str!("../wrk/outcomes.lua");
const TOKENS: &str = include_str!("../wrk/tokens.lua");

/// What every request of a run looks like.
pub struct Target {
    pub url: String,
    pub method: &'static str,
    pub buyers: Buyers,
}

pub enum Buyers {
    /// No token at all.
    Anonymous,
    /// The same buyer's token on every request.
    One(String),
    /// A different buyer per request, from a file of tokens, one a line.
    Each(PathBuf),
}

/// The two wrk scripts, written once into the output folder.
pub struct Scripts {
    outcomes: PathBuf,
    per_buyer: PathBuf,
}

impl Scripts {
    pub fn write(dir: &Path) -> Result<Scripts> {
        let scripts = Scripts {
            outcomes: dir.join("outcomes.lua"),
            per_buyer: dir.join("per-buyer.lua"),
        };
        std::fs::write(&scripts.outcomes, OUTCOMES)?;
        std::fs::write(&scripts.per_buyer, format!("{OUTCOMES}{TOKENS}"))?;
        Ok(scripts)
    }
}

#[derive(Deserialize)]
struct Report {
    requests: u64,
    duration_us: u64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    socket_errors: u64,
    outcomes: BTreeMap<String, u64>,
}

pub async fn run(
    scripts: &Scripts,
    target: &Target,
    connections: usize,
    duration: Duration,
) -> Result<Run> {
    // One thread per core at most, and wrk needs at least one connection per thread.
    let threads = connections.min(2);
    let mut command = Command::new("wrk");
    command
        .arg(format!("--threads={threads}"))
        .arg(format!("--connections={connections}"))
        .arg(format!("--duration={}s", duration.as_secs().max(1)))
        .arg("--timeout=30s");
    match &target.buyers {
        Buyers::Anonymous => {
            command.arg("--script").arg(&scripts.outcomes);
        }
        Buyers::One(token) => {
            command
                .arg("--script")
                .arg(&scripts.outcomes)
                .arg("--header")
                .arg(format!("Authorization: Bearer {token}"));
        }
        Buyers::Each(_) => {
            command.arg("--script").arg(&scripts.per_buyer);
        }
    }
    command.arg(&target.url).arg("--").arg(target.method);
    if let Buyers::Each(tokens) = &target.buyers {
        command.arg(tokens).arg(threads.to_string());
    }
    let output = command
        .output()
        .await
        .context("cannot run wrk (scripts/bench.sh installs it)")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(json) = stdout
        .lines()
        .find_map(|line| line.strip_prefix("seckill-bench "))
    else {
        bail!(
            "wrk printed no result ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let report: Report = serde_json::from_str(json).with_context(|| json.to_string())?;
    Ok(Run {
        requests: report.requests,
        seconds: report.duration_us as f64 / 1e6,
        latency: Latency {
            p50_us: report.p50_us,
            p99_us: report.p99_us,
            p999_us: report.p999_us,
            max_us: report.max_us,
        },
        socket_errors: report.socket_errors,
        outcomes: report.outcomes,
    })
}
