//! [`Woken`]: a future polled again only once the waker it last gave its inner future
//! has fired.
//!
//! A connection selects, for every request, between its work and futures that wait for
//! something rare: the listener's stage leaving `Serving` (a watch shared by every
//! connection of every event loop) and the connection's watchdog. `tokio::select!` polls
//! every branch each time it is polled, and each poll of a pending watch takes the lock
//! of the watch's waiters, the same lock for all connections on both loops: about 0.8 %
//! of one question's CPU in `perf`, and a cache line passed between the cores. Wrapped,
//! such a future is polled once, then only after something woke it; in between it is
//! pending at the cost of two atomic operations.
//!
//! It means what the inner future means: the inner future is polled after every wake
//! it asked for (the flag is set before the task is woken, and cleared before the inner
//! future is polled, so a wake during a poll is not lost), and a pending inner future
//! has nothing to say until it is woken.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// A future polled only when woken (see the module's doc).
pub(super) struct Woken<F> {
    inner: F,
    flag: Arc<Flag>,
    /// The waker the inner future is given: it sets the flag, then wakes the task.
    waker: Waker,
}

/// Whether the inner future was woken since its last poll, and the task to wake.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F> Woken<F> {
    /// `inner`, to be polled the first time and then after each of its wakes.
    pub(super) fn new(inner: F) -> Woken<F> {
        let flag = Arc::new(Flag {
            // The first poll always reaches the inner future.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        Woken { inner, flag, waker }
    }
}

impl<F: Future + Unpin> Future for Woken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // The task is registered before the flag is read: a wake after the read still
        // wakes the task, which then finds the flag set.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Pending until `ready` is set; counts its polls and keeps the last waker it got.
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = &'static str;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready("done");
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Counts the wakes of the task.
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_inner_future_is_polled_first_and_then_only_after_its_wakes() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(Mutex::new(None));
        let mut woken = Woken::new(Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        });
        let task = Arc::new(Task(AtomicUsize::new(0)));
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);

        assert_eq!(Pin::new(&mut woken).poll(&mut cx), Poll::Pending);
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // Polled again without a wake: the inner future is not.
        for _ in 0..5 {
            assert_eq!(Pin::new(&mut woken).poll(&mut cx), Poll::Pending);
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);

        // A wake that changes nothing: polled once more, then quiet again.
        let waker = inner_waker.lock().unwrap().take().unwrap();
        waker.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "the task is woken");
        assert_eq!(Pin::new(&mut woken).poll(&mut cx), Poll::Pending);
        assert_eq!(Pin::new(&mut woken).poll(&mut cx), Poll::Pending);
        assert_eq!(polls.load(Ordering::SeqCst), 2);

        // Ready, and woken: the result goes through.
        ready.store(true, Ordering::SeqCst);
        assert_eq!(Pin::new(&mut woken).poll(&mut cx), Poll::Pending);
        waker.wake();
        assert_eq!(Pin::new(&mut woken).poll(&mut cx), Poll::Ready("done"));
        assert_eq!(polls.load(Ordering::SeqCst), 3);
        assert_eq!(task.0.load(Ordering::SeqCst), 2);
    }

    /// A watch's change reaches a connection's select through the wrapper, however often
    /// the select was polled before.
    #[tokio::test]
    async fn a_watch_change_reaches_a_wrapped_wait() {
        let (sender, mut receiver) = tokio::sync::watch::channel(0u8);
        let wait = async move { receiver.wait_for(|now| *now == 2).await.is_ok() };
        let mut wait = Woken::new(Box::pin(wait));
        for round in 0..3u8 {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            drop(tx);
            tokio::select! {
                _ = rx => {}
                _ = &mut wait => panic!("round {round}: no change yet"),
            }
        }
        sender.send(1).unwrap();
        tokio::task::yield_now().await;
        sender.send(2).unwrap();
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(5), &mut wait)
                .await
                .expect("the change wakes the wrapped wait")
        );
    }
}
