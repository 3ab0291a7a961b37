"""cachalot as PyTorch's CUDA allocator, with the figures PyTorch's pluggable path lacks.

    import cachalot_torch
    cachalot_torch.install()                  # before the first CUDA tensor
    print(cachalot_torch.memory_summary())    # after some work

Role: `install()` loads libcachalot.so and makes it PyTorch's CUDA allocator through a C++
extension over PyTorch's own allocator interface (native/torch/), built ahead of time for each
supported PyTorch minor and shipped beside this module, loaded with ctypes: nothing is compiled
on the user's machine. When it cannot be loaded, install() raises, naming what is missing;
`install(extension=False)` asks for PyTorch's pluggable path instead,
`torch.cuda.memory.change_current_allocator(CUDAPluggableAllocator(...))` with its optional
hooks (`torch.cuda.empty_cache`, `set_per_process_memory_fraction`, `Tensor.record_stream`).
On that path `torch.cuda.memory_stats()` and its relatives raise; this module reads the same
figures from cachalot through its C ABI with ctypes, on either path: `memory_stats()` (the keys, meanings and order of `torch.cuda.memory_stats()`),
`memory_summary()` (its table) and `snapshot()` (the schema of
`torch.cuda.memory._snapshot()`).

Invariants: only `install()` imports torch; everything else works without it, and uses torch
only when the caller has imported it already. Figures come from the process-wide allocator
of each device (`cachalot_torch_allocator`), which only cachalot's PyTorch entry points
create; a device they have not used reads as an allocator that has served nothing. The
library is loaded once per process, after a check that it exports every function this module
calls, and `install()` takes effect once, with the config it was given.

Devices: every reader takes a device as torch.cuda's functions do (None for the current
device, an ordinal, "cuda:N", a torch.device) and checks it in Python before any list is
built or any C call made: another device type raises ValueError, a malformed device string
RuntimeError("Invalid device string: ..."), an ordinal out of range RuntimeError("Invalid
device argument N"), anything else TypeError. Out of range means past
torch.cuda.device_count() once torch is imported and CUDA initialised, else past cachalot's
63. Before CUDA is initialised the current device is 0.

CUDA not initialised (torch imported, `torch.cuda.is_initialized()` false): as in PyTorch,
`memory_stats()` is empty and so `memory_allocated()` and its three relatives are 0. The
others read cachalot whatever CUDA's state: `memory_summary()` is the table of an allocator
that has served nothing, `snapshot()` lists no segments and no history, and
`reset_peak_memory_stats()` has nothing to reset (only CUDA work creates an allocator).
"""
import collections
import ctypes
import glob
import hashlib
import json
import operator
import os
import re
import sys
import threading
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

# cachalot_torch_allocator serves CUDA ordinals 0 to 63 (include/cachalot.h).
DEVICE_LIMIT = 64
# The `cachalot_stats` layout this module reads (CACHALOT_STATS_VERSION of include/cachalot.h).
STATS_VERSION = 2
# cachalot_status codes this module acts on (fixed forever, include/cachalot.h).
STATUS_BUFFER_TOO_SMALL = 9
# How many times a text reader sizes and fills again when other threads outgrow its buffer.
TEXT_ATTEMPTS = 8

# cachalot_stats's fields after struct_size and version, in layout order, with their kinds: the
# list of core/src/report/stat_fields.rs, which native/tests/stat_fields.rs checks this one
# against. torch.cuda.memory_stats()'s keys follow from it: `name.pool.metric` per pool,
# `name.metric` for a single statistic, `name` for the rest.
STATS_FIELDS = (
    ("allocation", "per_pool"),
    ("segment", "per_pool"),
    ("active", "per_pool"),
    ("inactive_split", "per_pool"),
    ("allocated_bytes", "per_pool"),
    ("reserved_bytes", "per_pool"),
    ("active_bytes", "per_pool"),
    ("inactive_split_bytes", "per_pool"),
    ("requested_bytes", "per_pool"),
    ("num_alloc_retries", "count"),
    ("num_ooms", "count"),
    ("num_sync_all_streams", "count"),
    ("num_device_alloc", "count"),
    ("num_device_free", "count"),
    ("oversize_allocations", "single"),
    ("oversize_segments", "single"),
    ("max_split_size", "setting"),
    ("num_oom_rejections", "optional_count"),  # version 2; -1 where not counted
)
POOLS = ("all", "small_pool", "large_pool")
METRICS = ("current", "peak", "allocated", "freed")

# PyTorch's hooks on a CUDAPluggableAllocator and the entry points that serve them.
HOOKS = (("set_reset_fn", "cachalot_torch_empty_cache"),
         ("set_memory_fraction_fn", "cachalot_torch_set_memory_fraction"),
         ("set_record_stream_fn", "cachalot_torch_record_stream"))


class _Stat(ctypes.Structure):
    _fields_ = [(m, ctypes.c_int64) for m in METRICS]


