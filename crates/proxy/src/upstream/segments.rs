//! A request body of segments for hyper-util's client (`https://` providers): each segment
//! (the proxy's multipart framing, the upstream JSON, an image as a slice of its part) is
//! one data frame, handed over by reference count, never copied into one buffer. Its exact
//! length is known, so HTTP/1.1 sends a `content-length` and HTTP/2 a `content-length` too.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The segments not yet sent and their bytes.
#[derive(Debug, Default)]
pub(crate) struct Segments {
    left: VecDeque<Bytes>,
    length: u64,
}

impl Segments {
    /// A body of `segments` (reference counts), empty ones left out.
    pub(crate) fn new(segments: &[Bytes]) -> Segments {
        let left: VecDeque<Bytes> = segments
            .iter()
            .filter(|segment| !segment.is_empty())
            .cloned()
            .collect();
        let length = left.iter().map(|segment| segment.len() as u64).sum();
        Segments { left, length }
    }
}

impl Body for Segments {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(this.left.pop_front().map(|segment| {
            this.length -= segment.len() as u64;
            Ok(Frame::data(segment))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.left.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn segments_are_frames_of_the_same_bytes() {
        let image = Bytes::from(vec![7u8; 100_000]);
        let slice = image.slice(10..90_000);
        let parts = [
            Bytes::from_static(b"--b\r\n"),
            Bytes::new(),
            slice.clone(),
            Bytes::from_static(b"\r\n--b--\r\n"),
        ];
        let mut body = Segments::new(&parts);
        assert_eq!(body.size_hint().exact(), Some(5 + 89_990 + 9));
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"--b\r\n");
        let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
        // The image's own memory: handed over, not copied.
        assert_eq!(second.as_ptr(), slice.as_ptr());
        assert_eq!(body.size_hint().exact(), Some(9));
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(&rest[..], b"\r\n--b--\r\n");
        assert!(Segments::new(&[]).is_end_stream());
    }
}
