//! Which tokio runtime a bench runs its turns on: an embedding service picks one, and the
//! engine's hand-offs between tasks cost more when they cross threads.

/// A tokio runtime flavour, as `--runtime` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum RuntimeKind {
    /// One thread runs every task (`#[tokio::main(flavor = "current_thread")]`).
    #[default]
    CurrentThread,
    /// A worker per core (`#[tokio::main]`, what `mull serve` runs on).
    MultiThread,
}

impl RuntimeKind {
    /// A runtime of this flavour with its I/O and timers on.
    pub(crate) fn build(self) -> anyhow::Result<tokio::runtime::Runtime> {
        use anyhow::Context;
        let mut builder = match self {
            RuntimeKind::CurrentThread => tokio::runtime::Builder::new_current_thread(),
            RuntimeKind::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        };
        builder.enable_all().build().context("starting a runtime")
    }

    /// The name `--runtime` takes, for a row's note.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RuntimeKind::CurrentThread => "current-thread",
            RuntimeKind::MultiThread => "multi-thread",
        }
    }
}

/// Runs `work` as a task of `runtime`, as a service runs its request handlers. (`block_on`
/// alone would poll it on the calling thread, outside a multi-thread runtime's workers, so
/// every wake-up between it and the turns it drives would cross threads.)
pub(crate) fn run_as_task<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    use anyhow::Context;
    runtime.block_on(async {
        tokio::spawn(work)
            .await
            .context("the bench's task failed")?
    })
}
