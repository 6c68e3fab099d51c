//! The connections of an `http://` provider: HTTP/1.1, one pool per event loop.
//!
//! hyper-util's pooled client costs about 2.5 µs per request more than this pool
//! under load (`docs/benchmarks.md`): a pool keyed by scheme and authority behind a
//! lock shared by every host, a `Host` header built per request, its request and
//! response wrappers. A provider's pool here is a stack of idle connections of one
//! event loop: a request takes the most recently used one that is still open (a
//! closed one is dropped), or opens a new one. Only a connection whose 2xx answer
//! was read to its end goes back; one whose request failed, was cut short by the
//! timeout or answered with an error status is closed.
//!
//! A request is sent again on another connection only when hyper hands it back
//! unsent (the pooled connection had closed before the request was written), so a
//! request reaches the provider at most once. Connections idle longer than
//! [`IDLE_TIMEOUT`] are closed: by the next request, and by a sweep every half of it
//! (a task of the loop, started with the first connection, ended with the pool). At
//! most [`MAX_IDLE`] are kept. `https://` providers keep hyper-util's client (TLS,
//! HTTP/2 by ALPN).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::http::{Request, Response};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use super::Error;

/// How long an idle connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most idle connections kept per event loop and provider.
pub(crate) const MAX_IDLE: usize = 64;
/// How long opening a connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection's sending half (its connection runs as a task of the loop that opened it).
pub(crate) type Sender = SendRequest<Full<Bytes>>;

/// One event loop's connections to one provider.
#[derive(Debug)]
pub(crate) struct Pool {
    /// `host:port` to connect to.
    address: String,
    /// How long an idle connection is kept ([`IDLE_TIMEOUT`]).
    idle_timeout: Duration,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// Whether the sweep of idle connections runs.
    sweeping: AtomicBool,
}

#[derive(Debug)]
struct Idle {
    sender: Sender,
    since: Instant,
}

/// A connection in use: given back with [`Pool::put`] once its response is read.
#[derive(Debug)]
pub(crate) struct Lease(Sender);

impl Pool {
    /// A pool of connections to `address` (`host:port`).
    pub(crate) fn new(address: String) -> Arc<Pool> {
        Pool::with_idle_timeout(address, IDLE_TIMEOUT)
    }

    fn with_idle_timeout(address: String, idle_timeout: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            address,
            idle_timeout,
            idle: Mutex::new(Vec::new()),
            sweeping: AtomicBool::new(false),
        })
    }

    /// Sends `request` (origin-form URI, `Host` set) over an idle connection or a new one.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut request: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Lease), Error> {
        while let Some(mut idle) = self.take() {
            if idle.since.elapsed() > self.idle_timeout || idle.sender.ready().await.is_err() {
                continue;
            }
            match idle.sender.try_send_request(request).await {
                Ok(response) => return Ok((response, Lease(idle.sender))),
                // Handed back unsent: the connection closed first; try the next one.
                Err(mut error) => match error.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(Error::Transport(Box::new(error.into_error()))),
                },
            }
        }
        let mut sender = self.connect().await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| Error::Transport(Box::new(error)))?;
        Ok((response, Lease(sender)))
    }

    /// Gives a connection back after its response was read to its end.
    pub(crate) fn put(&self, lease: Lease) {
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let now = Instant::now();
        self.drop_expired(&mut idle, now);
        if idle.len() < MAX_IDLE && !lease.0.is_closed() {
            idle.push(Idle {
                sender: lease.0,
                since: now,
            });
        }
    }

    /// The number of idle connections kept.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    fn take(&self) -> Option<Idle> {
        self.idle.lock().ok()?.pop()
    }

    /// Closes the idle connections older than the idle timeout (dropping a sender
    /// closes its connection).
    fn expire(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            self.drop_expired(&mut idle, Instant::now());
        }
    }

    /// Drops the connections idle longer than the idle timeout at `now`.
    fn drop_expired(&self, idle: &mut Vec<Idle>, now: Instant) {
        idle.retain(|entry| now.duration_since(entry.since) <= self.idle_timeout);
    }

    /// Expires idle connections every half idle timeout until the pool is dropped.
    async fn sweep(pool: Weak<Pool>, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(pool) = pool.upgrade() else { return };
            pool.expire();
        }
    }

    async fn connect(self: &Arc<Self>) -> Result<Sender, Error> {
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(Pool::sweep(Arc::downgrade(self), self.idle_timeout / 2));
        }
        let connect = tokio::net::TcpStream::connect(self.address.as_str());
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Err(_) => return Err(Error::Timeout),
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::TimedOut => {
                return Err(Error::Timeout);
            }
            Ok(Err(error)) => return Err(Error::Connect(Box::new(error))),
            Ok(Ok(stream)) => stream,
        };
        stream
            .set_nodelay(true)
            .map_err(|error| Error::Connect(Box::new(error)))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| Error::Connect(Box::new(error)))?;
        // The connection ends when the provider closes it or its sender is dropped.
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "provider connection closed");
            }
        });
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A provider answering every request with `ok`, closing after `per_connection`
    /// answers (0: never); returns its address and the count of accepted connections.
    async fn provider(per_connection: usize) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut served = 0;
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                        // Bodies are empty in these tests: a request ends with its head.
                        while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            buffer.drain(..end + 4);
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                            served += 1;
                            if served == per_connection {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (address, accepted)
    }

    fn request(address: &str) -> Request<Full<Bytes>> {
        Request::builder()
            .uri("/v1/models")
            .header("host", address)
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    async fn call(pool: &Arc<Pool>, address: &str) -> Result<Bytes, Error> {
        let (response, lease) = pool.send(request(address)).await?;
        let body = response.into_body().collect().await.unwrap().to_bytes();
        pool.put(lease);
        Ok(body)
    }

    #[tokio::test]
    async fn sequential_requests_share_one_connection() {
        let (address, accepted) = provider(0).await;
        let pool = Pool::new(address.clone());
        for _ in 0..20 {
            assert_eq!(call(&pool, &address).await.unwrap(), "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert_eq!(pool.idle(), 1);
    }

    #[tokio::test]
    async fn connections_the_provider_closed_are_replaced() {
        let (address, accepted) = provider(1).await;
        let pool = Pool::new(address.clone());
        for _ in 0..10 {
            assert_eq!(call(&pool, &address).await.unwrap(), "ok");
            // Let the connection task see the close before the next request.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 10);
    }

    #[tokio::test]
    async fn an_unread_response_keeps_its_connection_out_of_the_pool() {
        let (address, accepted) = provider(0).await;
        let pool = Pool::new(address.clone());
        let (response, _lease) = pool.send(request(&address)).await.unwrap();
        drop(response);
        assert_eq!(pool.idle(), 0);
        assert_eq!(call(&pool, &address).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn idle_connections_are_closed_after_the_idle_timeout() {
        let (address, accepted) = provider(0).await;
        let pool = Pool::with_idle_timeout(address.clone(), Duration::from_millis(100));
        assert_eq!(call(&pool, &address).await.unwrap(), "ok");
        assert_eq!(pool.idle(), 1);
        // No request comes: the sweep closes the connection.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(pool.idle(), 0);
        assert_eq!(call(&pool, &address).await.unwrap(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connect_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let pool = Pool::new(address.clone());
        assert!(matches!(
            call(&pool, &address).await,
            Err(Error::Connect(_))
        ));
    }
}
