//! A throwaway PostgreSQL for tests and benches: the one place that starts one.
//!
//! With `MULL_TEST_PG` set (a connection URL such as `postgres://postgres@127.0.0.1:5432/postgres`)
//! that server is used. Otherwise a cluster is made in a temporary directory with the server
//! binaries of the machine (`MULL_PG_BIN`, else `/usr/lib/postgresql/15/bin`), started on a free
//! loopback port, and stopped and removed when the [`TestPg`] is dropped — also when the test
//! panics. The binaries refuse to run as root, so as root they run as the `postgres` user
//! (`runuser`), in a directory owned by it.
//!
//! Each test takes a database of its own ([`TestPg::database`]), so tests sharing a cluster
//! never see each other's rows. On a server the harness did not start, the databases it made
//! are dropped when the [`TestPg`] is, so test runs leave nothing behind there either.
//!
//! Where PostgreSQL cannot be had, [`TestPg::start`] prints why and returns `None` (the test
//! is skipped), except under CI (`CI` or `MULL_PG_REQUIRED` set to anything but `0`/`false`),
//! where it panics: CI runs these tests, it never skips them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// The default place of the server binaries (Debian's `postgresql-15`).
pub const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The user the server runs as when the tests run as root.
const SERVER_USER: &str = "postgres";

/// A running PostgreSQL for one test process.
#[derive(Debug)]
pub struct TestPg {
    /// `postgres://user@host:port` without a database name.
    base: String,
    /// The cluster this harness started, if it started one.
    cluster: Option<Cluster>,
    /// The databases [`TestPg::database`] made.
    made: Mutex<Vec<String>>,
}

#[derive(Debug)]
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    as_root: bool,
    /// The server's options (its port among them), for starting it again.
    options: String,
}

/// Whether a PostgreSQL that cannot be started fails the test instead of skipping it.
pub fn required() -> bool {
    let set = |name: &str| {
        std::env::var(name)
            .map(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
            .unwrap_or(false)
    };
    set("CI") || set("MULL_PG_REQUIRED")
}

impl TestPg {
    /// The PostgreSQL to test against, or `None` (with the reason printed) where there is none
    /// outside CI. `test` names the caller in the printed skip.
    pub fn start(test: &str) -> Option<TestPg> {
        let result = match std::env::var("MULL_TEST_PG") {
            Ok(url) if !url.is_empty() => Ok(TestPg {
                base: base_of(&url),
                cluster: None,
                made: Mutex::new(Vec::new()),
            }),
            _ => start_cluster(),
        };
        match result {
            Ok(pg) => Some(pg),
            Err(why) if required() => {
                panic!("{test}: PostgreSQL is required here (CI) but could not be started: {why}")
            }
            Err(why) => {
                eprintln!("skipping {test}: no PostgreSQL ({why}); set MULL_TEST_PG to use a running server");
                None
            }
        }
    }

    /// A URL of the server's maintenance database (`postgres`).
    pub fn admin_url(&self) -> String {
        format!("{}/postgres", self.base)
    }

    /// Makes a new empty database and returns its URL.
    pub fn database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "mull_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(why) = run_sql(self.admin_url(), format!("CREATE DATABASE {name}")) {
            panic!("making a test database: {why}");
        }
        if let Ok(mut made) = self.made.lock() {
            made.push(name.clone());
        }
        format!("{}/{name}", self.base)
    }
}

/// Runs `sql` on the database at `url`, on a thread and runtime of its own: the caller may be
/// inside an async runtime or not.
fn run_sql(url: String, sql: String) -> Result<(), String> {
    let ran = std::thread::spawn(move || -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("connecting to {url}: {e}"))?;
            let driver = tokio::spawn(conn);
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| format!("{sql}: {e}"))?;
            drop(client);
            let _ = driver.await;
            Ok(())
        })
    })
    .join();
    ran.unwrap_or_else(|_| Err("the thread panicked".to_owned()))
}

