//! Real Spin, as the runtime under test: `spin up` serving a manifest on a free loopback
//! port, in its own process group, so a test can also kill it mid-request (SIGKILL) as a
//! crash. `spin up` runs the HTTP trigger as a child process (`spin trigger http`): the
//! whole group is killed, or the child would go on serving.
//!
//! The binary is `$SPIN` when set, else `spin` on `PATH` (`.ci/run` adds
//! `../shared/tools` when it exists). No Spin is a test failure, never a skip: a green
//! run must mean "works under Spin".

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::faults::TempDir;

/// The Spin CLI the tests run: `$SPIN`, else `spin` from `PATH`.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SPIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("spin"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("no Spin: set $SPIN or put `spin` on PATH (https://spinframework.dev/install)")
        })
}

/// What `spin --version` prints, e.g. `spin 3.6.3 (88d51cf1 2026-04-09)`.
pub fn version() -> String {
    let output = Command::new(binary())
        .arg("--version")
        .output()
        .expect("spin --version runs");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A running `spin up`. Killed (SIGKILL) on drop.
pub struct Spin {
    child: Option<Child>,
    addr: String,
    manifest: PathBuf,
    env: Vec<(String, String)>,
    logs: TempDir,
}

impl Spin {
    /// Serves `manifest` with `env` (e.g. `SPIN_VARIABLE_*`) added to the environment;
    /// returns once it accepts connections.
    pub fn up(manifest: &Path, env: &[(String, String)]) -> Spin {
        let mut spin = Spin {
            child: None,
            addr: String::new(),
            manifest: manifest.to_path_buf(),
            env: env.to_vec(),
            logs: TempDir::new("spin"),
        };
        // Spin binds the port itself: a port taken between our probe and its bind is tried again.
        for _ in 0..5 {
            spin.addr = format!("127.0.0.1:{}", free_port());
            if spin.start() {
                return spin;
            }
        }
        panic!("spin up found no free port in five tries")
    }

    /// Starts Spin again on the same address, after [`Spin::kill`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "Spin is still running");
        assert!(self.start(), "{} is taken: Spin cannot restart", self.addr);
    }

    /// Spawns `spin up` on `self.addr`; false when the address was taken.
    fn start(&mut self) -> bool {
        let err = self.logs.path().join("spin.err");
        let out = self.logs.path().join("spin.out");
        let mut child = Command::new(binary())
            .args(["up", "--listen", &self.addr, "--from"])
            .arg(&self.manifest)
            .arg("--log-dir")
            .arg(self.logs.path())
            .arg("--state-dir")
            .arg(self.logs.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{} cannot start: {e}", binary().display()));
        // Spin says so once it listens. A successful connect() would prove nothing: while
        // nobody listens, a loopback connect can pick the port itself as its source port
        // and connect to itself.
        let serving = format!("Serving http://{}", self.addr);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::fs::read_to_string(&out).is_ok_and(|text| text.contains(&serving)) {
                self.child = Some(child);
                return true;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let err = self.stderr();
                if err.contains("in use") {
                    return false;
                }
                panic!("spin up exited ({status}) before serving:\n{err}");
            }
            assert!(
                Instant::now() < deadline,
                "spin up did not serve {} within 60 s",
                self.addr
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What Spin printed to stderr so far (its own errors, such as a guest trap).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("spin.err")).unwrap_or_default()
    }

    /// What the component wrote to stdout so far: its request log, one JSON line per
    /// request (Spin keeps each component's stdout in `<log dir>/<component>_stdout.txt`).
    pub fn component_stdout(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("seckill_stdout.txt")).unwrap_or_default()
    }

    /// SIGKILL to the whole group, as a crash: requests in flight die wherever they are.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = -(child.id() as libc::pid_t);
            // SAFETY: kill(2) with a negative pid signals the group `spawn` created.
            unsafe { libc::kill(group, libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}
