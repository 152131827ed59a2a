//! `Options::checkpoint`: the run's whole history lent after each message, in order, with
//! the run's spend so far; an error from it ends the run.

use std::sync::{Arc, Mutex};

use agent_backends::{ScriptedBackend, ScriptedTurn};
use agent_loop::{BudgetsUsed, CheckpointFuture, Options, Session, TurnCheckpoint, execute};
use agent_types::{AgentError, ErrorKind, Message, Role, Usage};
use serde_json::json;

use crate::support::{registry, weather_tool};

/// Records the roles of each lent history and the run's spend at that moment; fails on the
/// call numbered `fail_at` (counting from 0) when given.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(Vec<Role>, Usage)>>,
    fail_at: Option<usize>,
}

impl TurnCheckpoint for Recorder {
    fn checkpoint<'a>(
        &'a self,
        history: &'a mut Vec<Message>,
        usage: Usage,
        _cost_usd: Option<f64>,
        _budgets: &'a BudgetsUsed,
    ) -> CheckpointFuture<'a> {
        Box::pin(async move {
            let mut seen = self.seen.lock().unwrap();
            if self.fail_at == Some(seen.len()) {
                return Err(AgentError::new(ErrorKind::Appender, "the store is gone"));
            }
            seen.push((history.iter().map(Message::role).collect(), usage));
            Ok(())
        })
    }
}

fn backend() -> ScriptedBackend {
    ScriptedBackend::new([
        ScriptedTurn::tool_call("call_1", "get_weather", json!({"city": "Denver"})).with_usage(
            Usage {
                input_tokens: Some(120),
                output_tokens: Some(40),
                ..Usage::default()
            },
        ),
        ScriptedTurn::text("Sunny in Denver."),
    ])
}

#[tokio::test]
async fn every_message_lends_the_whole_history_with_the_spend_so_far() {
    let recorder = Arc::new(Recorder::default());
    let mut options = Options::auto().with_tools(registry([weather_tool()]));
    options.checkpoint = Some(Arc::clone(&recorder) as Arc<dyn TurnCheckpoint>);
    let mut session = Session::new("test-model").with_message(Message::user("earlier"));
    execute(&mut session, "Denver?", &backend(), &options)
        .await
        .unwrap();
    let seen = recorder.seen.lock().unwrap();
    let roles: Vec<&Vec<Role>> = seen.iter().map(|(roles, _)| roles).collect();
    // The history from the start (earlier message and input included), one more each time.
    assert_eq!(
        roles,
        [
            &vec![Role::User, Role::User, Role::Assistant],
            &vec![Role::User, Role::User, Role::Assistant, Role::Tool],
            &vec![
                Role::User,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant
            ],
        ]
    );
    // The first call's usage is in the first checkpoint already; the session's history is
    // whole again after the run.
    assert_eq!(seen[0].1.input_tokens, Some(120), "{:?}", seen[0].1);
    assert_eq!(session.messages.len(), 5);
}

#[tokio::test]
async fn a_failed_checkpoint_ends_the_run_with_its_error() {
    let recorder = Arc::new(Recorder {
        fail_at: Some(1),
        ..Recorder::default()
    });
    let mut options = Options::auto().with_tools(registry([weather_tool()]));
    options.checkpoint = Some(Arc::clone(&recorder) as Arc<dyn TurnCheckpoint>);
    let mut session = Session::new("test-model");
    let error = execute(&mut session, "Denver?", &backend(), &options)
        .await
        .unwrap_err();
    assert!(matches!(error.kind, ErrorKind::Appender), "{error:?}");
    assert!(error.message.contains("the store is gone"), "{error:?}");
    // The second model call was never made: one checkpoint went through.
    assert_eq!(recorder.seen.lock().unwrap().len(), 1);
}

/// Keeps the budgets lent with the last checkpoint.
#[derive(Default)]
struct BudgetKeeper(Mutex<Option<BudgetsUsed>>);

impl TurnCheckpoint for BudgetKeeper {
    fn checkpoint<'a>(
        &'a self,
        _history: &'a mut Vec<Message>,
        _usage: Usage,
        _cost_usd: Option<f64>,
        budgets: &'a BudgetsUsed,
    ) -> CheckpointFuture<'a> {
        Box::pin(async move {
            *self.0.lock().unwrap() = Some(budgets.clone());
            Ok(())
        })
    }
}

#[tokio::test]
async fn budgets_saved_by_a_checkpoint_carry_into_a_continue_but_not_a_new_message() {
    let keeper = Arc::new(BudgetKeeper::default());
    let mut options = Options::auto()
        .with_tools(registry([weather_tool()]))
        .with_max_tool_iterations(1);
    options.checkpoint = Some(Arc::clone(&keeper) as Arc<dyn TurnCheckpoint>);
    // A run that stopped after round 1's checkpoint, as a crash would leave it.
    let mut session = Session::new("test-model");
    execute(&mut session, "Denver?", &backend(), &options)
        .await
        .unwrap();
    let used = keeper.0.lock().unwrap().clone().unwrap();
    assert_eq!((used.iterations(), used.tokens()), (1, 160));
    session.messages.truncate(3);
    session.set_budgets_used(Some(used));
    let json = session.to_json().unwrap();

    // `{}` continues the same budgets: one round was used, the limit is one, so a second
    // round is refused.
    let mut continued = Session::from_json(&json).unwrap();
    assert_eq!(continued.budgets_used().unwrap().iterations(), 1);
    let round = ScriptedBackend::new([ScriptedTurn::tool_call(
        "call_2",
        "get_weather",
        json!({"city": "Paris"}),
    )]);
    let error = agent_loop::execute(
        &mut continued,
        agent_loop::SessionInput::Continue,
        &round,
        &options,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error.kind, ErrorKind::BudgetExceeded { .. }),
        "{error:?}"
    );

    // A new message starts fresh budgets.
    let mut fresh = Session::from_json(&json).unwrap();
    let round = ScriptedBackend::new([
        ScriptedTurn::tool_call("call_2", "get_weather", json!({"city": "Paris"})),
        ScriptedTurn::text("Rain in Paris."),
    ]);
    execute(&mut fresh, "And Paris?", &round, &options)
        .await
        .unwrap();
    assert!(fresh.budgets_used().is_none());
}
