"""Cohort's progress probe for unmodified Python programs (docs/faults.md).

Started by the sitecustomize.py next to this file in the process cohort-launch started for a rank
(os.getppid() == COHORT_PROBE_PPID), never in that process's children. A daemon thread samples
the main thread's Python stack every 0.5 s and rewrites $COHORT_PROBE_DIR/status.json every 1 s;
optimizer steps (torch), completed collectives the program calls (torch.distributed: its steps
when it makes no optimizer step) and host syncs (JAX) are counted by hooks installed right after
the program imports torch or jax. The sidecar asks for stacks and torch's flight recorder by writing
$COHORT_PROBE_DIR/dump-request. Standard library only; torch and jax are never imported here.

Environment: COHORT_PROBE_DIR, COHORT_PROBE_PPID, COHORT_PROCESS_ID (set by cohort-launch),
COHORT_PYTHON_PROBE=0 (off). For tests: COHORT_PROBE_SAMPLE_S (0.5), COHORT_PROBE_WRITE_S (1),
COHORT_PROBE_IDLE_S (10).

Whatever goes wrong here prints one line to stderr and the probe steps aside: it must never
change what the program does or prints.
"""

import os
import sys

_FRAMEWORKS = frozenset(("torch", "jax", "jaxlib", "cohort", "_cohort_probe"))
# Hang evidence's files and the status fields the sidecar reads, as common/hang_evidence.h names
# them (tests/fixtures/hang_evidence.json holds both sides' names; a C++ and a Python test check).
_STATUS = "status.json"
_DUMP_REQUEST = "dump-request"
_DUMPED = "dumped"
_FAULTHANDLER = "faulthandler.txt"
_STACKS = "stacks.txt"
_TORCH_FLIGHT_RECORDER = "fr_trace.json"
_STATUS_FIELDS_READ = ("unix_ms", "started_unix_ms", "steps", "last_step_unix_ms", "median_step_ms",
                       "phase", "busy", "waiting", "op", "where")
_started = False
_probe = None  # the running probe (for tests and benchmarks)


def _say(error):
    try:
        sys.stderr.write("cohort python probe: disabled: %s: %s\n" % (type(error).__name__, error))
    except BaseException:  # noqa: BLE001
        pass


def _seconds(name, default):
    try:
        value = float(os.environ.get(name, ""))
        return value if value > 0 else default
    except ValueError:
        return default


def start():
    """Starts the probe if this is a rank's process; else does nothing."""
    global _started
    env = os.environ
    if _started or env.get("COHORT_PYTHON_PROBE", "1").strip() == "0":
        return
    directory, parent = env.get("COHORT_PROBE_DIR"), env.get("COHORT_PROBE_PPID")
    if not directory or not parent:
        return
    try:
        if os.getppid() != int(parent):
            return  # a child of the rank's process (DataLoader, multiprocessing): silent
    except ValueError:
        return
    _started = True
    try:
        global _probe
        _probe = _Probe(directory)
        _probe.start()
    except BaseException as error:  # noqa: BLE001
        _say(error)
        if _probe is not None:
            _probe.off = True
            finder = getattr(_probe, "finder", None)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)


