//! A PostgreSQL cluster a test owns, so it may stop and restart it: `initdb` into a temporary
//! directory, `pg_ctl start` on a free loopback port, stopped (`-m immediate`) and removed on
//! drop. The binaries come from `AGENTRY_TEST_PG_BINDIR` (`.ci/postgres.sh start` exports
//! it); without it `Cluster::start` skips (`None`), and under `CI` it fails. As root
//! (PostgreSQL refuses to run as root) the cluster belongs to the `postgres` user.
//!
//! Shared by `pg_restart.rs` and `chaos.rs` (each includes it with `#[path]`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A PostgreSQL cluster of the test's own.
pub(crate) struct Cluster {
    bindir: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// `postgres` when the test runs as root.
    owner: Option<&'static str>,
}

impl Cluster {
    /// The cluster, started; `None` (skipped) without `AGENTRY_TEST_PG_BINDIR` outside CI.
    pub(crate) fn start() -> Option<Self> {
        let Some(bindir) = std::env::var_os("AGENTRY_TEST_PG_BINDIR").filter(|dir| !dir.is_empty())
        else {
            assert!(
                std::env::var_os("CI").is_none(),
                "AGENTRY_TEST_PG_BINDIR is not set under CI (.ci/postgres.sh start exports it)"
            );
            eprintln!("skipped: set AGENTRY_TEST_PG_BINDIR to PostgreSQL's bin directory");
            return None;
        };
        let root = Command::new("id").arg("-u").output().unwrap();
        let owner = (String::from_utf8_lossy(&root.stdout).trim() == "0").then_some("postgres");
        let dir = tempfile::Builder::new()
            .prefix("agentry-pg-cluster")
            .tempdir()
            .unwrap();
        if let Some(owner) = owner {
            assert!(
                Command::new("chown")
                    .args([owner, dir.path().to_str().unwrap()])
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self {
            bindir: PathBuf::from(bindir),
            dir,
            port,
            owner,
        };
        let data = cluster.data();
        cluster.pg(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--no-locale",
            ],
        );
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(cluster.dir.path().join("data/postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(
            &mut conf,
            format!(
                "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n\
                 fsync = off\n"
            )
            .as_bytes(),
        )
        .unwrap();
        cluster.ctl(&["start"]);
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The `postgres` database's URL.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs one of the cluster's binaries as its owner; panics on failure.
    fn pg(&self, binary: &str, args: &[&str]) {
        let program = self.bindir.join(binary);
        let mut command = match self.owner {
            Some(owner) => {
                let mut command = Command::new("runuser");
                command.args(["-u", owner, "--"]).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        let output = command
            .args(args)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{binary} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `pg_ctl <action>` on the cluster, waiting for it to finish.
    pub(crate) fn ctl(&self, action: &[&str]) {
        let data = self.data();
        let log = self.dir.path().join("server.log").display().to_string();
        let mut args = vec!["-D", data.as_str(), "-l", log.as_str(), "-w", "-t", "60"];
        args.extend_from_slice(action);
        self.pg("pg_ctl", &args);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = Command::new(match self.owner {
            Some(_) => "runuser".into(),
            None => self.bindir.join("pg_ctl"),
        })
        .args(match self.owner {
            Some(owner) => vec![
                "-u".to_owned(),
                owner.to_owned(),
                "--".to_owned(),
                self.bindir.join("pg_ctl").display().to_string(),
            ],
            None => Vec::new(),
        })
        .args(["-D", &data, "-m", "immediate", "-w", "stop"])
        .current_dir("/")
        .output();
    }
}
