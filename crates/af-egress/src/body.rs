//! Bodies: streamed through with their bytes counted, never buffered whole.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, SizeHint};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every response the proxy sends and every request it forwards.
pub type ProxyBody = BoxBody<Bytes, BoxError>;

/// What a proxy body's `poll_frame` returns.
pub type FramePoll = Poll<Option<Result<Frame<Bytes>, BoxError>>>;

/// A complete body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Passes a body through, adding the bytes of each data frame to `counter`, and runs `on_end` once
/// when the body ends or is dropped (whichever comes first), so the exchange's record is written
/// with its final counts even when a client goes away mid-body.
pub struct CountedBody<B> {
    inner: B,
    counter: Arc<AtomicU64>,
    on_end: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl<B> CountedBody<B> {
    pub fn new(
        inner: B,
        counter: Arc<AtomicU64>,
        on_end: Option<Box<dyn FnOnce() + Send + Sync>>,
    ) -> Self {
        CountedBody {
            inner,
            counter,
            on_end,
        }
    }

    fn end(&mut self) {
        if let Some(on_end) = self.on_end.take() {
            on_end();
        }
    }
}

impl<B> Drop for CountedBody<B> {
    fn drop(&mut self) {
        self.end();
    }
}

impl<B> Body for CountedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.counter.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.end();
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(None) => {
                this.end();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
