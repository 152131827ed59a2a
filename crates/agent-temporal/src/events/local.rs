//! The `publish_events` local activity: how the workflow publishes its own events.

use std::sync::Arc;

use agent_types::AgentEvent;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use super::{EventLog, Published};

/// The worker's side of the workflow's own events: the `publish_events` local activity.
pub struct EventActivities {
    log: Option<Arc<dyn EventLog>>,
}

impl EventActivities {
    /// Publishing into `log` (nothing without one).
    pub fn new(log: Option<Arc<dyn EventLog>>) -> Self {
        Self { log }
    }
}

#[activities]
impl EventActivities {
    /// Publishes the workflow's own events (a local activity: it runs on the worker that runs
    /// the workflow task, recorded as a marker, so a replay does not publish again).
    #[activity(name = "publish_events")]
    pub async fn publish_events(
        self: Arc<Self>,
        ctx: ActivityContext,
        events: Vec<AgentEvent>,
    ) -> Result<(), ActivityError> {
        let info = ctx.info();
        let (Some(log), Some(workflow_id)) = (&self.log, info.workflow_id.as_deref()) else {
            return Ok(());
        };
        let prefix = format!(
            "{}/l{}",
            info.workflow_run_id.as_deref().unwrap_or(""),
            info.activity_id
        );
        let published: Vec<Published> = events
            .into_iter()
            .enumerate()
            .map(|(index, event)| Published {
                key: format!("{prefix}/{index}"),
                event,
            })
            .collect();
        if let Err(error) = log.publish(workflow_id, &published).await {
            tracing::warn!(workflow_id, %error, "cannot publish the run's events");
        }
        Ok(())
    }
}
