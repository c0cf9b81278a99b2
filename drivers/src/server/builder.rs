//! What every server database's builders share: the work and clock
//! methods, and their `Debug`.

/// The work and clock methods every server database's builders share, for
/// a builder with a field `options` that has `tasks` and `clock`, in a
/// module where `LeaderContext` names the database's context.
macro_rules! work_methods {
    () => {
        /// Registers work to run while this node leads (in a set: while it
        /// leads each of its leases): `task` is spawned at the start of
        /// every term with the term's [`LeaderContext`] (the lease, epoch,
        /// fence, fenced transactions, deadline), and must return soon
        /// after the term ends (`ctx.cancelled()` completes then). A
        /// lease's new term's tasks start only after its previous term's
        /// have returned; the lease is released only after they have.
        /// Several may be registered.
        pub fn while_leader<F, Fut>(mut self, task: F) -> Self
        where
            F: Fn(LeaderContext) -> Fut + Send + Sync + 'static,
            Fut: std::future::Future<Output = ()> + Send + 'static,
        {
            self.options
                .tasks
                .push(crate::server::gate::gated_task(task));
            self
        }

        /// Times deadlines on `clock` instead of the system's suspend-aware
        /// clock: a test seam (a clock that jumps, as a suspend would).
        pub fn clock(mut self, clock: impl crate::clock::Clock) -> Self {
            self.options.clock = std::sync::Arc::new(clock);
            self
        }
    };
}

/// `Debug` for a builder: its name and the fields given, each read from
/// the builder by a closure (so a long list can print as its length).
macro_rules! builder_debug {
    ($builder:ident { $($field:literal => |$this:ident| $value:expr),* $(,)? }) => {
        impl std::fmt::Debug for $builder {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut debug = f.debug_struct(stringify!($builder));
                $({
                    let $this = self;
                    debug.field($field, &$value);
                })*
                debug.finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use {builder_debug, work_methods};
