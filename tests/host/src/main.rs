//! `test-host serve [--manifest spin.toml] [--listen 127.0.0.1:3000]`: a
//! stand-in for `spin up --listen ...` on machines without the Spin CLI.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: test-host serve [--manifest PATH] [--listen ADDR]
  --manifest  the application manifest (default: ./spin.toml)
  --listen    address to serve on (default: 127.0.0.1:3000)
Variables come from SPIN_VARIABLE_<NAME> environment variables or their defaults.";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<test_host::Config> {
    match args.next().as_deref() {
        Some("serve") => {}
        Some("-h" | "--help") => {
            println!("{USAGE}");
            std::process::exit(0);
        }
        _ => bail!("{USAGE}"),
    }
    let mut config = test_host::Config {
        manifest: PathBuf::from("spin.toml"),
        listen: "127.0.0.1:3000".parse()?,
        env: Vec::new(),
        faults: Arc::default(),
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--manifest" | "-f" => config.manifest = value.into(),
            "--listen" => {
                config.listen = value
                    .parse()
                    .with_context(|| format!("--listen {value:?} is not an IP:PORT address"))?
            }
            _ => bail!("unknown option {flag:?}\n{USAGE}"),
        }
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> Result<()> {
    let config = parse_args(std::env::args().skip(1))?;
    let server = test_host::Server::start(config).await?;
    let base = format!("http://{}", server.addr());
    println!("\nServing {base}");
    println!("Available Routes:");
    for (route, component) in server.routes() {
        println!("  {component}: {base}{route}");
    }
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
