//! `GET /v1/ui/chat/{id}/stream`: the AI SDK's resume-stream (`DefaultChatTransport`'s
//! `reconnectToStream`, `Chat.resumeStream()`, `useChat({ resume: true })`).
//!
//! A `/v1/ui/chat` run records the bytes of its stream, from `start` on, while it runs
//! ([`Recorded`]), and goes on when its client hangs up (a page reload, a dropped network):
//! a client that comes back with the chat's id gets the run's stream replayed from its
//! start, then live to `[DONE]`, which is what the transport expects (`resumeStreamIsReplay`:
//! it resets the message on the replayed `start`). With no run of that chat going on this
//! instance the answer is `204 No Content`, on which the transport reports nothing to resume.
//!
//! What a run records is bounded ([`MAX_REPLAY_BYTES`]): past it the run stops recording, its
//! own client still gets every frame, and a resume is refused with a 409 (the client reloads
//! the chat's messages from `GET /v1/sessions/{id}` once the run ends). The recording is
//! dropped when the run ends.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use crate::encode::{Encoder, End};
use crate::error::ApiError;
use crate::frontend;
use crate::path_id::PathId;
use crate::sessions::respond;
use crate::state::AppState;

/// The most a run's stream records for resuming clients: 1 MiB (a long answer with tool
/// calls is tens of KiB).
pub(crate) const MAX_REPLAY_BYTES: usize = 1 << 20;

/// What a run's stream has sent so far.
#[derive(Debug, Default)]
struct Log {
    bytes: Vec<u8>,
    /// The run sent its last frame (or its task ended).
    done: bool,
    /// The stream outgrew [`MAX_REPLAY_BYTES`]: no longer recorded.
    overflowed: bool,
}

type Key = (String, String);

/// The `/v1/ui/chat` runs going on in this instance, by tenant and chat id.
#[derive(Debug, Default)]
pub(crate) struct ActiveRuns(Mutex<HashMap<Key, Arc<watch::Sender<Log>>>>);

impl ActiveRuns {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<watch::Sender<Log>>>> {
        // A panic while holding it leaves a plain map behind: still usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts recording the run of chat `id` of `tenant` (replacing a finished one's).
    pub(crate) fn record<E: Encoder>(
        self: &Arc<Self>,
        tenant: &str,
        id: &str,
        encoder: E,
    ) -> Recorded<E> {
        let log = Arc::new(watch::Sender::new(Log::default()));
        let key = (tenant.to_owned(), id.to_owned());
        self.map().insert(key.clone(), Arc::clone(&log));
        Recorded {
            inner: encoder,
            recording: Recording {
                runs: Arc::clone(self),
                key,
                log,
            },
        }
    }

    fn get(&self, tenant: &str, id: &str) -> Option<Arc<watch::Sender<Log>>> {
        self.map()
            .get(&(tenant.to_owned(), id.to_owned()))
            .map(Arc::clone)
    }

    /// How many runs are recording (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// One run's recording: ends (and leaves [`ActiveRuns`]) when dropped, so a run task that
/// ends any way at all leaves nothing behind.
struct Recording {
    runs: Arc<ActiveRuns>,
    key: Key,
    log: Arc<watch::Sender<Log>>,
}

impl Recording {
    fn append(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.log.send_if_modified(|log| {
            if log.overflowed || log.done {
                return false;
            }
            if log.bytes.len() + bytes.len() > MAX_REPLAY_BYTES {
                log.overflowed = true;
                log.bytes = Vec::new();
            } else {
                log.bytes.extend_from_slice(bytes);
            }
            true
        });
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.log.send_modify(|log| log.done = true);
        let mut map = self.runs.map();
        // A later run of the same chat may have taken the slot already.
        if map
            .get(&self.key)
            .is_some_and(|log| Arc::ptr_eq(log, &self.log))
        {
            map.remove(&self.key);
        }
    }
}

/// An encoder whose frames are also recorded for resuming clients; its run goes on when
/// its client hangs up.
pub(crate) struct Recorded<E> {
    inner: E,
    recording: Recording,
}

impl<E: Encoder> Encoder for Recorded<E> {
    fn open(&mut self, out: &mut BytesMut) {
        let start = out.len();
        self.inner.open(out);
        self.recording.append(&out[start..]);
    }

