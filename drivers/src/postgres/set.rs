//! A lease set on PostgreSQL (DESIGN §9): one tokio task, one statement
//! connection and one `LISTEN` connection, whatever the number of leases.
//!
//! The task owns a [`LeaseSet`] through the shared `SetRunner` (which runs
//! each lease's work on threads and publishes transitions). Each batch the
//! set asks for runs on the statement connection with the prepared
//! statement of its kind, bounded by the request timeout; while no batch is
//! due, the task waits for the set's next timeout, a control message from
//! the handle, or a release notification (a lease or membership row freed
//! by another node's `release_batch`).
//!
//! # Connections
//!
//! Both connections come from the application's [`Connect`]or and set
//! `application_name = 'picolease'` right after connecting, so a DBA can
//! find them in `pg_stat_activity`. A statement that fails for a reason
//! that is not clearly transient, or that outlives the request timeout
//! (it is then cancelled on the server), drops the statement connection;
//! the next batch connects afresh, after a jittered backoff that doubles
//! per consecutive failure and never exceeds the interval. The listening
//! connection is re-established 500 ms after it breaks; the set then
//! surveys at once, since notifications sent meanwhile were lost.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Duration;

use futures::future::BoxFuture as FutBox;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use picolease_core::sql::{BatchBindings, Cell, Dialect, Statements};
use picolease_core::{
    Batch, BatchKind, BatchReply, Config, Failure, HolderId, LeaseName, LeaseSet, TableName,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client};

use super::cells::{param_type, rows_to_cells, to_sql};
use super::connect::{BoxFuture, Connect, Listener};
use super::error::PgError;
use super::link::create_table;
use crate::set::{
    Execute, SetLeaderContext, SetOutputs, SetRunner, SetStatus, SetTransition, SetWork,
};

/// The `application_name` both connections of a set announce.
const APPLICATION_NAME: &str = "picolease";

/// The first reconnect waits about this long; each failure doubles it, up
/// to the interval.
const BACKOFF_BASE: Duration = Duration::from_millis(50);

/// Waits between attempts to (re)establish the listening connection.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

enum Control {
    Shutdown,
    Abort,
    GiveUp(LeaseName),
}

/// Builds a [`PgLeaseSet`]: `PgLeaseSet::builder(template, leases,
/// connector)`, options, optional work, then `start()`.
pub struct PgLeaseSetBuilder {
    template: Config,
    leases: Vec<LeaseName>,
    connector: Arc<dyn Connect>,
    table: TableName,
    auto_create: bool,
    notifications: bool,
    linger: Duration,
    works: Vec<SetWork>,
}

impl std::fmt::Debug for PgLeaseSetBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseSetBuilder")
            .field("template", &self.template)
            .field("leases", &self.leases.len())
            .field("table", &self.table)
            .field("auto_create", &self.auto_create)
            .field("notifications", &self.notifications)
            .finish_non_exhaustive()
    }
}

impl PgLeaseSetBuilder {
    /// The lease table (default [`picolease_core::DEFAULT_TABLE`]).
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// Create the table and its index if they are missing, on first
    /// connect (default on). Off, a missing table finishes the set with
    /// [`PgError::MissingTable`]; create it with [`super::init`].
    pub fn auto_create(mut self, on: bool) -> Self {
        self.auto_create = on;
        self
    }

    /// Listen for release notifications on a second connection (default
    /// on, when the connector can provide a listening connection). Off, a
    /// node under its share notices a release at its next survey.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// How long [`PgLeaseSet::shutdown`] keeps both connections open after
    /// its release batch freed rows, before closing them (default
    /// [`super::DEFAULT_LINGER`]; zero closes at once), so that the
    /// successors' acquires do not share the server with two backends
    /// exiting.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Work to run, on its own thread, for each lease this node leads
    /// (blocking code: it must return soon after its context is
    /// cancelled). Several may be registered.
    pub fn while_leader(mut self, work: impl Fn(SetLeaderContext) + Send + Sync + 'static) -> Self {
        self.works.push(Arc::new(work));
        self
    }

