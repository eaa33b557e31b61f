"""The router's parts without servers: the approximate prefix tree, the routing policies, the
prompt key, the replica command line and the merged /metrics."""

import argparse
import random

from prometheus_client.parser import text_string_to_metric_families

from sgrun.server.cli_commands import add_serve_parser
from sgrun.server.prefix_tree import PrefixTree
from sgrun.server.replica_metrics import render_merged_metrics
from sgrun.server.replicas import argv_from_namespace
from sgrun.server.router import prompt_key
from sgrun.server.routing_policy import Replica, RoutingPolicy


def test_prefix_tree_matches_longest_prefix_and_splits_edges():
    t = PrefixTree()
    t.insert("system prompt A; user: hello")
    t.insert("system prompt A; user: goodbye")
    t.insert("system prompt B")
    assert t.match("system prompt A; user: hello there") == len("system prompt A; user: hello")
    assert t.match("system prompt A; user: good") == len("system prompt A; user: good")
    assert t.match("system prompt C") == len("system prompt ")
    assert t.match("other") == 0
    assert t.size == len("system prompt A; user: hello") + len("goodbye") + len("B")


def test_prefix_tree_matches_a_brute_force_reference():
    rng = random.Random(0)
    t, stored = PrefixTree(), []
    for _ in range(300):
        s = "".join(rng.choice("ab") for _ in range(rng.randint(1, 12)))
        t.insert(s)
        stored.append(s)
        q = "".join(rng.choice("ab") for _ in range(rng.randint(0, 14)))
        best = max(len(_common(q, x)) for x in stored)
        assert t.match(q) == best


def _common(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_prefix_tree_evicts_least_recently_used_first():
    t = PrefixTree(max_chars=30)
    t.insert("a" * 10)
    t.insert("b" * 10)
    t.match("a" * 10)                 # a is now more recent than b
    t.insert("c" * 15)                # over the cap: b goes, a stays
    assert t.match("a" * 10) == 10
    assert t.match("b" * 10) == 0
    assert t.size <= 30


def test_cache_aware_sends_a_prefix_back_to_its_replica():
    replicas = [Replica(url=f"http://w{i}", index=i) for i in range(2)]
    policy = RoutingPolicy("cache_aware")
    prefixes = [f"agent {a} system prompt " + "x" * 200 for a in range(8)]
    first = {a: policy.choose(replicas, prefixes[a] + "turn 0").index for a in range(8)}
    assert set(first.values()) == {0, 1}          # new prefixes spread over both replicas
    for turn in range(1, 4):
        for a in range(8):
            assert policy.choose(replicas, prefixes[a] + f"turn {turn}").index == first[a]


def test_cache_aware_falls_back_to_least_loaded_when_imbalanced():
    replicas = [Replica(url=f"http://w{i}", index=i) for i in range(2)]
    policy = RoutingPolicy("cache_aware", balance_abs_threshold=4, balance_rel_threshold=1.5)
    hot = "the same hot prefix " * 20
    assert policy.choose(replicas, hot).index == 0
    replicas[0].in_flight = 10                    # replica 0 is swamped
    assert policy.choose(replicas, hot + "again").index == 1
    replicas[0].healthy = False
    replicas[0].in_flight = 0
    assert policy.choose(replicas, hot).index == 1  # never a replica out of rotation
    replicas[1].healthy = False
    assert policy.choose(replicas, hot) is None


def test_round_robin_and_least_load():
    replicas = [Replica(url=f"http://w{i}", index=i) for i in range(3)]
    rr = RoutingPolicy("round_robin")
    assert [rr.choose(replicas, "p").index for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    replicas[0].in_flight, replicas[1].in_flight, replicas[2].in_flight = 3, 1, 2
    assert RoutingPolicy("least_load").choose(replicas, "p").index == 1


def test_prompt_key_follows_what_the_replica_caches():
    chat = {"tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [{"role": "system", "content": "S"},
                         {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    key = prompt_key("/v1/chat/completions", chat)
    assert key.index('"name":"f"') < key.index("<system>S") < key.index("<user>hi")
    assert prompt_key("/v1/completions", {"prompt": ["first", "second"]}) == "first"
    assert prompt_key("/generate", {"input_ids": [1, 2, 3]}) == "1 2 3"
    assert prompt_key("/generate", {"text": "abc"}) == "abc"
    assert prompt_key("/v1/completions", ["not", "a", "dict"]) == ""


def test_replica_argv_reproduces_the_serve_options():
    sub = argparse.ArgumentParser().add_subparsers()
    p = add_serve_parser(sub)
    args = p.parse_args(["--model", "m.gguf", "--dp", "2", "--port", "9000", "--disable-prefix-cache",
                         "--served-model-name", "a", "--served-model-name", "b", "--max-running", "8"])
    argv = argv_from_namespace(p, args, skip={"dp", "host", "port", "num_threads", "router_policy"})
    again = p.parse_args(argv)
    for name in ("model", "disable_prefix_cache", "served_model_name", "max_running", "dtype"):
        assert getattr(again, name) == getattr(args, name)
    assert "--port" not in argv and "--dp" not in argv


def test_merged_metrics_label_each_replica_once_per_family():
    replicas = [Replica(url=f"http://w{i}", index=i) for i in range(2)]
    text = ('# HELP sgrun_kv_pages KV pool pages by state\n# TYPE sgrun_kv_pages gauge\n'
            'sgrun_kv_pages{state="in_use"} %d\n# HELP sgrun_requests_total Finished\n'
            '# TYPE sgrun_requests_total counter\nsgrun_requests_total{kind="chat",status="ok"} %d\n')
    out = render_merged_metrics(replicas, [text % (3, 5), text % (0, 7)]).decode()
    fams = {f.name: f for f in text_string_to_metric_families(out)}
    pages = {s.labels["replica"]: s.value for s in fams["sgrun_kv_pages"].samples}
    assert pages == {"0": 3.0, "1": 0.0}
    reqs = {s.labels["replica"]: s.value for s in fams["sgrun_requests"].samples}
    assert reqs == {"0": 5.0, "1": 7.0}
    assert {s.labels["replica"] for s in fams["sgrun_router_replica_healthy"].samples} == {"0", "1"}
    assert out.count("# TYPE sgrun_kv_pages ") == 1