    fn event(&mut self, event: &agent_types::AgentEvent, out: &mut BytesMut) {
        let start = out.len();
        self.inner.event(event, out);
        self.recording.append(&out[start..]);
    }

    fn close(&mut self, end: &End<'_>, out: &mut BytesMut) {
        let start = out.len();
        self.inner.close(end, out);
        self.recording.append(&out[start..]);
        self.recording.log.send_modify(|log| log.done = true);
    }

    fn outlives_client(&self) -> bool {
        true
    }
}

/// `GET /v1/ui/chat/{id}/stream`.
pub(crate) async fn resume(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Response {
    let (state, headers) = (&state, &headers);
    respond(state, headers, |tenant| async move {
        frontend::check_id("id", &id)?;
        let Some(log) = state.inner.ui_runs.get(&tenant.name, &id) else {
            return Ok(StatusCode::NO_CONTENT.into_response());
        };
        let receiver = log.subscribe();
        {
            let log = receiver.borrow();
            if log.done {
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
            if log.overflowed {
                return Err(ApiError::conflict(format!(
                    "the run of chat {id} streamed more than the {MAX_REPLAY_BYTES} bytes kept \
                     for resuming; read the chat from GET /v1/sessions/{id} once it ends"
                )));
            }
        }
        let body = futures_util::stream::unfold(Some((receiver, 0_usize)), |state| async move {
            let (mut receiver, offset) = state?;
            loop {
                let (chunk, ended) = {
                    let log = receiver.borrow_and_update();
                    let chunk = (log.bytes.len() > offset)
                        .then(|| Bytes::copy_from_slice(&log.bytes[offset..]));
                    (chunk, log.done || log.overflowed)
                };
                if let Some(chunk) = chunk {
                    let offset = offset + chunk.len();
                    let next = (!ended).then_some((receiver, offset));
                    return Some((Ok::<_, Infallible>(chunk), next));
                }
                // Ended (an overflow ends the replay where the recording stopped), or the
                // run's task is gone.
                if ended || receiver.changed().await.is_err() {
                    return None;
                }
            }
        });
        let mut response = crate::execute::event_stream(Body::from_stream(body));
        let headers = response.headers_mut();
        headers.insert(
            "x-vercel-ai-ui-message-stream",
            HeaderValue::from_static("v1"),
        );
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        Ok(response)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl Encoder for Echo {
        fn open(&mut self, out: &mut BytesMut) {
            out.extend_from_slice(b"open;");
        }
        fn event(&mut self, _event: &agent_types::AgentEvent, out: &mut BytesMut) {
            out.extend_from_slice(&[b'x'; 1000]);
        }
        fn close(&mut self, _end: &End<'_>, out: &mut BytesMut) {
            out.extend_from_slice(b"close;");
        }
    }

    #[test]
    fn a_recording_is_bounded_and_leaves_when_its_run_ends() {
        let runs = Arc::new(ActiveRuns::default());
        let mut recorded = runs.record("acme", "chat", Echo);
        let mut out = BytesMut::new();
        recorded.open(&mut out);
        let log = runs.get("acme", "chat").unwrap();
        assert_eq!(log.borrow().bytes, b"open;");
        assert!(runs.get("globex", "chat").is_none());
        for _ in 0..MAX_REPLAY_BYTES / 1000 {
            recorded.event(&agent_types::AgentEvent::TextStart, &mut out);
        }
        assert!(!log.borrow().overflowed);
        recorded.event(&agent_types::AgentEvent::TextStart, &mut out);
        assert!(log.borrow().overflowed);
        assert!(log.borrow().bytes.is_empty(), "the recording is freed");
        // The client's own stream has every byte.
        assert_eq!(out.len(), 5 + (MAX_REPLAY_BYTES / 1000 + 1) * 1000);
        drop(recorded);
        assert!(log.borrow().done);
        assert_eq!(runs.len(), 0);
    }

    #[test]
    fn a_finished_run_does_not_remove_the_next_runs_recording() {
        let runs = Arc::new(ActiveRuns::default());
        let first = runs.record("acme", "chat", Echo);
        let second = runs.record("acme", "chat", Echo);
        drop(first);
        assert_eq!(runs.len(), 1);
        drop(second);
        assert_eq!(runs.len(), 0);
    }
}
