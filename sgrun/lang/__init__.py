"""The frontend DSL: LLM programs as ordinary Python (modelled on SGLang's frontend language).

ir.py             gen / select / role blocks as plain data
chat_roles.py     per-role prefix/suffix strings derived from the model's chat template
interpreter.py    ProgramExecutor: runs a state's expressions in order on a worker thread
state.py          ProgramState (`s`), forks
function.py       @function, run / run_batch
prefix_tracer.py  the argument-independent prefix run_batch prefills once
backend.py        the Backend interface and the default backend
runtime_backend.py, endpoint_backend.py   in-process Engine / `sgrun serve` over HTTP
tool_schema.py    Python function -> JSON Schema tool description
agent.py          Agent: constrained tool-calling loop
program_error.py  ProgramError

The public names are exported lazily from `sgrun` (sgrun.function, sgrun.gen, ...).

May import: sgrun.engine, sgrun.constrain, sgrun.models, sgrun.errors (the HTTP backend talks to
`sgrun serve` over the wire, never by importing sgrun.server).
"""