class _StatArray(ctypes.Structure):
    _fields_ = [(p, _Stat) for p in POOLS]


# How each kind of field is laid out in C.
_KIND_TYPES = {"per_pool": _StatArray, "single": _Stat, "count": ctypes.c_uint64, "setting": ctypes.c_int64,
               "optional_count": ctypes.c_int64}


class _Stats(ctypes.Structure):
    """`cachalot_stats`, layout version STATS_VERSION (include/cachalot.h)."""
    _fields_ = ([("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32)]
                + [(name, _KIND_TYPES[kind]) for name, kind in STATS_FIELDS])


assert ctypes.sizeof(_Stats) == 8 + 9 * 96 + 5 * 8 + 2 * 32 + 8 + 8, "cachalot_stats layout changed"


class CachalotError(RuntimeError):
    """A cachalot call failed; `status` is the status name, the text cachalot's message."""

    def __init__(self, call, status, message):
        super().__init__(f"{call} failed ({status}): {message}")
        self.status, self.message = status, message


def _signatures():
    """Every function of libcachalot.so this module calls, by name or by address (the
    PyTorch entry points install() hands to torch), with its ctypes signature."""
    handle, p, size, status = ctypes.c_void_p, ctypes.POINTER, ctypes.c_size_t, ctypes.c_int32
    return [
        ("cachalot_torch_allocator", [ctypes.c_int, p(handle)], status),
        ("cachalot_allocator_new_simulated", [ctypes.c_uint64, ctypes.c_char_p, p(handle)], status),
        ("cachalot_allocator_new_simulated_placed",
         [ctypes.c_uint64, ctypes.c_char_p, p(ctypes.c_uint64), size, p(handle)], status),
        ("cachalot_allocator_free", [handle], None),
        ("cachalot_get_stats", [handle, p(_Stats)], status),
        ("cachalot_memory_summary", [handle, ctypes.c_bool, ctypes.c_char_p, size, p(size)], status),
        ("cachalot_snapshot_json", [handle, ctypes.c_char_p, size, p(size)], status),
        ("cachalot_config_notes", [ctypes.c_char_p, ctypes.c_char_p, size, p(size)], status),
        ("cachalot_reset_peak_stats", [handle], status),
        ("cachalot_malloc", [handle, size, ctypes.c_void_p, p(ctypes.c_void_p)], status),
        ("cachalot_free", [handle, ctypes.c_void_p], status),
        ("cachalot_last_error_message", [ctypes.c_char_p, size], size),
        ("cachalot_status_name", [ctypes.c_int], ctypes.c_char_p),
        ("cachalot_version", [], ctypes.c_char_p),
        ("cachalot_torch_malloc", [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p),
        ("cachalot_torch_free", [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p], None),
        ("cachalot_torch_empty_cache", [], None),
        ("cachalot_torch_set_memory_fraction", [ctypes.c_double, ctypes.c_int], None),
        ("cachalot_torch_record_stream", [ctypes.c_void_p, ctypes.c_void_p], None),
    ]


class Library:
    """libcachalot.so through ctypes: the calls this module makes, typed, with errors raised.

    Loading checks every function of `_signatures()` up front: a file that is no shared
    library raises OSError, one that is not cachalot or is an older cachalot RuntimeError,
    each naming the path and what is wrong."""

    def __init__(self, path):
        self.path = path
        try:
            self.dll = d = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(f"cachalot: cannot load {path} as a shared library: {e}") from e
        signatures = _signatures()
        missing = [name for name, _, _ in signatures if not hasattr(d, name)]
        if missing:
            if "cachalot_version" in missing:
                raise RuntimeError(f"cachalot: {path} is not a cachalot library (no {missing[0]})")
            d.cachalot_version.argtypes, d.cachalot_version.restype = [], ctypes.c_char_p
            raise RuntimeError(f"cachalot: {path} is cachalot {d.cachalot_version().decode()}, older than this "
                               f"module: it lacks {', '.join(missing)}; rebuild it with "
                               f"`cargo build --release -p cachalot`")
        for name, args, result in signatures:
            fn = getattr(d, name)
            fn.argtypes, fn.restype = args, result

    def version(self):
        return self.dll.cachalot_version().decode()

    def address(self, symbol):
        """The address of an exported function, for PyTorch's hook setters."""
        return ctypes.cast(getattr(self.dll, symbol), ctypes.c_void_p).value

    def last_error(self):
        """This thread's message of its most recent failed cachalot call."""
        n = self.dll.cachalot_last_error_message(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.dll.cachalot_last_error_message(buf, n + 1)
        return buf.value.decode()

    def check(self, call, status):
        if status != 0:
            raise CachalotError(call, self.dll.cachalot_status_name(status).decode(), self.last_error())

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
        """The allocator's statistics as `torch.cuda.memory_stats()` gives them. Raises
        RuntimeError when the library wrote another layout than the one `_Stats` reads."""
        s = _Stats(struct_size=ctypes.sizeof(_Stats))
        self.check("cachalot_get_stats", self.dll.cachalot_get_stats(handle, ctypes.byref(s)))
        if s.version != STATS_VERSION or s.struct_size != ctypes.sizeof(_Stats):
            raise RuntimeError(f"cachalot: {self.path} wrote cachalot_stats version {s.version} ({s.struct_size} "
                               f"bytes); this module reads version {STATS_VERSION} ({ctypes.sizeof(_Stats)} bytes): "
                               f"the library and this module come from different builds of cachalot")
        return stats_dict(s)

    def _text(self, call, fn, *args):
        """The text `fn` writes (`cachalot_memory_summary` or `cachalot_snapshot_json`): ask
        for its size, then fill a buffer with room to spare. Other threads may allocate in
        between and outgrow the buffer; a failed call leaves the size unwritten, so each
        attempt asks for the size again, with a wider margin, TEXT_ATTEMPTS times at most."""
        need = ctypes.c_size_t()
        for attempt in range(TEXT_ATTEMPTS):
            self.check(call, fn(*args, None, 0, ctypes.byref(need)))
            # A quarter of the text to spare, doubled at each attempt up to twice the text.
            margin = min((need.value // 4) << attempt, 2 * need.value) + 4096
            buf = ctypes.create_string_buffer(need.value + margin)
            status = fn(*args, buf, len(buf), ctypes.byref(need))
            if status != STATUS_BUFFER_TOO_SMALL:
                self.check(call, status)
                return buf.value.decode()
        raise CachalotError(call, "CACHALOT_STATUS_BUFFER_TOO_SMALL",
                            f"gave up after {TEXT_ATTEMPTS} attempts: the text outgrew each buffer made for it "
                            f"(other threads kept allocating); the last: {self.last_error()}")

    def summary(self, handle, abbreviated=False):
        return self._text("cachalot_memory_summary", self.dll.cachalot_memory_summary, handle, bool(abbreviated))

    def snapshot(self, handle):
        return json.loads(self._text("cachalot_snapshot_json", self.dll.cachalot_snapshot_json, handle))

    def reset_peak_stats(self, handle):
        self.check("cachalot_reset_peak_stats", self.dll.cachalot_reset_peak_stats(handle))

    def config_notes(self, config=None):
        """The keys of `config` (None: $CACHALOT_ALLOC_CONF) that change nothing under the
        policy it selects, one sentence each."""
        conf = None if config is None else config.encode()
        text = self._text("cachalot_config_notes", self.dll.cachalot_config_notes, conf)
        return [line for line in text.split("\n") if line]


def stats_dict(s):
    """A `cachalot_stats` as torch.cuda.memory_stats()'s flat OrderedDict (sorted by key)."""
    items = []
    for name, kind in STATS_FIELDS:
        value = getattr(s, name)
        if kind == "per_pool":
            items += [(f"{name}.{pool}.{m}", getattr(getattr(value, pool), m)) for pool in POOLS for m in METRICS]
        elif kind == "single":
            items += [(f"{name}.{m}", getattr(value, m)) for m in METRICS]
        elif kind != "optional_count" or value >= 0:  # -1: the PyTorch release followed keeps no such count
            items.append((name, value))
    return collections.OrderedDict(sorted(items))


# ---- the library ----------------------------------------------------------------------------

_LIB = None               # the Library loaded in this process
_INSTALLED = None         # the Extension (or CUDAPluggableAllocator) install() plugged in
_EXTENSION = None         # the Extension loaded in this process
_INSTALL_LOCK = threading.RLock()  # one install() at a time: the swap happens once per process
_INSTALLED_CONFIG = None  # the $CACHALOT_ALLOC_CONF it was plugged in with ("" for the defaults)
_INSTALLED_PATH = None    # "extension" or "pluggable"


def find_library(lib_path=None):
    """The library's path: `lib_path`, else $CACHALOT_LIB, else the one the wheel installed (in
    cachalot_native beside this module), else next to this module, else target/release of the
    repository this file is in. A path given explicitly (argument or
    variable) must exist; FileNotFoundError names every path tried."""
    if lib_path is not None or os.environ.get(LIB_ENV):
        path = lib_path if lib_path is not None else os.environ[LIB_ENV]
        tried = [f"{path} (from {'the lib_path argument' if lib_path is not None else '$' + LIB_ENV})"]
        candidates = [path]
    else:
        # The wheel installs the library into cachalot_native under its SONAME (libcachalot.so.0.x).
        installed = sorted(glob.glob(os.path.join(_HERE, "cachalot_native", "libcachalot.so*")))
        candidates = installed + [os.path.join(_HERE, LIB_NAME),
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


def install(lib_path=None, config=None, extension=True):
    """Makes cachalot PyTorch's CUDA allocator; returns the loaded extension (or, with
    `extension=False`, the CUDAPluggableAllocator).

    cachalot is plugged in through PyTorch's own allocator interface: a C++ extension
    (native/torch/cachalot_allocator.cpp) built ahead of time for each supported PyTorch minor
    (2.11 to 2.15) and shipped in the wheel, so nothing is compiled on the user's machine. Out
    of memory raises torch.OutOfMemoryError (after the attached observers are called);
    torch.cuda.memory_stats(), memory_summary(), max_memory_reserved(),
    reset_peak_memory_stats(), _snapshot(), _record_memory_history() and cuDNN's cacheInfo read
    cachalot; CUDA graphs, torch.cuda.MemPool and torch.compile's CUDA graph trees get private
    pools.

    There is no silent fallback: when the extension cannot be loaded (a PyTorch outside the
    supported minors, a CPU-only PyTorch, a build missing from this installation) install()
    raises RuntimeError naming the missing piece and the command that fixes it.
    `extension=False` takes PyTorch's pluggable path instead, on purpose: there out of memory
    hands back a null tensor instead of raising and torch.cuda.memory_stats() raises (this
    module's readers give the figures).

    `config` (PYTORCH_CUDA_ALLOC_CONF syntax plus cachalot's keys, e.g. "policy:pytorch")
    is set as $CACHALOT_ALLOC_CONF, which cachalot reads at its first allocation; without it
    the variable's value (or the defaults) applies. Unless it names `pytorch_version`, the
    running PyTorch's release is added, so `policy:pytorch` makes that release's decisions and
    the statistics have its keys. The config is checked here: a bad one raises ValueError
    naming the key. A second call returns the same allocator; given a config, it must be the
    one installed (spaces around keys and values aside), and it must ask for the same path.
    Calls from several threads install once. A pre-release or source build of PyTorch is
    refused unless $CACHALOT_ANY_TORCH_BUILD=1.

    A key that changes nothing under the policy the config selects (PyTorch's
    max_split_size_mb under cachalot's own policy, say) is named in a UserWarning.

    Raises FileNotFoundError when the library is missing, OSError when the file cannot be
    loaded as a shared library, RuntimeError when it is not cachalot or an older cachalot
    than this module, RuntimeError when the extension cannot be loaded, RuntimeError when
    PyTorch has already initialised its allocator, RuntimeError when called again with
    another config or path, and ModuleNotFoundError naming the pip command without PyTorch."""
    with _INSTALL_LOCK:
        return _install(lib_path, config, extension)


# The PyTorch releases whose keys and decisions the core follows (core/src/base/pytorch_version.rs).
CORE_PYTORCH_VERSIONS = ("2.11", "2.12", "2.13", "2.14", "2.15")


def _install(lib_path, config, extension):
    global _INSTALLED, _INSTALLED_CONFIG, _INSTALLED_PATH
    # Without a path, the library already loaded is the one meant, wherever it came from.
    path = _LIB.path if lib_path is None and _LIB is not None else find_library(lib_path)
    lib = load_library(path)
    try:
        import torch  # the one place torch is imported
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"cachalot: PyTorch is not installed in this environment ({e}): "
                                  f"`pip install 'torch>={CORE_PYTORCH_VERSIONS[0]},<2.16'` (PyPI's CUDA builds)",
                                  name="torch") from e
    minor = torch_minor(getattr(torch, "__version__", ""))
    wanted = "extension" if extension else "pluggable"
    if _INSTALLED is not None:
        asked = _with_torch_version(config, minor) if config is not None else None
        if asked is not None and not _same_config(asked, _INSTALLED_CONFIG):
            raise RuntimeError(f"cachalot is already installed with {CONFIG_ENV}={_INSTALLED_CONFIG!r}; "
                               f"the config cannot change afterwards (asked for {config!r})")
        if wanted != _INSTALLED_PATH:
            raise RuntimeError(f"cachalot is already installed through the {_INSTALLED_PATH} path; "
                               f"install(extension={extension!r}) asks for the {wanted} path, which cannot "
                               f"replace it in this process")
        return _INSTALLED
    if torch.cuda.is_initialized():
        why = "CUDA is already initialised in this process"
        try:
            why += f" and PyTorch's allocator holds {torch.cuda.memory_allocated()} bytes"
        except RuntimeError:
            pass
        raise RuntimeError(_TOO_LATE.format(why=why))
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") and config is None and not os.environ.get(CONFIG_ENV):
        warnings.warn(f"cachalot: PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']!r} does not apply "
                      f"to cachalot; set {CONFIG_ENV} (the same keys) or install(config=...)", UserWarning,
                      stacklevel=3)
    created = any(lib.torch_allocator(d) for d in range(DEVICE_LIMIT))  # it read its config already
    if config is not None and created:
        raise RuntimeError("cachalot: its allocator was created already (by an earlier allocation); "
                           "a config set now would not apply")
    effective = config if config is not None else os.environ.get(CONFIG_ENV, "")
    versioned = effective if created else _with_torch_version(effective, minor)
    previous = os.environ.get(CONFIG_ENV)
    if config is not None or versioned != effective:
        os.environ[CONFIG_ENV] = versioned
    try:
        _check_config(lib)
        for note in lib.config_notes():
            warnings.warn(f"cachalot: {CONFIG_ENV}: {note}", UserWarning, stacklevel=3)
        if extension:
            alloc = load_extension(torch)
            alloc.install()
        else:
            alloc = _install_pluggable(torch, lib, path)
    except BaseException:
        if previous is None:
            os.environ.pop(CONFIG_ENV, None)
        else:
            os.environ[CONFIG_ENV] = previous
        raise
    _INSTALLED, _INSTALLED_CONFIG, _INSTALLED_PATH = alloc, os.environ.get(CONFIG_ENV, ""), wanted
    return alloc


def _with_torch_version(config, minor):
    """`config` following the running PyTorch's release (`pytorch_version`) unless it names one:
    the core's default is the newest, whose keys and statistics a 2.11 user would not see. A
    release it names other than the running one is kept, with a warning."""
    if minor not in CORE_PYTORCH_VERSIONS:
        return config
    pairs = _config_pairs(config)
    if pairs is None:
        return config  # malformed: the core's check names the problem
    named = [v for k, v in pairs if k == "pytorch_version"]
    if named:
        if named[-1] != minor:
            warnings.warn(f"cachalot: {CONFIG_ENV} follows PyTorch {named[-1]}'s allocator (pytorch_version), "
                          f"while PyTorch {minor} is running", UserWarning, stacklevel=4)
        return config
    return f"{config},pytorch_version:{minor}" if config.strip() else f"pytorch_version:{minor}"


def _install_pluggable(torch, lib, path):
    """PyTorch's CUDAPluggableAllocator over the library, with the hooks this PyTorch has."""
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "cachalot_torch_malloc", "cachalot_torch_free")
    raw = alloc.allocator()
    for setter, symbol in HOOKS:
        if hasattr(raw, setter):
            getattr(raw, setter)(lib.address(symbol))
        else:
            warnings.warn(f"cachalot: this PyTorch ({torch.__version__}) has no allocator hook {setter}: "
                          f"{symbol} stays unwired", RuntimeWarning, stacklevel=3)
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError(_TOO_LATE.format(why=f"PyTorch refused to swap its allocator ({e})")) from e
    return alloc


# ---- the prebuilt extension -----------------------------------------------------------------

EXTENSIONS_ENV = "CACHALOT_TORCH_EXTENSIONS"
ANY_TORCH_ENV = "CACHALOT_ANY_TORCH_BUILD"
# What build_extensions.py writes beside the extensions: each minor's file, PyTorch release, sha256.
MANIFEST = "extensions.json"
_EXTENSION_PATTERN = re.compile(r"^libcachalot_torch_(\d+)_(\d+)\.so$")
_ENTRY_POINTS = ("cachalot_torch_extension_torch_version", "cachalot_torch_extension_install",
                 "cachalot_torch_extension_is_current")


def _fix_install(folder):
    """The command that puts the extensions back: a reinstall for the wheel's, a build in a checkout."""
    if os.path.realpath(folder) == os.path.realpath(os.path.join(_HERE, "cachalot_native")):
        return ("reinstall cachalot's wheel (`pip install --force-reinstall --no-deps cachalot-*.whl`; "
                "`make wheel` in the cachalot repository builds it)")
    return "build them (`make torch-extensions` in the cachalot repository) or install cachalot's wheel"


class Extension:
    """The extension built for one PyTorch minor, loaded into this process (ctypes)."""

    def __init__(self, path, minor):
        self.path, self.minor = os.path.abspath(path), minor
        try:
            self._dll = ctypes.CDLL(self.path)
        except OSError as e:
            if "undefined symbol: cachalot_" in str(e):  # the library loaded is older than the extension
                raise RuntimeError(f"cachalot: the extension {self.path} needs a newer libcachalot than the one "
                                   f"loaded ({_LIB.path if _LIB else 'none'}): {e}. Use the library and the "
                                   f"extension of one build: {_fix_install(os.path.dirname(self.path))}, or unset "
                                   f"${LIB_ENV} and ${EXTENSIONS_ENV}.") from e
            raise RuntimeError(f"cachalot: the extension for PyTorch {minor} ({self.path}) does not load into this "
                               f"PyTorch: {e}. {_fix_install(os.path.dirname(self.path))}; if it persists, this "
                               f"PyTorch build is not one cachalot was built against (PyPI's CUDA builds are).") from e
        missing = [name for name in _ENTRY_POINTS if not hasattr(self._dll, name)]
        if missing:
            raise RuntimeError(f"cachalot: {self.path} is no cachalot extension (it lacks {', '.join(missing)}); "
                               f"{_fix_install(os.path.dirname(self.path))}")
        self._dll.cachalot_torch_extension_torch_version.restype = ctypes.c_int
        self._dll.cachalot_torch_extension_install.restype = ctypes.c_int
        self._dll.cachalot_torch_extension_install.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self._dll.cachalot_torch_extension_is_current.restype = ctypes.c_int
        built = self._dll.cachalot_torch_extension_torch_version()
        if f"{built // 100}.{built % 100}" != minor:
            raise RuntimeError(f"cachalot: {self.path} was built for PyTorch {built // 100}.{built % 100}, "
                               f"not {minor}; {_fix_install(os.path.dirname(self.path))}")

    def install(self):
        """Makes cachalot PyTorch's current CUDA allocator (before PyTorch's has served anything)."""
        message = ctypes.create_string_buffer(1024)
        if self._dll.cachalot_torch_extension_install(message, len(message)) != 0:
            why = message.value.decode("utf-8", "replace")
            raise RuntimeError(_TOO_LATE.format(why=f"PyTorch refused to swap its allocator ({why})"))

    def is_current(self):
        """Whether PyTorch's current CUDA allocator is cachalot's."""
        return self._dll.cachalot_torch_extension_is_current() == 1


def extension_dir():
    """The folder holding the extensions: $CACHALOT_TORCH_EXTENSIONS, else the installed
    package's cachalot_native, else this checkout's target/torch-ext (make torch-extensions)
    when it holds any (else cachalot_native, for the message)."""
    if os.environ.get(EXTENSIONS_ENV):
        return os.path.abspath(os.environ[EXTENSIONS_ENV])
    installed = os.path.join(_HERE, "cachalot_native")
    if supported_minors(installed):
        return installed
    built = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "target", "torch-ext")
    return built if supported_minors(built) else installed


def _manifest(folder):
    """The manifest build_extensions.py wrote in `folder` ({minor: {file, torch, sha256}}), or None."""
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            return json.load(f)["minors"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def supported_minors(folder=None):
    """The PyTorch minors built for `folder` (default extension_dir()), oldest first: those its
    manifest lists, else those with an extension file."""
    folder = extension_dir() if folder is None else folder
    listed = _manifest(folder)
    if listed is not None:
        names = list(listed)
    else:
        names = []
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            m = _EXTENSION_PATTERN.match(name)
            if m:
                names.append(f"{m.group(1)}.{m.group(2)}")
    return sorted(names, key=lambda m: tuple(int(x) for x in m.split(".")))


def torch_minor(version):
    """"2.15" of a torch.__version__ such as "2.15.0+cu132", or None when it is not of that form."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.|$)", str(version))
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def _is_release(version):
    """False for a pre-release, nightly or source build (2.15.0a0+git..., 2.16.0.dev2026...,
    2.15.0rc1, NVIDIA's 2.15.0a0+...nv26.10), whose C++ ABI need not be the release's."""
    return re.match(r"^\d+\.\d+(\.\d+)?(\+[0-9A-Za-z]+)?$", str(version)) is not None


def load_extension(torch):
    """The extension for the running PyTorch, loaded (once per process); RuntimeError naming
    what is missing and the command that fixes it."""
    global _EXTENSION
    if _EXTENSION is not None:
        return _EXTENSION
    version = str(getattr(torch, "__version__", "unknown"))
    minor = torch_minor(version)
    versions = getattr(torch, "version", None)
    pluggable = ("install(extension=False) takes PyTorch's pluggable path instead, without "
                 "torch.OutOfMemoryError or torch.cuda.memory_stats().")
    if getattr(versions, "hip", None):
        raise RuntimeError(f"cachalot: this PyTorch ({version}) is a ROCm build; cachalot drives CUDA only")
    if getattr(versions, "cuda", "unknown") is None:
        raise RuntimeError(f"cachalot: this PyTorch ({version}) is built without CUDA (torch.version.cuda is "
                           f"None); install a CUDA build, such as PyPI's: `pip install --force-reinstall "
                           f"'torch=={minor or '2.15'}.*'`")
    folder = extension_dir()
    supported = supported_minors(folder)
    where = f"in {folder}" + (f" (${EXTENSIONS_ENV})" if os.environ.get(EXTENSIONS_ENV) else "")
    if not supported:
        raise RuntimeError(f"cachalot: no PyTorch extension {where}: {_fix_install(folder)}. {pluggable}")
    if minor not in supported:
        raise RuntimeError(f"cachalot: PyTorch {version} is not supported; cachalot supports PyTorch "
                           f"{', '.join(supported)} (`pip install 'torch>={supported[0]},<{_next_minor(supported[-1])}'`). "
                           f"{pluggable}")
    if not _is_release(version) and os.environ.get(ANY_TORCH_ENV) != "1":
        raise RuntimeError(f"cachalot: PyTorch {version} is not a release build; the extension is built against "
                           f"PyPI's {minor} release, whose C++ interface a pre-release or source build need not "
                           f"share. Install the release (`pip install 'torch=={minor}.*'`), or set "
                           f"{ANY_TORCH_ENV}=1 to load it anyway. {pluggable}")
    listed = (_manifest(folder) or {}).get(minor, {})
    path = os.path.join(folder, listed.get("file", "libcachalot_torch_" + minor.replace(".", "_") + ".so"))
    if not os.path.isfile(path):
        raise RuntimeError(f"cachalot: the extension for PyTorch {minor} is missing from {folder}: "
                           f"{_fix_install(folder)}")
    if listed.get("sha256"):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != listed["sha256"]:
            raise RuntimeError(f"cachalot: the extension for PyTorch {minor} ({path}) is damaged (its sha256 is not "
                               f"the one its build recorded): {_fix_install(folder)}")
    _EXTENSION = Extension(path, minor)
    return _EXTENSION


def _next_minor(minor):
    major, low = minor.split(".")
    return f"{major}.{int(low) + 1}"


def _config_pairs(text):
    """The (key, value) pairs of a config string, split as the core's parser splits them
    (core/src/base/config.rs, split_pairs): spaces around the whole, each key and each value do
    not count, and a bracketed value ("[a:b,c:d]") stays whole. None when that parser
    would refuse the text's shape."""
    pairs, rest = [], text.strip()
    while rest:
        colon = rest.find(":")
        if colon < 0:
            return None
        key, after = rest[:colon].strip(), rest[colon + 1:].lstrip()
        if not key:
            return None
        if after.startswith("["):
            close = after.find("]")
            if close < 0:
                return None
            value, tail = after[:close + 1], after[close + 1:]
        else:
            comma = after.find(",")
            value, tail = (after, "") if comma < 0 else (after[:comma], after[comma:])
        value = value.strip()
        if not value:
            return None
        pairs.append((key, value))
        tail = tail.lstrip()
        if tail and not tail.startswith(","):
            return None
        rest = tail[1:].lstrip()
    return pairs


def _same_config(a, b):
    """Whether two config strings say the same, as the core's parser reads them."""
    pairs_a, pairs_b = _config_pairs(a), _config_pairs(b)
    if pairs_a is None or pairs_b is None:
        return a.strip() == b.strip()
    return pairs_a == pairs_b


def _invalid_config(error):
    """The ValueError for a config that cachalot refused (`error`, INVALID_CONFIG), naming
    $CACHALOT_ALLOC_CONF and, through the core's message, the key."""
    where = "" if CONFIG_ENV in error.message else f"{CONFIG_ENV}={os.environ.get(CONFIG_ENV, '')!r}: "
    return ValueError(f"cachalot: invalid config: {where}{error.message}")


def _check_config(lib):
    """Parses $CACHALOT_ALLOC_CONF now (a throwaway simulated allocator reads it), so a bad
    value fails here, with its message, rather than at the first CUDA allocation."""
    try:
        lib.free_allocator(lib.new_simulated(1 << 30))
    except CachalotError as e:
        if e.status == "CACHALOT_STATUS_INVALID_CONFIG":
            raise _invalid_config(e) from None
        raise


# ---- figures ----------------------------------------------------------------------------------

def _torch():
    """torch if the caller imported it (never imported here)."""
    return sys.modules.get("torch")


def _cuda_initialised(torch):
    """True when `torch` (None: not imported) has initialised CUDA."""
    return torch is not None and torch.cuda.is_initialized()


def _cuda_unused():
    """True when torch is imported and CUDA is not initialised: PyTorch reports no stats then."""
    torch = _torch()
    return torch is not None and not _cuda_initialised(torch)


# c10::Device's grammar for a device string: a type, then optionally ":" and an index without
# leading zeros (so "cuda:-1" and "cuda:01" are malformed, as torch.device finds them).
_DEVICE_STRING = re.compile(r"([A-Za-z_]+)(?::(0|[1-9][0-9]*))?")
_DEVICE_KINDS = "None, a CUDA ordinal (int), a device string such as 'cuda:0', or a torch.device"


def _parsed_device(device):
    """The ordinal `device` names, read as torch.cuda reads it, or None for the current
    device (None, "cuda", a torch.device without an index)."""
    if device is None:
        return None
    if isinstance(device, str):
        match = _DEVICE_STRING.fullmatch(device)
        if match is None:
            raise RuntimeError(f"Invalid device string: {device!r}")
        kind, index = match.groups()
        if kind != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return None if index is None else int(index)
    if isinstance(device, bool):  # an int to Python, but no ordinal to torch
        raise TypeError(f"cachalot: device must be {_DEVICE_KINDS}; got {device!r}")
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device, or one like it
        index = device.index
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device.type}{'' if index is None else f':{index}'}")
        device = index
        if device is None:
            return None
    else:
        torch = _torch()
        cuda_device = getattr(torch.cuda, "device", None) if torch is not None else None
        if isinstance(cuda_device, type) and isinstance(device, cuda_device):  # torch.cuda.device(N)
            device = device.idx
    if isinstance(device, bool):
        raise TypeError(f"cachalot: device must be {_DEVICE_KINDS}; got {device!r}")
    try:
        return operator.index(device)  # an int, or an integer type such as numpy's
    except TypeError:
        raise TypeError(f"cachalot: device must be {_DEVICE_KINDS}; got {device!r} "
                        f"({type(device).__name__})") from None


def _device_index(device):
    """The CUDA ordinal `device` names, checked before anything uses it (see the module's
    "Devices"). The current device is torch.cuda.current_device() once torch is imported and
    CUDA initialised (asking earlier would initialise it), else 0."""
    torch = _torch()
    initialised = _cuda_initialised(torch)
    index = _parsed_device(device)
    if index is None:
        index = torch.cuda.current_device() if initialised else 0
    if initialised and not 0 <= index < torch.cuda.device_count():
        raise RuntimeError(f"Invalid device argument {index}: this process has {torch.cuda.device_count()} CUDA "
                           f"device(s) (torch.cuda.device_count())")
    if not 0 <= index < DEVICE_LIMIT:
        raise RuntimeError(f"Invalid device argument {index}: cachalot serves CUDA devices 0 to {DEVICE_LIMIT - 1}")
    return index


class _Allocator:
    """The allocator whose figures a call reads: device N's (N from `_device_index`), or,
    where it has none yet, a fresh simulated one with the same config (it has served
    nothing, as device N has not). A bad $CACHALOT_ALLOC_CONF raises ValueError, as it
    would at device N's first allocation."""

    def __init__(self, index):
        self.device = index
        self.lib = load_library()
        self.handle = self.lib.torch_allocator(self.device)
        self.idle = self.handle is None
        if self.idle:
            try:
                self.handle = self.lib.new_simulated(1 << 30)
            except CachalotError as e:
                if e.status == "CACHALOT_STATUS_INVALID_CONFIG":
                    raise _invalid_config(e) from None
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.idle:
            self.lib.free_allocator(self.handle)


def memory_stats(device=None):
    """torch.cuda.memory_stats() for cachalot: an OrderedDict with the same keys, meanings
    and order; empty while CUDA is not initialised, as PyTorch's (the device is checked
    all the same)."""
    index = _device_index(device)
    if _cuda_unused():
        return collections.OrderedDict()
    with _Allocator(index) as a:
        return a.lib.stats(a.handle)


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary() for cachalot: the same table, from cachalot's statistics
    (whatever CUDA's state: before any CUDA work, an allocator's that has served nothing)."""
    with _Allocator(_device_index(device)) as a:
        text = a.lib.summary(a.handle, abbreviated)
        if a.idle and a.device != 0:  # the simulated stand-in reports device 0
            text = text.replace(f"device ID {0:<21}", f"device ID {a.device:<21}", 1)
        return text


def snapshot(device=None):
    """torch.cuda.memory._snapshot() for cachalot: {"segments": [...], "device_traces":
    [[...] per device]}. Without `device`, every device's segments (each names its `device`)
    and one history list per device: as many as torch.cuda.device_count() when torch is
    imported, and always enough to cover every device that has an allocator; with one,
    that device's segments and history only (the lists before it empty). History is
    recorded only with `record_history:N` in the config. Read whatever CUDA's state."""
    if device is not None:
        devices = [_device_index(device)]  # checked before any list is built
        count = devices[0] + 1
    lib = load_library()
    if device is None:
        devices = [d for d in range(DEVICE_LIMIT) if lib.torch_allocator(d)]
        torch = _torch()
        count = max(torch.cuda.device_count() if torch is not None else 1, max(devices, default=-1) + 1)
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
    """torch.cuda.reset_peak_memory_stats() for cachalot: restarts device `device`'s peak
    statistics at their current values (nothing to do for a device without an allocator)."""
    index = _device_index(device)
    lib = load_library()
    handle = lib.torch_allocator(index)
    if handle:
        lib.reset_peak_stats(handle)


def _stat(key, device):
    return memory_stats(device).get(key, 0)


def memory_allocated(device=None):
    """torch.cuda.memory_allocated() for cachalot: the bytes device `device`'s tensors occupy
    now (`allocated_bytes.all.current`); 0 while CUDA is not initialised."""
    return _stat("allocated_bytes.all.current", device)


def max_memory_allocated(device=None):
    """torch.cuda.max_memory_allocated() for cachalot: the most bytes device `device`'s
    tensors occupied at once since the start or the last reset_peak_memory_stats()
    (`allocated_bytes.all.peak`); 0 while CUDA is not initialised."""
    return _stat("allocated_bytes.all.peak", device)


def memory_reserved(device=None):
    """torch.cuda.memory_reserved() for cachalot: the bytes device `device`'s allocator
    holds from the driver now, cached or in use (`reserved_bytes.all.current`); 0 while CUDA
    is not initialised."""
    return _stat("reserved_bytes.all.current", device)


def max_memory_reserved(device=None):
    """torch.cuda.max_memory_reserved() for cachalot: the most bytes device `device`'s
    allocator held from the driver at once since the start or the last
    reset_peak_memory_stats() (`reserved_bytes.all.peak`); 0 while CUDA is not initialised."""
    return _stat("reserved_bytes.all.peak", device)