    /// Validates the set and spawns its task on the current tokio runtime
    /// (panics outside one, like `tokio::spawn`). Connecting happens in
    /// the task: connection failures are retried, and a fatal one (bad
    /// login, missing table) finishes the set and is returned by
    /// [`PgLeaseSet::shutdown`].
    pub fn start(self) -> Result<PgLeaseSet, PgError> {
        let PgLeaseSetBuilder {
            template,
            leases,
            connector,
            table,
            auto_create,
            notifications,
            linger,
            works,
        } = self;
        let set = LeaseSet::new(template.clone(), leases, picolease_core::Instant::ZERO)?;
        let statements = Arc::new(Statements::new(Dialect::Postgres, &table));
        let (control, inbox) = mpsc::unbounded_channel();
        let (runner, outputs) = SetRunner::new(set, works);
        let link = SetLink {
            connector: Arc::clone(&connector),
            statements: Arc::clone(&statements),
            auto_create,
            table_ready: false,
            session: None,
            failures: 0,
            retry_at: None,
            backoff_cap: template.interval.max(BACKOFF_BASE),
            last_reason: String::new(),
        };
        let notices = if notifications {
            Notices::new(connector, &statements)
        } else {
            Notices::off()
        };
        let task = tokio::spawn(run(runner, link, notices, inbox, linger));
        Ok(PgLeaseSet {
            control,
            task: Some(task),
            outputs,
        })
    }
}

/// One node contending for a set of leases on PostgreSQL, with a fair
/// share between the live nodes. Made with [`PgLeaseSet::builder`].
///
/// It runs as one tokio task with one statement connection and one
/// `LISTEN` connection. Each lease's work runs on threads of its own.
/// Dropping the handle asks for a shutdown (releasing every lease) and
/// returns at once; the task finishes in the background.
pub struct PgLeaseSet {
    control: mpsc::UnboundedSender<Control>,
    task: Option<tokio::task::JoinHandle<Result<(), PgError>>>,
    outputs: SetOutputs,
}

impl std::fmt::Debug for PgLeaseSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseSet")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl PgLeaseSet {
    /// A set of `leases` contended with the timings and holder id of
    /// `template` (its lease name is not used), over connections from
    /// `connector`.
    pub fn builder(
        template: Config,
        leases: Vec<LeaseName>,
        connector: impl Connect,
    ) -> PgLeaseSetBuilder {
        PgLeaseSetBuilder {
            template,
            leases,
            connector: Arc::new(connector),
            table: TableName::default(),
            auto_create: true,
            notifications: true,
            linger: super::DEFAULT_LINGER,
            works: Vec::new(),
        }
    }

    /// Every lease's transitions, in order, from the start (the first call
    /// takes the receiver; later calls get `None`).
    pub fn transitions(&self) -> Option<std_mpsc::Receiver<SetTransition>> {
        self.outputs.transitions()
    }

    /// What this node holds, whom it sees, its share.
    pub fn status(&self) -> SetStatus {
        self.outputs.status()
    }

    /// A reader of [`PgLeaseSet::status`] for other threads.
    pub fn status_view(&self) -> crate::set::SetStatusView {
        self.outputs.status_view()
    }

    /// Gives `lease` up (its work stops, then it is released); this node
    /// keeps contending, and does not take it back for a ttl.
    pub fn give_up(&self, lease: &LeaseName) {
        let _ = self.control.send(Control::GiveUp(lease.clone()));
    }

    /// True once the set's task has ended.
    pub fn is_finished(&self) -> bool {
        self.task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Stops every lease's work, releases every held lease and the
    /// membership row (other nodes are notified at once), and waits for
    /// the task. Returns the fatal error that finished the set, if any.
    pub async fn shutdown(mut self) -> Result<(), PgError> {
        let _ = self.control.send(Control::Shutdown);
        match self.task.take() {
            Some(task) => task.await.unwrap_or_else(|e| {
                Err(PgError::Stopped {
                    reason: e.to_string(),
                })
            }),
            None => Ok(()),
        }
    }

    /// Stops at once without releasing anything, as a crash would: the
    /// leases lapse at their expiry. Each lease's work is still cancelled
    /// (by the task, in the background); this returns without waiting.
    pub fn abort(mut self) {
        let _ = self.control.send(Control::Abort);
        self.task = None;
    }
}

