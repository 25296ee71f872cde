//! A real terminal for the binary's full-screen commands: a tmux server of the test's own
//! (its own socket) running one command in a detached pane, read back by capturing the pane.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A tmux server of our own (its own socket), killed when the test ends.
pub struct Tmux {
    socket: String,
}

/// Whether tmux is installed (tests that need it print a skip without it).
pub fn available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

impl Tmux {
    /// Starts `mull ARGS` (`args` as one shell string) in a detached 160×40 pane named `dash`,
    /// on a server whose socket is named after the process and `tag`.
    pub fn start_mull(tag: &str, args: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("mull-e2e-{}-{tag}", std::process::id()),
        };
        let command = format!("{} {args}", env!("CARGO_BIN_EXE_mull"));
        let started = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "dash",
            "-x",
            "160",
            "-y",
            "40",
            &command,
        ]);
        assert!(
            started.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&started.stderr)
        );
        tmux
    }

    /// Runs a tmux command on this server.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("running tmux")
    }

    /// The pane's text now.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "dash"]).stdout)
            .into_owned()
    }

    /// Waits until the pane shows `needle`; fails the test with the screen after `timeout`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "{needle:?} did not appear within {timeout:?}; the screen was:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
