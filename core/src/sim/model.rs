//! The model database: exactly the semantics of the lease statements, on a
//! clock the caller controls.
//!
//! It answers with the same rows (as [`Cell`]s) the real statements return,
//! so the same decoder reads both, and the conformance tests can run one
//! operation sequence on the model, on SQLite and on PostgreSQL and compare
//! the decoded outcomes.

use std::collections::BTreeMap;

use crate::names::Epoch;
use crate::sql::{adopted_epoch, Cell, HANDOVER_PREFIX, MEMBER_PREFIX, PREFERRED_PREFIX};

/// One lease row. The default is the table's marker row as the table's
/// creation writes it (`sql::TABLE_MARKER`): nobody's, epoch 0, lapsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelRow {
    /// The holder, `None` when free.
    pub holder: Option<String>,
    /// The epoch.
    pub epoch: i64,
    /// Expiry on the database clock, in milliseconds.
    pub expires_at: i64,
    /// The server incarnation that last wrote the row (PostgreSQL's
    /// `incarnation` column; DESIGN §3 "Failover").
    pub incarnation: u32,
}

/// What a replica holds: the rows as of some earlier moment (a standby's
/// copy, or what a crashed server's disk kept), for
/// [`ModelDb::fail_over`] to come back with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelReplica {
    rows: BTreeMap<String, ModelRow>,
    marker: ModelRow,
}

impl ModelReplica {
    /// The row of `lease` in the copy, if any.
    pub fn row(&self, lease: &str) -> Option<&ModelRow> {
        self.rows.get(lease)
    }
}

/// The lease table, with the database's own clock supplied per call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelDb {
    rows: BTreeMap<String, ModelRow>,
    /// The table's marker row (`sql::TABLE_MARKER`, DESIGN §3 "Failover"):
    /// created with the table, so every replica has it; kept apart from
    /// the lease rows, which no listing shows it among.
    marker: ModelRow,
    /// The incarnation of the server now answering: 0 until the first
    /// failover.
    incarnation: u32,
    /// When this server last adopted a row, on its clock: the model
    /// checker promotes no standby at that very millisecond.
    adopted_ms: Option<i64>,
    /// Lease sets renew by liveness (DESIGN §9 "Renewal by liveness"): the set statements
    /// link what they take to the holder's membership row and confirm it
    /// by reading ([`ModelDb::by_liveness`]).
    linked: bool,
    /// By liveness, the acquire ends a lapsed liveness it takes from
    /// with a write (PostgreSQL's statements); SQLite's, one writer,
    /// take without it ([`ModelDb::by_liveness_without_kill`]).
    keeps_lapsed: bool,
    /// The statements now running are a node's that renews every row, on
    /// a table where others renew by liveness ([`ModelDb::as_every_row`]):
    /// they read a linked row's `expires_at` as it is, an expiry far ahead.
    every_row_reader: bool,
    /// Rows written so far (taken, renewed, released, ended, reserved):
    /// what a set's steady state costs the database
    /// ([`ModelDb::row_writes`]).
    writes: u64,
    /// A planted bug for the model checker's own tests (feature `mutants`).
    #[cfg(feature = "mutants")]
    mutation: crate::state::Mutation,
}

pub use crate::sql::LINK_BASE;

mod liveness;
use liveness::is_liveness_of;

