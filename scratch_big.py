import sys, time
sys.path.insert(0, "tests")
from constrain_fixtures import load_default_tokenizer
from sgrun.constrain import compile_constraint
from sgrun.constrain.tool_calls import ToolCallConstraint
from sgrun.constrain.shortest_completion import shortest_completion
from sgrun.constrain.budget import budgeted_matcher
tok = load_default_tokenizer()
tools = [{"type":"function","function":{"name":f"tool_{i}","parameters":{"type":"object","properties":{f"arg_{j}":{"type":["string","integer"][j%2]} for j in range(6)},"required":[f"arg_{j}" for j in range(3)]}}} for i in range(128)]
tc = ToolCallConstraint.from_dict({"format":"hermes","tools":tools,"mode":"required"})
t=time.perf_counter(); c = compile_constraint(tok, tool_calls=tc); t1=time.perf_counter()
print("compile", round(t1-t,3), "nfa states", len(c.dfa.nfa.edges))
sc = shortest_completion(c); t2=time.perf_counter()
n = sc.tokens_needed(c.initial_state); t3=time.perf_counter()
print("distances", round(t2-t1,3), "need", n, round(t3-t2,4))
t=time.perf_counter(); f = budgeted_matcher(c, 30); print("budget check", round(time.perf_counter()-t,4))
import torch
m = f(); row = torch.zeros(c.table.words, dtype=torch.int32)
t=time.perf_counter(); m.fill_bitmask(row); print("first steered mask", round(time.perf_counter()-t,4))
