"""Extract structured data: the generation is constrained by a JSON Schema, so it always parses."""

from __future__ import annotations

import json

import sgrun
from _common import default_backend, max_tokens

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 40},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@sgrun.function
def extract_person(s, text: str, limit: int):
    s += sgrun.system("You extract facts from text as JSON.")
    s += sgrun.user(f"Text: {text}\nGive the person's name, age and city as JSON.")
    s += sgrun.assistant(sgrun.gen("person", max_tokens=limit, json_schema=PERSON_SCHEMA))


def main(backend: sgrun.Runtime | None = None) -> dict:
    backend = backend or default_backend()
    text = "John Smith, a 42-year-old engineer, has lived in Berlin since 2010."
    state = extract_person.run(text=text, limit=max_tokens(64), backend=backend, temperature=0)
    person = json.loads(state["person"])
    print(json.dumps(person, indent=2))
    return person


if __name__ == "__main__":
    main()
