//! The event log on PostgreSQL: the table `agentry_run_events`, a `pg_notify` on the channel
//! `agentry_run_events` (payload: the workflow id) with every write, and one `LISTEN`
//! connection per process waking the subscribers of that workflow.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use agent_types::AgentEvent;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Client, NoTls};

#[cfg(test)]
use agent_types::StopReason;

use super::{EventLimits, EventLog, LoggedEvent, Published, ends_run, is_delta};
use crate::error::Error;

/// The channel every write notifies.
const CHANNEL: &str = "agentry_run_events";
/// A subscriber reads again this often even without a notification (a listener connection
/// that dropped, a notification lost with it): notifications make it fast, not correct.
const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// Rows one read takes.
const PAGE: i64 = 512;

// Under a lock: two processes creating the table at once would collide on its type.
const SCHEMA: &str = "
SELECT pg_advisory_lock(2200722);
CREATE TABLE IF NOT EXISTS agentry_run_events (
    workflow_id text NOT NULL,
    seq bigint NOT NULL,
    key text NOT NULL,
    event jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, seq),
    UNIQUE (workflow_id, key)
);
CREATE TABLE IF NOT EXISTS agentry_run_event_ends (
    workflow_id text PRIMARY KEY,
    ended_at timestamptz NOT NULL
);
SELECT pg_advisory_unlock(2200722);
";

/// The [`EventLog`] on PostgreSQL (`tokio-postgres`, without TLS: a database on a private
/// network or loopback, as the server's store).
#[derive(Clone)]
pub struct PgEventLog {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    limits: EventLimits,
    /// Writes (in a transaction: needs `&mut`) and reads.
    writer: tokio::sync::Mutex<Option<Client>>,
    reader: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// The subscribers to wake, by workflow id; the listener connection, once started.
    waiting: Mutex<Vec<(String, Weak<Notify>)>>,
    listening: Mutex<bool>,
    /// Whether the `LISTEN` is in place: a new subscriber waits for it (briefly) before its
    /// first read, so a write after that read wakes it.
    listens: tokio::sync::watch::Sender<bool>,
}

fn db(error: tokio_postgres::Error) -> Error {
    // The server's message, not only "db error".
    match error.as_db_error() {
        Some(db) => Error::Events(db.message().to_string()),
        None => Error::Events(error.to_string()),
    }
}

async fn open(url: &str) -> Result<Client, Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(db)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "event log connection closed");
        }
    });
    Ok(client)
}

impl PgEventLog {
    /// Connects to `url` and creates the tables if missing.
    ///
    /// # Errors
    /// [`Error::Events`] when the database cannot be reached or refuses the schema.
    pub async fn connect(url: &str, limits: EventLimits) -> Result<Self, Error> {
        let client = open(url).await?;
        client.batch_execute(SCHEMA).await.map_err(db)?;
        Ok(Self {
            inner: Arc::new(Inner {
                url: url.to_string(),
                limits,
                writer: tokio::sync::Mutex::new(Some(client)),
                reader: tokio::sync::Mutex::new(None),
                waiting: Mutex::new(Vec::new()),
                listening: Mutex::new(false),
                listens: tokio::sync::watch::Sender::new(false),
            }),
        })
    }

    /// The log as the trait object activities and viewers take.
    pub fn shared(self) -> Arc<dyn EventLog> {
        Arc::new(self)
    }
}

