//! Private pools through the C ABI (`cachalot_pool_*`), as PyTorch's allocator interface uses
//! them (`native/torch/private_pools.h`): a pool's allocation is freed with `cachalot_free`, its
//! blocks are listed with their pool, a checkpoint is set back within the pool, and every call
//! refuses what it cannot do, naming it, without writing an out-parameter.

use std::ffi::{c_void, CString};
use std::ptr;

use cachalot::ffi::allocation::{cachalot_free, cachalot_malloc};
use cachalot::ffi::blocks::{cachalot_blocks, BlockInfo, CACHALOT_BLOCK_ALLOCATED};
use cachalot::ffi::handle::{cachalot_allocator_free, cachalot_allocator_new_simulated};
use cachalot::ffi::last_error::get as last_error;
use cachalot::ffi::pool::*;
use cachalot::ffi::Status;
use cachalot::SharedAllocator;

const MIB: usize = 1 << 20;

fn allocator(config: &str) -> *mut SharedAllocator {
    let config = CString::new(config).unwrap();
    let mut a = ptr::null_mut();
    // SAFETY: a valid C string and a writable out-parameter.
    assert_eq!(unsafe { cachalot_allocator_new_simulated(1 << 30, config.as_ptr(), &mut a) }, Status::Ok);
    a
}

fn blocks(a: *mut SharedAllocator) -> Vec<BlockInfo> {
    let mut n = 0;
    // SAFETY: a live handle; the size-first protocol of cachalot_blocks.
    unsafe {
        assert_eq!(cachalot_blocks(a, ptr::null_mut(), 0, &mut n), Status::Ok);
        let mut rows = vec![BlockInfo::default(); n];
        assert_eq!(cachalot_blocks(a, rows.as_mut_ptr(), n, &mut n), Status::Ok);
        rows
    }
}

fn pool_malloc(a: *mut SharedAllocator, pool: u32, size: usize, stream: usize) -> Result<*mut c_void, Status> {
    let mut p = ptr::null_mut();
    // SAFETY: a live handle and a writable out-parameter.
    match unsafe { cachalot_pool_malloc(a, pool, size, stream as *mut c_void, &mut p) } {
        Status::Ok => Ok(p),
        s => Err(s),
    }
}

#[test]
fn a_graph_s_pool_through_the_c_abi() {
    let a = allocator("policy:pytorch");
    // SAFETY: `a` is a live handle until freed at the end; out-parameters are writable locals.
    unsafe {
        let mut pool = 0;
        assert_eq!(cachalot_pool_create(a, &mut pool), Status::Ok);
        assert_ne!(pool, 0);
        let capturing = 7usize as *mut c_void;
        assert_eq!(cachalot_pool_begin_allocate(a, pool, capturing), Status::Ok);
        let mut routed = ptr::null_mut();
        assert_eq!(cachalot_malloc(a, 3 * MIB, capturing, &mut routed), Status::Ok);
        assert_eq!(cachalot_pool_end_allocate(a, pool), Status::Ok);
        let direct = pool_malloc(a, pool, 2 * MIB, 0).unwrap();
        let mut own = ptr::null_mut();
        assert_eq!(cachalot_malloc(a, 3 * MIB, ptr::null_mut(), &mut own), Status::Ok);
        let rows = blocks(a);
        let pool_of = |p: *mut c_void| rows.iter().find(|b| b.address == p as u64).unwrap().pool;
        assert_eq!((pool_of(routed), pool_of(direct), pool_of(own)), (pool, pool, 0));

        // A checkpoint of the pool's live blocks, set back after they are freed.
        let live: Vec<BlockInfo> =
            rows.iter().filter(|b| b.pool == pool && b.state == CACHALOT_BLOCK_ALLOCATED).copied().collect();
        assert_eq!(live.len(), 2);
        assert_eq!(cachalot_free(a, routed), Status::Ok);
        assert_eq!(cachalot_free(a, direct), Status::Ok);
        for b in &live {
            let at = b.address as usize as *mut c_void;
            assert_eq!(cachalot_pool_allocate_at(a, pool, at, b.size as usize, b.requested_size as usize), Status::Ok);
        }
        assert_eq!(cachalot_pool_allocate_at(a, pool, own, 3 * MIB, 3 * MIB), Status::InvalidArgument);

        let mut uses = 0;
        assert_eq!(cachalot_pool_retain(a, pool), Status::Ok);
        assert_eq!(cachalot_pool_use_count(a, pool, &mut uses), Status::Ok);
        assert_eq!(uses, 2);
        for b in &live {
            assert_eq!(cachalot_free(a, b.address as usize as *mut c_void), Status::Ok);
        }
        assert_eq!(cachalot_pool_release(a, pool), Status::Ok);
        assert_eq!(cachalot_pool_empty_cache(a, pool), Status::Ok);
        assert!(blocks(a).iter().any(|b| b.pool == pool), "a pool in use keeps its cache");
        assert_eq!(cachalot_pool_release(a, pool), Status::Ok);
        assert_eq!(pool_malloc(a, pool, MIB, 0), Err(Status::InvalidArgument), "no use left");
        assert!(last_error().contains(&format!("private pool {pool} has no use left")), "{}", last_error());
        assert_eq!(cachalot_pool_empty_cache(a, pool), Status::Ok);
        assert!(blocks(a).iter().all(|b| b.pool != pool), "released and emptied: its memory is back");
        assert_eq!(cachalot_pool_use_count(a, pool, &mut uses), Status::InvalidArgument);
        assert!(last_error().contains(&format!("private pool {pool} does not exist")), "{}", last_error());
        assert_eq!(cachalot_free(a, own), Status::Ok);
        cachalot_allocator_free(a);
    }
}

