import sys, json
sys.path.insert(0, "tests")
from constrain_fixtures import load_default_tokenizer
from sgrun.constrain import compile_constraint
tok = load_default_tokenizer()
W = {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}
legacy = {"type":"structural_tag","structures":[{"begin":"<function=get_weather>","schema":W,"end":"</function>"}],"triggers":["<function="]}
c = compile_constraint(tok, structural_tag=legacy)
for t, want in [('hi <function=get_weather>{"city":"Paris"}</function> done', True), ('hi', True), ('<function=get_x>{}', False), ('<function=get_weather>{"town":1}</function>', False), ('a<function=get_weather>{"city":"x"}</function>b<function=get_weather>{"city":"y"}</function>', True)]:
    print(c.matches_bytes(t.encode()) == want, t)
fmt = {"type":"structural_tag","format":{"type":"sequence","elements":[{"type":"tag","begin":"<think>","content":{"type":"any_text"},"end":"</think>"},{"type":"triggered_tags","triggers":["<tool_call>"],"tags":[{"begin":"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ","content":{"type":"json_schema","json_schema":W},"end":"}\n</tool_call>"}],"at_least_one":False,"stop_after_first":False}]}}
c2 = compile_constraint(tok, structural_tag=fmt)
for t, want in [('<think>let me see</think>ok <tool_call>\n{"name": "get_weather", "arguments": {"city":"Rome"}}\n</tool_call>', True),
                ('<think>a</think></think>x', True), ('<think>a</think><tool_call>\n{"name": "other"', False), ('no think', False)]:
    print(c2.matches_bytes(t.encode()) == want, repr(t))
fmt3 = {"type":"structural_tag","format":{"type":"or","elements":[{"type":"json_schema","json_schema":W},{"type":"tags_with_separator","tags":[{"begin":"<a>","content":{"type":"regex","pattern":"[0-9]+"},"end":"</a>"}],"separator":",","at_least_one":True}]}}
c3 = compile_constraint(tok, structural_tag=fmt3)
for t, want in [('{"city":"x"}', True), ('<a>1</a>,<a>22</a>', True), ('', False), ('<a>x</a>', False)]:
    print(c3.matches_bytes(t.encode()) == want, repr(t))
for bad in [{"structures":[{"begin":"<f>","schema":W,"end":"</f>"}],"triggers":["<g>"]}, {"format":{"type":"grammar","grammar":"x"}}, {"format":{"type":"tag","begin":"a"}}, {"structures":[], "triggers":["a"]}, {"format":{"type":"sequence","elements":[{"type":"const_string"}]}}]:
    try:
        compile_constraint(tok, structural_tag=bad); print("NO ERROR", bad)
    except Exception as e:
        print(type(e).__name__, e)