impl Inner {
    async fn reader(&self) -> Result<Arc<Client>, Error> {
        let mut reader = self.reader.lock().await;
        if let Some(client) = reader.as_ref().filter(|client| !client.is_closed()) {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(open(&self.url).await?);
        *reader = Some(Arc::clone(&client));
        Ok(client)
    }

    /// The events after `after`, and the last seq read (past events this build cannot read).
    async fn read_after(
        &self,
        workflow_id: &str,
        after: i64,
    ) -> Result<(Vec<LoggedEvent>, i64), Error> {
        let client = self.reader().await?;
        let rows = client
            .query(
                "SELECT seq, event::text FROM agentry_run_events \
                 WHERE workflow_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&workflow_id, &after, &PAGE],
            )
            .await
            .map_err(db)?;
        let mut events = Vec::with_capacity(rows.len());
        let mut last = after;
        for row in rows {
            let seq: i64 = row.get(0);
            last = seq;
            let text: &str = row.get(1);
            match serde_json::from_str::<AgentEvent>(text) {
                Ok(event) => events.push(LoggedEvent { seq, event }),
                // An event type this build does not know (a newer worker): skipped, as the
                // wire format asks of clients.
                Err(error) => tracing::debug!(seq, %error, "skipping an unknown event"),
            }
        }
        Ok((events, last))
    }

    async fn publish(&self, workflow_id: &str, events: &[Published]) -> Result<(), Error> {
        let mut writer = self.writer.lock().await;
        if writer.as_ref().is_none_or(Client::is_closed) {
            *writer = Some(open(&self.url).await?);
        }
        let Some(client) = writer.as_mut() else {
            return Err(Error::Events("no connection".to_string()));
        };
        let tx = client.transaction().await.map_err(db)?;
        // Publishers of one workflow take turns, so `seq` grows in commit order and a viewer
        // reading after its last `seq` never skips a row committed late.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 22))",
            &[&workflow_id],
        )
        .await
        .map_err(db)?;
        let last: i64 = tx
            .query_one(
                "SELECT coalesce(max(seq), 0)::bigint FROM agentry_run_events WHERE workflow_id = $1",
                &[&workflow_id],
            )
            .await
            .map_err(db)?
            .get(0);
        let limits = self.limits;
        // Keys already in the log (a retried activity's): left out before the bounds count.
        let offered: Vec<&str> = events.iter().map(|p| p.key.as_str()).collect();
        let held: Vec<String> = tx
            .query(
                "SELECT key FROM agentry_run_events WHERE workflow_id = $1 AND key = ANY($2)",
                &[&workflow_id, &offered],
            )
            .await
            .map_err(db)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut keys = Vec::with_capacity(events.len());
        let mut texts = Vec::with_capacity(events.len());
        let mut ended = false;
        for published in events {
            if held.contains(&published.key) {
                continue;
            }
            let full = last + keys.len() as i64 >= limits.max_events_per_run;
            if full && is_delta(&published.event) {
                continue;
            }
            let Some(text) = bounded(&published.event, limits.max_event_bytes) else {
                tracing::warn!(workflow_id, "an event past the size bound is dropped");
                continue;
            };
            ended |= ends_run(&published.event);
            keys.push(published.key.as_str());
            texts.push(text);
        }
        let inserted = tx
            .execute(
                "INSERT INTO agentry_run_events (workflow_id, seq, key, event) \
                 SELECT $1, $2 + row_number() OVER (ORDER BY u.ord), u.k, u.e::jsonb \
                 FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(k, e, ord) \
                 WHERE NOT EXISTS (SELECT 1 FROM agentry_run_events r \
                                   WHERE r.workflow_id = $1 AND r.key = u.k)",
                &[&workflow_id, &last, &keys, &texts],
            )
            .await
            .map_err(db)?;
        if inserted > 0 {
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &workflow_id])
                .await
                .map_err(db)?;
        }
        if ended {
            // The run is over: its events stay for `retention`, then go with every other
            // ended run's (rows a later run under the same id wrote after the end stay).
            let retention = limits.retention.as_secs_f64();
            tx.execute(
                "INSERT INTO agentry_run_event_ends (workflow_id, ended_at) VALUES ($1, now()) \
                 ON CONFLICT (workflow_id) DO UPDATE SET ended_at = now()",
                &[&workflow_id],
            )
            .await
            .map_err(db)?;
            tx.execute(
                "DELETE FROM agentry_run_events e USING agentry_run_event_ends d \
                 WHERE e.workflow_id = d.workflow_id AND e.created_at <= d.ended_at \
                 AND d.ended_at < now() - make_interval(secs => $1)",
                &[&retention],
            )
            .await
            .map_err(db)?;
            tx.execute(
                "DELETE FROM agentry_run_event_ends WHERE ended_at < now() - make_interval(secs => $1)",
                &[&retention],
            )
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    /// Registers a subscriber of `workflow_id` and makes sure the listener runs.
    fn wait_for(self: &Arc<Self>, workflow_id: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.retain(|(_, weak)| weak.strong_count() > 0);
            waiting.push((workflow_id.to_string(), Arc::downgrade(&notify)));
        }
        let start = {
            let mut listening = self
                .listening
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            !std::mem::replace(&mut *listening, true)
        };
        if start {
            let inner = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(error) = inner.listen().await {
                    tracing::debug!(%error, "event log listener stopped");
                }
                // The next subscriber starts another; the ones waiting poll meanwhile.
                inner.listens.send_replace(false);
                *inner
                    .listening
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = false;
            });
        }
        notify
    }

    async fn listen(self: &Arc<Self>) -> Result<(), Error> {
        let (client, mut connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .map_err(db)?;
        let inner = Arc::clone(self);
        // The connection's messages (the notifications among them) until it closes or nobody
        // subscribes any more (the next subscriber opens another).
        let pump = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(note)) => inner.wake(note.payload()),
                    Ok(_) => {}
                    Err(error) => return Err(db(error)),
                }
                if inner.idle() {
                    break;
                }
            }
            Ok(())
        });
        client
            .batch_execute("LISTEN agentry_run_events")
            .await
            .map_err(db)?;
        self.listens.send_replace(true);
        // The client stays open as long as the pump runs.
        let ended = pump
            .await
            .map_err(|error| Error::Events(error.to_string()))?;
        drop(client);
        ended
    }

    fn idle(&self) -> bool {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .all(|(_, weak)| weak.strong_count() == 0)
    }

    fn wake(&self, workflow_id: &str) {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, weak) in waiting.iter() {
            if id == workflow_id
                && let Some(notify) = weak.upgrade()
            {
                notify.notify_one();
            }
        }
    }
}