impl ModelDb {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose lease-set statements renew by liveness (DESIGN
    /// §9 "Renewal by liveness"): a set's acquire extends the caller's live membership row (its
    /// *liveness*) and links every other row it takes to it
    /// (`expires_at = LINK_BASE + its epoch`); a linked row is takeable once
    /// that liveness is over, the acquire ending a lapsed liveness first
    /// (`holder` cleared: it never lives again); the renewal extends the
    /// liveness and the plain rows, and confirms linked rows without
    /// writing them. The single-lease statements are unchanged.
    pub fn by_liveness() -> Self {
        ModelDb {
            linked: true,
            ..Self::default()
        }
    }

    /// [`ModelDb::by_liveness`] as SQLite's statements run it: a linked
    /// row whose liveness lapsed is taken without ending that liveness
    /// first. SQLite's one writer runs a renewal and a takeover one after
    /// the other, whole, so a renewal that comes later finds the taken
    /// row another's and confirms nothing of it; the lapsed liveness may
    /// be renewed again by its holder, with the rows still linked to it,
    /// which nobody took (DESIGN §9 "Renewal by liveness").
    pub fn by_liveness_without_kill() -> Self {
        ModelDb {
            linked: true,
            keeps_lapsed: true,
            ..Self::default()
        }
    }

    /// How many rows the statements have written so far: each row taken,
    /// inserted, adopted, renewed, released, reserved or ended counts once
    /// per statement (a row confirmed by reading does not).
    pub fn row_writes(&self) -> u64 {
        self.writes
    }

    /// Whether the set statements renew by liveness.
    pub fn is_by_liveness(&self) -> bool {
        self.linked
    }

    /// Runs `statements` as a node renewing every row runs its own on a
    /// table where others renew by liveness: a fleet mid-upgrade (DESIGN
    /// §9 "Older versions never take a linked row"). Its statements link
    /// nothing, and they read a linked row's `expires_at` as it is, an
    /// expiry far ahead: such a row is never theirs to take, nor stale to
    /// their survey. Their adoption after a failover and their fence
    /// read it raw too, as a picolease from before renewal by liveness
    /// does (this version's adopt through the liveness): the set
    /// simulator, the one user, runs no failover and no fence.
    pub fn as_every_row<T>(&mut self, statements: impl FnOnce(&mut ModelDb) -> T) -> T {
        let shape = (self.linked, self.every_row_reader);
        self.linked = false;
        self.every_row_reader = true;
        let out = statements(self);
        (self.linked, self.every_row_reader) = shape;
        out
    }

    /// Plants a bug (feature `mutants`): only
    /// `Mutation::RenewIgnoresEpoch` and `Mutation::AcquireBatchTakesHeld`
    /// change the model.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn set_mutation(&mut self, mutation: crate::state::Mutation) {
        self.mutation = mutation;
    }

    /// The rows as they are now: what a replica that is up to date holds.
    pub fn replica(&self) -> ModelReplica {
        ModelReplica {
            rows: self.rows.clone(),
            marker: self.marker.clone(),
        }
    }

    /// Whether `replica` holds exactly the rows as they are now.
    pub fn holds(&self, replica: &ModelReplica) -> bool {
        self.rows == replica.rows && self.marker == replica.marker
    }

    /// The server is replaced by one holding `replica` (a standby promoted,
    /// or the same server restarted with only what its disk kept): every
    /// write after the replica was taken is lost, and the new server runs
    /// under a new incarnation.
    pub fn fail_over(&mut self, replica: ModelReplica) {
        self.rows = replica.rows;
        self.marker = replica.marker;
        self.incarnation += 1;
        self.adopted_ms = None;
    }

    /// The incarnation of the server now answering (0, then one more per
    /// [`ModelDb::fail_over`]).
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Whether the server adopted a row at database time `now_ms`.
    pub fn adopted_at(&self, now_ms: i64) -> bool {
        self.adopted_ms == Some(now_ms)
    }

    /// Whether `row` was written by another server incarnation (and is
    /// not to be trusted as it stands), unless a planted bug ignores it.
    fn foreign(&self, row: &ModelRow) -> bool {
        #[cfg(feature = "mutants")]
        if self.mutation == crate::state::Mutation::IncarnationIgnored {
            return false;
        }
        row.incarnation != self.incarnation
    }

    /// Every row, by name.
    pub fn rows(&self) -> impl Iterator<Item = (&str, &ModelRow)> {
        self.rows.iter().map(|(name, row)| (name.as_str(), row))
    }

    /// The row of `lease`, if any.
    pub fn row(&self, lease: &str) -> Option<&ModelRow> {
        self.rows.get(lease)
    }

    /// The acquire upsert at database time `now_ms`: adopt a row written by
    /// another server incarnation (holder cleared, epoch jumped to
    /// [`adopted_epoch`], expiry at least a ttl away); else take the
    /// row when it is lapsed (a released row's expiry is its release) or
    /// ours, bumping the epoch; return `holder, epoch, expires_in` either
    /// way.
    pub fn acquire(
        &mut self,
        lease: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        self.acquire_with(lease, holder, ttl_ms, now_ms, None)
    }