impl Drop for PgLeaseSet {
    fn drop(&mut self) {
        if self.task.take().is_some() {
            // The task shuts down on its own; never blocks the runtime.
            let _ = self.control.send(Control::Shutdown);
        }
    }
}

/// One live statement connection and the batch statements prepared on it.
struct Session {
    client: Client,
    prepared: HashMap<BatchKind, tokio_postgres::Statement>,
}

/// The set's statement connection: connected on demand, dropped when a
/// statement on it fails for a reason that is not clearly transient or
/// times out, reconnected with capped, jittered backoff.
struct SetLink {
    connector: Arc<dyn Connect>,
    statements: Arc<Statements>,
    auto_create: bool,
    table_ready: bool,
    session: Option<Session>,
    failures: u32,
    retry_at: Option<Instant>,
    backoff_cap: Duration,
    last_reason: String,
}

const KINDS: [BatchKind; 4] = [
    BatchKind::Acquire,
    BatchKind::Renew,
    BatchKind::Release,
    BatchKind::Survey,
];

fn kind_name(kind: BatchKind) -> &'static str {
    match kind {
        BatchKind::Acquire => "acquire batch",
        BatchKind::Renew => "renew batch",
        BatchKind::Release => "release batch",
        BatchKind::Survey => "survey",
    }
}

impl SetLink {
    fn table(&self) -> String {
        self.statements.table().to_string()
    }

    fn failed(&mut self, reason: String) {
        self.failures = self.failures.saturating_add(1);
        let exp = BACKOFF_BASE.saturating_mul(1 << self.failures.saturating_sub(1).min(16));
        let draw = RandomState::new().build_hasher().finish();
        let factor = 0.5 + (draw % 1001) as f64 / 2000.0;
        self.retry_at = Some(Instant::now() + exp.min(self.backoff_cap).mul_f64(factor));
        self.last_reason = reason;
    }

    /// Connects (after the backoff), names the session, creates the table
    /// if allowed and prepares the four batch statements (pipelined).
    async fn connect(&mut self, during: &'static str, deadline: Instant) -> Result<(), PgError> {
        if let Some(at) = self.retry_at {
            if at >= deadline {
                return Err(PgError::Connect {
                    reason: format!(
                        "backing off after {} failed attempts (last: {})",
                        self.failures, self.last_reason
                    ),
                });
            }
            tokio::time::sleep_until(at).await;
        }
        let client = self
            .connector
            .connect()
            .await
            .map_err(|e| PgError::from_connect(&e))?;
        let table = self.table();
        client
            .batch_execute(&format!("SET application_name = '{APPLICATION_NAME}'"))
            .await
            .map_err(|e| PgError::from_statement(during, &table, &e))?;
        if self.auto_create && !self.table_ready {
            create_table(&client, &self.statements).await?;
        }
        let prepares = KINDS.map(|kind| {
            let statement = self.statements.for_batch(kind);
            let types: Vec<_> = statement.params().iter().copied().map(param_type).collect();
            let client = &client;
            async move {
                client
                    .prepare_typed(statement.sql(), &types)
                    .await
                    .map(|prepared| (kind, prepared))
            }
        });
        let prepared = futures::future::try_join_all(prepares)
            .await
            .map_err(|e| PgError::from_statement(during, &table, &e))?;
        self.table_ready = true;
        self.session = Some(Session {
            client,
            prepared: prepared.into_iter().collect(),
        });
        Ok(())
    }

