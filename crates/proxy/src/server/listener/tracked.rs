//! What hyper drives on a connection: the socket ([`Tracked`]: reports received bytes to
//! the connection's [`Activity`], reads first what the plain path left unread, and writes
//! the proxy's answer in place of hyper's automatic one to a refused head) and the
//! response body ([`TrackedBody`]: keeps its request in progress until hyper drops it).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::Refusal;
use super::activity::{Activity, RequestGuard};

/// A response body that keeps its request in progress until hyper drops it.
pub(super) struct TrackedBody {
    pub(super) body: axum::body::Body,
    pub(super) _guard: RequestGuard,
}

impl hyper::body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, reporting received bytes to the connection's activity, and writing the
/// proxy's own answer instead of hyper's automatic response to a refused head.
pub(super) struct Tracked {
    pub(super) stream: TcpStream,
    /// Bytes the plain path read and left to hyper, read before the socket.
    pub(super) unread: Bytes,
    pub(super) activity: Arc<Activity>,
    pub(super) refusal: Option<Refusal>,
    /// The proxy's answer being written in place of hyper's (bytes, bytes written);
    /// once set, everything hyper writes is dropped (hyper closes the connection after
    /// its automatic response).
    pub(super) replacement: Option<(Vec<u8>, usize)>,
}

/// The status of hyper's automatic response starting at `bytes`: a response head that
/// starts the write, has one of the statuses hyper answers parse errors with, and lacks
/// the request id every response of the public router carries (so it never reached the
/// router). `None` for anything else.
pub(super) fn automatic_status(bytes: &[u8]) -> Option<u16> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 ")?;
    let status = match rest.get(..4)? {
        b"400 " => 400,
        b"414 " => 414,
        b"431 " => 431,
        _ => return None,
    };
    let end = bytes.windows(4).position(|window| window == b"\r\n\r\n")?;
    let head = bytes[..end].to_ascii_lowercase();
    let marker = format!("\r\n{}:", super::super::REQUEST_ID_HEADER);
    let stamped = head
        .windows(marker.len())
        .any(|window| window == marker.as_bytes());
    (!stamped).then_some(status)
}

impl Tracked {
    /// Takes over the connection's output when `bytes` start hyper's automatic response.
    fn check_automatic(&mut self, bytes: &[u8]) {
        if self.replacement.is_some() {
            return;
        }
        if let (Some(refusal), Some(status)) = (&self.refusal, automatic_status(bytes)) {
            self.replacement = refusal(status).map(|answer| (answer, 0));
        }
    }

    /// Writes what is left of the replacement (ready at once without one).
    pub(super) fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some((bytes, written)) = &mut self.replacement else {
            return Poll::Ready(Ok(()));
        };
        while *written < bytes.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.unread.is_empty() {
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.received();
        }
        result
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_automatic(buf);
        if this.replacement.is_some() {
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(first) = bufs.iter().find(|buf| !buf.is_empty()) {
            this.check_automatic(first);
        }
        if this.replacement.is_some() {
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(bufs.iter().map(|buf| buf.len()).sum()));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}
