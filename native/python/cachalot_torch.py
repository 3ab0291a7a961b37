"""cachalot as PyTorch's CUDA allocator, with the figures PyTorch's pluggable path lacks.

    import cachalot_torch
    cachalot_torch.install()                  # before the first CUDA tensor
    print(cachalot_torch.memory_summary())    # after some work

Role: `install()` loads libcachalot.so, plugs it in with
`torch.cuda.memory.change_current_allocator(CUDAPluggableAllocator(...))` and wires its
optional hooks (`torch.cuda.empty_cache`, `set_per_process_memory_fraction`,
`Tensor.record_stream`). Under a pluggable allocator `torch.cuda.memory_stats()` and its
relatives raise; this module reads the same figures from cachalot through its C ABI with
ctypes: `memory_stats()` (the keys, meanings and order of `torch.cuda.memory_stats()`),
`memory_summary()` (its table) and `snapshot()` (the schema of
`torch.cuda.memory._snapshot()`).

Invariants: only `install()` imports torch; everything else works without it, and uses torch
only when the caller has imported it already. Figures come from the process-wide allocator
of each device (`cachalot_torch_allocator`), which only cachalot's PyTorch entry points
create; a device they have not used reads as an allocator that has served nothing. The
library is loaded once per process, and `install()` takes effect once.
"""
import collections
import ctypes
import json
import os
import sys
import warnings

__all__ = [
    "install", "memory_stats", "memory_summary", "snapshot", "empty_cache", "reset_peak_memory_stats",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "find_library", "load_library", "CachalotError",
]

CONFIG_ENV = "CACHALOT_ALLOC_CONF"
LIB_ENV = "CACHALOT_LIB"
LIB_NAME = "libcachalot.so"
_HERE = os.path.dirname(os.path.abspath(__file__))

# torch.cuda.memory_stats()'s names: nine statistics per pool, two without pools, six counters.
STAT_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
               "active_bytes", "inactive_split_bytes", "requested_bytes")
POOLS = ("all", "small_pool", "large_pool")
METRICS = ("current", "peak", "allocated", "freed")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")
SINGLE_STATS = ("oversize_allocations", "oversize_segments")

# PyTorch's hooks on a CUDAPluggableAllocator and the entry points that serve them.
HOOKS = (("set_reset_fn", "cachalot_torch_empty_cache"),
         ("set_memory_fraction_fn", "cachalot_torch_set_memory_fraction"),
         ("set_record_stream_fn", "cachalot_torch_record_stream"))


class _Stat(ctypes.Structure):
    _fields_ = [(m, ctypes.c_int64) for m in METRICS]


class _StatArray(ctypes.Structure):
    _fields_ = [(p, _Stat) for p in POOLS]