    async fn rows(
        &mut self,
        batch: &Batch,
        bindings: &BatchBindings<'_>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Cell>>, PgError> {
        let during = kind_name(batch.kind);
        if self
            .session
            .as_ref()
            .is_none_or(|session| session.client.is_closed())
        {
            self.session = None;
            if let Err(e) = self.connect(during, deadline).await {
                self.failed(e.to_string());
                return Err(e);
            }
            self.failures = 0;
            self.retry_at = None;
        }
        let Some(session) = &self.session else {
            unreachable!("connected above");
        };
        let statement = self.statements.for_batch(batch.kind);
        let values: Vec<_> = statement.bind_batch(bindings).collect();
        let params: Vec<_> = values.iter().map(to_sql).collect();
        let result = async {
            let rows = session
                .client
                .query(&session.prepared[&batch.kind], &params)
                .await?;
            rows_to_cells(&rows)
        }
        .await;
        let closed = session.client.is_closed();
        result.map_err(|e| {
            let error = PgError::from_statement(during, &self.table(), &e);
            if closed || error.retires_session() {
                tracing::info!(error = %error, table = %self.table(), "picolease: retiring the set's session; the next batch connects afresh");
                self.session = None;
                self.failed(error.to_string());
            }
            error
        })
    }

    /// Runs `batch` and decodes its rows: the reply for the set, and the
    /// error behind a failed one. Its time is the set's to keep: past the
    /// request timeout the set gives up on it (`SetCommand::Cancel`) and
    /// the task drops this future and calls [`SetLink::abandon`].
    async fn execute(
        &mut self,
        batch: &Batch,
        me: &HolderId,
        ttl_millis: i64,
        stale_millis: i64,
        timeout: Duration,
    ) -> (BatchReply, Option<PgError>) {
        let json = batch.json();
        let bindings = BatchBindings {
            holder: me.as_str(),
            ttl_millis,
            batch: &json,
            stale_millis,
        };
        let deadline = Instant::now() + timeout;
        match self.rows(batch, &bindings, deadline).await {
            Ok(rows) => match self.statements.decode_batch_reply(batch.kind, me, &rows) {
                Ok(reply) => (reply, None),
                Err(source) => (
                    BatchReply::Failed(Failure::Fatal),
                    Some(PgError::Row {
                        table: self.table(),
                        source,
                    }),
                ),
            },
            Err(e) => (BatchReply::Failed(e.failure()), Some(e)),
        }
    }

    /// The set gave up on the batch in flight (its future is dropped): the
    /// connection is suspect (a stalled socket would hold every later
    /// batch), so drop it and cancel the query on the server.
    fn abandon(&mut self, kind: BatchKind, timeout: Duration) {
        if let Some(session) = self.session.take() {
            let cancel = self.connector.cancel(session.client.cancel_token());
            // Never waited for: the server may be unreachable.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, cancel).await;
            });
        }
        let error = PgError::Timeout {
            during: kind_name(kind),
            after: timeout,
        };
        tracing::warn!(error = %error, "picolease: the set gave up on a batch; cancelling it and reconnecting");
        self.failed(error.to_string());
    }
}

/// What the listening connection reports.
enum Notice {
    /// A lease or membership row was released.
    Released(String),
    /// Listening again after the connection was lost: notifications sent
    /// meanwhile are gone.
    Resubscribed,
}

enum ListenState {
    /// No listening connection: notifications off or unsupported.
    Off,
    /// Waiting before the next attempt.
    Idle(Instant),
    Connecting(BoxFuture<Result<Listener, tokio_postgres::Error>>),
    Subscribing {
        _client: Arc<Client>,
        messages: BoxStream<'static, Result<AsyncMessage, tokio_postgres::Error>>,
        listen: FutBox<'static, Result<(), tokio_postgres::Error>>,
    },
    Listening {
        _client: Arc<Client>,
        messages: BoxStream<'static, Result<AsyncMessage, tokio_postgres::Error>>,
    },
}

/// The set's listening connection, driven by the set's task itself (each
/// step is kept in `state`, so a wait cut short by another input loses
/// nothing).
struct Notices {
    connector: Option<Arc<dyn Connect>>,
    sql: String,
    state: ListenState,
    subscribed_before: bool,
}

impl Notices {
    fn off() -> Self {
        Notices {
            connector: None,
            sql: String::new(),
            state: ListenState::Off,
            subscribed_before: false,
        }
    }

    fn new(connector: Arc<dyn Connect>, statements: &Statements) -> Self {
        let sql = format!(
            "SET application_name = '{APPLICATION_NAME}'; {}",
            statements.listen().unwrap_or_default()
        );
        let state = match connector.connect_listener() {
            Some(connecting) => ListenState::Connecting(connecting),
            None => ListenState::Off,
        };
        Notices {
            connector: Some(connector),
            sql,
            state,
            subscribed_before: false,
        }
    }

