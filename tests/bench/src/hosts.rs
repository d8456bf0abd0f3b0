//! The applications under test, each served by real Spin in its own process (`spin up`
//! on a free loopback port, through the integration tests' launcher), with the test
//! secrets and any other `SPIN_VARIABLE_*` settings.

use std::path::Path;

use seckill_tests::drivers::app::{ADMIN_TOKEN, JWT_SECRET};
use seckill_tests::servers::spin::Spin;

/// A running `spin up`; killed when dropped.
pub struct Host {
    spin: Spin,
    pub base: String,
}

impl Host {
    /// Serves `manifest` with the test secrets and `variables` (name, value) as
    /// `SPIN_VARIABLE_*`.
    pub fn start(manifest: &Path, variables: &[(&str, &str)]) -> Host {
        let env: Vec<(String, String)> = [("jwt_secret", JWT_SECRET), ("admin_token", ADMIN_TOKEN)]
            .iter()
            .chain(variables)
            .map(|(name, value)| {
                (
                    format!("SPIN_VARIABLE_{}", name.to_ascii_uppercase()),
                    value.to_string(),
                )
            })
            .collect();
        let spin = Spin::up(manifest, &env);
        Host {
            base: spin.base(),
            spin,
        }
    }

    /// What Spin and the component printed to stderr so far.
    pub fn stderr(&self) -> String {
        self.spin.stderr()
    }

    /// What the seckill component wrote to stdout so far: Spin keeps it in a file of
    /// the `--log-dir` the launcher gives `spin up` (the request log, one line a request).
    pub fn stdout_log(&self) -> String {
        self.spin.component_stdout()
    }
}
