//! Faults injected into a simulated device's calls: the kinds of call a fault can refuse
//! ([`FaultSite`]) and, per kind, the call numbers that fail and the calls made so far.
//!
//! Invariant: every call of a kind is numbered from 0, failed attempts included, and a number
//! listed fails once (it is taken off the list as it fires).

use alloc::collections::BTreeSet;

/// The driver error code an injected map, unmap or event-record fault reports.
pub const INJECTED_FAULT_CODE: i32 = 999;

/// The kinds of device call a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultSite {
    /// Segment allocation (`allocate`): fails as out of memory.
    Allocate,
    /// Physical-handle creation (`vm_create`): fails as out of memory.
    Create,
    /// Mapping a handle (`vm_map`): fails with a driver error.
    Map,
    /// Unmapping a range (`vm_unmap`): fails with a driver error.
    Unmap,
    /// Recording an event (`record_event`): fails with a driver error.
    RecordEvent,
    /// Destroying a physical handle (`vm_destroy`): fails with a driver error, the handle
    /// still held.
    Destroy,
    /// Freeing a segment (`free`): fails with a driver error, the segment still held.
    Free,
    /// Releasing an address range (`vm_release`): fails with a driver error, the range still
    /// reserved.
    Release,
    /// Granting access to mapped pages (`vm_set_access`): fails with a driver error.
    SetAccess,
    /// Querying an event (`query_event`): fails with a driver error.
    QueryEvent,
}

impl FaultSite {
    /// Every kind, in declaration order.
    pub const ALL: [FaultSite; 10] = [
        FaultSite::Allocate,
        FaultSite::Create,
        FaultSite::Map,
        FaultSite::Unmap,
        FaultSite::RecordEvent,
        FaultSite::Destroy,
        FaultSite::Free,
        FaultSite::Release,
        FaultSite::SetAccess,
        FaultSite::QueryEvent,
    ];
}

/// Calls to fail, and the number of calls made so far, per [`FaultSite`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    failing: [BTreeSet<u64>; FaultSite::ALL.len()],
    attempts: [u64; FaultSite::ALL.len()],
}

impl Faults {
    /// Makes call number `call` of `site` fail once.
    pub(crate) fn fail(&mut self, site: FaultSite, call: u64) {
        self.failing[site as usize].insert(call);
    }

    /// The number the next call of `site` will get.
    pub(crate) fn next_call(&self, site: FaultSite) -> u64 {
        self.attempts[site as usize]
    }

    /// Faults listed that have not fired yet, of every kind.
    pub(crate) fn pending(&self) -> usize {
        self.failing.iter().map(BTreeSet::len).sum()
    }

    /// Forgets every fault that has not fired yet.
    pub(crate) fn clear(&mut self) {
        self.failing.iter_mut().for_each(BTreeSet::clear);
    }

    /// Numbers the next call of `site`; true if an injected fault refuses it.
    pub(crate) fn refuses(&mut self, site: FaultSite) -> bool {
        let call = self.attempts[site as usize];
        self.attempts[site as usize] += 1;
        self.failing[site as usize].remove(&call)
    }
}