class _Stats(ctypes.Structure):
    """`cachalot_stats`, layout version 1 (include/cachalot.h)."""
    _fields_ = ([("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32)]
                + [(n, _StatArray) for n in STAT_ARRAYS] + [(n, ctypes.c_uint64) for n in COUNTERS]
                + [(n, _Stat) for n in SINGLE_STATS] + [("max_split_size", ctypes.c_int64)])


assert ctypes.sizeof(_Stats) == 8 + 9 * 96 + 5 * 8 + 2 * 32 + 8, "cachalot_stats layout changed"


class CachalotError(RuntimeError):
    """A cachalot call failed; `status` is the status name, the text cachalot's message."""

    def __init__(self, call, status, message):
        super().__init__(f"{call} failed ({status}): {message}")
        self.status, self.message = status, message


class Library:
    """libcachalot.so through ctypes: the calls this module makes, typed, with errors raised."""

    def __init__(self, path):
        self.path = path
        self.dll = d = ctypes.CDLL(path)
        handle, p, size = ctypes.c_void_p, ctypes.POINTER, ctypes.c_size_t
        for name, args in [
            ("cachalot_torch_allocator", [ctypes.c_int, p(handle)]),
            ("cachalot_allocator_new_simulated", [ctypes.c_uint64, ctypes.c_char_p, p(handle)]),
            ("cachalot_allocator_new_simulated_placed",
             [ctypes.c_uint64, ctypes.c_char_p, p(ctypes.c_uint64), size, p(handle)]),
            ("cachalot_get_stats", [handle, p(_Stats)]),
            ("cachalot_memory_summary", [handle, ctypes.c_bool, ctypes.c_char_p, size, p(size)]),
            ("cachalot_snapshot_json", [handle, ctypes.c_char_p, size, p(size)]),
            ("cachalot_reset_peak_stats", [handle]),
            ("cachalot_malloc", [handle, size, ctypes.c_void_p, p(ctypes.c_void_p)]),
            ("cachalot_free", [handle, ctypes.c_void_p]),
        ]:
            try:
                fn = getattr(d, name)
            except AttributeError:
                raise RuntimeError(f"cachalot: {path} has no {name}: it is older than this module; rebuild it with "
                                   f"`cargo build --release -p cachalot`") from None
            fn.argtypes, fn.restype = args, ctypes.c_int32
        d.cachalot_allocator_free.argtypes, d.cachalot_allocator_free.restype = [handle], None
        d.cachalot_last_error_message.argtypes = [ctypes.c_char_p, size]
        d.cachalot_last_error_message.restype = size
        d.cachalot_status_name.argtypes, d.cachalot_status_name.restype = [ctypes.c_int], ctypes.c_char_p
        d.cachalot_version.argtypes, d.cachalot_version.restype = [], ctypes.c_char_p
        d.cachalot_torch_empty_cache.argtypes, d.cachalot_torch_empty_cache.restype = [], None

    def version(self):
        return self.dll.cachalot_version().decode()

    def address(self, symbol):
        """The address of an exported function, for PyTorch's hook setters."""
        return ctypes.cast(getattr(self.dll, symbol), ctypes.c_void_p).value

    def check(self, call, status):
        if status != 0:
            n = self.dll.cachalot_last_error_message(None, 0)
            buf = ctypes.create_string_buffer(n + 1)
            self.dll.cachalot_last_error_message(buf, n + 1)
            raise CachalotError(call, self.dll.cachalot_status_name(status).decode(), buf.value.decode())

    def torch_allocator(self, device):
        """The borrowed handle of device `device`'s process-wide allocator, or None."""
        out = ctypes.c_void_p()
        self.check("cachalot_torch_allocator", self.dll.cachalot_torch_allocator(device, ctypes.byref(out)))
        return out.value

    def new_simulated(self, capacity, config=None, placements=()):
        """A simulated allocator (free it with `free_allocator`); config None reads the env.
        `placements`, (address, size) pairs in order, put its segments where a recorded run's
        device put them (`cachalot_allocator_new_simulated_placed`)."""
        out = ctypes.c_void_p()
        conf = None if config is None else config.encode()
        if not placements:
            self.check("cachalot_allocator_new_simulated",
                       self.dll.cachalot_allocator_new_simulated(capacity, conf, ctypes.byref(out)))
            return out.value
        flat = (ctypes.c_uint64 * (2 * len(placements)))(*[v for pair in placements for v in pair])
        self.check("cachalot_allocator_new_simulated_placed",
                   self.dll.cachalot_allocator_new_simulated_placed(capacity, conf, flat, len(placements),
                                                                    ctypes.byref(out)))
        return out.value

    def free_allocator(self, handle):
        self.dll.cachalot_allocator_free(handle)

    def malloc(self, handle, size, stream=0):
        out = ctypes.c_void_p()
        self.check("cachalot_malloc", self.dll.cachalot_malloc(handle, size, stream or None, ctypes.byref(out)))
        return out.value

    def free(self, handle, ptr):
        self.check("cachalot_free", self.dll.cachalot_free(handle, ptr))

    def stats(self, handle):
        """The allocator's statistics as `torch.cuda.memory_stats()` gives them."""
        s = _Stats(struct_size=ctypes.sizeof(_Stats))
        self.check("cachalot_get_stats", self.dll.cachalot_get_stats(handle, ctypes.byref(s)))
        return stats_dict(s)

    def _text(self, call, fn, *args):
        # Ask for the size, then fill; grow and retry if other threads changed the state between.
        need = ctypes.c_size_t()
        self.check(call, fn(*args, None, 0, ctypes.byref(need)))
        for _ in range(8):
            buf = ctypes.create_string_buffer(need.value + need.value // 4 + 4096)
            status = fn(*args, buf, len(buf), ctypes.byref(need))
            if status != 9:  # CACHALOT_STATUS_BUFFER_TOO_SMALL
                self.check(call, status)
                return buf.value.decode()
        self.check(call, status)

    def summary(self, handle, abbreviated=False):
        return self._text("cachalot_memory_summary", self.dll.cachalot_memory_summary, handle, bool(abbreviated))

    def snapshot(self, handle):
        return json.loads(self._text("cachalot_snapshot_json", self.dll.cachalot_snapshot_json, handle))

    def reset_peak_stats(self, handle):
        self.check("cachalot_reset_peak_stats", self.dll.cachalot_reset_peak_stats(handle))


def stats_dict(s):
    """A `cachalot_stats` as torch.cuda.memory_stats()'s flat OrderedDict (sorted by key)."""
    items = []
    for name in STAT_ARRAYS:
        array = getattr(s, name)
        for pool in POOLS:
            stat = getattr(array, pool)
            items += [(f"{name}.{pool}.{m}", getattr(stat, m)) for m in METRICS]
    for name in SINGLE_STATS:
        items += [(f"{name}.{m}", getattr(getattr(s, name), m)) for m in METRICS]
    items += [(n, getattr(s, n)) for n in COUNTERS] + [("max_split_size", s.max_split_size)]
    return collections.OrderedDict(sorted(items))


# ---- the library ----------------------------------------------------------------------------

_LIB = None        # the Library loaded in this process
_INSTALLED = None  # the CUDAPluggableAllocator install() plugged in


def find_library(lib_path=None):
    """The library's path: `lib_path`, else $CACHALOT_LIB, else next to this module, else
    target/release of the repository this file is in. A path given explicitly (argument or
    variable) must exist; FileNotFoundError names every path tried."""
    if lib_path is not None or os.environ.get(LIB_ENV):
        path = lib_path if lib_path is not None else os.environ[LIB_ENV]
        tried = [f"{path} (from {'the lib_path argument' if lib_path is not None else '$' + LIB_ENV})"]
        candidates = [path]
    else:
        candidates = [os.path.join(_HERE, LIB_NAME),
                      os.path.join(os.path.dirname(os.path.dirname(_HERE)), "target", "release", LIB_NAME)]
        tried = list(candidates)
    for c in candidates:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise FileNotFoundError(f"cachalot: {LIB_NAME} not found; tried: {'; '.join(tried)}. Build it with "
                            f"`cargo build --release -p cachalot` and pass its path to install(lib_path=...) "
                            f"or set {LIB_ENV}.")


def load_library(lib_path=None):
    """The process's Library (loaded on first use; later calls must name the same file)."""
    global _LIB
    if _LIB is None:
        _LIB = Library(find_library(lib_path))
    elif lib_path is not None and os.path.realpath(lib_path) != os.path.realpath(_LIB.path):
        raise RuntimeError(f"cachalot: {_LIB.path} is already loaded in this process; cannot switch to {lib_path}")
    return _LIB


# ---- install --------------------------------------------------------------------------------

_TOO_LATE = ("cachalot_torch.install() was called too late: {why}. PyTorch picks its CUDA allocator once; "
             "call install() before any CUDA tensor is created (right after `import torch`, before anything "
             "that initialises CUDA).")


def install(lib_path=None, config=None):
    """Makes cachalot PyTorch's CUDA allocator; returns the CUDAPluggableAllocator.

    `config` (PYTORCH_CUDA_ALLOC_CONF syntax plus cachalot's keys, e.g. "policy:pytorch")
    is set as $CACHALOT_ALLOC_CONF, which cachalot reads at its first allocation; without it
    the variable's value (or the defaults) applies. The config is checked here: a bad one
    raises ValueError naming the key. Raises FileNotFoundError when the library is missing
    and RuntimeError when PyTorch has already initialised its allocator."""
    global _INSTALLED
    path = find_library(lib_path)
    lib = load_library(path)
    if _INSTALLED is not None:
        if config is not None and config != os.environ.get(CONFIG_ENV):
            raise RuntimeError(f"cachalot is already installed with {CONFIG_ENV}="
                               f"{os.environ.get(CONFIG_ENV, '')!r}; the config cannot change afterwards")
        return _INSTALLED
    import torch  # the one place torch is imported

    if torch.cuda.is_initialized():
        why = "CUDA is already initialised in this process"
        try:
            why += f" and PyTorch's allocator holds {torch.cuda.memory_allocated()} bytes"
        except RuntimeError:
            pass
        raise RuntimeError(_TOO_LATE.format(why=why))
    if config is not None:
        if any(lib.torch_allocator(d) for d in range(64)):
            raise RuntimeError("cachalot: its allocator was created already (by an earlier allocation); "
                               "a config set now would not apply")
        previous = os.environ.get(CONFIG_ENV)
        os.environ[CONFIG_ENV] = config
    try:
        _check_config(lib)
        alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cachalot_torch_malloc", "cachalot_torch_free")
        raw = alloc.allocator()
        for setter, symbol in HOOKS:
            if hasattr(raw, setter):
                getattr(raw, setter)(lib.address(symbol))
            else:
                warnings.warn(f"cachalot: this PyTorch ({torch.__version__}) has no allocator hook {setter}: "
                              f"{symbol} stays unwired", RuntimeWarning, stacklevel=2)
        try:
            torch.cuda.memory.change_current_allocator(alloc)
        except RuntimeError as e:
            raise RuntimeError(_TOO_LATE.format(why=f"PyTorch refused to swap its allocator ({e})")) from e
    except BaseException:
        if config is not None:
            if previous is None:
                os.environ.pop(CONFIG_ENV, None)
            else:
                os.environ[CONFIG_ENV] = previous
        raise
    _INSTALLED = alloc
    return alloc


def _check_config(lib):
    """Parses $CACHALOT_ALLOC_CONF now (a throwaway simulated allocator reads it), so a bad
    value fails here, with its message, rather than at the first CUDA allocation."""
    try:
        lib.free_allocator(lib.new_simulated(1 << 30))
    except CachalotError as e:
        if e.status == "CACHALOT_STATUS_INVALID_CONFIG":
            raise ValueError(f"cachalot: invalid config: {e.message}") from None
        raise


# ---- figures ----------------------------------------------------------------------------------

def _torch():
    """torch if the caller imported it (never imported here)."""
    return sys.modules.get("torch")


def _cuda_unused():
    """True when torch is imported and CUDA is not initialised: PyTorch reports no stats then."""
    torch = _torch()
    return torch is not None and not torch.cuda.is_initialized()


def _device_index(device):
    """An ordinal from None (the current device), an int, "cuda:N" or a torch.device."""
    torch = _torch()
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda._get_device_index(device, optional=True)
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        return int(device.split(":", 1)[1]) if ":" in device else 0
    return getattr(device, "index", None) or 0


class _Allocator:
    """The allocator whose figures a call reads: device N's, or, where it has none yet, a
    fresh simulated one with the same config (it has served nothing, as device N has not)."""

    def __init__(self, device):
        self.lib = load_library()
        self.device = _device_index(device)
        self.handle = self.lib.torch_allocator(self.device)
        self.idle = self.handle is None
        if self.idle:
            self.handle = self.lib.new_simulated(1 << 30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.idle:
            self.lib.free_allocator(self.handle)


def memory_stats(device=None):
    """torch.cuda.memory_stats() for cachalot: an OrderedDict with the same keys, meanings
    and order (empty while CUDA is not initialised, as PyTorch's)."""
    if _cuda_unused():
        return collections.OrderedDict()
    with _Allocator(device) as a:
        return a.lib.stats(a.handle)


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary() for cachalot: the same table, from cachalot's statistics."""
    with _Allocator(device) as a:
        text = a.lib.summary(a.handle, abbreviated)
        if a.idle and a.device != 0:  # the simulated stand-in reports device 0
            text = text.replace(f"device ID {0:<21}", f"device ID {a.device:<21}", 1)
        return text


def snapshot(device=None):
    """torch.cuda.memory._snapshot() for cachalot: {"segments": [...], "device_traces":
    [[...] per device]}. Without `device`, every device's segments (each names its `device`)
    and one history list per device (torch.cuda.device_count() of them when torch is
    imported); with one, that device's segments and history only. History is recorded only
    with `record_history:N` in the config."""
    lib = load_library()
    if device is not None:
        devices = [_device_index(device)]
        count = devices[0] + 1
    else:
        torch = _torch()
        live = [d for d in range(64) if lib.torch_allocator(d)]
        count = torch.cuda.device_count() if torch is not None else max(live, default=0) + 1
        devices = range(count)
    out = {"segments": [], "device_traces": [[] for _ in range(count)]}
    for d in devices:
        handle = lib.torch_allocator(d)
        if handle:
            snap = lib.snapshot(handle)
            out["segments"] += snap["segments"]
            out["device_traces"][d] = snap["device_traces"][0] if snap["device_traces"] else []
    return out


def empty_cache():
    """Returns every device's unused cached memory to the driver (torch.cuda.empty_cache())."""
    load_library().dll.cachalot_torch_empty_cache()


def reset_peak_memory_stats(device=None):
    """Restarts the peak statistics at their current values."""
    lib = load_library()
    handle = lib.torch_allocator(_device_index(device))
    if handle:
        lib.reset_peak_stats(handle)


def _stat(key, device):
    return memory_stats(device).get(key, 0)


def memory_allocated(device=None):
    return _stat("allocated_bytes.all.current", device)


def max_memory_allocated(device=None):
    return _stat("allocated_bytes.all.peak", device)


def memory_reserved(device=None):
    return _stat("reserved_bytes.all.current", device)


def max_memory_reserved(device=None):
    return _stat("reserved_bytes.all.peak", device)
