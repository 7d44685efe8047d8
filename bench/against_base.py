"""This checkout's router against another commit's, same requests, alternating rounds, one run.

    python -m bench.against_base --base f60fce8 [--base main] [--seconds 3] [--rounds 4]
                                 [--targets resolve,ofrep,trace]

"Above today's" needs today's code measured beside the new, on the same
machine at the same moment: a figure quoted from another day moves 10-30% with
the load of this shared box. This bench unpacks `--base` (any commit: `git
archive`, nothing added to the repository) into a temporary tree, gives each
router its own embedded valkey-server seeded with bindings.example.json by its
own code, and serves both under their own deploy/gunicorn.conf.py with the same
workers (logs and metrics on, as each shipped). The load (wrk when installed,
else the Python keep-alive generator) then alternates base / this checkout for
each target, `--rounds` times (`--base` again: several commits, each its own router):

- resolve: `GET /v1/resolve/summarizer?key=...`, a caller token, 1,000 keys;
- ofrep: `POST /ofrep/v1/evaluate/flags/summarizer`, a fresh targetingKey each;
- trace: `POST /v1/traces`, one new trace per request (bench.serving's).

Prints each row's req/s, latency and the router workers' CPU per request, then
now / base by requests per server CPU-second (the measure that does not move
with what else the machine runs) and by req/s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.load import Sample, drive, gunicorn_app, have_wrk
from bench.ofrep import CONTEXT, JSON_HEADERS, OFREP_SINGLE, per_cpu_second, print_rows
from bench.resolve import HEADERS, PATHS, ROOT, TOKEN, router_env
from bench.serving_load import INGEST_ROLE, OPERATOR, SINGLE, TRACE_HEADERS, _request

#: Each target: (paths, headers, method, body).
TARGETS: dict[str, tuple[list[str], dict[str, str], str, str | None]] = {
    "resolve": (PATHS, HEADERS, "GET", None),
    "ofrep": (OFREP_SINGLE, JSON_HEADERS, "POST", CONTEXT),
    "trace": (["/v1/traces"], TRACE_HEADERS, "POST", SINGLE),
}
LABELS = {"resolve": "GET /v1/resolve", "ofrep": "POST OFREP single",
          "trace": "POST /v1/traces (one trace)"}
#: Seeds a Redis the way the tree it runs in does (its own models and store).
SEED = ("import sys, redis\n"
        "from pathlib import Path\n"
        "from bindings.store import BindingStore\n"
        "from router.cli.serve import load_binding_file, seed_bindings\n"
        "c = redis.Redis.from_url(sys.argv[1])\n"
        "seed_bindings(BindingStore(c), load_binding_file(Path('bindings.example.json')),"
        " 'example')\n")


def unpack(commit: str, into: Path) -> str:
    """Write `commit`'s tree into `into` (git archive); return its short hash."""
    short = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", commit],
                           capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", "--format=tar", short],
                               stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    return short


@contextmanager
def seeded_redis(tree: Path, data_dir: str) -> Iterator[str]:
    """A private embedded valkey-server in `data_dir`, seeded by `tree`'s own code."""
    from router.server.embedded import EmbeddedRedis

    server = EmbeddedRedis(os.path.join(data_dir, "redis"), appendfsync="no")
    url = server.start()
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, "-c", SEED, url], cwd=tree, env=env, check=True)
        yield url
    finally:
        server.stop()


def _env(url: str, data_dir: str) -> dict[str, str]:
    env = router_env(url, data_dir)
    env["ROLEGATE_TOKENS"] += f",op={OPERATOR}:operator"
    return env


