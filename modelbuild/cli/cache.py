"""`modelbuild clean` and `modelbuild cache`: what removes or checks what the store holds, each alone on it."""

from __future__ import annotations

import contextlib
import json
import shutil

from modelbuild.cli.common import EXIT_OK, EXIT_STALE, project_of, relative
from modelbuild.engine.events import Status
from modelbuild.engine.scheduler import Options
from modelbuild.errors import EnvironmentFailure, ModelbuildError


def cmd_clean(args, console) -> int:
    if args.tuning and not args.all:
        raise ModelbuildError("--tuning only goes with --all (fix: modelbuild clean --all --tuning)")
    project = project_of(args)
    with _alone_on(project.store, "clean"):
        shutil.rmtree(project.build_dir, ignore_errors=True)
        console.print(f"removed {relative(project.build_dir)}", markup=False)
        if args.all:
            keep = () if args.tuning else (project.tuning_root,)
            project.store.clear(keep=keep + (project.store.store_lock(shared=False).path,))
            kept = (
                f" (kept tuning databases in {relative(project.tuning_root)}; --tuning removes them)"
                if keep and project.tuning_root.exists()
                else ""
            )
            console.print(f"emptied {relative(project.store.root)}{kept}", markup=False)
    return EXIT_OK


@contextlib.contextmanager
def _alone_on(store, command: str):
    """The store's exclusive lock, for commands that remove what a running build may be using."""
    lock = store.store_lock(shared=False)
    if store.root.exists() and not lock.try_acquire():
        raise EnvironmentFailure(
            f"a build is running on the cache {relative(store.root)}: run `modelbuild {command}` when it has finished"
        )
    try:
        yield
    finally:
        lock.release()


def cmd_cache(args, console) -> int:
    project = project_of(args)
    if args.action == "verify":
        return _cache_verify(project, args, console)
    if args.action == "gc":
        return _cache_gc(project, args, console)
    stats = project.store.stats()
    entries, size = project.store.usage()
    data = {"entries": entries, "bytes": size, **stats.as_dict()}
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    console.print(
        f"entries {entries}  bytes {size}  hits {stats.hits}  misses {stats.misses}  "
        f"hit rate {stats.hit_rate:.2f}  mean hit {stats.mean_hit * 1000:.1f} ms  "
        f"mean miss {stats.mean_miss:.2f} s",
        markup=False,
    )
    return EXIT_OK


def _cache_verify(project, args, console) -> int:
    from modelbuild.engine.housekeeping import verify

    with _alone_on(project.store, "cache verify"):
        damaged = verify(project.store, fix=args.fix)
    if args.json:
        print(
            json.dumps(
                {"damaged": [{"path": str(d.path), "reason": d.reason} for d in damaged], "removed": args.fix}, indent=2
            )
        )
    for d in damaged if not args.json else ():
        console.print(f"{'removed' if args.fix else 'DAMAGED'} {relative(d.path)}: {d.reason}", markup=False)
    if not args.json:
        entries, size = project.store.usage()
        fix = "" if args.fix or not damaged else " (fix: modelbuild cache verify --fix removes them)"
        console.print(
            f"checked the cache: {len(damaged)} damaged{fix}; {entries} entries, {size} bytes of objects intact",
            markup=False,
        )
    return EXIT_STALE if damaged and not args.fix else EXIT_OK


def _cache_gc(project, args, console) -> int:
    from modelbuild.engine.housekeeping import collect_garbage, parse_size

    if args.max_size is None and args.max_age is None:
        raise ModelbuildError("cache gc needs a limit (fix: modelbuild cache gc --max-size 20G, or --max-age 30)")
    max_bytes = parse_size(args.max_size) if args.max_size is not None else None
    keep = frozenset() if args.include_current else _current_keys(project)
    with _alone_on(project.store, "cache gc"):
        done = collect_garbage(project.store, max_bytes=max_bytes, max_age_days=args.max_age, keep=keep)
    if args.json:
        print(json.dumps(vars(done), indent=2))
        return EXIT_OK
    over = (
        (
            f"; {done.kept_for_recipe} entries over the limit kept because this recipe's builds use them "
            "(--include-current evicts them too)"
        )
        if done.kept_for_recipe
        else ""
    )
    console.print(
        f"removed {done.entries_removed} entries and {done.objects_removed} objects, freed "
        f"{done.bytes_freed} bytes; {done.bytes_left} bytes left{over}",
        markup=False,
    )
    return EXIT_OK


def _current_keys(project) -> frozenset[str]:
    """The keys of every stage of this recipe that is cached now: what the next build will reuse."""
    run = project.run([], Options(dry_run=True))
    return frozenset(r.key for r in run.results.values() if r.status is Status.CACHED and r.key)
