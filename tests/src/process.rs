//! Running external commands, and long-running child processes that are always ended by PID.
//!
//! [`Child`] owns one process the harness started: dropping it sends SIGTERM, waits a bounded time,
//! then SIGKILLs and reaps it. Nothing here ever signals a process it did not start.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// Human-readable form of a command line, for error messages.
#[must_use]
pub fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `command` to completion and returns its stdout; a non-zero exit is an error that
/// carries the command line and its stderr.
pub fn output(command: &mut Command) -> Result<String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting `{}`", describe(command)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            describe(command),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Shorthand for [`output`] on `program args…`.
pub fn run<S: AsRef<std::ffi::OsStr>>(program: &str, args: &[S]) -> Result<String> {
    output(Command::new(program).args(args))
}

/// A child process started by the harness, ended by PID when dropped.
#[derive(Debug)]
pub struct Child {
    name: String,
    child: Option<std::process::Child>,
    log: Option<PathBuf>,
}

impl Child {
    /// Starts `command` with stdin closed and stdout/stderr appended to `log` (or discarded).
    pub fn spawn(name: &str, command: &mut Command, log: Option<PathBuf>) -> Result<Self> {
        let (stdout, stderr) = match &log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening log {}", path.display()))?;
                (Stdio::from(file.try_clone()?), Stdio::from(file))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {name}: `{}`", describe(command)))?;
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
            log,
        })
    }

    /// The name it was started under.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// Fails if the process has already exited, quoting the end of its log.
    pub fn check_running(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            bail!("{} was already stopped", self.name)
        };
        if let Some(status) = child.try_wait()? {
            bail!("{} exited early ({status}){}", self.name, self.log_tail());
        }
        Ok(())
    }

    /// The file the process logs to, if any.
    #[must_use]
    pub fn log_path(&self) -> Option<&std::path::Path> {
        self.log.as_deref()
    }

    /// The last lines of the log, for error messages.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let Some(path) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        // A process that ended with an error (anyhow's `Error: …` and its causes) says why
        // above its backtrace, which alone would fill the tail.
        let error: Vec<&str> = lines
            .iter()
            .skip_while(|line| !line.starts_with("Error: "))
            .take_while(|line| !line.starts_with("Stack backtrace:"))
            .take(20)
            .copied()
            .collect();
        let error = if error.is_empty() {
            String::new()
        } else {
            format!("\n--- its error ---\n{}", error.join("\n"))
        };
        format!("\n--- last lines of {} ---\n{tail}{error}", path.display())
    }

    /// Leaves the process running after this guard is gone (for `cargo xtask lab up`); returns its PID.
    pub fn detach(mut self) -> u32 {
        let pid = self.pid();
        self.child = None;
        pid
    }

    /// Ends the process with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Ends the process: SIGTERM, up to 3 s for it to exit, then SIGKILL. Always reaps it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        terminate_pid(child.id());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends SIGTERM to `pid`.
pub fn terminate_pid(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) with a positive PID signals exactly that process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_command_reports_stderr() {
        let error = run("sh", &["-c", "echo boom >&2; exit 3"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("boom"), "{error}");
        assert!(error.contains("sh -c"), "{error}");
    }

    #[test]
    fn dropping_a_child_ends_it() {
        let child = Child::spawn("sleeper", Command::new("sleep").arg("60"), None).unwrap();
        let pid = child.pid();
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        drop(child);
        // Reaped by the guard: the PID no longer names our sleep (it may be gone or reused).
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert_ne!(cmdline, b"sleep\x0060\0", "sleep {pid} is still running");
    }
}
