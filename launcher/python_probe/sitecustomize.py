# Cohort's Python start-up hook (docs/faults.md, "Progress of unmodified Python programs").
#
# cohort-launch puts this directory first on PYTHONPATH, so Python's `site` imports this file as
# `sitecustomize`. It runs the next `sitecustomize` on sys.path (the image's own, Debian's,
# conda's) as if this file were not there, then starts the progress probe of _cohort_probe.py in
# the rank's own process only (COHORT_PROBE_PPID; COHORT_PYTHON_PROBE=0 turns it off). Nothing
# here may change what the program does or prints: a failure of the probe prints one line to
# stderr and the probe steps aside; an error of the chained sitecustomize is raised as it would
# have been without this file (site.py prints "Error in sitecustomize ..." and goes on).


def _cohort_sitecustomize(this_file):
    import os
    import sys

    def say(error):
        try:
            sys.stderr.write("cohort python probe: disabled: %s: %s\n" % (type(error).__name__, error))
        except BaseException:  # noqa: BLE001
            pass

    here = None
    chained_error = None
    probe = None
    try:
        # Only the rank's own process loads the probe (its children pay nothing more).
        environ = os.environ
        wanted = (environ.get("COHORT_PYTHON_PROBE", "1").strip() != "0" and environ.get("COHORT_PROBE_DIR")
                  and environ.get("COHORT_PROBE_PPID", "").strip().isdigit()
                  and os.getppid() == int(environ["COHORT_PROBE_PPID"]))
        if wanted:
            # Its .pyc is written even under PYTHONDONTWRITEBYTECODE=1 (common in images): without
            # one, every rank compiles it again (~10 ms, ~1.7 MiB of RSS that stays).
            dont_write_bytecode = sys.dont_write_bytecode
            sys.dont_write_bytecode = False
            try:
                import _cohort_probe as probe  # before this directory leaves sys.path
            finally:
                sys.dont_write_bytecode = dont_write_bytecode
    except BaseException as error:  # noqa: BLE001
        say(error)
    try:
        here = os.path.realpath(os.path.dirname(os.path.abspath(this_file)))

        def is_here(entry):
            try:
                return os.path.realpath(os.path.abspath(entry or os.curdir)) == here
            except (OSError, ValueError, TypeError):
                return False

        # This directory leaves sys.path: the program sees the sys.path it would have had.
        sys.path[:] = [entry for entry in sys.path if not is_here(entry)]
    except BaseException as error:  # noqa: BLE001
        say(error)

    # The next sitecustomize, as `import sitecustomize` would have found it without this file.
    try:
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", list(sys.path))
    except BaseException as error:  # noqa: BLE001
        say(error)
        spec = None
    if spec is not None and spec.loader is not None:
        try:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
        except BaseException as error:  # noqa: BLE001 - raised below, after the probe started
            chained_error = error

    if probe is not None:
        try:
            probe.start()
        except BaseException as error:  # noqa: BLE001
            say(error)

    if chained_error is not None:
        try:
            raise chained_error
        finally:
            chained_error = None


_cohort_sitecustomize(__file__)
del _cohort_sitecustomize