    /// [`ModelDb::acquire`], for a set that renews by liveness with its
    /// liveness at `term` (`Some`): a row whose own liveness is over is
    /// takeable too (a lapsed one is ended first), and what the caller
    /// takes is linked to `term` (its membership row, and a grace row,
    /// stay plain).
    fn acquire_with(
        &mut self,
        lease: &str,
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
        term: Option<i64>,
    ) -> Vec<Vec<Cell>> {
        let incarnation = self.incarnation;
        let foreign = self.rows.get(lease).is_some_and(|row| self.foreign(row));
        if foreign {
            self.adopted_ms = Some(now_ms);
        }
        // A linked row is adopted from its liveness's expiry, and taken
        // once that liveness is over.
        let effective = self.rows.get(lease).map(|row| self.expiry(row, now_ms));
        let over = !foreign && self.linked && self.end_lapsed_liveness(lease, holder, now_ms);
        let linked = self.linked;
        let jump = self.jump();
        let (fresh_in_grace, fresh_epoch) = self.fresh_row(now_ms);
        if !self.rows.contains_key(lease) && self.foreign(&self.marker) {
            // A fresh row's epoch counts the clock as an adoption's does.
            self.adopted_ms = Some(now_ms);
        }
        let before = self.rows.get(lease).cloned();
        let taken_until = match term {
            Some(term) if !is_liveness_of(lease, holder) => LINK_BASE + term,
            _ => now_ms + ttl_ms,
        };
        self.rows
            .entry(lease.to_string())
            .and_modify(|row| {
                // Ours, or reserved for our node by a planned handover.
                let takeable = (row.expires_at <= now_ms || over)
                    || row.holder.as_deref() == Some(holder)
                    || row.holder.as_deref() == Some(&reservation(holder));
                // By liveness, the caller's own membership row keeps its
                // epoch when the caller acquires it again (a late or
                // repeated acquire): its epoch is the term its linked rows
                // follow, and a bump would end them under a live holder.
                let own_liveness = linked
                    && is_liveness_of(lease, holder)
                    && row.holder.as_deref() == Some(holder);
                if foreign {
                    row.expires_at = effective.unwrap_or(row.expires_at);
                    adopt(row, ttl_ms, now_ms, jump);
                } else if own_liveness {
                    row.expires_at = now_ms + ttl_ms;
                } else if takeable {
                    row.holder = Some(holder.to_string());
                    row.epoch += 1;
                    row.expires_at = taken_until;
                }
                row.incarnation = incarnation;
            })
            .or_insert_with(|| {
                let holder = (!fresh_in_grace || lease.starts_with(MEMBER_PREFIX))
                    .then(|| holder.to_string());
                ModelRow {
                    expires_at: if holder.is_some() {
                        taken_until
                    } else {
                        now_ms + ttl_ms
                    },
                    holder,
                    epoch: fresh_epoch,
                    incarnation,
                }
            });
        let row = &self.rows[lease];
        if before.as_ref() != Some(row) {
            self.writes += 1;
        }
        let row = &self.rows[lease];
        vec![vec![
            row.holder.clone().map_or(Cell::Null, Cell::Text),
            Cell::Int(row.epoch),
            Cell::Int(self.expiry(row, now_ms) - now_ms),
        ]]
    }

    /// The row of `lease` if it is `holder`'s at `epoch` and was written
    /// by this server incarnation.
    fn matching(&mut self, lease: &str, holder: &str, epoch: Epoch) -> Option<&mut ModelRow> {
        let foreign = self.rows.get(lease).is_some_and(|row| self.foreign(row));
        self.rows.get_mut(lease).filter(|row| {
            !foreign && row.holder.as_deref() == Some(holder) && row.epoch == epoch.to_i64()
        })
    }

    /// The renew update: extend the row if it is ours at `epoch`.
    pub fn renew(
        &mut self,
        lease: &str,
        holder: &str,
        epoch: Epoch,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        #[cfg(feature = "mutants")]
        let epoch = match (self.mutation, self.rows.get(lease)) {
            (crate::state::Mutation::RenewIgnoresEpoch, Some(row)) => {
                Epoch::new(u64::try_from(row.epoch).unwrap_or(0))
            }
            _ => epoch,
        };
        match self.matching(lease, holder, epoch) {
            Some(row) => {
                row.expires_at = now_ms + ttl_ms;
                let epoch = row.epoch;
                self.writes += 1;
                vec![vec![
                    Cell::Int(epoch),
                    self.asked_hand_over(lease, epoch),
                    self.preferred_candidate(lease, now_ms),
                ]]
            }
            None => Vec::new(),
        }
    }

