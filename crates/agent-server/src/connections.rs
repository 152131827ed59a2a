//! The accept loop: every connection served by hyper's HTTP/1 with a deadline for each request
//! head, a deadline for idling between requests, and a cap on connections open at once.
//!
//! `axum::serve` has none of these (its hyper builder has no timer), so a client that sent half
//! a request head and stopped held its connection, and a file descriptor, forever. Here each
//! connection has a small watchdog that reads three facts the connection keeps up to date: how
//! many requests are in flight (from the request head to the end of the response body), when
//! the connection last became idle, and when the first byte of the next head arrived. A
//! response being produced or streamed (an SSE run that takes minutes) is never cut; a head
//! that does not arrive in `header_read_timeout_secs`, or an idle keep-alive connection past
//! `idle_timeout_secs`, is closed.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::state::AppState;

/// The bounds of every connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// From the connection's start, or the first byte of a later request, to the end of the
    /// request head.
    pub(crate) header_read_timeout: Duration,
    /// From the end of a response to the first byte of the next request.
    pub(crate) idle_timeout: Duration,
    /// Connections open at once; the next ones get 503 and are closed.
    pub(crate) max_connections: usize,
    /// Connections one client address may have open at once; the next get 503.
    pub(crate) max_connections_per_address: usize,
}

/// How long a refused connection gets to take its 503 before it is closed.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Refused connections being answered at once; beyond this they are closed without a word,
/// so a flood cannot hold descriptors through the refusals themselves.
const MAX_REFUSING: usize = 64;
/// The answer to a connection over the cap.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 105\r\n\
\r\n\
{\"error\":{\"type\":\"unavailable_error\",\"message\":\"too many open connections; retry shortly\",\"status\":503}}\n";

/// "Not set" for a timestamp in [`Activity`].
const NEVER: u64 = u64::MAX;

/// What a connection's watchdog reads (milliseconds since the connection was accepted).
#[derive(Debug)]
struct Activity {
    accepted: Instant,
    /// Requests whose response (body included) has not finished.
    in_flight: AtomicUsize,
    /// When the connection last had nothing in flight (0: at the start).
    idle_since: AtomicU64,
    /// When the first byte of the next request head arrived; [`NEVER`] while none has.
    head_since: AtomicU64,
}

impl Bounds {
    /// The configured bounds.
    pub(crate) fn of(config: &crate::config::ServerConfig) -> Self {
        Self {
            header_read_timeout: Duration::from_secs(config.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
            max_connections: config.max_connections,
            max_connections_per_address: config.max_connections_per_address,
        }
    }
}

impl Activity {
    fn new() -> Self {
        Self {
            accepted: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            // A new connection owes its first head from the start.
            head_since: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(NEVER - 1)
    }

    /// Bytes arrived: the start of a head when nothing is in flight and no head is under way.
    fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == NEVER
        {
            self.head_since.store(self.now(), Ordering::Release);
        }
    }

    /// A head arrived: a request is in flight.
    fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NEVER, Ordering::Release);
    }

    /// A response finished (or was abandoned).
    fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle_since.store(self.now(), Ordering::Release);
        }
    }

    /// Why the connection must close now, if it must.
    fn expired(&self, bounds: &Bounds) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let now = self.now();
        let head = self.head_since.load(Ordering::Acquire);
        if head != NEVER {
            let limit = u64::try_from(bounds.header_read_timeout.as_millis()).unwrap_or(NEVER);
            return (now.saturating_sub(head) >= limit).then_some("header read timeout");
        }
        let limit = u64::try_from(bounds.idle_timeout.as_millis()).unwrap_or(NEVER);
        let idle = self.idle_since.load(Ordering::Acquire);
        (now.saturating_sub(idle) >= limit).then_some("idle timeout")
    }
}

/// A connection's socket, noting when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// One request in flight until its response body is done or dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A response body that holds its request's [`InFlight`] until hyper has written it all.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
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

