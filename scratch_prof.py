import sys, time, cProfile, pstats
sys.path.insert(0, "tests")
from constrain_fixtures import load_default_tokenizer
from sgrun.constrain import compile_constraint
from sgrun.constrain.tool_calls import ToolCallConstraint
from sgrun.constrain.shortest_completion import NfaDistances
tok = load_default_tokenizer()
tools = [{"type":"function","function":{"name":f"tool_{i}","parameters":{"type":"object","properties":{f"arg_{j}":{"type":["string","integer"][j%2]} for j in range(6)},"required":[f"arg_{j}" for j in range(3)]}}} for i in range(128)]
tc = ToolCallConstraint.from_dict({"format":"hermes","tools":tools,"mode":"required"})
c = compile_constraint(tok, tool_calls=tc)
nfa = c.dfa.nfa
print("frags", len(nfa.frag_start), "states", len(nfa.edges))
cProfile.run("NfaDistances(nfa)", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("cumtime").print_stats(8)
