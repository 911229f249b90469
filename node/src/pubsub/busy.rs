//! Busy scripts, told to the routers: `Delivery.busy` on every router's stream when a script
//! here passes busy-reply-threshold and when it ends (fed by `Scripts::busy_changes`), and on a
//! stream that opens while one is busy. A router run with `--busy-reply-scope cluster` answers
//! BUSY to every command meanwhile, as one Redis would.

use std::sync::atomic::Ordering;

use shoal_wire::proto::Delivery;

use super::{Outbox, PubSub};
use crate::script::BusyNow;

/// `Delivery.busy`: a script / a library function here is past busy-reply-threshold; neither is.
const BUSY_SCRIPT: u32 = 1;
const BUSY_FUNCTION: u32 = 2;
const BUSY_NONE: u32 = 3;

impl PubSub {
    /// Tells every router whether a script here is past busy-reply-threshold (`Delivery.busy`),
    /// when that changed; a stream that opens later is told in [`PubSub::attach`].
    pub fn set_busy(&self, now: crate::script::BusyNow) {
        let busy = match now {
            BusyNow::No => BUSY_NONE,
            BusyNow::Script => BUSY_SCRIPT,
            BusyNow::Function => BUSY_FUNCTION,
        };
        // Under the write lock, as `attach`: a stream opening now sees either the old state and
        // this delivery, or the new state.
        let reg = self.registry.write();
        if self.busy.swap(busy, Ordering::Relaxed) != busy {
            for outbox in reg.routers.values() {
                outbox.push(Delivery { busy, ..Default::default() });
            }
        }
    }

    /// Tells a stream that opens while a script here is busy (under the registry's write lock).
    pub(super) fn tell_busy(&self, outbox: &Outbox) {
        let busy = self.busy.load(Ordering::Relaxed);
        if matches!(busy, BUSY_SCRIPT | BUSY_FUNCTION) {
            outbox.push(Delivery { busy, ..Default::default() });
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::pubsub::Out;

    /// The `busy` values one stream's queue holds now.
    fn busy_told(rx: &mut mpsc::UnboundedReceiver<Out>) -> Vec<u32> {
        let mut told = Vec::new();
        while let Ok(Out::Delivery(d)) = rx.try_recv() {
            if d.busy != 0 {
                told.push(d.busy);
            }
        }
        told
    }

    #[test]
    fn every_router_hears_of_a_busy_script_once_per_change_and_a_late_one_at_attach() {
        let ps = PubSub::default();
        let (_a, _a_box, mut a_rx) = ps.attach();
        assert_eq!(busy_told(&mut a_rx), Vec::<u32>::new(), "nothing to tell before a script is busy");
        ps.set_busy(BusyNow::Script);
        ps.set_busy(BusyNow::Script);
        assert_eq!(busy_told(&mut a_rx), [BUSY_SCRIPT], "told once");
        // A router that attaches while a script is busy hears of it at once.
        let (_b, _b_box, mut b_rx) = ps.attach();
        assert_eq!(busy_told(&mut b_rx), [BUSY_SCRIPT]);
        ps.set_busy(BusyNow::No);
        ps.set_busy(BusyNow::Function);
        assert_eq!(busy_told(&mut a_rx), [BUSY_NONE, BUSY_FUNCTION]);
        assert_eq!(busy_told(&mut b_rx), [BUSY_NONE, BUSY_FUNCTION]);
        ps.set_busy(BusyNow::No);
        // One that attaches after it ended is told nothing.
        let (_c, _c_box, mut c_rx) = ps.attach();
        assert_eq!(busy_told(&mut c_rx), Vec::<u32>::new());
    }
}