class _Probe:
    def __init__(self, directory):
        import collections
        import json
        import linecache
        import signal
        import threading
        import time

        self.json, self.linecache, self.signal, self.threading = json, linecache, signal, threading
        self.time, self.monotonic, self.sleep = time.time, time.monotonic, time.sleep
        self.directory = directory
        if not os.path.isdir(directory):
            raise OSError("COHORT_PROBE_DIR %s is not a directory" % directory)
        self.sample_s = _seconds("COHORT_PROBE_SAMPLE_S", 0.5)
        self.write_s = _seconds("COHORT_PROBE_WRITE_S", 1.0)
        self.idle_s = _seconds("COHORT_PROBE_IDLE_S", 10.0)
        try:
            self.rank = int(os.environ.get("COHORT_PROCESS_ID", "-1"))
        except ValueError:
            self.rank = -1
        self.pid = os.getpid()
        self.started_ms = int(self.time() * 1000)
        self.main_ident = threading.get_ident()
        self.off = False  # set in a forked child, or after a failure
        self.failed = False

        # Steps: completion times (time.time()) of the last 33 steps, per source.
        self.torch_steps, self.torch_times = 0, collections.deque(maxlen=33)
        self.jax_steps, self.jax_times = 0, collections.deque(maxlen=33)
        # Collectives the program called from Python (torch.distributed), completed: its steps
        # when it has no optimizer steps (a loop of dist.all_reduce), judged as a DDP program is.
        self.collective_steps, self.collective_times = 0, collections.deque(maxlen=33)
        self.collective_depth = threading.local()
        self.optimizers = []  # ids of the optimizers whose step() is running (nesting)
        self.sync_depth = threading.local()
        self.jax_compiling = {}  # /jax/core/compile/* event -> compilations in progress
        self.frameworks = []
        self.patched = set()

        # The main thread's innermost user frame, from the last sample.
        self.position = None  # (filename, line, bytecode offset) of the innermost user frame
        self.completed = 0  # steps and host syncs at the last sample
        self.changed_at = self.monotonic()  # when position last changed
        self.where_frame = None  # (filename, line, function)
        self.waiting, self.op, self.phase = False, "", "init"
        self.fr_polled_at, self.fr_op, self.fr_state = None, None, None
        self.dumped_id, self.answered = 0, set()
        self.faulthandler_file = None
        self.sigcgt_reads, self.sigcgt = 0, True
        self.fork_filter = None  # a warnings filter in place around a fork (_before_fork)

        stdlib = os.path.dirname(os.__file__)
        self.stdlib = tuple(sorted({stdlib, os.path.realpath(stdlib)}))
        self.this_file = os.path.abspath(__file__)
        if self.this_file.endswith((".pyc", ".pyo")):
            self.this_file = self.this_file[:-1]
        self.files = {}  # co_filename -> kind ("user", "stdlib", "frozen", "third", "probe")
        self.modules = {}  # co_filename -> the frame's module name

    # ---- start, fork -------------------------------------------------------------------------

    def start(self):
        # One probe per process and directory: a subinterpreter's `site` runs this hook again,
        # as would a second process given the same directory; the lock goes with the process.
        import fcntl

        self.lock_file = open(os.path.join(self.directory, "probe.lock"), "a")
        try:
            fcntl.flock(self.lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock_file.close()
            return
        except OSError:
            pass  # a file system without locks: go on
        self._register_faulthandler()
        self.finder = _PostImportFinder(self, ("torch", "jax"))
        sys.meta_path.insert(0, self.finder)
        for name in ("torch", "jax"):  # imported by a chained sitecustomize
            self._patch_if_imported(name)
        os.register_at_fork(before=self._before_fork, after_in_child=self._after_fork_in_child)
        import atexit

        atexit.register(self._stop)
        self.thread = self.threading.Thread(target=self._run, name="cohort-probe", daemon=True)
        self.thread.start()

    def _before_fork(self):
        # Python >= 3.12 warns (DeprecationWarning, shown for a fork in __main__) when a process
        # with more than one OS thread forks. When the probe's thread is the only other thread,
        # the warning is the probe's doing: a filter for exactly that warning of this process is
        # in place from here until the probe's next sample (the warning comes after every
        # at-fork hook has run).
        if sys.version_info < (3, 12) or self.off or self.fork_filter is not None:
            return
        try:
            with open("/proc/self/stat", "rb") as stat:
                threads = int(stat.read().rpartition(b")")[2].split()[17])
            if threads != 2 or not self.thread.is_alive():
                return
            import warnings

            warnings.filterwarnings("ignore", category=DeprecationWarning,
                                    message=r"This process \(pid=%d\) is multi-threaded" % os.getpid())
            self.fork_filter = warnings.filters[0]
        except BaseException:  # noqa: BLE001
            pass

    def _drop_fork_filter(self):
        entry, self.fork_filter = self.fork_filter, None
        try:
            import warnings

            if entry in warnings.filters:
                warnings.filters.remove(entry)
                warnings._filters_mutated()
        except BaseException:  # noqa: BLE001
            pass

    def _after_fork_in_child(self):
        # The child has no probe thread; it must not dump on SIGUSR2 nor keep counting.
        try:
            self.off = True
            if self.fork_filter is not None:
                self._drop_fork_filter()
            if self.faulthandler_file is not None:
                import faulthandler

                faulthandler.unregister(self.signal.SIGUSR2)
            if self.finder in sys.meta_path:
                sys.meta_path.remove(self.finder)
        except BaseException:  # noqa: BLE001
            pass

    def _register_faulthandler(self):
        # The fallback for a process whose probe thread cannot run (a C call holding the GIL):
        # SIGUSR2 writes every thread's stack to faulthandler.txt from the signal handler. Only
        # if nobody handles SIGUSR2 yet; never chained (the default action would kill).
        signal = self.signal
        if not hasattr(signal, "SIGUSR2") or signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, signal.SIG_IGN):
            return
        import faulthandler

        path = os.path.join(self.directory, _FAULTHANDLER)
        handle = open(path, "w")
        try:
            faulthandler.register(signal.SIGUSR2, file=handle, all_threads=True, chain=False)
        except BaseException:
            handle.close()
            raise
        self.faulthandler_file = handle

    def _sigusr2_dumps(self):
        """Whether a SIGUSR2 now writes faulthandler.txt (and nothing else)."""
        if self.faulthandler_file is None:
            return False
        signal = self.signal
        if signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, signal.SIG_IGN):
            return False  # the program set its own handler, which replaced faulthandler's
        # signal.signal(SIGUSR2, SIG_DFL) would have removed faulthandler's handler too: the
        # kernel's SigCgt says, read every 5th time (70 us in a torch process).
        self.sigcgt_reads += 1
        if self.sigcgt_reads % 5 == 1:
            self.sigcgt = True
            try:
                with open("/proc/self/status", "rb") as status:
                    for line in status:
                        if line.startswith(b"SigCgt:"):
                            self.sigcgt = bool(int(line.split()[1], 16) >> (signal.SIGUSR2 - 1) & 1)
                            break
            except (OSError, ValueError, IndexError):
                pass
        return self.sigcgt

    # ---- framework hooks ---------------------------------------------------------------------

    def _patch_if_imported(self, name):
        module = sys.modules.get(name)
        if module is None or name in self.patched:
            return
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            return  # still being imported
        self.patched.add(name)
        if name == "torch":
            self._patch_torch()
        else:
            self._patch_jax(module)

    def imported(self, name, module):
        """Called right after the program's import of torch or jax finished."""
        if self.off or name in self.patched:
            return
        try:
            self.patched.add(name)
            if name == "torch":
                self._patch_torch()
            else:
                self._patch_jax(module)
        except BaseException as error:  # noqa: BLE001
            self._fail(error)

    def _patch_torch(self):
        optimizer = sys.modules.get("torch.optim.optimizer")
        if optimizer is None or not hasattr(optimizer, "register_optimizer_step_post_hook"):
            return
        running = self.optimizers

        def pre(opt, args, kwargs):
            try:
                key = id(opt)
                if key in running:  # its last step() raised: forget what it left
                    del running[running.index(key):]
                running.append(key)
            except Exception:  # noqa: BLE001
                pass

        def post(opt, args, kwargs):
            try:
                key = id(opt)
                if key in running:
                    del running[running.index(key):]
                if not running and not self.off:  # the outermost step(): one step
                    self.torch_times.append(self.time())
                    self.torch_steps += 1
            except Exception:  # noqa: BLE001
                pass

        if hasattr(optimizer, "register_optimizer_step_pre_hook"):
            optimizer.register_optimizer_step_pre_hook(pre)
        optimizer.register_optimizer_step_post_hook(post)
        self._patch_torch_collectives()
        self.frameworks.append("torch")

    def _patch_torch_collectives(self):
        """torch.distributed's collectives counting one step per outermost completed call (an
        async_op=True call completes later: not counted), in the module and where they live."""
        modules = [module for module in (sys.modules.get("torch.distributed"),
                                         sys.modules.get("torch.distributed.distributed_c10d"))
                   if module is not None]
        for name in _TORCH_COLLECTIVES:
            for module in modules:
                function = getattr(module, name, None)
                if callable(function) and getattr(function, "_cohort_counted", None) is None:
                    wrapped = self._collective_wrapper(function, name)
                    wrapped._cohort_counted = True
                    setattr(module, name, wrapped)
                    # The other module names the same function: give it the same wrapper.
                    for other in modules:
                        if other is not module and getattr(other, name, None) is function:
                            setattr(other, name, wrapped)

    def _collective_wrapper(self, function, name):
        depth = self.collective_depth
        probe = self

        def wrapper(*args, **kwargs):
            result, outermost = _outermost_call(depth, function, args, kwargs)
            if outermost and not probe.off and not kwargs.get("async_op", False):
                probe.collective_times.append(probe.time())
                probe.collective_steps += 1
            return result

        return self._named_like(wrapper, function, name)

    def _patch_jax(self, jax):
        array = sys.modules.get("jax._src.array")
        cls = getattr(array, "ArrayImpl", None)
        if cls is not None:
            value = cls.__dict__.get("_value")
            if isinstance(value, property) and value.fget is not None:
                cls._value = property(self._sync_wrapper(value.fget, "_value", cached_check=True),
                                      value.fset, value.fdel, value.__doc__)
            method = cls.__dict__.get("block_until_ready")
            if method is not None and callable(method):
                cls.block_until_ready = self._sync_wrapper(method, "block_until_ready")
        for name in ("block_until_ready", "device_get"):
            function = getattr(jax, name, None)
            if callable(function):
                setattr(jax, name, self._sync_wrapper(function, name))
        monitoring = sys.modules.get("jax.monitoring") or getattr(jax, "monitoring", None)
        compiling = self.jax_compiling

        def on_scalar(event, value, **kwargs):
            # jax._src.dispatch.log_elapsed_time: record_scalar(event, start) on entering a
            # compilation stage, record_event_duration_secs(event, secs) on leaving it.
            if isinstance(event, str) and event.startswith("/jax/core/compile/"):
                compiling[event] = compiling.get(event, 0) + 1

        def on_duration(event, duration, **kwargs):
            if isinstance(event, str) and event.startswith("/jax/core/compile/"):
                left = compiling.get(event, 0) - 1
                if left > 0:
                    compiling[event] = left
                else:
                    compiling.pop(event, None)

        if monitoring is not None and hasattr(monitoring, "register_scalar_listener"):
            monitoring.register_scalar_listener(on_scalar)
            monitoring.register_event_duration_secs_listener(on_duration)
        self.frameworks.append("jax")

    def _sync_wrapper(self, function, name, cached_check=False):
        """`function` counting one JAX step per outermost completed call (a host sync)."""
        depth = self.sync_depth
        probe = self

        def wrapper(*args, **kwargs):
            if cached_check:
                try:
                    cached = getattr(args[0], "_npy_value", None) is not None
                except Exception:  # noqa: BLE001
                    cached = False
                if cached:
                    return function(*args, **kwargs)  # already on the host: no sync
            result, outermost = _outermost_call(depth, function, args, kwargs)
            if outermost and not probe.off:
                probe.jax_times.append(probe.time())
                probe.jax_steps += 1
            return result

        return self._named_like(wrapper, function, name)

    @staticmethod
    def _named_like(wrapper, function, name):
        """`wrapper` named as `function`: its frame reads as the wrapped call (the "op" of a thread
        waiting in it)."""
        try:
            wrapper.__code__ = wrapper.__code__.replace(co_name=name)
        except (AttributeError, TypeError, ValueError):
            pass
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(wrapper, attribute, getattr(function, attribute))
            except (AttributeError, TypeError):
                pass
        wrapper.__wrapped__ = function
        return wrapper

    # ---- the thread --------------------------------------------------------------------------

    def _fail(self, error):
        if not self.failed and not self.off and not sys.is_finalizing():
            self.failed = True
            _say(error)
        self.off = True

    def _stop(self):  # at exit: the thread stops before the interpreter's finalization
        self.off = True

    def _run(self):
        next_write = 0.0
        while not self.off:
            now = self.monotonic()
            try:
                if self.fork_filter is not None:
                    self._drop_fork_filter()
                if len(self.patched) < 2:
                    for name in ("torch", "jax"):  # if the import hook could not be installed
                        self._patch_if_imported(name)
                self._sample(now)
                request = self._read_request()
                if request is not None:
                    self._dump(*request)
                    next_write = 0.0
                if now >= next_write:
                    next_write = now + self.write_s
                    try:
                        self._write_status(now)
                    except OSError:
                        pass  # the directory went away or is full: try again later
            except BaseException as error:  # noqa: BLE001
                self._fail(error)
            self.sleep(self.sample_s)
        if self.failed:  # no status rather than a stale one, which would read as a held GIL
            try:
                os.unlink(os.path.join(self.directory, _STATUS))
            except OSError:
                pass

    def _kind(self, filename):
        kind = self.files.get(filename)
        if kind is None:
            if len(self.files) > 20000:
                self.files.clear()
                self.modules.clear()
            if filename == self.this_file:
                kind = "probe"
            elif filename.startswith("<frozen"):
                kind = "frozen"
            elif filename.startswith("<"):
                kind = "user"  # python -c, exec()'d strings
            elif "/site-packages/" in filename or "/dist-packages/" in filename:
                kind = "third"
            elif filename.startswith(self.stdlib):
                kind = "stdlib"
            else:
                kind = "user"
            self.files[filename] = kind
        return kind

    def _sample(self, now):
        frames = sys._current_frames()
        frame = frames.get(self.main_ident)
        del frames  # keep no other thread's frame (or its locals) alive
        if frame is None:  # the main thread is gone or in no Python code
            self.position = None
            self.where_frame = None
            self.waiting, self.op = False, ""
            return
        steps = self.torch_steps or self.jax_steps or self.collective_steps
        compiling = bool(self.jax_compiling)
        checkpointing = initializing = False
        innermost_kind = innermost_module = None
        user = fallback = None
        fallback_called = 0
        called = []  # (kind, module, function) of the frames the user frame called, inner first
        modules = self.modules
        while frame is not None:
            code = frame.f_code
            filename = code.co_filename
            kind = self._kind(filename)
            module = modules.get(filename)
            if module is None:
                module = modules[filename] = str(frame.f_globals.get("__name__") or "")
            top = module.partition(".")[0]
            framework = top in _FRAMEWORKS
            name = code.co_name
            if innermost_kind is None and kind not in ("stdlib", "frozen"):
                innermost_kind, innermost_module = kind, top
            if user is None:
                if kind == "user" and not framework:
                    user = (filename, frame.f_lineno, frame.f_lasti, name)
                else:
                    if fallback is None and kind == "third" and not framework:
                        fallback = (filename, frame.f_lineno, frame.f_lasti, name)
                        fallback_called = len(called)
                    called.append((kind, framework, name))
            if top == "torch":
                if module.startswith(("torch._dynamo", "torch._inductor")):
                    compiling = True
                elif module.startswith(("torch.distributed.checkpoint", "torch.serialization")):
                    checkpointing = True
                elif module.startswith("torch.distributed") and (
                        name in ("init_process_group", "init_device_mesh", "_new_process_group_helper",
                                 "_store_based_barrier") or "rendezvous" in module or "rendezvous" in name):
                    initializing = True
            elif top == "jax":
                if module.startswith(("jax._src.distributed", "jax.distributed")):
                    initializing = True
            elif top == "cohort":
                if name == "initialize":
                    initializing = True
            elif top == "orbax":
                checkpointing = True
            elif kind == "frozen":
                if not steps and module.startswith("importlib"):
                    initializing = True  # importing the program's modules
            elif kind != "stdlib" and not framework:
                lowered = name.lower()
                if "checkpoint" in lowered or "save" in lowered:
                    checkpointing = True
            frame = frame.f_back
        del frame
        if user is None:
            user = fallback
            called = called[:fallback_called]
        position = user[:3] if user is not None else None
        completed = self.torch_steps + self.jax_steps + self.collective_steps
        if position != self.position or completed != self.completed:
            # A step counts as progress too: in a training loop one line (backward) can take
            # most of the time, so that many samples in a row find the same position.
            self.position, self.completed = position, completed
            self.changed_at = now
        self.where_frame = (user[0], user[1], user[3]) if user is not None else None

        waiting = innermost_kind == "probe" or (innermost_module in _FRAMEWORKS)
        op = ""
        if waiting:
            # The framework call the user's frame made, past generic wrappers and the stdlib.
            for kind, framework, name in reversed(called):
                if (framework or kind == "probe") and name not in _WRAPPER_NAMES and not name.startswith("<"):
                    op = name
                    break
            if not op and called:
                op = called[0][2]
        idle = now - self.changed_at >= self.idle_s
        if idle:
            fr_op = self._flight_recorder_op(now)
            if fr_op:
                waiting, op = True, fr_op
        else:
            self.fr_polled_at, self.fr_op, self.fr_state = None, None, None
        self.waiting, self.op = waiting, op
        if compiling:
            self.phase = "compile"
        elif checkpointing:
            self.phase = "checkpoint"
        elif initializing and not steps:
            self.phase = "init"
        else:
            self.phase = "run"

    # ---- torch's flight recorder -------------------------------------------------------------

    def _flight_recorder_op(self, now):
        """The collective the process waits in, from torch's flight recorder; polled only while
        the main thread has not moved for idle_s, at most once per idle_s. First the process
        groups' status alone (0.1 ms): whether a collective was enqueued and not completed; the
        entries (up to ~100 ms and ~10 MiB of RSS the allocator keeps, for a full buffer of
        2000) only when that status is new."""
        if self.fr_polled_at is not None and now - self.fr_polled_at < self.idle_s:
            return self.fr_op
        self.fr_polled_at = now
        loads = self.json.loads
        for backend in self._backends():
            try:
                summary = self._fr_json(backend, True, collectives=False)
                groups = loads(summary).get("pg_status")
            except Exception:  # noqa: BLE001 - no recorder for this backend
                continue
            if groups is not None:
                pending = {}
                for group, status in groups.items():
                    try:
                        completed = int(status.get("last_completed_collective", -1))
                        if int(status.get("last_enqueued_collective", -1)) > completed:
                            pending[str(group)] = completed
                    except (AttributeError, TypeError, ValueError):
                        continue
                if not pending:
                    continue
                state = (backend, summary)  # unchanged since the entries were read: the same answer
                if state == self.fr_state:
                    return self.fr_op
            else:  # a recorder without pg_status
                pending, state = None, None
            try:
                entries = loads(self._fr_json(backend, True)).get("entries", ())
            except Exception:  # noqa: BLE001
                continue
            active = [entry for entry in entries if not entry.get("retired") and entry.get("state") != "completed"
                      and (pending is None or (str(entry.get("pg_id")) in pending
                                               and entry.get("collective_seq_id", 0) > pending[str(entry.get("pg_id"))]))]
            del entries
            if active:
                oldest = min(active, key=lambda entry: entry.get("time_created_ns", 0))
                self.fr_state, self.fr_op = state, str(oldest.get("profiling_name", "")).rpartition(":")[2]
                return self.fr_op
        self.fr_state, self.fr_op = None, None
        return None

    def _backends(self):
        dist = sys.modules.get("torch.distributed")
        if dist is None or "torch._C._distributed_c10d" not in sys.modules:
            return ()
        try:
            if not dist.is_available() or not dist.is_initialized():
                return ()
            described = str(dist.get_backend()).lower()
        except Exception:  # noqa: BLE001
            return ()
        found = tuple(backend for backend in ("nccl", "gloo") if backend in described)
        return found or ("gloo",)

    def _fr_json(self, backend, only_active, collectives=True):
        c10d = sys.modules["torch._C._distributed_c10d"]
        nccl = getattr(c10d, "_dump_nccl_trace_json", None)
        if backend == "nccl" and nccl is not None:  # ProcessGroupNCCL's own recorder
            return nccl(includeCollectives=collectives, onlyActive=only_active)
        dump = getattr(c10d, "_dump_fr_trace_json", None)
        if dump is None:
            raise RuntimeError("this torch has no _dump_fr_trace_json")
        try:
            return dump(includeCollectives=collectives, onlyActive=only_active, backend=backend)
        except TypeError:  # an older signature, without backend
            return dump(includeCollectives=collectives, onlyActive=only_active)

    def _fr_pickle(self, backend):
        c10d = sys.modules["torch._C._distributed_c10d"]
        nccl = getattr(c10d, "_dump_nccl_trace", None)
        if backend == "nccl" and nccl is not None:
            return nccl(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        dump = getattr(c10d, "_dump_fr_trace", None)
        if dump is None:
            return None
        try:
            return dump(includeCollectives=True, includeStackTraces=False, onlyActive=False, backend=backend)
        except TypeError:
            return dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)

    # ---- status.json -------------------------------------------------------------------------

    def _where(self):
        if self.where_frame is None:
            return ""
        filename, line, function = self.where_frame
        source = ""
        try:
            source = self.linecache.getline(filename, line).strip()
        except Exception:  # noqa: BLE001
            pass
        text = "%s:%d in %s" % (os.path.basename(filename), line, function)
        if source:
            text += ": " + source
        encoded = text.encode("utf-8", "replace")
        if len(encoded) > 200:
            text = encoded[:200].decode("utf-8", "ignore")
        return text

    def _steps(self):
        if self.torch_steps:
            return self.torch_steps, list(self.torch_times)
        if self.jax_steps:
            return self.jax_steps, list(self.jax_times)
        return self.collective_steps, list(self.collective_times)

    def _write_status(self, now):
        steps, times = self._steps()
        median = 0
        if len(times) >= 2:
            intervals = sorted(b - a for a, b in zip(times, times[1:]))
            middle = len(intervals) // 2
            value = intervals[middle] if len(intervals) % 2 else (intervals[middle - 1] + intervals[middle]) / 2
            median = int(round(value * 1000))
        status = {
            "pid": self.pid,
            "rank": self.rank,
            "unix_ms": int(self.time() * 1000),
            "started_unix_ms": self.started_ms,
            "steps": steps,
            "last_step_unix_ms": int(times[-1] * 1000) if times else 0,
            "median_step_ms": median,
            "phase": self.phase,
            "busy": self.position is not None and now - self.changed_at < self.idle_s,
            "waiting": self.waiting,
            "op": self.op if self.waiting else "",
            "where": self._where(),
            "frameworks": list(self.frameworks),
            "dumped_id": self.dumped_id,
            "sigusr2_dump": self._sigusr2_dumps(),
        }
        self._write_atomically(_STATUS, self.json.dumps(status, separators=(",", ":")).encode() + b"\n")

    def _write_atomically(self, name, data, directory=None):
        directory = directory or self.directory
        temporary = os.path.join(directory, ".%s.tmp" % name)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view):]
        finally:
            os.close(descriptor)
        os.replace(temporary, os.path.join(directory, name))

    # ---- dumps on request --------------------------------------------------------------------

    def _read_request(self):
        try:
            with open(os.path.join(self.directory, _DUMP_REQUEST), "rb") as request:
                text = request.read(4096).decode("utf-8", "replace")
        except OSError:
            return None
        first, _, rest = text.strip().partition(" ")
        try:
            request_id = int(first)
        except ValueError:
            return None
        directory = rest.strip()
        if request_id <= 0 or not directory or request_id in self.answered:
            return None
        if len(self.answered) > 1000:
            self.answered.clear()
        self.answered.add(request_id)
        return request_id, directory

    def _dump(self, request_id, directory):
        problems = []
        try:
            self._make_directories(directory)
            data = self._stacks_text().encode("utf-8", "replace")
            self._write_atomically(_STACKS, data, directory)
        except Exception as error:  # noqa: BLE001
            problems.append("stacks: %s" % error)
        for backend in self._backends()[:1]:  # the default process group's recorder
            try:
                self._write_atomically(_TORCH_FLIGHT_RECORDER, self._fr_json(backend, False), directory)
            except Exception as error:  # noqa: BLE001
                problems.append("fr_trace.json: %s" % error)
            try:
                raw = self._fr_pickle(backend)
                if raw:
                    # The name torch's `python -m torch.distributed.flight_recorder.fr_trace DIR`
                    # reads: <prefix><rank>, with one common prefix.
                    self._write_atomically("fr_trace_rank_%d" % self.rank, raw, directory)
            except Exception as error:  # noqa: BLE001
                problems.append("fr_trace_rank: %s" % error)
        summary = "rank %d: %s" % (self.rank, self._where() or "(no Python frame in the main thread)")
        if problems:
            summary += " (failed: %s)" % "; ".join(problems)
        summary = summary.replace("\r", " ").replace("\n", " ")
        self._write_atomically(_DUMPED, ("%d %s\n" % (request_id, summary)).encode("utf-8", "replace"))
        self.dumped_id = request_id

    def _make_directories(self, directory):
        # Every directory made here is 0777 (the umask takes bits away, so chmod): the sidecar that
        # reads and removes the dumps may run as another uid than the program.
        missing = []
        path = os.path.abspath(directory)
        while not os.path.isdir(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        for path in reversed(missing):
            try:
                os.mkdir(path, 0o777)
            except FileExistsError:
                continue
            try:
                os.chmod(path, 0o777)
            except OSError:
                pass

    def _stacks_text(self):
        import traceback

        names = {thread.ident: thread.name for thread in self.threading.enumerate()}
        frames = sys._current_frames()
        idents = sorted(frames, key=lambda ident: (ident != self.main_ident, ident))
        lines = ["rank %d pid %d: %d Python threads, the main thread first\n" % (self.rank, self.pid, len(idents))]
        for ident in idents:
            marks = []
            if ident == self.main_ident:
                marks.append("main")
            if ident == self.threading.get_ident():
                marks.append("cohort probe")
            lines.append("\nThread %s (ident %d%s):\n" % (
                names.get(ident, "<not started by threading>"), ident, ", " + ", ".join(marks) if marks else ""))
            lines.extend(traceback.format_stack(frames[ident]))
        del frames
        return "".join(lines)


# Function names of decorators and dispatchers: not the "op" a thread waits in.
def _outermost_call(depth, function, args, kwargs):
    """Calls `function`; its result, and whether the call was this thread's outermost one counted
    by `depth` (a threading.local): a counted call made inside another counts once."""
    level = getattr(depth, "level", 0)
    depth.level = level + 1
    try:
        return function(*args, **kwargs), level == 0
    finally:
        depth.level = level


# torch.distributed's collectives whose completed calls count as progress (_patch_torch_collectives).
_TORCH_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                      "reduce_scatter_tensor", "reduce", "all_to_all", "all_to_all_single", "barrier",
                      "gather", "scatter", "all_gather_object", "broadcast_object_list")