    /// The renewal's second column: the node an operator asked term
    /// `epoch` of `lease` to go to (`""`: anyone), or NULL.
    fn asked_hand_over(&self, lease: &str, epoch: i64) -> Cell {
        self.rows
            .get(&format!("{HANDOVER_PREFIX}{lease}"))
            .filter(|request| request.epoch == epoch)
            .map_or(Cell::Null, |request| {
                Cell::Text(request.holder.clone().unwrap_or_default())
            })
    }

    /// The renewal's third column: the live announcement in the lease's
    /// preferred-candidate row, or NULL.
    fn preferred_candidate(&self, lease: &str, now_ms: i64) -> Cell {
        self.rows
            .get(&format!("{PREFERRED_PREFIX}{lease}"))
            .filter(|row| row.expires_at > now_ms)
            .and_then(|row| row.holder.clone())
            .map_or(Cell::Null, Cell::Text)
    }

    /// A candidate's announcement (`Statements::announce`): the lease's
    /// preferred-candidate row takes `announcement` for `life_ms` if it
    /// lapsed, is empty, or holds text that sorts at or below it.
    pub fn announce(&mut self, lease: &str, announcement: &str, life_ms: i64, now_ms: i64) {
        let incarnation = self.incarnation;
        let row = self
            .rows
            .entry(format!("{PREFERRED_PREFIX}{lease}"))
            .or_insert(ModelRow {
                holder: None,
                epoch: 0,
                expires_at: now_ms,
                incarnation,
            });
        let replace = row.expires_at <= now_ms
            || row
                .holder
                .as_deref()
                .is_none_or(|held| announcement.as_bytes() >= held.as_bytes());
        if replace {
            row.holder = Some(announcement.to_string());
            row.expires_at = now_ms + life_ms;
        }
    }

    /// The hand-over update: if the row is ours at `epoch`, it names
    /// `successor` (a reservation, `<node>#`) until `reservation_ms` from
    /// now, keeping the epoch.
    pub fn hand_over(
        &mut self,
        lease: &str,
        holder: &str,
        epoch: Epoch,
        successor: &str,
        reservation_ms: i64,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        match self.matching(lease, holder, epoch) {
            Some(row) => {
                row.holder = Some(successor.to_string());
                row.expires_at = now_ms + reservation_ms;
                let epoch = row.epoch;
                self.writes += 1;
                vec![vec![Cell::Int(epoch)]]
            }
            None => Vec::new(),
        }
    }

    /// An operator's request that term `epoch` of `lease` be handed over
    /// to `node` (`""`: anyone): the upsert of its request row.
    pub fn request_hand_over(&mut self, lease: &str, node: &str, epoch: Epoch, now_ms: i64) {
        let incarnation = self.incarnation;
        self.rows.insert(
            format!("{HANDOVER_PREFIX}{lease}"),
            ModelRow {
                holder: Some(node.to_string()),
                epoch: epoch.to_i64(),
                expires_at: now_ms,
                incarnation,
            },
        );
    }

    /// The withdrawal of a handover request: delete the request row of
    /// `lease` if it names term `epoch`.
    pub fn withdraw_hand_over(&mut self, lease: &str, epoch: Epoch) {
        let name = format!("{HANDOVER_PREFIX}{lease}");
        if self
            .rows
            .get(&name)
            .is_some_and(|row| row.epoch == epoch.to_i64())
        {
            self.rows.remove(&name);
        }
    }

    /// The release update: free the row if it is ours at `epoch`, keeping
    /// the epoch.
    pub fn release(
        &mut self,
        lease: &str,
        holder: &str,
        epoch: Epoch,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        match self.matching(lease, holder, epoch) {
            Some(row) => {
                row.holder = None;
                row.expires_at = now_ms;
                let epoch = row.epoch;
                self.writes += 1;
                vec![vec![Cell::Int(epoch)]]
            }
            None => Vec::new(),
        }
    }

