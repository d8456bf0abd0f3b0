//! The components under test, each served by the project's test host in its own process
//! (`test-host serve`, as `spin up` would be), on a free loopback port.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

use seckill_tests::app::{ADMIN_TOKEN, JWT_SECRET};

/// A running `test-host serve`; stopped (by its own process id) when dropped.
pub struct Host {
    child: Child,
    pub base: String,
}

impl Host {
    /// Serves `manifest`; the host's stderr (guest logs, host errors) goes to `log`.
    pub fn start(manifest: &Path, log: &Path) -> Result<Host> {
        // Built beside this binary by scripts/bench.sh (`cargo build`, optimised by the dev profile).
        let exe = std::env::current_exe()?.with_file_name("test-host");
        let mut child = Command::new(&exe)
            .args(["serve", "--listen", "127.0.0.1:0", "--manifest"])
            .arg(manifest)
            .env("SPIN_VARIABLE_JWT_SECRET", JWT_SECRET)
            .env("SPIN_VARIABLE_ADMIN_TOKEN", ADMIN_TOKEN)
            .stdout(Stdio::piped())
            .stderr(File::create(log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let mut lines = BufReader::new(child.stdout.take().context("host stdout")?).lines();
        // "Serving http://ADDR" comes once the component is compiled, then the routes.
        while let Some(line) = lines.next() {
            if let Some(base) = line?.strip_prefix("Serving ") {
                // Keep reading, so that the host never writes to a closed pipe.
                std::thread::spawn(move || lines.for_each(drop));
                return Ok(Host {
                    base: base.trim().to_string(),
                    child,
                });
            }
        }
        let status = child.wait()?;
        bail!(
            "{} exited ({status}) before serving; see {}",
            exe.display(),
            log.display()
        )
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Already gone is fine: there is nothing left to stop.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