impl TestPg {
    /// Stops the server at once (`pg_ctl stop -m immediate`): every connection is cut, as in a
    /// crash or a failover. Panics for a server this harness did not start (`MULL_TEST_PG`).
    pub fn stop_now(&self) {
        let cluster = self.own_cluster("stopping");
        run(cluster
            .command("pg_ctl")
            .arg("-D")
            .arg(cluster.dir.join("data"))
            .args(["-m", "immediate", "-w", "-t", "60", "stop"]))
        .unwrap_or_else(|e| panic!("pg_ctl stop: {e}"));
    }

    /// Starts the server [`TestPg::stop_now`] stopped, on the same port and data directory.
    pub fn start_again(&self) {
        let cluster = self.own_cluster("starting again");
        cluster
            .start()
            .unwrap_or_else(|e| panic!("starting PostgreSQL again: {e}"));
    }

    fn own_cluster(&self, what: &str) -> &Cluster {
        match &self.cluster {
            Some(cluster) => cluster,
            None => panic!(
                "{what} a PostgreSQL this harness did not start (MULL_TEST_PG is set): unset it \
                 to test a restart on a throwaway cluster"
            ),
        }
    }
}

impl Drop for TestPg {
    fn drop(&mut self) {
        if self.cluster.is_none() {
            let made = self.made.get_mut().map(std::mem::take).unwrap_or_default();
            for name in made {
                // `FORCE`: a log a test leaked may still be connected.
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                if let Err(why) = run_sql(self.admin_url(), sql) {
                    eprintln!("dropping the test database {name}: {why}");
                }
            }
        }
        if let Some(cluster) = self.cluster.take() {
            let data = cluster.dir.join("data");
            let _ = cluster
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "-t", "30", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(&cluster.dir);
        }
    }
}

/// `postgres://user@host:port` of a URL, without its database and parameters.
fn base_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    format!("{scheme}://{authority}")
}

impl Cluster {
    /// Starts the server with its options and waits until it accepts connections.
    fn start(&self) -> Result<(), String> {
        let started = run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &self.options, "start"]));
        started.map_err(|e| {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            format!("pg_ctl start: {e}; server log: {}", tail(&log))
        })
    }

    /// A command running server binary `tool`, as the server user when we are root.
    fn command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", SERVER_USER, "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn start_cluster() -> Result<TestPg, String> {
    let bin = std::env::var_os("MULL_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BIN));
    if !bin.join("initdb").exists() || !bin.join("pg_ctl").exists() {
        return Err(format!("no initdb/pg_ctl in {}", bin.display()));
    }
    let as_root = is_root();
    let dir = make_dir(as_root)?;
    let mut cluster = Cluster {
        bin,
        dir,
        as_root,
        options: String::new(),
    };
    // Owned from here on: an error below still removes the directory.
    let mut pg = TestPg {
        base: String::new(),
        cluster: None,
        made: Mutex::new(Vec::new()),
    };
    let data = cluster.dir.join("data");
    run(cluster.command("initdb").arg("-D").arg(&data).args([
        "-U",
        "postgres",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
    ]))
    .map_err(|e| format!("initdb: {e}"))?;
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        cluster.options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={} \
             -c fsync=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=128MB",
            cluster.dir.display()
        );
        match cluster.start() {
            Ok(()) => {
                pg.base = format!("postgres://postgres@127.0.0.1:{port}");
                pg.cluster = Some(cluster);
                return Ok(pg);
            }
            Err(e) => last = e,
        }
    }
    let _ = std::fs::remove_dir_all(&cluster.dir);
    Err(last)
}

/// A new directory under the temporary directory, owned by the server user when we are root.
fn make_dir(as_root: bool) -> Result<PathBuf, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mull-pg-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if as_root {
        run(Command::new("chown").arg(SERVER_USER).arg(&dir))
            .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    Ok(dir)
}

/// Runs a command to its end (bounded by the tools' own timeouts), keeping its output for an error.
fn run(command: &mut Command) -> Result<(), String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{} ({}{})",
        out.status,
        tail(&String::from_utf8_lossy(&out.stderr)),
        tail(&String::from_utf8_lossy(&out.stdout))
    ))
}

fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(600);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[start..].trim()
}

/// The directory of a started cluster (its server log is `server.log` there).
pub fn cluster_dir(pg: &TestPg) -> Option<&Path> {
    pg.cluster.as_ref().map(|c| c.dir.as_path())
}
