"""The OpenAI-compatible HTTP server (and SGLang's native protocol, the web page, and the
data-parallel replicas that `--dp N` starts behind SGLang's gateway smg) over one sgrun.Engine.

May import: sgrun.engine, sgrun.constrain, sgrun.models, sgrun.lang, sgrun.cli_flags, sgrun.errors.
Nothing imports the server but the CLI.
"""
