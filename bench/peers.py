"""rolegate's in-process resolve beside peer flag SDKs, in one run (issue 38).

    pip install -e '.[bench]'      # the peer SDKs
    python -m bench.peers [--calls 200000] [--rounds 10] [--roles 1000] [--only Eppo,...]

Every contender answers the same question for the same job keys: which arm of a
flag that sends 10% of keys to the candidate. Every SDK runs offline from a
configuration handed to it in-process, with events, metrics and exposure
sending off (rolegate's client still counts exposures in-process, as it does in
production; its sender thread has nowhere to send them):

- rolegate: `rolegate.Client.resolve`, bootstrapped from a `GET /v1/bindings` body;
- LaunchDarkly server SDK: `LDClient.variation`, the flag in its in-memory store (daemon mode);
- GrowthBook: `GrowthBook.get_feature_value` with a 10% rollout rule, attributes set per call;
- Unleash: `UnleashClient.is_enabled`, a 10% flexibleRollout from a bootstrapped cache;
- Flagsmith: the flag engine's `get_evaluation_result` (what its local-evaluation SDK runs)
  on a 90/10 multivariate feature with the job as identity;
- Eppo: `EppoClient.get_string_assignment` from an initial configuration (Rust core).

Latency: the contenders take turns over `--rounds` rounds, each timing every call
with perf_counter_ns (less the cost of timing an empty call), so the shared
machine's noise hits them alike; calls/s come from an untimed loop over the same
keys. The loaded SDKs are frozen out of the garbage collector first (`gc.freeze`),
so one contender's allocations never pay for scanning the others' heaps. Memory: each SDK is loaded with 1 and with `--roles` flags in a fresh
child process (its modules imported first), measured with tracemalloc: what the
SDK's Python objects hold once loading's garbage is collected. Eppo's and
Unleash's flag stores live in their native (Rust) cores, which tracemalloc cannot
see: theirs is the growth of the resident set instead (after malloc_trim), which
rounds to pages at 1 role. Both columns are printed for every SDK.
Ratios are peer / rolegate (above 1: rolegate is faster or smaller).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.client_resolve import interleaved

FLAG = "summarizer"
SHARE = 0.1
#: One arm per answer, so every contender's answer can be checked for a ~10% split.
Call = Callable[[str], str]


def flag_name(index: int) -> str:
    """The n-th flag/role: the first is the one every contender resolves."""
    return FLAG if index == 0 else f"{FLAG}-{index}"


# -- rolegate -------------------------------------------------------------------

#: The body every config of the bench's table has registered (a small agent).
BODY = {"mode": "agent", "model": {"name": "model-x", "parameters": {"temperature": 0.2}},
        "instructions": "Summarize the document; keep every table.",
        "tools": [{"name": "search", "description": "Search the corpus.",
                   "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]}


def rolegate_config(roles: int) -> bytes:
    """A `GET /v1/bindings` body (the client's view) with `roles` roles on a 10% canary.

    Every config has a body, named by its version as the SDK asks for them
    (`?bodies=versions`: fetched when a role is first resolved); the timed flag's two
    bodies are in it already, as a client that resolved the flag holds them.
    """
    from bindings.models import Binding, VersionedBinding
    from router.api.client_view import client_record

    records = {}
    for n in range(roles):
        role = flag_name(n)
        # As the API writes a rollout: its own salt, bucketing version 2.
        binding = Binding(current=f"{role}@1", candidate=f"{role}@2", stage="canary",
                          share=SHARE, stage_since=1_700_000_000.0 + n, salt=f"salt{n}",
                          bucket_version=2)
        record = VersionedBinding(role=role, version=2, binding=binding,
                                  updated_at=1_700_000_000.0, updated_by="bench")
        records[role] = client_record(record)
    versions = {config: 1 for role in records for config in (f"{role}@1", f"{role}@2")}
    held = {config: BODY for config in (f"{FLAG}@1", f"{FLAG}@2") if config in versions}
    return json.dumps({"generation": 1, "roles": records, "body_versions": versions,
                       "bodies": held}).encode()


def rolegate_load(config: bytes) -> tuple[Any, Call]:
    from rolegate.client import Client

    # Nothing listens on port 9: the client answers from its bootstrap file, offline (a
    # path: a dict would stay referenced by the client's config, and count as its memory).
    path = Path(tempfile.mkdtemp(prefix="rolegate-")) / "bindings.json"
    path.write_bytes(config)
    client = Client("http://127.0.0.1:9", "bench", bootstrap=path,
                    start_timeout=0, subscribe=False, refresh_interval=3600.0)
    resolve = client.resolve

    def call(key: str) -> str:
        arm: str = resolve(FLAG, key)["arm"]
        return arm
    return client, call


# -- LaunchDarkly ---------------------------------------------------------------

def launchdarkly_config(roles: int) -> bytes:
    flags = {}
    for n in range(roles):
        key = flag_name(n)
        flags[key] = {
            "key": key, "version": 1, "on": True, "salt": key, "deleted": False,
            "variations": ["current", "candidate"], "offVariation": 0,
            "fallthrough": {"rollout": {"variations": [
                {"variation": 0, "weight": round((1 - SHARE) * 100_000)},
                {"variation": 1, "weight": round(SHARE * 100_000)}]}},
            "targets": [], "contextTargets": [], "rules": [], "prerequisites": [],
            "trackEvents": False, "trackEventsFallthrough": False}
    return json.dumps(flags).encode()


def launchdarkly_load(config: bytes) -> tuple[Any, Call]:
    from ldclient.client import LDClient
    from ldclient.config import Config
    from ldclient.context import Context
    from ldclient.feature_store import InMemoryFeatureStore
    from ldclient.versioned_data_kind import FEATURES, SEGMENTS

    # The SDK leaves these two unannotated (its store's __init__ and init take no types);
    # without the bench extra installed they are Any, and the ignores go unused.
    store = InMemoryFeatureStore()  # type: ignore[no-untyped-call, unused-ignore]
    store.init({FEATURES: json.loads(config),  # type: ignore[no-untyped-call, unused-ignore]
                SEGMENTS: {}})
    # Daemon mode: the SDK reads its store and never connects; no events are sent.
    client = LDClient(config=Config("bench-sdk-key", feature_store=store, use_ldd=True,
                                    send_events=False, diagnostic_opt_out=True))
    variation, create = client.variation, Context.create

    def call(key: str) -> str:
        arm: str = variation(FLAG, create(key), "current")
        return arm
    return client, call


# -- GrowthBook -----------------------------------------------------------------

def growthbook_config(roles: int) -> bytes:
    features = {flag_name(n): {"defaultValue": "current", "rules": [
        {"force": "candidate", "coverage": SHARE, "hashAttribute": "id"}]}
        for n in range(roles)}
    return json.dumps(features).encode()


def growthbook_load(config: bytes) -> tuple[Any, Call]:
    from growthbook import GrowthBook

    client = GrowthBook(features=json.loads(config))
    set_attributes, value = client.set_attributes, client.get_feature_value

    def call(key: str) -> str:
        set_attributes({"id": key})
        arm: str = value(FLAG, "current")
        return arm
    return client, call


# -- Unleash --------------------------------------------------------------------

def unleash_config(roles: int) -> bytes:
    features = [{"name": flag_name(n), "enabled": True, "type": "release", "strategies": [
        {"name": "flexibleRollout", "parameters": {
            "rollout": str(round(SHARE * 100)), "stickiness": "userId", "groupId": flag_name(n)}}]}
        for n in range(roles)]
    return json.dumps({"version": 2, "features": features}).encode()


def unleash_load(config: bytes) -> tuple[Any, Call]:
    from UnleashClient.cache import FileCache
    from UnleashClient.clients.unleash_client import UnleashClient

    cache = FileCache("rolegate-bench", directory=tempfile.mkdtemp(prefix="unleash-"))
    cache.bootstrap_from_dict(json.loads(config))
    client = UnleashClient(url="http://127.0.0.1:9", app_name="rolegate-bench",
                           disable_metrics=True, disable_registration=True, cache=cache)
    client.initialize_client(fetch_toggles=False)
    enabled = client.is_enabled

    def call(key: str) -> str:
        return "candidate" if enabled(FLAG, {"userId": key}) else "current"
    return client, call


# -- Flagsmith ------------------------------------------------------------------

def flagsmith_config(roles: int) -> bytes:
    features = {flag_name(n): {
        "key": str(n), "name": flag_name(n), "enabled": True, "value": "current",
        "variants": [{"value": "candidate", "weight": SHARE * 100, "priority": 0}]}
        for n in range(roles)}
    return json.dumps({"environment": {"key": "bench", "name": "bench"},
                       "features": features}).encode()


def flagsmith_load(config: bytes) -> tuple[Any, Call]:
    from flag_engine.context.types import EvaluationContext
    from flag_engine.engine import get_evaluation_result

    context: EvaluationContext[Any, Any] = json.loads(config)
    if len(context["features"]) > 1:
        # The engine evaluates every feature of the environment per identity;
        # resolving one flag, time the environment of that one flag.
        timed: EvaluationContext[Any, Any] = {
            **context, "features": {FLAG: context["features"][FLAG]}}
    else:
        timed = context

    def call(key: str) -> str:
        result = get_evaluation_result({**timed, "identity": {
            "identifier": key, "key": f"bench_{key}"}})
        arm: str = result["flags"][FLAG]["value"]
        return arm
    return context, call


# -- Eppo -----------------------------------------------------------------------

def eppo_config(roles: int) -> bytes:
    shards = 10_000
    flags = {}
    for n in range(roles):
        key = flag_name(n)
        cut = round(SHARE * shards)
        flags[key] = {
            "key": key, "enabled": True, "variationType": "STRING", "totalShards": shards,
            "variations": {arm: {"key": arm, "value": arm} for arm in ("current", "candidate")},
            "allocations": [{"key": "rollout", "rules": [], "doLog": False, "splits": [
                {"variationKey": "candidate",
                 "shards": [{"salt": f"{key}-split", "ranges": [{"start": 0, "end": cut}]}]},
                {"variationKey": "current",
                 "shards": [{"salt": f"{key}-split",
                             "ranges": [{"start": cut, "end": shards}]}]}]}]}
    return json.dumps({"createdAt": "2026-01-01T00:00:00Z", "format": "SERVER",
                       "environment": {"name": "bench"}, "flags": flags}).encode()


def eppo_load(config: bytes) -> tuple[Any, Call]:
    import eppo_client
    from eppo_client import AssignmentLogger, ClientConfig, Configuration

    # Without the bench extra installed, AssignmentLogger is Any (pyproject's override).
    class Silent(AssignmentLogger):  # type: ignore[misc, unused-ignore]
        def log_assignment(self, event: dict[str, Any]) -> None:
            pass

    client = eppo_client.init(ClientConfig(
        api_key="bench", base_url="http://127.0.0.1:9", assignment_logger=Silent(),
        poll_interval_seconds=None,
        initial_configuration=Configuration(flags_configuration=config)))
    assign = client.get_string_assignment
    empty: dict[str, Any] = {}

    def call(key: str) -> str:
        arm: str = assign(FLAG, key, empty, "current")
        return arm
    return client, call


#: SDKs whose flag store lives in a native core: measured by resident-set growth.
NATIVE = frozenset({"Eppo", "Unleash"})

CONTENDERS: dict[str, tuple[Callable[[int], bytes], Callable[[bytes], tuple[Any, Call]]]] = {
    "rolegate": (rolegate_config, rolegate_load),
    "Eppo": (eppo_config, eppo_load),
    "Flagsmith": (flagsmith_config, flagsmith_load),
    "GrowthBook": (growthbook_config, growthbook_load),
    "LaunchDarkly": (launchdarkly_config, launchdarkly_load),
    "Unleash": (unleash_config, unleash_load),
}


def _rss_bytes() -> int:
    gc.collect()
    try:  # hand freed heap pages back, so the resident set counts what is held
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(name: str, roles: int) -> dict[str, float]:
    """In this process (a fresh child): bytes the SDK holds for `roles` flags."""
    make, load = CONTENDERS[name]
    config = make(roles)
    # Import the SDK first: its modules are not the flags' cost.
    held = load(make(1))
    gc.collect()
    rss0 = _rss_bytes()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    held = load(config)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    rss = _rss_bytes() - rss0
    del held
    return {"traced": traced, "rss": rss}


def memory_in_child(name: str, roles: int) -> dict[str, float]:
    """Run measure_memory in a fresh interpreter, so one SDK's leftovers never count for another."""
    out = subprocess.run([sys.executable, __file__, "--memory-child", name, str(roles)],
                         capture_output=True, text=True, timeout=300, check=True)
    measured: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return measured


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    """Time every contender in alternating rounds, measure memory, print ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="timed calls per contender")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--roles", type=int, default=1_000, help="flags for the memory figure")
    parser.add_argument("--only", default="", help="comma-separated contenders (default: all)")
    parser.add_argument("--memory-child", nargs=2, metavar=("SDK", "ROLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(measure_memory(args.memory_child[0], int(args.memory_child[1]))))
        return
    names = [n for n in CONTENDERS if not args.only or n in args.only.split(",")]
    if "rolegate" not in names:
        names.insert(0, "rolegate")
    keys = [f"job-{n}" for n in range(args.calls)]
    calls: dict[str, Call] = {}
    held = []
    for name in names:
        make, load = CONTENDERS[name]
        sdk, call = load(make(1))
        held.append(sdk)
        share = sum(call(k) == "candidate" for k in keys[:20_000]) / 20_000
        if not 0.08 <= share <= 0.12:
            raise SystemExit(f"{name}: {share:.3f} of keys went to the candidate, not ~{SHARE}")
        calls[name] = call
    # Every SDK's loaded objects out of the collector's way: a contender that allocates
    # (rolegate answers a dict) would otherwise pay for scanning the other SDKs' heaps.
    gc.collect()
    gc.freeze()
    print(f"in-process resolve, one flag at {SHARE:.0%} to the candidate, {args.calls} keys, "
          f"{args.rounds} alternating rounds (python {sys.version.split()[0]})")
    samples, means = interleaved(calls, keys, rounds=args.rounds)
    rows = {}
    for name in names:
        ordered = sorted(samples[name])
        rows[name] = (percentile(ordered, 0.5) / 1e3, percentile(ordered, 0.99) / 1e3,
                      1e9 / means[name])
    ours = rows["rolegate"]
    print(f"  {'SDK':<13}{'p50 µs':>9}{'p99 µs':>9}{'calls/s':>11}   "
          f"{'p50 x':>7}{'p99 x':>7}{'calls/s x':>10}")
    for name in names:
        p50, p99, rate = rows[name]
        print(f"  {name:<13}{p50:9.2f}{p99:9.2f}{rate:11,.0f}   {p50 / ours[0]:7.2f}"
              f"{p99 / ours[1]:7.2f}{ours[2] / rate:10.2f}")
    print(f"\nSDK memory, bytes: the whole SDK at 1 role, and per role at {args.roles:,} roles "
          f"(fresh process each; x = peer / rolegate)")
    memory = {}
    for name in names:
        one, many = memory_in_child(name, 1), memory_in_child(name, args.roles)
        pick = "rss" if name in NATIVE else "traced"
        memory[name] = (one[pick], many[pick] / args.roles, many, pick)
    ours_mem = memory["rolegate"]
    print(f"  {'SDK':<13}{'1 role':>10}{f'per role at {args.roles:,}':>18}{'measured':>10}"
          f"{'traced':>9}{'rss':>9}{'x':>7}")
    for name in names:
        one_b, per_role, many, pick = memory[name]
        print(f"  {name:<13}{one_b:10,.0f}{per_role:18,.0f}{pick:>10}"
              f"{many['traced'] / args.roles:9,.0f}{many['rss'] / args.roles:9,.0f}"
              f"{per_role / ours_mem[1]:7.2f}")
    for sdk in held:
        close = getattr(sdk, "close", None) or getattr(sdk, "destroy", None)
        if callable(close):
            try:
                close()
            except Exception:  # a peer's shutdown is not what is measured
                pass
    time.sleep(0)


if __name__ == "__main__":
    main()