    fn retry(&mut self) {
        self.state = ListenState::Idle(Instant::now() + LISTEN_RETRY);
    }

    /// The next notice; pending for ever when there is no listening
    /// connection to be had.
    async fn next(&mut self) -> Notice {
        loop {
            match &mut self.state {
                ListenState::Off => std::future::pending::<()>().await,
                ListenState::Idle(at) => {
                    tokio::time::sleep_until(*at).await;
                    self.state = match self.connector.as_ref().and_then(|c| c.connect_listener()) {
                        Some(connecting) => ListenState::Connecting(connecting),
                        None => ListenState::Off,
                    };
                }
                ListenState::Connecting(connecting) => match connecting.await {
                    Ok(listener) => {
                        let client = Arc::new(listener.client);
                        let sql = self.sql.clone();
                        let listening = Arc::clone(&client);
                        self.state = ListenState::Subscribing {
                            _client: client,
                            messages: listener.messages,
                            listen: async move { listening.batch_execute(&sql).await }.boxed(),
                        };
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "picolease: could not connect to listen");
                        self.retry();
                    }
                },
                ListenState::Subscribing {
                    messages, listen, ..
                } => {
                    let subscribed = tokio::select! {
                        result = listen => result.map_err(|e| {
                            tracing::warn!(error = %e, "picolease: LISTEN failed");
                        }),
                        message = messages.next() => match message {
                            Some(Ok(_)) => continue,
                            Some(Err(e)) => {
                                tracing::debug!(error = %e, "picolease: listening connection failed");
                                Err(())
                            }
                            None => Err(()),
                        },
                    };
                    if subscribed.is_err() {
                        self.retry();
                        continue;
                    }
                    tracing::debug!("picolease: the set listens for releases");
                    let ListenState::Subscribing {
                        _client, messages, ..
                    } = std::mem::replace(&mut self.state, ListenState::Off)
                    else {
                        unreachable!("in this state");
                    };
                    self.state = ListenState::Listening { _client, messages };
                    if std::mem::replace(&mut self.subscribed_before, true) {
                        return Notice::Resubscribed;
                    }
                }
                ListenState::Listening { messages, .. } => match messages.next().await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        return Notice::Released(n.payload().to_string())
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "picolease: listening connection failed");
                        self.retry();
                    }
                    None => self.retry(),
                },
            }
        }
    }
}

/// A batch running on the statement connection: its id, its kind (for
/// messages) and its outcome to come.
type Running = (
    picolease_core::RequestId,
    BatchKind,
    FutBox<'static, (BatchReply, Option<PgError>)>,
);

/// The outcome of the batch in flight; pending while there is none.
async fn outcome(in_flight: &mut Option<Running>) -> (BatchReply, Option<PgError>) {
    match in_flight {
        Some((_, _, future)) => future.await,
        None => std::future::pending().await,
    }
}