    /// The administrative release: free the row whoever holds it and bump
    /// the epoch; a row from another server incarnation is adopted instead
    /// (nobody's for `ttl_ms` at least: a lost term's holder may still run).
    pub fn force_release(&mut self, lease: &str, ttl_ms: i64, now_ms: i64) -> Vec<Vec<Cell>> {
        let foreign = self.rows.get(lease).is_some_and(|row| self.foreign(row));
        if foreign {
            self.adopted_ms = Some(now_ms);
        }
        let incarnation = self.incarnation;
        let jump = self.jump();
        let effective = self.rows.get(lease).map(|row| self.expiry(row, now_ms));
        match self.rows.get_mut(lease) {
            Some(row) => {
                if foreign {
                    row.expires_at = effective.unwrap_or(row.expires_at);
                    adopt(row, ttl_ms, now_ms, jump);
                } else {
                    row.holder = None;
                    row.epoch += 1;
                    row.expires_at = now_ms;
                }
                row.incarnation = incarnation;
                vec![vec![Cell::Int(row.epoch)]]
            }
            None => Vec::new(),
        }
    }

    /// The operators' statement after a failover
    /// (`Statements::after_failover`): every row but the handover requests
    /// and preferred-candidate rows is adopted, whatever its incarnation.
    /// Returns `name, epoch` of each.
    pub fn after_failover(&mut self, ttl_ms: i64, now_ms: i64) -> Vec<Vec<Cell>> {
        let incarnation = self.incarnation;
        let jump = self.jump();
        self.adopted_ms = Some(now_ms);
        // A linked row is adopted from its liveness's expiry.
        let effective: BTreeMap<String, i64> = self
            .rows
            .iter()
            .map(|(name, row)| (name.clone(), self.expiry(row, now_ms)))
            .collect();
        let adopted = self
            .rows
            .iter_mut()
            .filter(|(name, _)| {
                !name.starts_with(HANDOVER_PREFIX) && !name.starts_with(PREFERRED_PREFIX)
            })
            .map(|(name, row)| {
                row.expires_at = effective[name];
                adopt(row, ttl_ms, now_ms, jump);
                row.incarnation = incarnation;
                vec![Cell::Text(name.clone()), Cell::Int(row.epoch)]
            })
            .collect();
        // The marker too: a lease whose first row was lost starts in the
        // grace as well. It is not reported.
        adopt(&mut self.marker, ttl_ms, now_ms, jump);
        self.marker.incarnation = incarnation;
        adopted
    }

    /// What a fresh row starts as (`sql::first_row`): a grace row while
    /// the marker is another server's or in its grace; its epoch the
    /// marker's (adopted, if foreign) + 1. With the planted
    /// `Mutation::FirstRowUnguarded`, the caller's at epoch 1 always.
    fn fresh_row(&self, now_ms: i64) -> (bool, i64) {
        #[cfg(feature = "mutants")]
        if self.mutation == crate::state::Mutation::FirstRowUnguarded {
            return (false, 1);
        }
        let foreign = self.foreign(&self.marker);
        let grace = foreign || self.marker.expires_at > now_ms;
        let floor = if foreign {
            self.jump()(self.marker.epoch, now_ms)
        } else {
            self.marker.epoch
        };
        (grace, floor + 1)
    }

    /// How an adopted row's epoch is chosen: [`adopted_epoch`], or with the
    /// planted `Mutation::ConstantEpochJump` the constant 2^32 of old.
    fn jump(&self) -> fn(i64, i64) -> i64 {
        #[cfg(feature = "mutants")]
        if self.mutation == crate::state::Mutation::ConstantEpochJump {
            return |epoch, _| epoch + (1 << 32);
        }
        adopted_epoch
    }

    /// The fence: held by `holder` at `epoch` and unexpired.
    pub fn fence(&self, lease: &str, holder: &str, epoch: Epoch, now_ms: i64) -> bool {
        self.rows.get(lease).is_some_and(|row| {
            !self.foreign(row)
                && row.holder.as_deref() == Some(holder)
                && row.epoch == epoch.to_i64()
                && self.expiry(row, now_ms) > now_ms
        })
    }