#[test]
fn pool_calls_refuse_bad_arguments_and_write_nothing() {
    let a = allocator("policy:pytorch");
    // SAFETY: as above; NULL handles and out-parameters are what is being refused.
    unsafe {
        let mut out = 0xdead;
        assert_eq!(cachalot_pool_create(ptr::null_mut(), &mut out), Status::NullPointer);
        assert_eq!(cachalot_pool_create(a, ptr::null_mut()), Status::NullPointer);
        assert_eq!(cachalot_pool_use_count(a, 42, &mut out), Status::InvalidArgument);
        assert_eq!(out, 0xdead, "a failing call writes no out-parameter");
        assert_eq!(cachalot_pool_retain(a, 42), Status::InvalidArgument);
        assert_eq!(cachalot_pool_release(a, 42), Status::InvalidArgument);
        assert_eq!(cachalot_pool_begin_allocate(a, 42, ptr::null_mut()), Status::InvalidArgument);
        assert_eq!(cachalot_pool_end_allocate(a, 42), Status::InvalidArgument);
        assert_eq!(cachalot_pool_empty_cache(a, 42), Status::InvalidArgument);
        assert_eq!(cachalot_pool_allocate_at(a, 42, ptr::null_mut(), 512, 512), Status::InvalidArgument);
        let mut p = 0x5e5e as *mut c_void;
        assert_eq!(cachalot_pool_malloc(a, 42, MIB, ptr::null_mut(), &mut p), Status::InvalidArgument);
        assert_eq!(p, 0x5e5e as *mut c_void);
        let mut pool = 0;
        assert_eq!(cachalot_pool_create(a, &mut pool), Status::Ok);
        assert_eq!(cachalot_pool_malloc(a, pool, 0, ptr::null_mut(), &mut p), Status::InvalidSize);
        assert_eq!(cachalot_pool_malloc(a, pool, MIB, ptr::null_mut(), ptr::null_mut()), Status::NullPointer);
        assert_eq!(p, 0x5e5e as *mut c_void);
        cachalot_allocator_free(a);
    }
}

#[test]
fn per_stream_locks_refuse_pools_naming_the_key() {
    let a = allocator("policy:pytorch,lock_per_stream:True");
    // SAFETY: as above.
    unsafe {
        let mut pool = 0;
        assert_eq!(cachalot_pool_create(a, &mut pool), Status::InvalidArgument);
        assert!(last_error().contains("lock_per_stream"), "{}", last_error());
        assert_eq!(pool, 0);
        cachalot_allocator_free(a);
    }
}
