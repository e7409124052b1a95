"""GPU memory for one device: a bounded buffer pool and the recorder of pending dispatches.

Creating a buffer, a bind group or a command encoder costs tens of microseconds in wgpu-py, more
than recording a dispatch (about 2). So calls reuse pooled buffers and cached bind groups, and
consecutive dispatches are recorded into one open compute pass (a device-side copy, which no pass
may hold, ends it: the next dispatch opens another on the same encoder), submitted only when a
result is read, the caller flushes, a host write needs the queue, or the batch grows long.

Ordering rules that keep this correct on one in-order queue:
- a buffer released to the pool may be reused at once by later recorded work (the queue runs
  in recording order), but is never destroyed while unsubmitted work may reference it;
- anything that goes through the queue directly (``write_buffer``, reads) flushes first.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any

import numpy as np
import wgpu

from .errors import DeviceError, DeviceLostError, GpuWaitWarning, OutOfMemoryError, user_stacklevel
from .forks import fresh_in_child

STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
READBACK_USAGE = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
#: How read_into maps its staging buffer. wgpu-py's "READ" first submits an empty command buffer (a
#: workaround for mapping without a prior submit, wgpu-native issue 305); read_into always submits
#: the copy right before mapping, so it skips that as wgpu-py's own read_buffer does. H200,
#: `python scripts/readback_probe.py 40` (now `scripts/wait_probe.py --map-modes`), QuickGelu round
#: trip: 16 KB 323-370 -> 286-301 us, 0.95 MB 586-622 -> 549-567 us.
READBACK_MAP_MODE: Any = "READ_NOSYNC"
#: How long a readback on a GPU adapter polls without sleeping before it waits for wgpu-py's poll
#: thread (which costs two thread wake-ups once the GPU is done). H200, `python scripts/wait_probe.py
#: 30`, NumPy round trips: 0.95 MB 594 -> 561 us, 16 MB 2981 -> 2767 us, 16 KB unchanged (202 ->
#: 209, within its drift). Not on CPU adapters: there the spin takes a core from the driver's
#: threads (lavapipe, 16 MB: 7.5 -> 11.1 ms unbounded, 7.6 bounded).
READBACK_SPIN_S = 0.001
#: The environment variable of DeviceMemory.wait_warn_s (whole seconds; 0 never warns), and its default.
WAIT_WARN_ENV = "WEBGPU_KERNELS_WAIT_WARN_S"
WAIT_WARN_S = 60
#: Dispatches recorded before a forced submit, so latency and memory stay bounded.
MAX_PENDING_DISPATCHES = 256
#: Bytes written by ``write_buffer`` since the last submit before an empty submit: wgpu-native
#: keeps a staging copy of every write until a submission carries it, so uploads with no dispatch
#: between them (a model's weights through to_gpu) grew the host's memory by their whole size.
MAX_UNSUBMITTED_WRITE_BYTES = 64 << 20
BIND_GROUP_CACHE_SIZE = 1024


#: How wgpu-native and the drivers say a device is gone: wgpu-core's "Parent device is lost", its
#: lost callback's "device was lost", Vulkan's VK_ERROR_DEVICE_LOST ("The logical device has been lost").
_DEVICE_LOST = re.compile(r"Parent device is lost|[Dd]evice (?:is|was|has been) lost|\bDevice lost\b|"
                          r"ERROR_DEVICE_LOST|\bDeviceLost\b")


#: User text wgpu-core quotes in its own lines: a label (a manifest's pass name: "label = 'X'",
#: "Shader 'X' parsing error", "ComputePipeline with 'X' label"), an identifier (`X`), a token ("{").
#: A quote opens only after a non-word character, so a "doesn't" in wgpu's own text opens none.
_QUOTED = re.compile(r"(?<!\w)'[^'\n]*'(?!\w)|`[^`\n]*`|\"[^\"\n]*\"")


def _own_lines(exc: BaseException) -> list[str]:
    """wgpu's own words in ``exc``: the lines outside the WGSL a compile error quotes (naga's ``15 │
    ...``), less the user text quoted in them."""
    return [_QUOTED.sub("''", line) for line in str(exc).splitlines() if "│" not in line]


def is_device_lost(exc: BaseException) -> bool:
    """wgpu-native reports work on a lost (destroyed, reset) device as a validation error. Its
    phrases are matched in wgpu's own words only (_own_lines): "lost" anywhere had made a shader
    error on a line naming ``lost_lanes`` a lost device, and dropped a healthy one with every tensor
    on it; a pass named "DeviceLost" did so through its quoted label."""
    return any(_DEVICE_LOST.search(line) for line in _own_lines(exc))


#: How wgpu-native and the drivers say an allocation failed: wgpu-core's "Not enough memory left"
#: (a validation error on lavapipe), its "Out of memory", Vulkan's VK_ERROR_OUT_OF_DEVICE_MEMORY.
_OUT_OF_MEMORY = re.compile(r"Not enough memory left|\b[Oo]ut of (?:device |host )?memory\b|\bOutOfMemory\b|"
                            r"ERROR_OUT_OF_(?:DEVICE|HOST)_MEMORY")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether wgpu's ``exc`` says the device ran out of memory: a GPUOutOfMemoryError, or (as
    wgpu-native reports it on lavapipe) a validation error with that text, matched in wgpu's own
    words as is_device_lost does (a shader naming ``out_of_memory``, a pipeline labelled
    "OutOfMemory" refused for another reason, is no such error)."""
    if isinstance(exc, wgpu.GPUOutOfMemoryError):
        return True
    return isinstance(exc, wgpu.GPUError) and any(_OUT_OF_MEMORY.search(line) for line in _own_lines(exc))


