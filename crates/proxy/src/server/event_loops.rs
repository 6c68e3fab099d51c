//! The public listener's event loops (one thread and runtime each beyond the
//! calling one), the listener tasks' end reports and the drain of a listener.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{Limits, listener, routes};

/// Serves a listener from a socket shared with other event loops, registered
/// with the runtime this runs on, taking its turn among them to accept (`LoopAccept`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_shared(
    name: &'static str,
    limits: Limits,
    socket: std::net::TcpListener,
    permits: Arc<tokio::sync::Semaphore>,
    routes: routes::Routes,
    metrics: listener::ConnectionMetrics,
    stage: watch::Receiver<listener::Stage>,
    accept: listener::LoopAccept,
    refusal: Option<listener::Refusal>,
) {
    match TcpListener::from_std(socket) {
        Ok(tcp) => {
            let listener = listener::Listener {
                name,
                tcp,
                limits,
                refusal,
            };
            listener::serve(listener, permits, routes, metrics, stage, Some(accept)).await;
        }
        Err(error) => tracing::error!(%error, "an event loop cannot register the listener"),
    }
}

/// Where a listener task reports its end (its listener's name).
pub(super) type Ended = tokio::sync::mpsc::UnboundedSender<&'static str>;

/// Runs a listener task and reports its end on `ended`.
pub(super) async fn watched(name: &'static str, ended: Ended, task: impl Future<Output = ()>) {
    task.await;
    let _ = ended.send(name);
}

/// The event-loop threads beyond the calling one; dropping this stops them
/// (their runtimes drop whatever is left).
#[derive(Debug)]
pub(super) struct EventLoops {
    stop: watch::Sender<bool>,
}

impl EventLoops {
    pub(super) fn new() -> EventLoops {
        EventLoops {
            stop: watch::channel(false).0,
        }
    }

    /// Starts event loop `index` on a thread of its own and runs `task` on it.
    /// The runtime is built, run and dropped on that thread (a runtime must
    /// not be dropped inside another one's tasks).
    pub(super) fn spawn(
        &mut self,
        index: usize,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let (started, handle) = std::sync::mpsc::sync_channel(1);
        let mut stop = self.stop.subscribe();
        std::thread::Builder::new()
            .name(format!("rg-loop-{index}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = started.send(Err(error));
                        return;
                    }
                };
                crate::upstream::set_event_loop(index);
                let _ = started.send(Ok(runtime.spawn(task)));
                runtime.block_on(async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        // Start-up only: the thread answers as soon as its runtime exists.
        handle
            .recv()
            .map_err(|_| std::io::Error::other("an event loop did not start"))?
    }
}

impl Drop for EventLoops {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Stops a listener's accepts and waits up to `grace` for its connections
/// (every event loop's), then drops the rest.
pub(super) async fn drain(
    stage: &watch::Sender<listener::Stage>,
    tasks: &mut [tokio::task::JoinHandle<()>],
    grace: Duration,
    name: &'static str,
) {
    let _ = stage.send(listener::Stage::Draining);
    if tokio::time::timeout(grace, all_finished(tasks))
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            "shutdown grace elapsed with connections still open; closing them"
        );
        let _ = stage.send(listener::Stage::Closing);
        if tokio::time::timeout(Duration::from_secs(1), all_finished(tasks))
            .await
            .is_err()
        {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }
}

/// Waits for every task (a task already awaited to its end is not polled again).
async fn all_finished(tasks: &mut [tokio::task::JoinHandle<()>]) {
    for task in tasks.iter_mut() {
        if !task.is_finished() {
            let _ = (&mut *task).await;
        }
    }
}