/// The router as a hyper service for one connection: the peer address in each request's
/// extensions (for [`ConnectInfo`]) and the in-flight count kept.
#[derive(Clone)]
struct Service {
    router: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.activity.begin();
        let in_flight = InFlight(Arc::clone(&self.activity));
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let mut router = self.router.clone();
        Box::pin(async move {
            // A router is always ready; its error type is Infallible.
            let response = tower_service::Service::call(&mut router, request).await?;
            Ok(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// Connections open now; [`serve`] waits for it to reach 0 after the shutdown.
#[derive(Debug, Clone)]
struct Open(watch::Sender<usize>);

/// Connections open per client address (the TCP peer), so that one address cannot take
/// every place. Holds only addresses with a connection open: at most `max_connections`.
#[derive(Debug, Default)]
struct PerAddress(Mutex<HashMap<IpAddr, usize>>);

impl PerAddress {
    /// Counts one more connection from `address`, unless it has `limit` open.
    fn enter(&self, address: IpAddr, limit: usize) -> bool {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= limit {
            return false;
        }
        *count += 1;
        true
    }

    fn leave(&self, address: IpAddr) {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Entry::Occupied(mut count) = open.entry(address) {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
    }
}

/// One open connection; dropping it closes the counts.
struct Slot {
    open: Open,
    state: AppState,
    per_address: Arc<PerAddress>,
    address: IpAddr,
}

impl Open {
    fn count(&self) -> usize {
        *self.0.borrow()
    }

    /// Counts a connection whose address [`PerAddress::enter`] already counted.
    fn enter(&self, state: &AppState, per_address: &Arc<PerAddress>, address: IpAddr) -> Slot {
        self.0.send_modify(|open| *open += 1);
        state
            .inner
            .metrics
            .add("agentry_open_connections", &[], 1.0);
        Slot {
            open: self.clone(),
            state: state.clone(),
            per_address: Arc::clone(per_address),
            address,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open
            .0
            .send_modify(|open| *open = open.saturating_sub(1));
        self.per_address.leave(self.address);
        self.state
            .inner
            .metrics
            .add("agentry_open_connections", &[], -1.0);
    }
}

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets each
/// connection finish its request in flight (idle ones close at once) and returns when every
/// connection has closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let open = Open(watch::Sender::new(0));
    let refusing = Arc::new(AtomicUsize::new(0));
    let per_address = Arc::new(PerAddress::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: wait a moment rather than spin.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // An SSE answer goes out in small writes, each of which would otherwise wait for the
        // client's delayed ACK (~40 ms).
        let _ = stream.set_nodelay(true);
        let over = if open.count() >= bounds.max_connections {
            Some("server")
        } else if !per_address.enter(peer.ip(), bounds.max_connections_per_address) {
            Some("address")
        } else {
            None
        };
        if let Some(limit) = over {
            state
                .inner
                .metrics
                .inc("agentry_connections_refused_total", &[("limit", limit)]);
            refuse(stream, &refusing);
            continue;
        }
        let slot = open.enter(&state, &per_address, peer.ip());
        let router = router.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            connection(stream, peer, router, bounds, stop).await;
            drop(slot);
        });
    }
    // New connections are refused from here on, as axum::serve does, rather than left
    // waiting in the backlog for a server that will not answer them.
    drop(listener);
    let _ = stop_tx.send(true);
    let mut count = open.0.subscribe();
    let _ = count.wait_for(|open| *open == 0).await;
}

/// Serves one connection until it closes, its watchdog cuts it, or the shutdown has let its
/// last request finish.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    bounds: Bounds,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        stream,
        activity: Arc::clone(&activity),
    });
    let service = Service {
        router,
        peer,
        activity: Arc::clone(&activity),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    // Checked often enough to cut within a tenth of the shorter timeout (at most a second late).
    let tick = (bounds.header_read_timeout.min(bounds.idle_timeout) / 10)
        .clamp(Duration::from_millis(20), Duration::from_secs(1));
    let mut watchdog = tokio::time::interval(tick);
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!(client = %peer, %error, "connection ended with an error");
                }
                return;
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            _ = watchdog.tick() => {
                if let Some(reason) = activity.expired(&bounds) {
                    tracing::debug!(client = %peer, reason, "closing connection");
                    // Dropping the connection closes the socket.
                    return;
                }
            }
        }
    }
}

/// Answers a connection over the cap with 503 and closes it, in the background and briefly.
fn refuse(mut stream: TcpStream, refusing: &Arc<AtomicUsize>) {
    if refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
        refusing.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let refusing = Arc::clone(refusing);
    tokio::spawn(async move {
        let answer = async {
            stream.write_all(REFUSAL).await?;
            stream.shutdown().await?;
            // Read what the client sent until it closes: closing with unread bytes would
            // send a reset, and the client might lose the 503 before reading it.
            let mut sink = [0_u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, answer).await;
        refusing.fetch_sub(1, Ordering::AcqRel);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            header_read_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(300),
            max_connections: 1,
            max_connections_per_address: 1,
        }
    }

    #[test]
    fn the_refusal_declares_its_body_length() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }

    #[test]
    fn a_head_under_way_has_the_header_deadline_and_in_flight_has_none() {
        let activity = Activity::new();
        let bounds = bounds();
        // A new connection owes its head from the start.
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(activity.expired(&bounds), Some("header read timeout"));
        activity.begin();
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(activity.expired(&bounds), None);
        activity.end();
        // Idle after a response: the idle deadline, not the header one.
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(activity.expired(&bounds), None);
        activity.read();
        assert_eq!(activity.expired(&bounds), None);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(activity.expired(&bounds), Some("header read timeout"));
        activity.begin();
        activity.end();
        std::thread::sleep(Duration::from_millis(320));
        assert_eq!(activity.expired(&bounds), Some("idle timeout"));
    }
}