_WRAPPER_NAMES = frozenset((
    "wrapper", "wrapped", "_wrapper", "inner", "_inner", "_fn", "fn", "f", "func", "decorate_context",
    "decorator", "__call__", "_call_impl", "_wrapped_call_impl", "new_func", "wrap", "_wrap",
    "reraise_with_filtered_traceback", "cache_miss", "__exit__", "__enter__",
))


class _PostImportFinder:
    """A sys.meta_path entry that runs probe.imported(name, module) right after the import of
    `name` finished, and otherwise finds nothing: every import goes on as before."""

    def __init__(self, probe, names):
        self.probe = probe
        self.names = set(names)
        self.busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names or fullname in self.busy or self.probe.off:
            return None
        self.busy.add(fullname)
        try:
            finders = sys.meta_path
            after = finders[finders.index(self) + 1:] if self in finders else list(finders)
            spec = None
            for finder in after:
                find = getattr(finder, "find_spec", None)
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self.busy.discard(fullname)
        if spec is None:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        probe, names = self.probe, self.names

        def exec_then_patch(module):
            exec_module(module)
            if getattr(module, "__name__", None) != fullname:
                return  # a loader shared with other modules: not the one awaited
            try:
                del loader.exec_module
            except (AttributeError, TypeError):
                pass
            names.discard(fullname)
            if not names:
                try:
                    sys.meta_path.remove(self)
                except ValueError:
                    pass
            probe.imported(fullname, module)

        try:
            loader.exec_module = exec_then_patch  # on this module's loader instance only
        except (AttributeError, TypeError):
            pass  # the probe thread patches it once imported (_patch_if_imported)
        return spec