def describe_bytes(nbytes: int, *, exact: bool = False) -> str:
    """``nbytes`` for a message: in GiB from 1 GiB, in MiB from 1 MiB (and in bytes too where
    ``exact``), else in bytes (an H100's 78 GiB had read "7.987e+04 MiB")."""
    if nbytes < 1 << 20:
        return f"{nbytes} bytes"
    short = f"{nbytes / 2**30:.4g} GiB" if nbytes >= 1 << 30 else f"{nbytes / 2**20:.4g} MiB"
    return f"{short} ({nbytes} bytes)" if exact else short


#: What an out-of-memory message tells the user to do.
OUT_OF_MEMORY_ADVICE = ("release GpuTensors no longer needed (t.release()), call webgpu_kernels.empty_cache() to "
                        "give the pool's memory to other programs, or split the work into smaller calls")


def raised_by_wgpu_promise(exc: BaseException) -> bool:
    """wgpu-py rejects a failed promise (a buffer map, a device request) with a bare RuntimeError
    raised in its own code: such an error is the GPU's, and a RuntimeError from anywhere else is not."""
    if type(exc) is not RuntimeError or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("wgpu.")


#: wgpu-native's devices do not survive os.fork: a forked child's first wait on its parent's device
#: (or on a new one) hung for good.
FORKED = ("this process was forked (os.fork, or multiprocessing's 'fork' start method) after its parent opened "
          "a WebGPU device, and wgpu cannot run in such a child: start workers with the 'spawn' or 'forkserver' "
          "method, or open devices only in the workers")


class translate_gpu_errors:  # noqa: N801 - used as a function: `with translate_gpu_errors(...)`
    """The one place where wgpu's errors become the library's errors.

    A lost device raises DeviceLostError and tells ``memory``'s owner, so the next call gets a
    new device instead of failing forever. A class rather than @contextmanager: it wraps every
    call, and a generator-based context manager costs about a microsecond more.
    """

    __slots__ = ("what", "memory")

    def __init__(self, what: str, memory: DeviceMemory | None = None) -> None:
        self.what = what
        self.memory = memory

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None or not (isinstance(exc, wgpu.GPUError) or raised_by_wgpu_promise(exc)):
            return
        text = str(exc).strip()
        if is_device_lost(exc):
            self._tell_lost()
            raise DeviceLostError(f"the WebGPU device was lost ({self.what}): {text}; the next call opens a new one") from None
        if is_out_of_memory(exc):  # an allocation other than a pooled buffer's (those retry in DeviceMemory.create)
            if self.memory is not None and self.memory.lost_to_out_of_memory():
                self._tell_lost()
                raise DeviceLostError(f"the WebGPU device was lost ({self.what}) when it ran out of memory: "
                                      f"{' '.join(text.split())}; {OUT_OF_MEMORY_ADVICE}; the next call opens a new "
                                      "device") from None  # fmt: skip
            live, pooled = (0, 0) if self.memory is None else self.memory.held_bytes()
            raise OutOfMemoryError(f"out of GPU memory ({self.what}): live buffers hold {describe_bytes(live)}, the "
                                   f"pool {describe_bytes(pooled)}; {OUT_OF_MEMORY_ADVICE} (wgpu: {' '.join(text.split())})",
                                   nbytes=None, live_bytes=live, pooled_bytes=pooled) from None  # fmt: skip
        raise DeviceError(f"WebGPU refused the work ({self.what}): {text}") from None

    def _tell_lost(self) -> None:
        """Tell ``memory``'s owner (the Device) that its device is gone: the next call opens a new one."""
        if self.memory is not None and self.memory.on_lost is not None:
            self.memory.on_lost()