    /// The batch acquire: [`ModelDb::acquire`] for each name in turn
    /// (the names are distinct), each answer prefixed by its name: `name,
    /// holder, epoch, expires_in` per name, as the real statement returns
    /// (in the batch's order; the real statement's order is unspecified).
    pub fn acquire_batch(
        &mut self,
        names: &[&str],
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        #[cfg(feature = "mutants")]
        if self.mutation == crate::state::Mutation::AcquireBatchTakesHeld {
            for name in names {
                if let Some(row) = self.rows.get_mut(*name) {
                    // Held by another, unexpired: taken all the same (as
                    // if it had lapsed).
                    row.expires_at = row.expires_at.min(now_ms);
                }
            }
        }
        // By liveness: the caller's live membership row is extended first,
        // and what it takes is linked to it.
        let term = if self.linked {
            self.extend_all_liveness(holder, ttl_ms, now_ms, &[])
                .into_iter()
                .max()
        } else {
            None
        };
        names
            .iter()
            .flat_map(|name| {
                self.acquire_with(name, holder, ttl_ms, now_ms, term)
                    .into_iter()
                    .map(|row| named(name, row))
            })
            .collect()
    }

    /// The batch renew: [`ModelDb::renew`] for each `(name, epoch)` pair;
    /// `name, epoch, asked` of each renewed row.
    pub fn renew_batch(
        &mut self,
        pairs: &[(&str, Epoch)],
        holder: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        if self.linked {
            return self.renew_batch_by_liveness(pairs, holder, ttl_ms, now_ms);
        }
        pairs
            .iter()
            .flat_map(|&(name, epoch)| {
                // The single renew's epoch and handover request; the
                // batch reads no candidate.
                self.renew(name, holder, epoch, ttl_ms, now_ms)
                    .into_iter()
                    .map(move |mut row| {
                        row.truncate(2);
                        named(name, row)
                    })
            })
            .collect()
    }

    /// The batch release: [`ModelDb::release`] for each `(name, epoch)`
    /// pair; `name, epoch` of each freed row.
    pub fn release_batch(
        &mut self,
        pairs: &[(&str, Epoch)],
        holder: &str,
        now_ms: i64,
    ) -> Vec<Vec<Cell>> {
        pairs
            .iter()
            .flat_map(|&(name, epoch)| {
                self.release(name, holder, epoch, now_ms)
                    .into_iter()
                    .map(move |row| named(name, row))
            })
            .collect()
    }

    /// The survey: `name, holder, epoch, expires_in` by name, of every
    /// live membership row (named [`MEMBER_PREFIX`]…, held, unexpired) and
    /// every other row that is free, expires in less than `stale_ms`, or
    /// is reserved for a successor (its holder ends with `#`).
    pub fn survey(&self, stale_ms: i64, now_ms: i64) -> Vec<Vec<Cell>> {
        self.status(now_ms)
            .into_iter()
            .zip(self.rows.iter())
            .filter(|(_, (name, row))| {
                let expiry = self.expiry(row, now_ms);
                if name.starts_with(MEMBER_PREFIX) {
                    row.holder.is_some() && expiry > now_ms
                } else {
                    row.holder.as_deref().is_none_or(|h| h.ends_with('#'))
                        || expiry - now_ms < stale_ms
                }
            })
            .map(|(cells, _)| cells)
            .collect()
    }

    /// The status read: `name, holder, epoch, expires_in` by name.
    pub fn status(&self, now_ms: i64) -> Vec<Vec<Cell>> {
        self.rows
            .iter()
            .map(|(name, row)| {
                vec![
                    Cell::Text(name.clone()),
                    row.holder.clone().map_or(Cell::Null, Cell::Text),
                    Cell::Int(row.epoch),
                    Cell::Int(self.expiry(row, now_ms) - now_ms),
                ]
            })
            .collect()
    }
}

/// The reservation of `holder`'s node (`HolderId::reservation`).
fn reservation(holder: &str) -> String {
    let node = holder.rsplit_once('#').map_or(holder, |(node, _)| node);
    format!("{node}#")
}

/// A single statement's answer row with the lease name in front, as the
/// batch statements return it.
fn named(name: &str, row: Vec<Cell>) -> Vec<Cell> {
    let mut cells = Vec::with_capacity(row.len() + 1);
    cells.push(Cell::Text(name.to_string()));
    cells.extend(row);
    cells
}

/// A row adopted from another server incarnation (DESIGN §3 "Failover"):
/// nobody's, its epoch `jump(epoch, now)`, its expiry a ttl away at least.
fn adopt(row: &mut ModelRow, ttl_ms: i64, now_ms: i64, jump: fn(i64, i64) -> i64) {
    row.holder = None;
    row.epoch = jump(row.epoch, now_ms);
    row.expires_at = row.expires_at.max(now_ms + ttl_ms);
}
