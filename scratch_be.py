import faulthandler, sys; faulthandler.dump_traceback_later(240, repeat=True, file=sys.stderr)
import time, json, sys
sys.path.insert(0, "/work/wt/cdecode/tests")
import sgrun, jsonschema
from sgrun.constrain import compile_constraint
from sgrun.constrain.shortest_completion import shortest_completion
eng = sgrun.Engine(num_threads=2)
tok = eng.tokenizer
sch = {"type":"object","properties":{"user":{"type":"object","properties":{"first_name":{"type":"string"},"last_name":{"type":"string"},"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","city","zip"]}},"required":["first_name","last_name","address"]},"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku","qty"]},"minItems":3}},"required":["user","items"]}
c = compile_constraint(tok, json_schema=sch)
need = shortest_completion(c).tokens_needed(c.initial_state)
print("need", need)
prompt = tok.apply_chat_template([{"role":"user","content":"Describe a customer order for Alice Smith living at 12 Long Street, Springfield, with three items, as JSON."}], add_generation_prompt=True)
for budget in (need, need+2, need+10, need+40, 200):
    for temp in (0.0, 0.8):
        t=time.perf_counter()
        out = eng.generate(prompt, sgrun.SamplingParams(max_new_tokens=budget, temperature=temp, seed=1, json_schema=sch))[0]
        ok = True
        try: jsonschema.validate(json.loads(out.text), sch)
        except Exception as e: ok = repr(e)[:80]
        print(budget, temp, out.finish_reason, len(out.token_ids), ok, f"{time.perf_counter()-t:.2f}s", out.text[:150])
try:
    eng.generate(prompt, sgrun.SamplingParams(max_new_tokens=need-1, json_schema=sch))
except Exception as e:
    print(type(e).__name__, e)
eng.close()
