//! PyTorch's rules while a CUDA graph is being captured (`engine/capture.rs`), one test each:
//! no pending free's events are processed; a block freed while used on other streams records
//! no event until the captures end; uses recorded during a capture are dropped then; a failed
//! event record at the end is tried again. Every test checks the invariants as it goes.

use cachalot_core::sim::FaultSite;
use cachalot_core::{AllocError, Allocator, Config, Decision, SimDevice};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn pytorch() -> Allocator<SimDevice> {
    Allocator::new(SimDevice::new(80 * GIB), Config::parse("policy:pytorch").unwrap())
}

fn checked(a: &Allocator<SimDevice>) {
    a.check_invariants().unwrap();
}

#[test]
fn a_free_used_on_another_stream_records_no_event_until_the_capture_ends() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap(); // used on stream 9 before the capture
    a.device_mut().hold_stream(9);
    a.begin_capture().unwrap();
    a.free(p).unwrap();
    assert_eq!(a.device().calls().events_recorded, 0, "no event is recorded during a capture");
    assert_eq!(a.segments(0)[0].blocks[0].state, "active_pending_free");
    assert_eq!(a.stats().allocated_bytes.all.current, 0, "freed: no longer allocated");
    assert_eq!(a.stats().active_bytes.all.current as u64, 4 * MIB, "but still active, as a pending free");
    assert_ne!(a.malloc(4 * MIB, 0).unwrap(), p, "not reused during the capture");
    checked(&a);
    a.end_capture().unwrap();
    assert_eq!(a.device().calls().events_recorded, 1, "the event is recorded once the capture ends");
    assert_eq!(a.captures_underway(), 0);
    checked(&a);
    let q = a.malloc(4 * MIB, 0).unwrap();
    assert_ne!(q, p, "stream 9 is still busy");
    a.device_mut().finish_stream(9);
    assert_eq!(a.malloc(4 * MIB, 0).unwrap(), p, "reused once stream 9's work is done");
    checked(&a);
}

#[test]
fn uses_recorded_during_the_capture_are_dropped_when_it_ends() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.device_mut().hold_stream(7);
    a.begin_capture().unwrap();
    a.record_stream(p, 7).unwrap(); // only during the capture
    a.free(p).unwrap();
    checked(&a);
    a.end_capture().unwrap();
    assert_eq!(a.device().calls().events_recorded, 0, "a use from the capture needs no event");
    assert_eq!(a.segments(0)[0].blocks[0].state, "inactive", "free at once");
    assert_eq!(a.stats().active_bytes.all.current, 0);
    assert_eq!(a.malloc(4 * MIB, 0).unwrap(), p);
    checked(&a);
}

#[test]
fn only_the_uses_from_before_the_capture_get_events() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 5).unwrap();
    a.begin_capture().unwrap();
    a.record_stream(p, 6).unwrap();
    a.free(p).unwrap();
    a.end_capture().unwrap();
    assert_eq!(a.device().calls().events_recorded, 1, "stream 5's use only");
    checked(&a);
}

#[test]
fn no_pending_free_completes_during_a_capture() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap();
    a.free(p).unwrap(); // an event on stream 9, recorded before the capture; already done
    a.begin_capture().unwrap();
    let during = a.malloc(4 * MIB, 0).unwrap();
    assert_ne!(during, p, "its event is not queried during the capture, so it is not reused");
    assert_eq!(a.device().calls().events_recorded, 1);
    checked(&a);
    a.end_capture().unwrap();
    assert_eq!(a.malloc(4 * MIB, 0).unwrap(), p, "the next malloc after the capture completes it");
    checked(&a);
}

#[test]
fn captures_nest_and_the_last_end_records_the_events() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap();
    a.begin_capture().unwrap();
    a.begin_capture().unwrap();
    a.free(p).unwrap();
    a.end_capture().unwrap();
    assert_eq!(a.captures_underway(), 1);
    assert_eq!(a.device().calls().events_recorded, 0, "one capture is still underway");
    a.end_capture().unwrap();
    assert_eq!(a.device().calls().events_recorded, 1);
    checked(&a);
}

#[test]
fn ending_a_capture_that_never_began_is_refused_and_changes_nothing() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    assert!(matches!(a.end_capture(), Err(AllocError::NoCaptureUnderway)));
    assert_eq!(a.captures_underway(), 0);
    a.free(p).unwrap();
    assert_eq!(a.malloc(4 * MIB, 0).unwrap(), p, "frees still complete as usual");
    checked(&a);
}

#[test]
fn empty_cache_during_a_capture_waits_on_no_event() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap();
    a.device_mut().hold_stream(9);
    a.free(p).unwrap();
    a.begin_capture().unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.stats().num_sync_all_streams, 0, "no event is waited on during a capture");
    assert_eq!(a.stats().reserved_bytes.all.current as u64, 20 * MIB, "the pending block's segment stays");
    checked(&a);
    a.end_capture().unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.stats().num_sync_all_streams, 1);
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    checked(&a);
}

#[test]
fn a_failed_event_record_at_the_end_is_tried_again_where_events_are_processed() {
    let mut a = pytorch();
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap();
    a.begin_capture().unwrap();
    a.free(p).unwrap();
    let call = a.device().next_call(FaultSite::RecordEvent);
    a.device_mut().fail_call(FaultSite::RecordEvent, call);
    assert!(matches!(a.end_capture(), Err(AllocError::Device(_))));
    assert_eq!(a.captures_underway(), 0, "the capture did end");
    assert_eq!(a.segments(0)[0].blocks[0].state, "active_pending_free", "the block still waits");
    checked(&a);
    a.empty_cache().unwrap(); // processes events: records the deferred one, then waits for it
    assert_eq!(a.device().calls().events_recorded, 1);
    assert_eq!(a.stats().reserved_bytes.all.current, 0, "then frees and releases it");
    checked(&a);
}

#[test]
fn the_explainer_says_why_a_block_waits_for_the_capture() {
    let mut a = pytorch();
    a.set_explain(true);
    let p = a.malloc(4 * MIB, 0).unwrap();
    a.record_stream(p, 9).unwrap();
    a.begin_capture().unwrap();
    a.free(p).unwrap();
    let decisions = a.take_decisions();
    assert!(decisions.iter().any(|d| matches!(d, Decision::DeferredByCapture)), "{decisions:?}");
    assert!(Decision::DeferredByCapture.to_string().contains("until the capture ends"));
}