@contextmanager
def served(tree: Path, workers: int) -> Iterator[tuple[int, int]]:
    """`tree`'s router on its own seeded Redis, with a caller and an operator token."""
    with tempfile.TemporaryDirectory(prefix="rolegate-base-") as data_dir, \
            seeded_redis(tree, data_dir) as url, \
            gunicorn_app("router:create_app()", _env(url, data_dir), workers,
                         os.path.join(data_dir, "router.log"), root=tree) as (port, master):
        status, body = _request(port, "PUT", f"/v1/bindings/{INGEST_ROLE}",
                                {"current": "cfg_a", "candidate": "cfg_b"})
        if status not in (200, 201):
            raise SystemExit(f"{tree}: creating {INGEST_ROLE} answered {status}: {body}")
        deadline = time.monotonic() + 10
        while _request(port, "GET", f"/v1/resolve/{INGEST_ROLE}?key=k")[0] != 200:
            if time.monotonic() > deadline:  # every worker's copy has it, or near enough
                raise SystemExit(f"{tree}: {INGEST_ROLE} never resolved")
            time.sleep(0.1)
        time.sleep(0.6)
        yield port, master


def run(servers: dict[str, tuple[int, int]], targets: list[str], rounds: int, seconds: float,
        connections: int, use_wrk: bool) -> dict[str, list[Sample]]:
    """Each target on each server once per round, the bases then now, after a warm-up of each."""
    order = [(f"{LABELS[t]} [{side}]", servers[side], TARGETS[t])
             for t in targets for side in servers]
    for _name, (port, _master), (paths, headers, method, body) in order:
        drive(port, paths, headers, 1.0, connections, method=method, body=body,
              use_wrk=use_wrk)
    out: dict[str, list[Sample]] = {name: [] for name, _s, _t in order}
    for _ in range(rounds):
        for name, (port, master), (paths, headers, method, body) in order:
            out[name].append(drive(port, paths, headers, seconds, connections, method=method,
                                   body=body, master=master, use_wrk=use_wrk))
    return out


def main(argv: list[str] | None = None) -> int:
    """Serve every router, run the rounds, print the rows and the now / base ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True, action="append",
                        help="a commit to compare against (again for more than one)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=4, help="alternations base/now")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--targets", default="resolve,ofrep,trace",
                        help="comma-separated: " + ", ".join(TARGETS))
    parser.add_argument("--python-load", action="store_true",
                        help="use the Python load generator even when wrk is installed")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}")
    use_wrk = have_wrk() and not args.python_load
    with ExitStack() as stack:
        trees: dict[str, Path] = {}
        for commit in args.base:
            tree = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rolegate-tree-")))
            trees[unpack(commit, tree)] = tree
        head = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip()
        trees["now"] = ROOT
        print(f"this checkout ({head}) against {', '.join(list(trees)[:-1])}: "
              f"cpus={os.cpu_count()} workers={args.workers} (each tree's "
              f"deploy/gunicorn.conf.py), load={'wrk' if use_wrk else 'python'} "
              f"{args.connections} keep-alive connections, {args.rounds} rounds x "
              f"{args.seconds:g}s, alternating, loopback", flush=True)
        servers = {name: stack.enter_context(served(tree, args.workers))
                   for name, tree in trees.items()}
        for name, (port, _master) in servers.items():
            # Which code answers: each tree's resolve has its own fields (run_id came later).
            _status, answer = _request(port, "GET", f"{PATHS[1]}", token=TOKEN)
            print(f"  {name}: a resolve answers {', '.join(sorted(answer))}")
        results = run(servers, targets, args.rounds, args.seconds, args.connections, use_wrk)
    rows = print_rows(results)
    for target in targets:
        now = rows[f"{LABELS[target]} [now]"]
        for base_name in list(trees)[:-1]:
            base = rows[f"{LABELS[target]} [{base_name}]"]
            print(f"  {LABELS[target]}, now / {base_name}: "
                  f"{per_cpu_second(now) / per_cpu_second(base):.2f} by requests per server "
                  f"CPU-second ({per_cpu_second(base):.0f} -> {per_cpu_second(now):.0f}); "
                  f"{now[0] / base[0] if base[0] else float('nan'):.2f} by req/s")
    return 1 if sum(row[3] for row in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