/// The set's task.
///
/// The batch in flight runs concurrently with the waits, so a term whose
/// deadline passes while a statement hangs ends on time (its work is
/// cancelled then, not when the statement gives up). The work threads are
/// joined at the end on tokio's blocking pool, so the runtime's threads
/// are never blocked.
async fn run(
    mut runner: SetRunner,
    link: SetLink,
    mut notices: Notices,
    mut inbox: mpsc::UnboundedReceiver<Control>,
    linger: Duration,
) -> Result<(), PgError> {
    let me = runner.set.config().holder.clone();
    let ttl_millis = runner.set.config().ttl_millis();
    let timeout = runner.set.config().request_timeout;
    let stale_millis = runner.set.stale_millis();
    let link = Arc::new(tokio::sync::Mutex::new(link));
    let mut in_flight: Option<Running> = None;
    // The batch the set asked for, until the one in flight has ended.
    let mut queued: Option<Execute> = None;
    let mut fatal = None;
    let mut handle_gone = false;
    // A release batch freed rows: successors may be acquiring them.
    let mut released = false;
    let now = runner.now();
    runner.set.handle_timeout(now);
    loop {
        let carried = runner.carry_out();
        if let Some(request) = carried.cancel {
            if queued
                .as_ref()
                .is_some_and(|q: &Execute| q.request == request)
            {
                queued = None;
            }
            let abandoned = in_flight.take_if(|(r, _, _)| *r == request);
            if let Some((_, kind, future)) = abandoned {
                // Dropped first: the future holds the link's lock.
                drop(future);
                link.lock().await.abandon(kind, timeout);
            }
        }
        if let Some(execute) = carried.execute {
            queued = Some(execute);
        }
        if in_flight.is_none() {
            if let Some(Execute { request, batch, .. }) = queued.take() {
                let link = Arc::clone(&link);
                let me = me.clone();
                let kind = batch.kind;
                let future = async move {
                    link.lock()
                        .await
                        .execute(&batch, &me, ttl_millis, stale_millis, timeout)
                        .await
                };
                in_flight = Some((request, kind, future.boxed()));
            }
        }
        if runner.set.is_finished() {
            break;
        }
        let wait = runner
            .wait()
            .unwrap_or(crate::clock::LONGEST_WAIT)
            .min(crate::clock::LONGEST_WAIT);
        let mut notice = None;
        let control = tokio::select! {
            control = inbox.recv(), if !handle_gone => match control {
                Some(control) => Some(control),
                None => {
                    // A dropped handle shuts down like an explicit call.
                    handle_gone = true;
                    Some(Control::Shutdown)
                }
            },
            (reply, error) = outcome(&mut in_flight) => {
                let Some((request, kind, _)) = in_flight.take() else {
                    unreachable!("an outcome comes from the batch in flight");
                };
                if let Some(error) = error {
                    match reply {
                        BatchReply::Failed(Failure::Fatal) => {
                            tracing::error!(?kind, error = %error, "picolease: the set gives up");
                            fatal = Some(error);
                        }
                        _ => {
                            tracing::warn!(?kind, error = %error, "picolease: batch failed, will retry")
                        }
                    }
                }
                if kind == BatchKind::Release && matches!(&reply, BatchReply::Matched(names) if !names.is_empty()) {
                    released = true;
                }
                runner.reply(request, kind, reply);
                None
            }
            n = notices.next() => {
                notice = Some(n);
                None
            }
            () = tokio::time::sleep(wait) => None,
        };
        let now = runner.now();
        match control {
            Some(Control::Shutdown) => runner.set.handle_shutdown(now),
            Some(Control::GiveUp(lease)) => runner.set.handle_give_up(now, lease.as_str()),
            Some(Control::Abort) => {
                tracing::warn!(holder = %me, "picolease: aborting the set without releasing the leases");
                break;
            }
            None => {}
        }
        if let Some(first) = notice {
            // Notifications come in bursts (a node giving up its surplus
            // frees hundreds of leases in one commit): take every one
            // already here, and let the set plan once for all of them.
            let mut released = Vec::new();
            let mut resubscribed = false;
            let mut next = Some(first);
            while let Some(notice) = next {
                match notice {
                    Notice::Released(name) => released.push(name),
                    Notice::Resubscribed => resubscribed = true,
                }
                next = notices.next().now_or_never();
            }
            if !released.is_empty() {
                runner
                    .set
                    .handle_release_notices(now, released.iter().map(String::as_str));
            }
            if resubscribed {
                runner.set.handle_change(now);
            }
        }
        runner.reap();
        let now = runner.now();
        runner.set.handle_timeout(now);
    }
    if released && runner.set.is_finished() && !linger.is_zero() {
        // Closing both connections now would have the server tear two
        // backends down while the successors acquire (DEFAULT_LINGER).
        tokio::time::sleep(linger).await;
    }
    // Connections close before the work is joined.
    drop(in_flight);
    drop(notices);
    drop(link);
    let stopped = tokio::task::spawn_blocking(move || runner.stop_all()).await;
    if let Err(e) = stopped {
        tracing::error!(error = %e, "picolease: stopping the set's work failed");
    }
    match fatal {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
