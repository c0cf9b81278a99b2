//! The handles of a server database (PostgreSQL, MySQL) and their
//! builders, written once: a lone lease's and a set's. Each database
//! invokes [`server_handles!`] with its names, its connector, its options
//! and the function that starts its task; everything else (the core
//! machine, the gates, the runner, the views, the fences, the task
//! methods) is the same code for both.

/// Which release notices a task's listener passes on, where the database
/// has them (MySQL has none yet and ignores it).
#[derive(Clone, Debug)]
pub(crate) enum Listen {
    /// A lone lease: only its own row's, coalesced (one pending notice is
    /// all the driver needs to try at once).
    Lease(std::sync::Arc<str>),
    /// A lease set: every row's (a lease or a membership row freed by
    /// another node's release batch), none dropped (the channel applies
    /// back pressure instead).
    Every,
}

/// Defines a server database's four public types: `$lease` and its
/// `$lease_builder`, `$set` and its `$set_builder`.
///
/// In the invoking module: `LeaderContext`, `Fence` (with
/// `Fence::new(&statements, lease, holder, epoch)`), the options type
/// `$options` (`Default`, fields `table`, `tasks`, `clock`), the macro
/// `$option_methods` of its builder methods, and `$start(runner,
/// connector, &statements, &options, Listen) -> DriverTask`.
macro_rules! server_handles {
    (
        database: $database:literal,
        dialect: $dialect:expr,
        error: $error:ty,
        connector: $connector_arg:ty => $connector:ty, by $into_connector:expr,
        options: $options:ty, $option_methods:ident,
        start: $start:path,
        lease: $lease:ident, $lease_builder:ident,
        set: $set:ident, $set_builder:ident $(,)?
    ) => {
        #[doc = concat!("Configures a [`", stringify!($lease), "`] before it starts. Made by [`", stringify!($lease), "::builder`].")]
        pub struct $lease_builder {
            config: picolease_core::Config,
            connector: $connector,
            options: $options,
            publisher: std::sync::Arc<crate::publish::Publisher>,
        }

        crate::server::builder::builder_debug!($lease_builder {
            "config" => |b| b.config,
            "options" => |b| b.options,
        });

        impl $lease_builder {
            $option_methods!();
            crate::server::builder::work_methods!();

            /// Every leadership change from the start on, in order.
            pub fn subscribe(&self) -> crate::subscription::Subscription {
                self.publisher.subscribe()
            }

            /// Validates the configuration and starts the driver task on
            /// the current tokio runtime (panics outside one, like
            /// `tokio::spawn`). Connecting happens in the task: connection
            /// failures are retried, and a fatal one (bad login, missing
            /// table) finishes the driver and is returned by `shutdown`.
            pub fn start(mut self) -> Result<$lease, $error> {
                use std::sync::Arc;
                self.publisher.set_clock(Arc::clone(&self.options.clock));
                let state = picolease_core::LeaseState::new(
                    self.config.clone(),
                    picolease_core::Instant::ZERO,
                )?;
                let statements = Arc::new(picolease_core::sql::Statements::new(
                    $dialect,
                    &self.options.table,
                ));
                let gate = crate::server::gate::Gate::new(
                    std::mem::take(&mut self.options.tasks),
                    Arc::clone(&statements),
                    self.config.lease.clone(),
                    self.config.holder.clone(),
                    Arc::clone(&self.publisher),
                );
                let runner = crate::set::SetRunner::lone(state, Arc::clone(&self.publisher), gate);
                // A lone lease hears only of its own row's release.
                let listen = crate::server::handles::Listen::Lease(self.config.lease.as_str().into());
                let task = $start(runner, self.connector, &statements, &self.options, listen);
                Ok($lease {
                    view: crate::view::LeaseView::new(self.config, self.publisher),
                    statements,
                    task,
                })
            }
        }

        #[doc = concat!("One contender for one lease on ", $database, ": the handle of the driver task. Made with [`", stringify!($lease), "::builder`].")]
        ///
        /// Dropping it shuts the driver down in the background (gated work
        /// stopped, lease released); call `shutdown` to wait for that.
        ///
        /// It dereferences to a [`LeaseView`](crate::LeaseView), as every
        /// driver's lone handle does: `config()`, `lease()`, `holder()`,
        /// `leadership()`, `watch()`, `subscribe()`, `time_left()`,
        /// `wait_for()`, `snapshot()`, …
        pub struct $lease {
            view: crate::view::LeaseView,
            statements: std::sync::Arc<picolease_core::sql::Statements>,
            task: crate::server::task::DriverTask<Link, Fence>,
        }

        impl std::ops::Deref for $lease {
            type Target = crate::view::LeaseView;
            fn deref(&self) -> &crate::view::LeaseView {
                &self.view
            }
        }

        impl std::fmt::Debug for $lease {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(stringify!($lease)).field(&self.view).finish()
            }
        }

        impl $lease {
            crate::server::task::task_methods!($error);

            /// A contender for `config` (lease, holder id, timings) whose
            /// connections come from `connector`.
            pub fn builder(config: picolease_core::Config, connector: $connector_arg) -> $lease_builder {
                let publisher = std::sync::Arc::new(crate::publish::Publisher::new(
                    crate::clock::system(),
                    config.lease.clone(),
                ));
                $lease_builder {
                    publisher,
                    config,
                    connector: ($into_connector)(connector),
                    options: <$options>::default(),
                }
            }

            /// The fence of the current term, if this node leads.
            pub fn fence(&self) -> Option<Fence> {
                let epoch = self.leadership().leader_epoch()?;
                Some(Fence::new(&self.statements, self.lease(), self.holder(), epoch))
            }

            /// Hands the lease over (DESIGN §3 "Planned handover") if this node
            /// leads when the driver gets to it: the work stops as at any end of a
            /// term (its guarantees unchanged), then one statement reserves the
            /// row for node `to` (a node name: what `--node` says, or a library
            /// holder id, whose node is itself) for two intervals, during which
            /// only that node can take it, at once and at the next epoch; after
            /// that anyone may. `None` releases the row instead. This node goes on
            /// as a follower. Returns at once; watch [`LeaseView::leadership`] or
            /// a subscription for the outcome (a `follower` transition with
            /// reason [`Demotion::HandedOver`], then the successor's term). An
            /// error names a node that cannot be reserved for.
            ///
            /// [`LeaseView::leadership`]: crate::LeaseView::leadership
            /// [`Demotion::HandedOver`]: picolease_core::Demotion::HandedOver
            pub fn hand_over(&self, to: Option<&str>) -> Result<(), picolease_core::ConfigError> {
                let to = to.map(picolease_core::HolderId::reserved_for).transpose()?;
                self.task.send(crate::server::driver::Control::HandOver(None, to));
                Ok(())
            }

            /// Hands the lease over, as `hand_over` does, to the lease's
            /// preferred candidate (DESIGN §3 "Preferred holders"): the live
            /// candidate the last renewal read, whatever its rank, if it runs on
            /// another node; else releases it. Followed by a shutdown, it is "hand
            /// over, then exit" (what `picolease run` does on SIGUSR1): the lease
            /// goes to the node most likely to keep it, and the shutdown finishes
            /// once the statement is answered.
            pub fn hand_over_to_preferred(&self) {
                self.task.send(crate::server::driver::Control::HandOverToPreferred);
            }

            /// True once the driver task has stopped (after shutdown,
            /// abort, or a fatal error).
            pub fn is_finished(&self) -> bool {
                self.view.publisher().is_finished() || self.task.is_finished()
            }
        }

        #[doc = concat!("Builds a [`", stringify!($set), "`]: `", stringify!($set), "::builder(template, leases, connector)`, options, optional work, then `start()`.")]
        pub struct $set_builder {
            template: picolease_core::SetConfig,
            leases: Vec<picolease_core::LeaseName>,
            connector: $connector,
            options: $options,
            fanout: std::sync::Arc<crate::subscription::Fanout>,
        }

        crate::server::builder::builder_debug!($set_builder {
            "template" => |b| b.template,
            "leases" => |b| b.leases.len(),
            "options" => |b| b.options,
        });

        impl $set_builder {
            $option_methods!();
            crate::server::builder::work_methods!();

            /// Every lease's leadership changes from the start on, in order
            /// ([`SetView::subscribe`](crate::set::SetView::subscribe)).
            pub fn subscribe(&self) -> crate::subscription::Subscription {
                self.fanout.subscribe()
            }

            /// `lease`'s leadership changes from the start on, in order, as
            /// a lone lease's builder's `subscribe()`; `None` for a lease
            /// outside the set.
            pub fn subscribe_to(
                &self,
                lease: &picolease_core::LeaseName,
            ) -> Option<crate::subscription::Subscription> {
                self.leases
                    .contains(lease)
                    .then(|| self.fanout.subscribe_to(Some(lease.clone())))
            }

            /// Validates the set and spawns its task on the current tokio
            /// runtime (panics outside one, like `tokio::spawn`), as a lone
            /// lease's builder does.
            pub fn start(self) -> Result<$set, $error> {
                use std::sync::Arc;
                let $set_builder {
                    template,
                    leases,
                    connector,
                    options,
                    fanout,
                } = self;
                let holder = template.holder.clone();
                let set = picolease_core::LeaseSet::new(template, leases, picolease_core::Instant::ZERO)?;
                let statements = Arc::new(picolease_core::sql::Statements::new($dialect, &options.table));
                let clock = Arc::clone(&options.clock);
                let (runner, outputs) =
                    crate::set::SetRunner::new(set, clock, fanout, |lease, publisher| {
                        crate::server::gate::Gate::new(
                            options.tasks.clone(),
                            Arc::clone(&statements),
                            lease.clone(),
                            holder.clone(),
                            Arc::clone(publisher),
                        )
                    });
                // The lone lease's task, link and listener: one adapter per
                // database. A set hears of every row's release.
                let listen = crate::server::handles::Listen::Every;
                let task = $start(runner, connector, &statements, &options, listen);
                Ok($set {
                    statements,
                    task,
                    outputs,
                })
            }
        }

        #[doc = concat!("One node contending for a set of leases on ", $database, ", with a fair share between the live nodes (DESIGN §9). Made with [`", stringify!($set), "::builder`].")]
        ///
        /// One task and one statement connection whatever the number of
        /// leases; each lease's work runs as tasks of its own, with a lone
        /// lease's `LeaderContext`. It dereferences to a
        /// [`SetView`](crate::set::SetView): per lease what a lone lease's
        /// handle shows. Dropping the handle asks for a shutdown (releasing
        /// every lease) and returns at once; the task finishes in the
        /// background.
        pub struct $set {
            statements: std::sync::Arc<picolease_core::sql::Statements>,
            task: crate::server::task::DriverTask<Link, Fence>,
            outputs: crate::set::SetView,
        }

        impl std::fmt::Debug for $set {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($set))
                    .field("snapshot", &self.snapshot())
                    .finish_non_exhaustive()
            }
        }

        impl $set {
            crate::server::task::task_methods!($error);

            /// A set of `leases` contended with the timings and holder id
            /// of `template`, over connections from `connector`.
            pub fn builder(
                template: picolease_core::SetConfig,
                leases: Vec<picolease_core::LeaseName>,
                connector: $connector_arg,
            ) -> $set_builder {
                $set_builder {
                    connector: ($into_connector)(connector),
                    options: <$options>::default(),
                    fanout: std::sync::Arc::new(crate::subscription::Fanout::for_leases(leases.len())),
                    template,
                    leases,
                }
            }

            /// The fence of `lease`'s current term, if this node leads it
            /// (as a lone lease's `fence()`).
            pub fn fence(&self, lease: &picolease_core::LeaseName) -> Option<Fence> {
                let epoch = self.leadership(lease)?.leader_epoch()?;
                Some(Fence::new(&self.statements, lease, self.holder(), epoch))
            }

            /// Gives `lease` up (its work stops, then it is released); this
            /// node keeps contending, and does not take it back for a ttl.
            pub fn give_up(&self, lease: &picolease_core::LeaseName) {
                self.task.send(crate::server::driver::Control::GiveUp(lease.clone()));
            }

            /// Hands `lease` over (DESIGN §3 "Planned handover"), as a lone
            /// lease's `hand_over` does, if this node leads it when the task
            /// gets to it: its work stops, then one statement reserves its row
            /// for node `to` for two intervals (`None`: releases it). The node
            /// that gets a lease takes it whatever its share, and the share then
            /// moves another lease instead; this node does not try the lease
            /// again while the reservation lasts. Returns at once; watch
            /// `leadership(lease)` or a subscription for the outcome. An error
            /// names a node that cannot be reserved for.
            pub fn hand_over(
                &self,
                lease: &picolease_core::LeaseName,
                to: Option<&str>,
            ) -> Result<(), picolease_core::ConfigError> {
                let to = to.map(picolease_core::HolderId::reserved_for).transpose()?;
                self.task
                    .send(crate::server::driver::Control::HandOver(Some(lease.clone()), to));
                Ok(())
            }

            /// "Hand over, then exit" (what `picolease run` does on SIGUSR1
            /// with several names): hands every lease this node leads to the
            /// live member that ranks first for it (where the share will keep
            /// it once this node is gone; released when no other member is
            /// live), then shuts down; await [`Self::shutdown`] for the end.
            pub fn hand_over_all(&self) {
                self.task.send(crate::server::driver::Control::HandOverToPreferred);
            }

            /// True once the set's task has ended.
            pub fn is_finished(&self) -> bool {
                self.task.is_finished()
            }
        }

        /// What the set publishes, per lease and as a whole.
        impl std::ops::Deref for $set {
            type Target = crate::set::SetView;
            fn deref(&self) -> &crate::set::SetView {
                &self.outputs
            }
        }
    };
}

pub(crate) use server_handles;
