//! The connections between the nodes and the database: in order per node
//! and per direction (TCP), each head message delivered within the
//! delivery bound unless a fault made it late.

use std::collections::VecDeque;

use super::world::Setup;
use crate::names::HolderId;
use crate::protocol::{Operation, Reply, RequestId};

/// A statement on its way to the database.
#[derive(Clone, Debug)]
pub(super) struct Request {
    pub(super) node: usize,
    pub(super) incarnation: u32,
    pub(super) holder: HolderId,
    pub(super) id: RequestId,
    pub(super) operation: Operation,
    /// A hand-over's reservation (`LeaseState::successor`).
    pub(super) successor: Option<HolderId>,
}

/// A message on its way to a node.
#[derive(Clone, Debug)]
pub(super) enum Delivery {
    Reply(RequestId, Reply),
    Notice,
}

/// One direction of a connection: in order (TCP), with the age of its
/// head message in database ticks, or `late` once a fault delayed it.
#[derive(Clone, Debug)]
pub(super) struct Channel<T> {
    pub(super) queue: VecDeque<T>,
    pub(super) age: u32,
    pub(super) late: bool,
}

impl<T> Channel<T> {
    pub(super) fn new() -> Self {
        Channel {
            queue: VecDeque::new(),
            age: 0,
            late: false,
        }
    }

    pub(super) fn push(&mut self, item: T) {
        if self.queue.is_empty() {
            self.age = 0;
            self.late = false;
        }
        self.queue.push_back(item);
    }

    /// The head, and whether it was late.
    pub(super) fn pop(&mut self) -> Option<(T, bool)> {
        let item = self.queue.pop_front()?;
        let late = self.late;
        self.age = 0;
        self.late = false;
        Some((item, late))
    }

    /// Whether the head may wait one more database tick.
    pub(super) fn on_time(&self, setup: &Setup) -> bool {
        self.queue.is_empty() || self.age < setup.bound(self.late)
    }

    pub(super) fn clear(&mut self) {
        self.queue.clear();
        self.age = 0;
        self.late = false;
    }
}