/// The event's JSON within `max` bytes: a `session_end` past it loses its messages (the run's
/// result has them); anything else past it is `None`.
fn bounded(event: &AgentEvent, max: usize) -> Option<String> {
    let text = serde_json::to_string(event).ok()?;
    if text.len() <= max {
        return Some(text);
    }
    match event {
        AgentEvent::SessionEnd {
            session_id,
            finish_reason,
            ..
        } => serde_json::to_string(&AgentEvent::SessionEnd {
            session_id: session_id.clone(),
            messages: Vec::new(),
            finish_reason: *finish_reason,
        })
        .ok(),
        _ => None,
    }
}

impl EventLog for PgEventLog {
    fn publish<'a>(
        &'a self,
        workflow_id: &'a str,
        events: &'a [Published],
    ) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.publish(workflow_id, events).boxed()
    }

    fn last_seq<'a>(&'a self, workflow_id: &'a str) -> BoxFuture<'a, Result<i64, Error>> {
        async move {
            let client = self.inner.reader().await?;
            let row = client
                .query_one(
                    "SELECT coalesce(max(seq), 0)::bigint FROM agentry_run_events WHERE workflow_id = $1",
                    &[&workflow_id],
                )
                .await
                .map_err(db)?;
            Ok(row.get(0))
        }
        .boxed()
    }

    fn subscribe(
        &self,
        workflow_id: &str,
        after_seq: i64,
    ) -> BoxStream<'static, Result<LoggedEvent, Error>> {
        struct State {
            inner: Arc<Inner>,
            workflow_id: String,
            after: i64,
            ready: VecDeque<LoggedEvent>,
            notify: Arc<Notify>,
            first: bool,
        }
        let state = State {
            notify: self.inner.wait_for(workflow_id),
            inner: Arc::clone(&self.inner),
            workflow_id: workflow_id.to_string(),
            after: after_seq,
            ready: VecDeque::new(),
            first: true,
        };
        futures_util::stream::unfold(state, |mut state| async move {
            if std::mem::take(&mut state.first) {
                let mut listens = state.inner.listens.subscribe();
                let _ = tokio::time::timeout(FALLBACK_POLL, listens.wait_for(|on| *on)).await;
            }
            loop {
                if let Some(event) = state.ready.pop_front() {
                    return Some((Ok(event), state));
                }
                match state
                    .inner
                    .read_after(&state.workflow_id, state.after)
                    .await
                {
                    Ok((events, last)) if last > state.after => {
                        state.after = last;
                        state.ready.extend(events);
                    }
                    Ok(_) => {
                        // A notification since the read left a permit: no wake-up is lost.
                        let _ = tokio::time::timeout(FALLBACK_POLL, state.notify.notified()).await;
                    }
                    Err(error) => {
                        tokio::time::sleep(FALLBACK_POLL).await;
                        return Some((Err(error), state));
                    }
                }
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_types::SessionId;

    #[test]
    fn an_oversized_session_end_keeps_its_finish_reason() {
        let end = AgentEvent::SessionEnd {
            session_id: SessionId::from("s"),
            messages: vec![agent_types::Message::user("x".repeat(1_000))],
            finish_reason: StopReason::Stop,
        };
        let text = bounded(&end, 200).unwrap_or_default();
        assert!(text.len() < 200, "{text}");
        assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
        let delta = AgentEvent::TextDelta {
            delta: "x".repeat(1_000),
        };
        assert_eq!(bounded(&delta, 200), None);
    }
}