MAX_POOLED_BUFFERS = 256
#: A call's large buffers (inputs, outputs, the readback staging) stay pooled past the byte budget:
#: the pool may also hold this many buffers the size of the largest one released in the last
#: LARGE_BUFFER_WINDOW releases. Without it a call bigger than the budget recreated its buffers
#: every time (H200, 336 MiB QuickGelu round trip: a new 384 MiB input and staging buffer per call).
LARGE_BUFFERS_KEPT = 4
LARGE_BUFFER_WINDOW = 256

#: Host copies this large are split across threads (pageable memory, one thread: H200 host,
#: 336 MiB write_buffer 77 ms in one call and 30 ms in 8 chunks; the mapped read 28.5 -> 8.9 ms).
PARALLEL_COPY_MIN_CHUNK = 8 << 20
COPY_THREADS = min(8, os.cpu_count() or 1)
_copy_pool: ThreadPoolExecutor | None = None
_copy_pool_lock = threading.Lock()
# The parent's copy threads do not exist in a forked child: a pool of them would never run a copy.
fresh_in_child(globals(), _copy_pool=lambda: None, _copy_pool_lock=threading.Lock)


def copy_chunks(nbytes: int) -> list[tuple[int, int]]:
    """(offset, size) pieces of a host copy of ``nbytes``, page-aligned, one per copy thread."""
    parts = min(COPY_THREADS, nbytes // PARALLEL_COPY_MIN_CHUNK)
    if parts <= 1:
        return [(0, nbytes)]
    step = -(-nbytes // parts)
    step += -step % 4096
    return [(offset, min(step, nbytes - offset)) for offset in range(0, nbytes, step)]


def parallel_copy(nbytes: int, copy: Callable[[int, int], Any]) -> None:
    """Run ``copy(offset, size)`` over ``copy_chunks(nbytes)``, on threads when there are several
    (NumPy and wgpu-native release the GIL while they copy); once all are done, the first failure
    is raised."""
    chunks = copy_chunks(nbytes)
    if len(chunks) == 1:
        copy(0, nbytes)
        return
    global _copy_pool
    with _copy_pool_lock:
        if _copy_pool is None:
            _copy_pool = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="webgpu-kernels-copy")
    futures = [_copy_pool.submit(copy, offset, size) for offset, size in chunks]
    # Every piece finishes before anything is raised: a caller that unmaps or frees on error must
    # not pull memory from under a copy still running. That holds for a Ctrl-C in the wait too:
    # the pieces not started are cancelled, the running ones waited for (milliseconds).
    try:
        wait(futures)
    except BaseException:
        for future in futures:
            future.cancel()
        while not all(future.done() for future in futures):
            try:
                wait(futures)
            except BaseException:  # noqa: S112 - another Ctrl-C: the running copies still end first
                continue
        raise
    for future in futures:
        future.result()


def copy_bytes(source: np.ndarray, target: np.ndarray) -> None:
    """``target[:] = source`` for 1-D uint8 arrays, split across threads when large."""
    parallel_copy(source.nbytes, lambda offset, n: np.copyto(target[offset:offset + n], source[offset:offset + n]))


@functools.lru_cache(maxsize=4096)  # asked for on every call; a handful of sizes recur
def size_class(nbytes: int) -> int:
    """The pooled size for ``nbytes``: 2^k x {1, 1.25, 1.5, 1.75} (at most 25% unused), so that
    calls of many distinct shapes reuse a few buffers instead of one per exact size."""
    size = padded_size(nbytes)
    if size <= 256:
        return 1 << (size - 1).bit_length()
    step = (1 << (size.bit_length() - 1)) // 4
    return -(-size // step) * step


def padded_size(nbytes: int) -> int:
    """Buffer sizes round up to 16 bytes, never 0: WebGPU copies and storage bindings need 4, and
    16 lets shaders read and write whole 16-byte vectors at a tensor's tail."""
    return max(16, -(-nbytes // 16) * 16)


def append_dispatch(compute: Any, state: tuple[Any, Any], pipeline: Any, bind_group: Any,
                    grid: tuple[int, int, int]) -> tuple[Any, Any]:  # fmt: skip
    """Append one dispatch to the open compute pass ``compute``, whose current (pipeline, bind
    group) is ``state``; returns the new state. A pass keeps both between dispatches, so repeated
    calls skip re-setting them. The recorder and the benchmark's spans both record through this."""
    if pipeline is not state[0]:
        compute.set_pipeline(pipeline)
    if bind_group is not state[1]:
        compute.set_bind_group(0, bind_group)
    compute.dispatch_workgroups(*grid)
    return (pipeline, bind_group)


class DeviceMemory:
    """Pools, bind-group cache and the open command encoder of one wgpu device."""

    def __init__(self, gpu: Any, lock: threading.RLock, pool_bytes: int, max_buffer_size: int, *,
                 spin_s: float = 0.0, wait_warn_s: float = WAIT_WARN_S) -> None:  # fmt: skip
        self.gpu = gpu
        self.spin_s = spin_s  # READBACK_SPIN_S on GPU adapters
        self.wait_warn_s = wait_warn_s  # a readback waiting longer says so (GpuWaitWarning), once
        self.lock = lock
        self.pool_bytes = pool_bytes
        self.max_buffer_size = max_buffer_size
        self.on_lost: Any = None  # set by the owning Device
        self.forked = False  # set in a forked child (device._after_fork_in_child): every use is refused
        self._free: dict[tuple[int, int], list[Any]] = {}  # (size, usage) -> buffers
        self._free_order: OrderedDict[int, tuple[tuple[int, int], Any]] = OrderedDict()  # uid -> entry, oldest first
        self._free_total = 0
        self._bind_groups: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        # The open batch: an encoder holding recorded work (None: nothing recorded since the last
        # submit), and its open compute pass (None after a recorded copy, until the next dispatch).
        self._encoder: Any = None
        self._pass: Any = None
        self._pass_state: tuple[Any, Any] = (None, None)  # pipeline and bind group set in the open pass
        self._pending = 0
        self._doomed: list[Any] = []
        # Every buffer handed out, until it comes back: the memory owns its buffers for their whole
        # life, so a GpuTensor collected in a reference cycle can never take its wgpu buffer object
        # down with it (finalizers in a cycle run in any order; a released buffer must not be pooled).
        self._leased: dict[int, Any] = {}
        self._releases = 0
        self._large_size, self._large_seen = 0, 0  # largest recent release, and when
        # Buffers of GpuTensors collected by the garbage collector, pooled at the next safe point.
        # A finalizer runs wherever a collection starts: inside flush() between emptying the
        # recorder and submitting, in a copy thread while this thread holds the lock and waits for
        # it, in wgpu-py's poll thread. It may neither change the pool there nor wait for the lock.
        self._collected: deque[Any] = deque()
        self._unsubmitted_writes = 0
        # Recorded work is numbered by submission (a batch): a batch whose submission raised or was
        # cut short (Ctrl-C between emptying the recorder and submit returning) goes to
        # lost_batches, so the tensors it computes refuse to be read instead of giving stale data.
        # Read-only outside this class; empty unless a submission failed, which the per-call path
        # tests before calling lost() (the call alone cost 85 ns, the test 17, on the CPU machine).
        # A rejected first run of a plan takes its batch out again (forget_lost: its tensors are
        # released); what stays is a batch of others' work cut short (Ctrl-C) or refused after it ran
        # once, a device loss mostly, whose memory goes with the device (get_device opens a new one).
        self.batch = 0  # the batch being recorded
        self.lost_batches: set[int] = set()

    # --- buffers ----------------------------------------------------------------------------

    def acquire(self, nbytes: int, usage: int = STORAGE_USAGE) -> Any:
        """A buffer of at least ``nbytes`` (its size class; the exact size past the device limit)."""
        size = size_class(nbytes)
        if size > self.max_buffer_size:
            size = padded_size(nbytes)
        with self.lock:
            if self._collected:
                self._pool_collected()
            stack = self._free.get((size, usage))
            if stack:
                buffer = stack.pop()
                self._free_order.pop(buffer.uid, None)
                self._free_total -= size
            else:  # the pool's miss only: the hit above gains no work from the retry
                buffer = self._new_buffer(size, usage, nbytes)
            self._leased[buffer.uid] = buffer
            return buffer

    def _new_buffer(self, size: int, usage: int, nbytes: int) -> Any:
        # A method of its own: a lambda in acquire made its locals closure cells, and the pool's hit
        # 90 ns slower (CPU machine, acquire + release 1.50 -> 1.59 us).
        return self.create(size, lambda: self.gpu.create_buffer(size=size, usage=usage), usage == STORAGE_USAGE,
                           data_bytes=nbytes)  # fmt: skip

    def create(self, nbytes: int, make: Callable[[], Any], written: bool = False, *,
               data_bytes: int | None = None) -> Any:  # fmt: skip
        """``make()``, a new wgpu buffer of ``nbytes`` (a pooled buffer's size class, for ``data_bytes``).
        When the device is out of memory, the pool's free buffers are destroyed and ``make()`` runs
        once more, as PyTorch's caching allocator frees its cache and retries; failing again raises
        OutOfMemoryError.

        A buffer that may be ``written`` through the queue needs room for wgpu's staging copy of the
        data too, and wgpu-native loses the device when that copy does not fit (lavapipe): so when
        memory is this tight, the retry also asks for (and frees) a staging buffer of ``nbytes``, and
        a call that would have lost the device raises OutOfMemoryError instead."""
        try:
            return make()
        except wgpu.GPUError as exc:
            if not is_out_of_memory(exc):
                raise
        with self.lock:
            live, pooled = self.held_bytes()
            self._make_room()
            buffer = None
            try:
                buffer = make()
                if written:  # made while the buffer is held: both must fit at once
                    self.gpu.create_buffer(size=nbytes, usage=wgpu.BufferUsage.MAP_WRITE | wgpu.BufferUsage.COPY_SRC).destroy()
                return buffer
            except wgpu.GPUError as exc:
                if buffer is not None:
                    buffer.destroy()  # never leased, never used
                if not is_out_of_memory(exc):
                    raise
                text = " ".join(str(exc).split())
        # The size class may be 25% over the tensor: the user knows the tensor's size, not the class's.
        data = ("" if data_bytes is None or data_bytes == nbytes else
                f", the pool's size class for {describe_bytes(data_bytes, exact=True)} of data")  # fmt: skip
        raise OutOfMemoryError(f"out of GPU memory for a buffer of {describe_bytes(nbytes, exact=True)}{data}: live buffers "
                               f"(GpuTensors, the call's own) hold {describe_bytes(live)} and the pool held "
                               f"{describe_bytes(pooled)}, freed for one more try that failed too; {OUT_OF_MEMORY_ADVICE} "
                               f"(wgpu: {text})", nbytes=nbytes, live_bytes=live, pooled_bytes=pooled)  # fmt: skip

    def _make_room(self) -> None:  # under the lock
        """Free the pool's buffers for a retry, for real: a buffer destroyed while a pass is open is
        only doomed until that work is submitted, and wgpu-native frees a destroyed buffer's memory
        once the submitted work that used it has finished. So: trim, submit, wait for the queue."""
        self.trim()
        self.flush()
        # A blocking poll: it waits for the last submission and runs wgpu-core's cleanup. wgpu-py 0.32's
        # public queue.on_submitted_work_done_sync() fails on its wgpu-native (a cffi TypeError); if
        # the private name changes, the retry runs without the wait (and may fail where it had not).
        wait = getattr(self.gpu, "_poll_wait", None)
        if wait is not None:
            wait()

    def lost_to_out_of_memory(self) -> bool:
        """Whether the device was lost to the out-of-memory error just raised: wgpu-native loses it when
        an allocation other than a buffer's or texture's fails (queue.write_buffer's staging copy, on
        lavapipe), and the next call would otherwise fail on it once more. A 16-byte probe tells."""
        try:
            with self.lock:
                self.gpu.create_buffer(size=16, usage=wgpu.BufferUsage.COPY_DST).destroy()
        except wgpu.GPUError as exc:
            return is_device_lost(exc)
        return False

    def held_bytes(self) -> tuple[int, int]:
        """Bytes in live (leased) buffers and in the pool's free ones, for an out-of-memory message."""
        with self.lock:
            self._pool_collected()
            return sum(b.size for b in self._leased.values()), self._free_total

    def release_collected(self, buffer: Any) -> None:
        """:meth:`release` for a finalizer: queued without the lock (a deque's append is atomic),
        pooled by the next acquire, release or flush on any thread."""
        self._collected.append(buffer)

    def _pool_collected(self) -> None:  # under the lock, as every taker is: only finalizers append
        while self._collected:
            self._release(self._collected.popleft())

    def release(self, buffer: Any) -> None:
        """Give a buffer back to the pool; the oldest free buffers beyond the cap are destroyed."""
        if self.forked:  # a forked child must not touch its parent's device (device._after_fork_in_child)
            return
        try:
            with self.lock:
                if self._collected:
                    self._pool_collected()
                self._release(buffer)
        except BaseException:
            # Cut short before _release took it (a Ctrl-C while waiting for the lock another thread
            # holds): the caller (GpuTensor.release) has let go of it, so it had stayed leased for
            # good. Pooled at the next safe point instead; one _release took is never queued twice.
            if buffer.uid in self._leased:
                self._collected.append(buffer)
            raise

    def _release(self, buffer: Any) -> None:  # under the lock
        size, uid = buffer.size, buffer.uid
        self._leased.pop(uid, None)
        key = (size, buffer.usage)
        self._free.setdefault(key, []).append(buffer)
        self._free_order[uid] = (key, buffer)
        self._free_total += size
        self._releases += 1
        if size >= self._large_size or self._releases - self._large_seen > LARGE_BUFFER_WINDOW:
            self._large_size, self._large_seen = size, self._releases
        if self._free_total > self.pool_bytes or len(self._free_order) > MAX_POOLED_BUFFERS:
            self._shrink_pool()

    def _shrink_pool(self) -> None:
        budget = self.pool_budget
        while (self._free_total > budget or len(self._free_order) > MAX_POOLED_BUFFERS) and self._free_order:
            _, (old_key, old) = self._free_order.popitem(last=False)
            self._free[old_key].remove(old)
            self._free_total -= old.size
            self._destroy(old)

    def destroy(self, buffer: Any) -> None:
        """Destroy a buffer made outside the pool (bench's timing buffers), and drop the cached bind
        groups over it: destroyed directly, they had stayed cached until 1,024 more pushed them out."""
        with self.lock:
            self._destroy(buffer)

    def forget_bind_groups(self, buffer: Any) -> None:
        """Drop the cached bind groups over ``buffer``: one the user lends (from_wgpu_buffer) is
        not kept alive by the cache once its tensor is released. Recorded work that uses a
        group keeps what it needs (wgpu counts references)."""
        with self.lock:
            self._forget_bind_groups(buffer)

    def _forget_bind_groups(self, buffer: Any) -> None:  # under the lock
        stale = [k for k in self._bind_groups if any(e[1] is buffer for e in k[1])]
        for k in stale:
            del self._bind_groups[k]

    def _destroy(self, buffer: Any) -> None:
        self._forget_bind_groups(buffer)  # they would bind a dead buffer
        if self._encoder is not None:
            self._doomed.append(buffer)  # unsubmitted work may still use it
        else:
            buffer.destroy()

    def trim(self) -> None:
        """Destroy every pooled buffer (they are recreated on demand), and forget the largest recent
        size: its room (LARGE_BUFFERS_KEPT of it beyond the budget) had outlived empty_cache() and an
        out-of-memory retry for the next LARGE_BUFFER_WINDOW releases, filling with small buffers."""
        with self.lock:
            self._pool_collected()
            # Out of the pool before any is destroyed: a Ctrl-C in the loop (a bind-group scan and a
            # destroy each) had left destroyed buffers pooled, handed to later calls that WebGPU
            # refused. Cut short now, the rest are only unpooled, freed when collected.
            free = self._free_order
            self._free, self._free_order, self._free_total = {}, OrderedDict(), 0
            self._large_size, self._large_seen = 0, self._releases
            for _, buffer in free.values():
                self._destroy(buffer)

    @property
    def live_buffers(self) -> int:
        """Buffers this memory owns: handed out, or free in the pool."""
        with self.lock:
            self._pool_collected()
            return len(self._leased) + len(self._free_order)

    @property
    def pooled_bytes(self) -> int:
        with self.lock:
            self._pool_collected()
            return self._free_total

    @property
    def pool_budget(self) -> int:
        """Bytes the pool may hold now: the configured budget plus room for a few recent large buffers."""
        return self.pool_bytes + LARGE_BUFFERS_KEPT * self._large_size

    # --- bind groups ------------------------------------------------------------------------

    def bind_group(self, layout: Any, entries: tuple[tuple[int, Any, int | None], ...]) -> Any:
        """A bind group of ``layout`` over ``entries`` ((binding, buffer, bound bytes or None for
        all)), cached by buffer identity (wgpu objects hash by identity; a destroyed buffer's groups
        are dropped). Binding only a tensor's own bytes keeps arrayLength() right in shaders
        although pooled buffers may be larger."""
        key = (layout, entries)
        group = self._bind_groups.get(key)
        if group is not None:
            self._bind_groups.move_to_end(key)
            return group
        group = self.gpu.create_bind_group(layout=layout, entries=[
            {"binding": n, "resource": {"buffer": b, "offset": 0, "size": size if size is not None else b.size}}
            for n, b, size in entries
        ])  # fmt: skip
        self._bind_groups[key] = group
        if len(self._bind_groups) > BIND_GROUP_CACHE_SIZE:
            self._bind_groups.popitem(last=False)
        return group

    # --- recording --------------------------------------------------------------------------

    def record(self, pipeline: Any, bind_group: Any, grid: tuple[int, int, int]) -> None:
        """Append one dispatch to the open compute pass (opened on demand)."""
        if self._pass is None:
            if self._encoder is None:
                self._encoder = self.gpu.create_command_encoder()
            self._pass = self._encoder.begin_compute_pass()
            self._pass_state = (None, None)
        # Unknown until the dispatch is appended: cut short (Ctrl-C) after set_bind_group, the pass
        # held this call's group while the state named the one before, and the next call using
        # that one skipped setting it and ran on the interrupted call's buffers.
        state, self._pass_state = self._pass_state, (None, None)
        self._pass_state = append_dispatch(self._pass, state, pipeline, bind_group, grid)
        self._pending += 1
        if self._pending >= MAX_PENDING_DISPATCHES:
            self.flush()

    def record_copy(self, source: Any, target: Any, size: int) -> tuple[int, int]:
        """Append a copy of ``size`` bytes of ``source`` into ``target`` to the open batch, after the
        work recorded so far and before any recorded later; returns the batch it went into (first,
        last: the target's ``_work``). A copy cannot sit in a compute pass: the open one ends here,
        and the next dispatch opens another on the same encoder."""
        if self._pass is not None:
            compute, self._pass = self._pass, None  # never ended twice: flush ends an open pass too
            try:
                compute.end()
            except BaseException:
                # Cut short (Ctrl-C) or refused, the pass may stay open and the encoder locked: the
                # next flush, another call's, failed on it. Dropped now, as a failing flush drops it.
                self._drop_batch()
                raise
        elif self._encoder is None:
            self._encoder = self.gpu.create_command_encoder()
        self._encoder.copy_buffer_to_buffer(source, 0, target, 0, size)
        batch = self.batch  # the flush below, if any, submits this batch
        self._pending += 1
        if self._pending >= MAX_PENDING_DISPATCHES:
            self.flush()
        return batch, batch

    def _drop_batch(self) -> None:  # under the lock
        """Forget the open batch unsubmitted, lost as a failed flush's: the next record opens a new encoder."""
        doomed = self._empty_recorder()
        self.lost_batches.add(self.batch)
        self.batch += 1
        for buffer in doomed:  # never to be submitted: no work reads them
            buffer.destroy()

    def _empty_recorder(self) -> list[Any]:  # under the lock
        """Forget the recorded work (a flush took its encoder and pass first); returns the buffers
        released meanwhile, to destroy once no work can read them."""
        self._encoder = self._pass = None
        self._pass_state = (None, None)
        self._pending = 0
        doomed, self._doomed = self._doomed, []
        return doomed

    def flush(self, then: Any = None) -> None:
        """Submit recorded work and pending writes; ``then(encoder)`` may append copies to the same
        submission."""
        with self.lock:
            if self._collected:  # before the recorder is emptied: a buffer destroyed now would be doomed
                self._pool_collected()
            writes, self._unsubmitted_writes = self._unsubmitted_writes, 0  # any submission carries them
            if self._encoder is None and then is None:
                if writes:
                    self.gpu.queue.submit([])  # carries the writes' staging copies, then frees them
                return
            # The recorder is emptied first: when WebGPU rejects the work (at end() or finish(),
            # where it reports a dispatch it refused), that work is dropped and the next call
            # opens a fresh encoder, instead of every later call failing on the dead one. The
            # batch is lost when anything below raises (marked in the except, never meanwhile:
            # a read on another thread during a normal flush must not see it lost).
            batch = self.batch
            # Moved on before anything may raise: a Ctrl-C in the encoder a read made with nothing
            # recorded had left this batch current and lost, and the calls recorded next refused reads.
            self.batch = batch + 1
            doomed: list[Any] = []
            try:
                encoder, compute = self._encoder or self.gpu.create_command_encoder(), self._pass
                doomed = self._empty_recorder()
                if compute is not None:
                    compute.end()
                if then is not None:
                    then(encoder)
                self.gpu.queue.submit([encoder.finish()])
            except BaseException:
                self.lost_batches.add(batch)
                raise
            finally:
                for buffer in doomed:  # submitted, or never to be: either way no work reads them later
                    buffer.destroy()

    def lost(self, work: tuple[int, int] | None) -> bool:
        """Whether any batch of ``work`` (first, last; None for data not computed by recorded work)
        never reached the GPU (see flush). Under the lock (run_plan and reads already hold it): a
        failing flush on another thread adds to the set, and iterating it meanwhile raised
        "Set changed size during iteration" from GpuTensor.uncomputed."""
        with self.lock:
            lost = self.lost_batches
            return bool(lost) and work is not None and any(work[0] <= batch <= work[1] for batch in lost)

    def forget_lost(self, work: tuple[int, int]) -> None:
        """Drop ``work``'s batches (first, last) from the lost ones: no tensor computed there is left."""
        with self.lock:
            self.lost_batches.difference_update(range(work[0], work[1] + 1))

    def write(self, buffer: Any, data: np.ndarray) -> None:
        """Host bytes (1-D uint8) into ``buffer``, after submitting recorded work, which may use it."""
        with self.lock:
            if self._encoder is not None:  # recorded work that may read the buffer goes first; earlier writes wait
                self.flush()
            write_buffer = self.gpu.queue.write_buffer
            parallel_copy(data.nbytes, lambda offset, size: write_buffer(buffer, offset, data[offset:offset + size]))
            self._unsubmitted_writes += data.nbytes
            if self._unsubmitted_writes >= MAX_UNSUBMITTED_WRITE_BYTES:
                self.flush()

    def _map_for_read(self, staging: Any, size: int) -> None:
        promise = staging.map_async(READBACK_MAP_MODE, 0, size)
        if self.spin_s:
            # Non-blocking polls for at most spin_s (READBACK_SPIN_S). wgpu-py 0.32 (pinned) has no
            # public "is it done"; if these private names change, the spin just ends at once.
            poll = getattr(self.gpu, "_poll", None)
            deadline = time.perf_counter() + self.spin_s
            while poll is not None and getattr(promise, "_state", None) == "pending":
                if time.perf_counter() > deadline:
                    break
                poll(False)
        # Then wgpu-py's poll thread (a blocking poll on this thread was slower on the H200:
        # scripts/wait_probe.py); a failed map raises here. A wait that never ends (a wedged driver:
        # on the H200 after a forked child's normal exit, before device._skip_inherited_exit_handlers)
        # would otherwise hang without a word; without wgpu-py 0.32's private event it has no warning.
        event = getattr(promise, "_thread_event", None)
        # A wait past threading.TIMEOUT_MAX (292 years: $WEBGPU_KERNELS_WAIT_WARN_S=99999999999, "never")
        # is that long: Event.wait raised OverflowError, and no readback could complete.
        if self.wait_warn_s and event is not None and not event.wait(min(self.wait_warn_s, threading.TIMEOUT_MAX)):
            warnings.warn(GpuWaitWarning(
                f"a readback of {size} bytes has waited {self.wait_warn_s:g} s for the GPU and still waits: long "
                "recorded work, a hung driver, or a forked child of this process whose exit ran the drivers' exit "
                "handlers (docs/python-api.md: end it with os._exit where libc has no on_exit); "
                f"${WAIT_WARN_ENV} sets when this is said, 0 never"), stacklevel=user_stacklevel())  # fmt: skip
        promise.sync_wait()

    def read_into(self, buffer: Any, out: np.ndarray) -> None:
        """Copy the first ``out.nbytes`` of ``buffer`` into ``out`` (C-contiguous), through a pooled
        mappable staging buffer: about 3x faster than ``queue.read_buffer``."""
        nbytes = out.nbytes
        with self.lock:
            staging = self.acquire(nbytes, READBACK_USAGE)
            mapping = False
            try:
                size = padded_size(nbytes)
                self.flush(then=lambda encoder: encoder.copy_buffer_to_buffer(buffer, 0, staging, 0, size))
                mapping = True
                self._map_for_read(staging, size)
                try:
                    # The view of mapped memory lives only inside copy_bytes: nothing refers to it at unmap.
                    copy_bytes(np.frombuffer(staging.read_mapped(0, size, copy=False), dtype=np.uint8, count=nbytes),
                               out.reshape(-1).view(np.uint8))  # fmt: skip
                finally:
                    staging.unmap()
                    mapping = False
            finally:
                if mapping:  # a wait cut short (Ctrl-C) leaves the map pending: pooled, the next copy into it aborted the process
                    self._leased.pop(staging.uid, None)
                    self._destroy(staging)
                else:
                    self.release(staging)
