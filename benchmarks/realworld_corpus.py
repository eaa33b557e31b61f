"""Real-world-like schemas written for sgrun (issue 13): the shapes the MaskBench
sources are made of (GitHub repository files, Kubernetes objects, Snowplow events, Washington
Post content, SchemaStore configuration files, Glaive function-calling schemas), each written
here by hand from general knowledge of those formats; nothing is copied from the benchmark.

Each schema carries hand-written instances, labelled again by `jsonschema` (the draft its
`$schema` names, formats checked), so a label never rests on our intent. Instances are
serialized the way MaskBench's reference harness does (serde_json::to_string: compact, keys in
the instance's order, raw UTF-8, floats as the serializer prints them).

The constructs are the ones real schemas use and engines refuse: uniqueItems, min/maxProperties,
not, if/then/else, many patternProperties, oneOf without discriminators, additionalProperties
schemas, big enums, formats (known and not), $ref chains, recursive definitions, draft-04 idioms
(`id`, `definitions`, boolean exclusiveMaximum), type arrays, OpenAPI's `nullable`, int64 bounds.

`python benchmarks/realworld_corpus.py --write DIR` writes them as MaskBench-format files.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import jsonschema

from schema_corpus import Case

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2020 = "https://json-schema.org/draft/2020-12/schema"
INT64 = {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807}
UINT32 = {"type": "integer", "minimum": 0, "maximum": 4294967295}


def serialize(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _s(t: str = "string", **kw: Any) -> dict:
    return {"type": t, **kw}


def _obj(props: dict, required: list[str] | None = None, **kw: Any) -> dict:
    out: dict = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    out.update(kw)
    return out


# --- SchemaStore-style configuration files ----------------------------------------------------
def package_json() -> tuple[dict, list, list]:
    deps = {"type": "object", "additionalProperties": {"type": "string"}}
    schema = {"$schema": D4, "id": "https://example.invalid/package.json", "title": "package manifest",
              "definitions": {
                  "person": {"oneOf": [{"type": "string"},
                                       _obj({"name": _s(), "email": _s(format="email"), "url": _s(format="uri")},
                                            ["name"])]},
                  "dependency": deps},
              "type": "object",
              "properties": {
                  "name": _s(maxLength=214, minLength=1, pattern="^(?:@[a-z0-9-*~][a-z0-9-*._~]*/)?[a-z0-9-~][a-z0-9-._~]*$"),
                  "version": _s(), "description": _s(),
                  "keywords": {"type": "array", "items": _s()},
                  "license": _s(), "author": {"$ref": "#/definitions/person"},
                  "contributors": {"type": "array", "items": {"$ref": "#/definitions/person"}},
                  "main": _s(), "private": {"type": "boolean"},
                  "scripts": {"type": "object", "additionalProperties": _s()},
                  "dependencies": {"$ref": "#/definitions/dependency"},
                  "devDependencies": {"$ref": "#/definitions/dependency"},
                  "engines": {"type": "object", "additionalProperties": _s()}}}
    valid = [{"name": "left-pad", "version": "1.3.0", "description": "String left pad", "keywords": ["pad"],
              "license": "WTFPL", "author": "azer", "main": "index.js",
              "scripts": {"test": "node test"}, "devDependencies": {"tape": "*"}},
             {"name": "@scope/pkg", "version": "0.0.1", "private": True,
              "author": {"name": "Ada", "email": "ada@example.org"},
              "contributors": [{"name": "Bob"}, "Carol <c@example.org>"], "dependencies": {}}]
    invalid = [{"name": "Bad Name"}, {"name": "x", "private": "yes"}, {"author": {"email": "a@b.c"}},
               {"scripts": {"test": 1}}]
    return schema, valid, invalid


def tsconfig() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "definitions": {
        "compilerOptions": {"type": "object", "properties": {
            "target": {"type": "string", "enum": ["ES3", "ES5", "ES6", "ES2015", "ES2016", "ES2017", "ES2018",
                                                  "ES2019", "ES2020", "ES2021", "ES2022", "ESNext"]},
            "module": {"type": "string", "enum": ["CommonJS", "AMD", "System", "UMD", "ES6", "ES2015", "ES2020",
                                                  "ESNext", "None", "Node16", "NodeNext"]},
            "strict": {"type": "boolean", "default": False},
            "lib": {"type": "array", "uniqueItems": True,
                    "items": {"type": "string", "enum": ["ES5", "ES6", "DOM", "DOM.Iterable", "WebWorker",
                                                         "ScriptHost", "ESNext"]}},
            "outDir": {"type": "string"}, "paths": {"type": "object", "additionalProperties": {
                "type": "array", "items": {"type": "string"}, "minItems": 1}},
            "jsx": {"enum": ["preserve", "react", "react-native", "react-jsx", "react-jsxdev"]},
            "maxNodeModuleJsDepth": {"type": "number", "minimum": 0}}}},
        "properties": {"extends": {"type": "string"}, "compilerOptions": {"$ref": "#/definitions/compilerOptions"},
                       "include": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
                       "exclude": {"type": "array", "items": {"type": "string"}}}}
    valid = [{"compilerOptions": {"target": "ES2020", "module": "ESNext", "strict": True, "lib": ["DOM", "ESNext"],
                                  "outDir": "dist", "paths": {"@/*": ["src/*"]}}, "exclude": ["node_modules"]},
             {"extends": "./base.json", "compilerOptions": {"jsx": "react-jsx", "maxNodeModuleJsDepth": 2}}]
    invalid = [{"compilerOptions": {"target": "ES2099"}}, {"compilerOptions": {"lib": ["DOM", "DOM"]}},
               {"compilerOptions": {"paths": {"x": []}}}, {"compilerOptions": {"maxNodeModuleJsDepth": -1}}]
    return schema, valid, invalid


def eslintrc() -> tuple[dict, list, list]:
    rule = {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 2}, {"enum": ["off", "warn", "error"]},
                      {"type": "array"}]}
    schema = {"$schema": D4, "definitions": {"rule": rule}, "type": "object", "properties": {
        "root": {"type": "boolean"}, "extends": {"oneOf": [{"type": "string"}, {"type": "array",
                                                                              "items": {"type": "string"}}]},
        "env": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "parserOptions": {"type": "object", "properties": {
            "ecmaVersion": {"enum": [3, 5, 6, 2015, 2016, 2017, 2018, 2019, 2020, 2021, 2022, "latest"]},
            "sourceType": {"enum": ["script", "module"]}}},
        "rules": {"type": "object", "additionalProperties": {"$ref": "#/definitions/rule"}},
        "globals": {"type": "object", "additionalProperties": {"oneOf": [
            {"type": "boolean"}, {"enum": ["readonly", "writable", "off"]}]}}}}
    valid = [{"root": True, "extends": ["eslint:recommended"], "env": {"browser": True, "node": True},
              "parserOptions": {"ecmaVersion": "latest", "sourceType": "module"},
              "rules": {"semi": ["error", "always"], "no-console": "warn", "eqeqeq": 2}},
             {"extends": "airbnb", "globals": {"window": "readonly", "x": False}}]
    invalid = [{"rules": {"semi": 3}}, {"env": {"browser": "yes"}}, {"parserOptions": {"sourceType": "esm"}},
               {"globals": {"a": "read"}}]
    return schema, valid, invalid


def docker_compose() -> tuple[dict, list, list]:
    list_or_dict = {"oneOf": [{"type": "object", "patternProperties": {
        ".+": {"type": ["string", "number", "boolean", "null"]}}, "additionalProperties": False},
        {"type": "array", "items": {"type": "string"}, "uniqueItems": False}]}
    service = {"type": "object", "properties": {
        "image": {"type": "string"}, "build": {"oneOf": [{"type": "string"}, _obj({
            "context": _s(), "dockerfile": _s(), "args": {"$ref": "#/definitions/list_or_dict"}})]},
        "command": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "environment": {"$ref": "#/definitions/list_or_dict"},
        "ports": {"type": "array", "items": {"type": ["string", "number"]}},
        "depends_on": {"type": "array", "items": {"type": "string"}},
        "restart": {"type": "string"},
        "deploy": _obj({"replicas": {"type": "integer"}, "resources": {"type": "object"}})},
        "patternProperties": {"^x-": {}}, "additionalProperties": False}
    schema = {"$schema": D7, "type": "object", "definitions": {"list_or_dict": list_or_dict, "service": service},
              "properties": {"version": _s(), "services": {"type": "object", "patternProperties": {
                  "^[a-zA-Z0-9._-]+$": {"$ref": "#/definitions/service"}}, "additionalProperties": False},
                  "volumes": {"type": "object"}},
              "patternProperties": {"^x-": {}}, "required": ["services"], "additionalProperties": False}
    valid = [{"version": "3.8", "services": {"web": {"image": "nginx:1.25", "ports": ["80:80", 443],
                                                     "environment": {"DEBUG": True, "PORT": 8080},
                                                     "depends_on": ["db"], "restart": "always"},
                                             "db": {"image": "postgres", "environment": ["POSTGRES_PASSWORD=x"]}}},
             {"services": {"app": {"build": {"context": ".", "args": ["A=1"]}, "command": ["npm", "start"],
                                   "x-note": {"a": 1}}}, "x-common": {}}]
    invalid = [{"version": "3"}, {"services": {"web": {"image": 5}}}, {"services": {"web": {"unknown": 1}}},
               {"services": {"bad name": {"image": "x"}}}, {"services": {}, "volumes": 1}]
    return schema, valid, invalid


def github_workflow() -> tuple[dict, list, list]:
    step = {"type": "object", "properties": {
        "id": _s(), "name": _s(), "uses": _s(), "run": _s(), "with": {"type": "object", "additionalProperties": {
            "type": ["string", "number", "boolean"]}},
        "env": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
        "if": {"type": ["boolean", "number", "string"]}, "continue-on-error": {"type": ["boolean", "string"]},
        "timeout-minutes": {"type": "number"}},
        "dependencies": {"working-directory": ["run"], "shell": ["run"]},
        "oneOf": [{"required": ["uses"]}, {"required": ["run"]}], "additionalProperties": False}
    job = {"type": "object", "properties": {
        "name": _s(), "runs-on": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                                                  "minItems": 1}]},
        "needs": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]},
        "steps": {"type": "array", "items": {"$ref": "#/definitions/step"}, "minItems": 1},
        "strategy": _obj({"matrix": {"type": "object", "minProperties": 1}, "fail-fast": {"type": "boolean"},
                          "max-parallel": {"type": "number"}}),
        "timeout-minutes": {"type": "number", "default": 360}}, "required": ["runs-on"]}
    schema = {"$schema": D7, "definitions": {"step": step, "job": job}, "type": "object", "properties": {
        "name": _s(), "on": {"oneOf": [{"type": "string", "enum": ["push", "pull_request", "workflow_dispatch",
                                                                   "schedule", "release"]},
                                       {"type": "array", "items": {"type": "string"}, "minItems": 1},
                                       {"type": "object", "minProperties": 1}]},
        "env": {"type": "object"}, "jobs": {"type": "object", "patternProperties": {
            "^[_a-zA-Z][a-zA-Z0-9_-]*$": {"$ref": "#/definitions/job"}}, "minProperties": 1,
            "additionalProperties": False}}, "required": ["on", "jobs"]}
    valid = [{"name": "CI", "on": ["push", "pull_request"], "jobs": {"test": {"runs-on": "ubuntu-latest", "steps": [
        {"uses": "actions/checkout@v4"}, {"name": "Test", "run": "make test", "shell": "bash"}]}}},
        {"on": {"push": {"branches": ["main"]}}, "jobs": {"build": {"runs-on": ["self-hosted", "linux"],
                                                                    "strategy": {"matrix": {"py": ["3.11"]}},
                                                                    "steps": [{"uses": "x/y@v1", "with": {"a": 1}}]},
                                                          "deploy": {"needs": "build", "runs-on": "ubuntu-22.04"}}}]
    invalid = [{"on": "push", "jobs": {}}, {"on": "push", "jobs": {"t": {"steps": []}}},
               {"on": "push", "jobs": {"t": {"runs-on": "x", "steps": [{"uses": "a", "run": "b"}]}}},
               {"on": "push", "jobs": {"t": {"runs-on": "x", "steps": [{"shell": "bash", "uses": "a"}]}}},
               {"on": "cron", "jobs": {"t": {"runs-on": "x"}}}, {"on": {}, "jobs": {"t": {"runs-on": "x"}}}]
    return schema, valid, invalid


def prettierrc() -> tuple[dict, list, list]:
    opts = {"type": "object", "properties": {
        "printWidth": {"type": "integer"}, "tabWidth": {"type": "integer"}, "useTabs": {"type": "boolean"},
        "semi": {"type": "boolean"}, "singleQuote": {"type": "boolean"},
        "trailingComma": {"enum": ["all", "es5", "none"]}, "endOfLine": {"enum": ["lf", "crlf", "cr", "auto"]},
        "parser": {"anyOf": [{"enum": ["babel", "flow", "typescript", "css", "json", "markdown", "yaml"]},
                             {"type": "string"}]}}}
    schema = {"$schema": D7, "definitions": {"options": opts}, "oneOf": [
        {"type": "string"}, {"allOf": [{"$ref": "#/definitions/options"}, {"type": "object", "properties": {
            "overrides": {"type": "array", "items": {"type": "object", "properties": {
                "files": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                "options": {"$ref": "#/definitions/options"}}, "required": ["files"]}}}}]}]}
    valid = [{"semi": False, "singleQuote": True, "trailingComma": "es5", "printWidth": 100},
             {"tabWidth": 4, "overrides": [{"files": "*.md", "options": {"parser": "markdown"}}]},
             "prettier-config-standard"]
    invalid = [{"semi": "no"}, {"trailingComma": "some"}, {"overrides": [{"options": {}}]}, 12, {"tabWidth": 2.5}]
    return schema, valid, invalid


def renovate() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "extends": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "schedule": {"type": "array", "items": {"type": "string"}},
        "labels": {"type": "array", "items": {"type": "string"}},
        "rangeStrategy": {"enum": ["auto", "pin", "bump", "replace", "widen", "update-lockfile",
                                   "in-range-only"]},
        "prConcurrentLimit": {"type": "integer", "minimum": 0},
        "automerge": {"type": "boolean"},
        "packageRules": {"type": "array", "items": {"type": "object", "properties": {
            "matchPackageNames": {"type": "array", "items": {"type": "string"}},
            "matchUpdateTypes": {"type": "array", "uniqueItems": True, "items": {
                "enum": ["major", "minor", "patch", "pin", "digest", "lockFileMaintenance", "rollback", "bump"]}},
            "enabled": {"type": "boolean"}, "automerge": {"type": "boolean"}},
            "minProperties": 2}}}}
    valid = [{"extends": ["config:recommended"], "labels": ["deps"], "prConcurrentLimit": 5,
              "packageRules": [{"matchUpdateTypes": ["minor", "patch"], "automerge": True}]},
             {"rangeStrategy": "pin", "packageRules": [{"matchPackageNames": ["react"], "enabled": False,
                                                        "automerge": False}]}]
    invalid = [{"packageRules": [{"enabled": False}]}, {"packageRules": [{"matchUpdateTypes": ["major", "major"],
                                                                           "enabled": True}]},
               {"rangeStrategy": "always"}, {"prConcurrentLimit": -1}]
    return schema, valid, invalid


def babelrc() -> tuple[dict, list, list]:
    plugin = {"anyOf": [{"type": "string"}, {"type": "array", "items": [{"type": "string"}, {"type": "object"}],
                                             "minItems": 1, "maxItems": 3}]}
    schema = {"$schema": D4, "definitions": {"plugin": plugin}, "type": "object", "properties": {
        "presets": {"type": "array", "items": {"$ref": "#/definitions/plugin"}},
        "plugins": {"type": "array", "items": {"$ref": "#/definitions/plugin"}},
        "sourceMaps": {"enum": [True, False, "inline", "both"]},
        "comments": {"type": "boolean", "default": True},
        "env": {"type": "object", "additionalProperties": {"type": "object"}}}}
    valid = [{"presets": ["@babel/preset-env", ["@babel/preset-react", {"runtime": "automatic"}]],
              "sourceMaps": "inline"}, {"plugins": [], "env": {"test": {"plugins": ["x"]}}, "comments": False}]
    invalid = [{"sourceMaps": "yes"}, {"presets": [1]}, {"plugins": [[]]}, {"env": {"test": 1}}]
    return schema, valid, invalid


def lintstaged() -> tuple[dict, list, list]:
    command = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
    schema = {"$schema": D7, "type": "object", "definitions": {"command": command},
              "additionalProperties": {"$ref": "#/definitions/command"}, "minProperties": 1}
    valid = [{"*.js": "eslint --fix"}, {"*.{ts,tsx}": ["prettier --write", "eslint"], "*.md": "prettier --write"}]
    invalid = [{}, {"*.js": []}, {"*.js": 1}, []]
    return schema, valid, invalid


def editorconfig_json() -> tuple[dict, list, list]:
    section = {"type": "object", "properties": {
        "indent_style": {"enum": ["tab", "space", "unset"]},
        "indent_size": {"oneOf": [{"type": "integer", "minimum": 1}, {"enum": ["tab", "unset"]}]},
        "end_of_line": {"enum": ["lf", "cr", "crlf", "unset"]}, "charset": {"enum": [
            "latin1", "utf-8", "utf-8-bom", "utf-16be", "utf-16le", "unset"]},
        "trim_trailing_whitespace": {"type": "boolean"}, "insert_final_newline": {"type": "boolean"},
        "max_line_length": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "off"}]}},
        "additionalProperties": False}
    schema = {"$schema": D2020, "type": "object", "$defs": {"section": section}, "properties": {
        "root": {"type": "boolean"}}, "additionalProperties": {"$ref": "#/$defs/section"}}
    valid = [{"root": True, "*": {"indent_style": "space", "indent_size": 2, "charset": "utf-8"},
              "*.py": {"indent_size": 4, "max_line_length": 120}, "Makefile": {"indent_style": "tab"}},
             {"*.md": {"trim_trailing_whitespace": False, "max_line_length": "off"}}]
    invalid = [{"*": {"indent_size": 0}}, {"*": {"indent_style": "tabs"}}, {"root": "true"}, {"*": {"foo": 1}}]
    return schema, valid, invalid


def vscode_extensions() -> tuple[dict, list, list]:
    ext_id = {"type": "string", "pattern": "^([a-z0-9A-Z][a-z0-9-A-Z]*)\\.([a-z0-9A-Z][a-z0-9-A-Z]*)$"}
    schema = {"$schema": D7, "type": "object", "properties": {
        "recommendations": {"type": "array", "items": ext_id, "default": []},
        "unwantedRecommendations": {"type": "array", "items": ext_id}}, "additionalProperties": False}
    valid = [{"recommendations": ["ms-python.python", "esbenp.prettier-vscode"]}, {"unwantedRecommendations": []}]
    invalid = [{"recommendations": ["python"]}, {"extra": []}, {"recommendations": "ms-python.python"}]
    return schema, valid, invalid


def jest_config() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "testEnvironment": {"type": "string"}, "roots": {"type": "array", "items": {"type": "string"}},
        "collectCoverage": {"type": "boolean"}, "coverageThreshold": {"type": "object", "properties": {
            "global": {"type": "object", "properties": {k: {"type": "number", "minimum": 0, "maximum": 100}
                                                        for k in ("branches", "functions", "lines", "statements")}}},
            "additionalProperties": {"type": "object"}},
        "moduleNameMapper": {"type": "object", "additionalProperties": {"oneOf": [
            {"type": "string"}, {"type": "array", "items": {"type": "string"}}]}},
        "testTimeout": {"type": "integer", "minimum": 0}, "verbose": {"type": "boolean"},
        "maxWorkers": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[0-9]+%$"}]}}}
    valid = [{"testEnvironment": "node", "collectCoverage": True, "coverageThreshold": {
        "global": {"branches": 80, "lines": 90.5}}, "maxWorkers": "50%"},
        {"roots": ["<rootDir>/src"], "moduleNameMapper": {"^@/(.*)$": "<rootDir>/src/$1"}, "testTimeout": 10000,
         "maxWorkers": 4}]
    invalid = [{"coverageThreshold": {"global": {"lines": 101}}}, {"maxWorkers": "half"}, {"testTimeout": -5},
               {"maxWorkers": 0}]
    return schema, valid, invalid


def cargo_like() -> tuple[dict, list, list]:
    dep = {"anyOf": [{"type": "string"}, {"type": "object", "properties": {
        "version": _s(), "path": _s(), "git": _s(format="uri"), "features": {"type": "array", "items": _s(),
                                                                             "uniqueItems": True},
        "optional": {"type": "boolean"}, "default-features": {"type": "boolean"}},
        "minProperties": 1}]}
    schema = {"$schema": D7, "title": "Cargo manifest (as JSON)", "definitions": {"dep": dep}, "type": "object",
              "properties": {"package": _obj({
                  "name": _s(pattern="^[a-zA-Z][a-zA-Z0-9_-]*$"), "version": _s(pattern="^\\d+\\.\\d+\\.\\d+"),
                  "edition": {"enum": ["2015", "2018", "2021", "2024"]}, "authors": {"type": "array", "items": _s()},
                  "publish": {"type": "boolean"}}, ["name"]),
                  "dependencies": {"type": "object", "additionalProperties": {"$ref": "#/definitions/dep"}},
                  "features": {"type": "object", "additionalProperties": {"type": "array", "items": _s()}}}}
    valid = [{"package": {"name": "sgrun-core", "version": "0.1.0", "edition": "2021"},
              "dependencies": {"serde": {"version": "1", "features": ["derive"]}, "rand": "0.8"}},
             {"package": {"name": "x", "publish": False}, "features": {"default": []}}]
    invalid = [{"package": {"version": "1.0.0"}}, {"package": {"name": "x", "edition": "2020"}},
               {"dependencies": {"a": {}}}, {"package": {"name": "1x"}}]
    return schema, valid, invalid


def openapi_fragment() -> tuple[dict, list, list]:
    # OpenAPI 3.0 style: `nullable` is not a JSON Schema keyword (an annotation to validators)
    schema = {"$schema": D7, "type": "object", "definitions": {
        "Pet": _obj({"id": INT64 | {"format": "int64"}, "name": _s(), "tag": _s(nullable=True),
                     "status": {"type": "string", "enum": ["available", "pending", "sold"]},
                     "photoUrls": {"type": "array", "items": _s(format="uri")}}, ["name", "photoUrls"])},
        "properties": {"pets": {"type": "array", "items": {"$ref": "#/definitions/Pet"}},
                       "next": {"type": "string", "format": "uri", "nullable": True}}}
    valid = [{"pets": [{"id": 10, "name": "doggie", "tag": "dog", "status": "available",
                        "photoUrls": ["https://example.org/d.png"]}], "next": "https://example.org/?page=2"},
             {"pets": [{"name": "cat", "photoUrls": []}]}]
    invalid = [{"pets": [{"name": "cat"}]}, {"pets": [{"name": "c", "photoUrls": [], "status": "lost"}]},
               {"pets": [{"name": "c", "photoUrls": [], "tag": None}]}, {"next": None}]
    return schema, valid, invalid


def mkdocs_like() -> tuple[dict, list, list]:
    nav_item = {"oneOf": [{"type": "string"}, {"type": "object", "additionalProperties": {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/definitions/nav_item"}}]},
        "minProperties": 1, "maxProperties": 1}]}
    schema = {"$schema": D7, "definitions": {"nav_item": nav_item}, "type": "object", "properties": {
        "site_name": _s(), "site_url": _s(format="uri"), "repo_url": _s(format="uri"),
        "theme": {"oneOf": [{"type": "string"}, _obj({"name": _s(), "palette": {"type": "object"},
                                                       "features": {"type": "array", "items": _s()}}, ["name"])]},
        "nav": {"type": "array", "items": {"$ref": "#/definitions/nav_item"}},
        "plugins": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "object",
                                                                              "minProperties": 1,
                                                                              "maxProperties": 1}]}},
        "strict": {"type": "boolean"}}, "required": ["site_name"]}
    valid = [{"site_name": "Docs", "site_url": "https://docs.example.org/", "theme": {"name": "material",
                                                                                     "features": ["navigation.tabs"]},
              "nav": ["index.md", {"Guide": [{"Install": "install.md"}, "usage.md"]}],
              "plugins": ["search", {"mkdocstrings": {"handlers": {}}}]},
             {"site_name": "x", "theme": "readthedocs", "strict": True}]
    invalid = [{"nav": []}, {"site_name": "x", "nav": [{"A": "a.md", "B": "b.md"}]},
               {"site_name": "x", "plugins": [{}]}, {"site_name": "x", "theme": {"palette": {}}}]
    return schema, valid, invalid


def codecov() -> tuple[dict, list, list]:
    pct = {"type": "string", "pattern": "^\\d+(\\.\\d+)?%$"}
    status = {"oneOf": [{"type": "boolean"}, {"type": "object", "properties": {
        "target": {"oneOf": [pct, {"const": "auto"}]}, "threshold": pct, "informational": {"type": "boolean"}},
        "additionalProperties": False}]}
    schema = {"$schema": D4, "type": "object", "definitions": {"status": status, "pct": pct}, "properties": {
        "coverage": _obj({"precision": {"type": "integer", "minimum": 0, "maximum": 5},
                          "round": {"enum": ["down", "up", "nearest"]},
                          "range": {"type": "string", "pattern": "^\\d+(\\.\\d+)?\\.\\.\\d+(\\.\\d+)?$"},
                          "status": _obj({"project": {"$ref": "#/definitions/status"},
                                          "patch": {"$ref": "#/definitions/status"}})}),
        "ignore": {"type": "array", "items": {"type": "string"}},
        "comment": {"oneOf": [{"const": False}, _obj({"layout": _s(), "require_changes": {"type": "boolean"}})]}}}
    valid = [{"coverage": {"precision": 2, "round": "down", "range": "70..100",
                           "status": {"project": {"target": "80%", "threshold": "1%"}, "patch": False}},
              "ignore": ["tests/**"], "comment": False},
             {"coverage": {"status": {"project": {"target": "auto", "informational": True}}},
              "comment": {"layout": "reach, diff", "require_changes": True}}]
    invalid = [{"coverage": {"precision": 6}}, {"coverage": {"status": {"project": {"target": "80"}}}},
               {"comment": True}, {"coverage": {"range": "70-100"}}]
    return schema, valid, invalid


def stylelint() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "extends": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "plugins": {"type": "array", "items": {"type": "string"}},
        "rules": {"type": "object", "patternProperties": {
            "^color-": {"oneOf": [{"type": "null"}, {"type": "boolean"}, {"type": "array"}, {"type": "string"}]},
            "^font-": {"oneOf": [{"type": "null"}, {"type": "boolean"}, {"type": "array"}]},
            "^selector-": {"oneOf": [{"type": "null"}, {"type": "boolean"}, {"type": "array"},
                                     {"type": "string"}]},
            "^declaration-": {}, "^block-": {}, "^at-rule-": {}, "^max-": {"type": ["integer", "null", "array"]},
            "^no-": {"type": ["boolean", "null", "array"]}},
            "additionalProperties": False},
        "ignoreFiles": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}}
    valid = [{"extends": "stylelint-config-standard", "rules": {"color-hex-case": "lower", "max-nesting-depth": 3,
                                                                 "no-descending-specificity": None,
                                                                 "selector-class-pattern": [".*", {}]}},
             {"rules": {"font-family-no-missing-generic-family-keyword": True, "block-no-empty": True}}]
    invalid = [{"rules": {"unknown-rule": True}}, {"rules": {"max-line-length": "100"}},
               {"rules": {"font-weight-notation": "numeric"}}, {"extends": 1}]
    return schema, valid, invalid


def dependabot() -> tuple[dict, list, list]:
    update = {"type": "object", "properties": {
        "package-ecosystem": {"enum": ["bundler", "cargo", "composer", "docker", "github-actions", "gomod", "gradle",
                                       "maven", "npm", "nuget", "pip", "pub", "terraform"]},
        "directory": {"type": "string"},
        "schedule": {"type": "object", "properties": {
            "interval": {"enum": ["daily", "weekly", "monthly"]},
            "day": {"enum": ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]},
            "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}},
            "required": ["interval"],
            "if": {"properties": {"interval": {"const": "weekly"}}}, "then": {},
            "else": {"not": {"required": ["day"]}}},
        "open-pull-requests-limit": {"type": "integer", "minimum": 0, "maximum": 20},
        "labels": {"type": "array", "items": {"type": "string"}, "minItems": 0},
        "reviewers": {"type": "array", "items": {"type": "string"}}},
        "required": ["package-ecosystem", "directory", "schedule"], "additionalProperties": False}
    schema = {"$schema": D7, "type": "object", "properties": {"version": {"const": 2}, "updates": {
        "type": "array", "items": update}}, "required": ["version", "updates"]}
    valid = [{"version": 2, "updates": [{"package-ecosystem": "pip", "directory": "/",
                                         "schedule": {"interval": "weekly", "day": "monday", "time": "09:00"},
                                         "open-pull-requests-limit": 5}]},
             {"version": 2, "updates": [{"package-ecosystem": "github-actions", "directory": "/",
                                         "schedule": {"interval": "daily"}, "labels": ["ci"]}]}]
    invalid = [{"version": 1, "updates": []}, {"version": 2, "updates": [{"package-ecosystem": "pip",
                                                                          "directory": "/",
                                                                          "schedule": {"interval": "daily",
                                                                                       "day": "monday"}}]},
               {"version": 2, "updates": [{"package-ecosystem": "pip", "directory": "/",
                                           "schedule": {"interval": "weekly", "time": "25:00"}}]},
               {"version": 2, "updates": [{"package-ecosystem": "apt", "directory": "/",
                                           "schedule": {"interval": "daily"}}]}]
    return schema, valid, invalid


def pre_commit() -> tuple[dict, list, list]:
    hook = _obj({"id": _s(), "name": _s(), "entry": _s(), "language": {"enum": [
        "conda", "coursier", "dart", "docker", "docker_image", "dotnet", "fail", "golang", "haskell", "lua", "node",
        "perl", "python", "python_venv", "r", "ruby", "rust", "swift", "pygrep", "script", "system"]},
        "args": {"type": "array", "items": _s()}, "files": _s(), "exclude": _s(),
        "types": {"type": "array", "items": _s(), "uniqueItems": True},
        "stages": {"type": "array", "uniqueItems": True, "items": {"enum": [
            "commit", "merge-commit", "push", "prepare-commit-msg", "commit-msg", "post-checkout", "post-commit",
            "post-merge", "manual"]}},
        "additional_dependencies": {"type": "array", "items": _s()}}, ["id"], additionalProperties=False)
    repo = {"type": "object", "properties": {"repo": _s(), "rev": _s(), "hooks": {"type": "array", "items": hook}},
            "required": ["repo", "hooks"],
            "if": {"properties": {"repo": {"enum": ["local", "meta"]}}},
            "then": {"not": {"required": ["rev"]}}, "else": {"required": ["rev"]}}
    schema = {"$schema": D7, "type": "object", "definitions": {"hook": hook, "repo": repo}, "properties": {
        "default_stages": {"type": "array", "items": _s()}, "fail_fast": {"type": "boolean"},
        "repos": {"type": "array", "items": {"$ref": "#/definitions/repo"}}}, "required": ["repos"]}
    valid = [{"repos": [{"repo": "https://github.com/psf/black", "rev": "24.1.0", "hooks": [{"id": "black"}]},
                        {"repo": "local", "hooks": [{"id": "lint", "name": "lint", "entry": "make lint",
                                                     "language": "system", "stages": ["commit", "push"]}]}]},
             {"fail_fast": True, "repos": []}]
    invalid = [{"repos": [{"repo": "https://x", "hooks": []}]}, {"repos": [{"repo": "local", "rev": "1",
                                                                            "hooks": []}]},
               {"repos": [{"repo": "local", "hooks": [{"id": "x", "stages": ["commit", "commit"]}]}]},
               {"repos": [{"repo": "local", "hooks": [{"id": "x", "language": "java"}]}]}]
    return schema, valid, invalid


def gitlab_ci_like() -> tuple[dict, list, list]:
    script = {"oneOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}, "minItems": 1}]}
    job = {"type": "object", "properties": {
        "image": {"oneOf": [{"type": "string"}, _obj({"name": _s(), "entrypoint": {"type": "array"}}, ["name"])]},
        "stage": _s(), "script": {"$ref": "#/definitions/script"},
        "before_script": {"$ref": "#/definitions/script"},
        "rules": {"type": "array", "items": {"type": "object", "properties": {
            "if": _s(), "when": {"enum": ["on_success", "on_failure", "always", "manual", "delayed", "never"]},
            "allow_failure": {"type": "boolean"}}, "additionalProperties": False}},
        "artifacts": _obj({"paths": {"type": "array", "items": _s()}, "expire_in": _s()}),
        "retry": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 2}, _obj({
            "max": {"type": "integer", "minimum": 0, "maximum": 2}})]},
        "tags": {"type": "array", "items": _s()}}, "required": ["script"]}
    schema = {"$schema": D7, "definitions": {"script": script, "job": job}, "type": "object", "properties": {
        "stages": {"type": "array", "items": _s(), "uniqueItems": True},
        "variables": {"type": "object", "additionalProperties": {"type": ["string", "integer", "number"]}}},
        "additionalProperties": {"$ref": "#/definitions/job"}}
    valid = [{"variables": {"GIT_DEPTH": 10}, "build": {"image": "python:3.12", "stage": "build",
                                                        "script": ["pip install .", ["pytest"]],
                                                        "artifacts": {"paths": ["dist/"], "expire_in": "1 week"}}},
             {"lint": {"script": "ruff check .", "rules": [{"if": "$CI", "when": "always"}], "retry": {"max": 2}}}]
    invalid = [{"build": {"stage": "b"}}, {"build": {"script": []}}, {"build": {"script": "x", "retry": 3}},
               {"build": {"script": "x", "rules": [{"when": "sometimes"}]}}]
    return schema, valid, invalid


def vercel_json() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "version": {"type": "integer", "minimum": 1, "maximum": 2},
        "name": {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 52},
        "regions": {"type": "array", "uniqueItems": True, "maxItems": 3, "items": {"enum": [
            "arn1", "bom1", "cdg1", "cle1", "cpt1", "dub1", "fra1", "gru1", "hkg1", "hnd1", "iad1", "icn1", "kix1",
            "lhr1", "pdx1", "sfo1", "sin1", "syd1"]}},
        "rewrites": {"type": "array", "maxItems": 1024, "items": _obj({"source": _s(maxLength=4096),
                                                                       "destination": _s(maxLength=4096)},
                                                                      ["source", "destination"],
                                                                      additionalProperties=False)},
        "headers": {"type": "array", "items": _obj({"source": _s(), "headers": {"type": "array", "items": _obj(
            {"key": _s(), "value": _s()}, ["key", "value"])}}, ["source", "headers"])},
        "cleanUrls": {"type": "boolean"}, "trailingSlash": {"type": "boolean"}}}
    valid = [{"version": 2, "name": "my-site", "regions": ["iad1", "fra1"],
              "rewrites": [{"source": "/(.*)", "destination": "/index.html"}], "cleanUrls": True},
             {"headers": [{"source": "/api/(.*)", "headers": [{"key": "Cache-Control", "value": "no-store"}]}]}]
    invalid = [{"regions": ["iad1", "iad1"]}, {"regions": ["iad1", "fra1", "sfo1", "hnd1"]},
               {"name": "My Site"}, {"version": 3}, {"rewrites": [{"source": "/"}]}]
    return schema, valid, invalid


def serverless_like() -> tuple[dict, list, list]:
    event = {"type": "object", "minProperties": 1, "maxProperties": 1, "properties": {
        "http": {"oneOf": [{"type": "string"}, _obj({"path": _s(), "method": {"enum": [
            "get", "post", "put", "patch", "delete", "options", "head", "any", "GET", "POST", "PUT", "DELETE"]},
            "cors": {"type": "boolean"}}, ["path", "method"])]},
        "schedule": {"oneOf": [{"type": "string", "pattern": "^(cron|rate)\\(.*\\)$"},
                               _obj({"rate": _s(), "enabled": {"type": "boolean"}}, ["rate"])]},
        "sqs": {"oneOf": [{"type": "string"}, _obj({"arn": _s(), "batchSize": {
            "type": "integer", "minimum": 1, "maximum": 10000}}, ["arn"])]}}, "additionalProperties": False}
    schema = {"$schema": D7, "type": "object", "definitions": {"event": event}, "properties": {
        "service": _s(), "frameworkVersion": _s(),
        "provider": _obj({"name": {"const": "aws"}, "runtime": {"enum": [
            "nodejs18.x", "nodejs20.x", "python3.9", "python3.10", "python3.11", "python3.12", "java17", "go1.x",
            "provided.al2"]}, "region": _s(), "memorySize": {"type": "integer", "minimum": 128, "maximum": 10240},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 900}}, ["name"]),
        "functions": {"type": "object", "additionalProperties": _obj({
            "handler": _s(), "events": {"type": "array", "items": {"$ref": "#/definitions/event"}},
            "memorySize": {"type": "integer", "minimum": 128, "maximum": 10240}}, ["handler"])}},
        "required": ["service", "provider"]}
    valid = [{"service": "api", "provider": {"name": "aws", "runtime": "python3.12", "memorySize": 512},
              "functions": {"hello": {"handler": "handler.hello", "events": [
                  {"http": {"path": "hello", "method": "get"}}, {"schedule": "rate(5 minutes)"}]}}},
             {"service": "worker", "provider": {"name": "aws", "timeout": 30},
              "functions": {"w": {"handler": "w.main", "events": [{"sqs": {"arn": "arn:aws:sqs:x", "batchSize": 10}}]}}}]
    invalid = [{"service": "a", "provider": {"name": "gcp"}},
               {"service": "a", "provider": {"name": "aws"}, "functions": {"f": {"handler": "h", "events": [{}]}}},
               {"service": "a", "provider": {"name": "aws"}, "functions": {"f": {"handler": "h", "events": [
                   {"http": "GET /", "sqs": "q"}]}}},
               {"service": "a", "provider": {"name": "aws", "memorySize": 64}}]
    return schema, valid, invalid


def tslint_like_recursive() -> tuple[dict, list, list]:
    # recursive menu / tree definitions (common in UI config schemas)
    node = {"type": "object", "properties": {"label": _s(minLength=1), "icon": _s(), "href": _s(format="uri-reference"),
                                             "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
            "required": ["label"], "additionalProperties": False}
    schema = {"$schema": D7, "definitions": {"node": node}, "type": "object", "properties": {
        "menu": {"type": "array", "items": {"$ref": "#/definitions/node"}}}, "required": ["menu"]}
    valid = [{"menu": [{"label": "Home", "href": "/"}, {"label": "Docs", "children": [
        {"label": "API", "href": "/api", "children": [{"label": "v1"}]}]}]}, {"menu": []}]
    invalid = [{"menu": [{"label": ""}]}, {"menu": [{"label": "a", "children": [{"icon": "x"}]}]}, {}]
    return schema, valid, invalid


def hcl_variables() -> tuple[dict, list, list]:
    # Terraform-like variable declarations: deep oneOf without discriminators
    var = {"type": "object", "properties": {
        "type": {"type": "string"}, "description": {"type": "string"},
        "default": {}, "sensitive": {"type": "boolean"},
        "validation": {"type": "array", "items": _obj({"condition": _s(), "error_message": _s()},
                                                      ["condition", "error_message"])}},
        "additionalProperties": False}
    schema = {"$schema": D7, "type": "object", "properties": {
        "variable": {"type": "object", "additionalProperties": var},
        "output": {"type": "object", "additionalProperties": _obj({"value": {}, "sensitive": {"type": "boolean"}},
                                                                  ["value"])},
        "terraform": _obj({"required_version": _s(), "required_providers": {"type": "object", "additionalProperties": {
            "oneOf": [{"type": "string"}, _obj({"source": _s(), "version": _s()}, ["source"])]}}})}}
    valid = [{"variable": {"region": {"type": "string", "default": "us-east-1"}, "tags": {"default": {"a": 1}}},
              "output": {"ip": {"value": "${aws_instance.x.ip}"}},
              "terraform": {"required_providers": {"aws": {"source": "hashicorp/aws", "version": "~> 5.0"}}}},
             {"terraform": {"required_version": ">= 1.5", "required_providers": {"random": "3.5.1"}}}]
    invalid = [{"variable": {"x": {"typo": 1}}}, {"output": {"ip": {}}}, {"terraform": {"required_providers": {
        "aws": {"version": "5"}}}}]
    return schema, valid, invalid


# --- Kubernetes-style objects --------------------------------------------------------------
def _k8s_meta() -> dict:
    return _obj({"name": _s(maxLength=253, pattern="^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"), "namespace": _s(),
                 "labels": {"type": "object", "additionalProperties": _s(maxLength=63)},
                 "annotations": {"type": "object", "additionalProperties": _s()},
                 "generation": INT64 | {"format": "int64"}, "uid": _s()})


def _int_or_string() -> dict:
    return {"oneOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


def k8s_deployment() -> tuple[dict, list, list]:
    container = _obj({
        "name": _s(), "image": _s(), "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        "args": {"type": "array", "items": _s()}, "command": {"type": "array", "items": _s()},
        "env": {"type": "array", "items": _obj({"name": _s(), "value": _s(), "valueFrom": {"type": "object"}},
                                               ["name"])},
        "ports": {"type": "array", "items": _obj({
            "containerPort": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535},
            "protocol": {"enum": ["TCP", "UDP", "SCTP"], "default": "TCP"}, "name": _s(maxLength=15)},
            ["containerPort"])},
        "resources": _obj({"limits": {"type": "object", "additionalProperties": _int_or_string()},
                           "requests": {"type": "object", "additionalProperties": _int_or_string()}})}, ["name"])
    schema = {"$schema": D4, "description": "Deployment enables declarative updates for Pods and ReplicaSets.",
              "type": "object", "definitions": {"container": container, "meta": _k8s_meta()}, "properties": {
                  "apiVersion": {"type": ["string", "null"], "enum": ["apps/v1"]},
                  "kind": {"type": ["string", "null"], "enum": ["Deployment"]},
                  "metadata": {"$ref": "#/definitions/meta"},
                  "spec": _obj({
                      "replicas": {"type": "integer", "format": "int32", "minimum": 0},
                      "selector": _obj({"matchLabels": {"type": "object", "additionalProperties": _s()}}),
                      "strategy": _obj({"type": {"enum": ["Recreate", "RollingUpdate"]}, "rollingUpdate": _obj({
                          "maxSurge": _int_or_string(), "maxUnavailable": _int_or_string()})}),
                      "template": _obj({"metadata": {"$ref": "#/definitions/meta"}, "spec": _obj({
                          "containers": {"type": "array", "items": {"$ref": "#/definitions/container"}},
                          "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
                          "nodeSelector": {"type": "object", "additionalProperties": _s()}}, ["containers"])})},
                      ["selector", "template"])}}
    valid = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                       "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                       "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                           {"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": 1}}}]}}}},
             {"spec": {"selector": {}, "template": {"spec": {"containers": []}}}}]
    invalid = [{"kind": "Pod"}, {"spec": {"selector": {}, "template": {"spec": {"containers": [{"image": "x"}]}}}},
               {"spec": {"replicas": -1, "selector": {}, "template": {"spec": {"containers": []}}}},
               {"metadata": {"name": "Web_1"}}, {"spec": {"selector": {}, "template": {"spec": {"containers": [
                   {"name": "a", "ports": [{"containerPort": 70000}]}]}}}}]
    return schema, valid, invalid


def k8s_service() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "type": "object", "definitions": {"meta": _k8s_meta()}, "properties": {
        "apiVersion": {"type": "string", "enum": ["v1"]}, "kind": {"type": "string", "enum": ["Service"]},
        "metadata": {"$ref": "#/definitions/meta"}, "spec": _obj({
            "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]},
            "selector": {"type": "object", "additionalProperties": _s()},
            "clusterIP": _s(), "externalName": _s(format="hostname"),
            "ports": {"type": "array", "items": _obj({
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "targetPort": _int_or_string(), "nodePort": {"type": "integer", "minimum": 30000, "maximum": 32767},
                "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}, ["port"])},
            "sessionAffinity": {"enum": ["ClientIP", "None"]}})}, "required": ["apiVersion", "kind"]}
    valid = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {
        "type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http",
                                                                   "nodePort": 30080}]}},
             {"apiVersion": "v1", "kind": "Service", "spec": {"type": "ExternalName",
                                                              "externalName": "db.example.org"}}]
    invalid = [{"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80, "nodePort": 80}]}},
               {"apiVersion": "v2", "kind": "Service"}, {"kind": "Service"},
               {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": 1.5}]}}]
    return schema, valid, invalid


def k8s_configmap() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string", "enum": ["ConfigMap"]},
        "metadata": _k8s_meta(), "data": {"type": "object", "additionalProperties": {"type": "string"}},
        "binaryData": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"}},
        "immutable": {"type": "boolean"}}}
    valid = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "prod"},
              "data": {"app.properties": "a=1\nb=2", "LOG_LEVEL": "debug"}},
             {"kind": "ConfigMap", "binaryData": {"logo": "aGVsbG8="}, "immutable": True}]
    invalid = [{"data": {"a": 1}}, {"kind": "Secret"}, {"immutable": "true"}]
    return schema, valid, invalid


def k8s_hpa() -> tuple[dict, list, list]:
    metric = _obj({"type": {"enum": ["Resource", "Pods", "Object", "External", "ContainerResource"]},
                   "resource": _obj({"name": _s(), "target": _obj({
                       "type": {"enum": ["Utilization", "Value", "AverageValue"]},
                       "averageUtilization": {"type": "integer", "format": "int32"},
                       "averageValue": _int_or_string()}, ["type"])}, ["name", "target"])}, ["type"])
    schema = {"$schema": D4, "type": "object", "properties": {
        "apiVersion": {"enum": ["autoscaling/v2"]}, "kind": {"enum": ["HorizontalPodAutoscaler"]},
        "metadata": _k8s_meta(), "spec": _obj({
            "scaleTargetRef": _obj({"apiVersion": _s(), "kind": _s(), "name": _s()}, ["kind", "name"]),
            "minReplicas": {"type": "integer", "format": "int32", "minimum": 1},
            "maxReplicas": {"type": "integer", "format": "int32", "minimum": 1},
            "metrics": {"type": "array", "items": metric}}, ["scaleTargetRef", "maxReplicas"])}}
    valid = [{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
              "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                       "minReplicas": 2, "maxReplicas": 10, "metrics": [
                           {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                       "averageUtilization": 70}}}]}}]
    invalid = [{"spec": {"scaleTargetRef": {"kind": "D", "name": "w"}}},
               {"spec": {"scaleTargetRef": {"kind": "D", "name": "w"}, "maxReplicas": 0}},
               {"spec": {"scaleTargetRef": {"kind": "D", "name": "w"}, "maxReplicas": 3, "metrics": [{"type": "Cpu"}]}}]
    return schema, valid, invalid


def k8s_crd_like() -> tuple[dict, list, list]:
    # a custom resource with x-kubernetes-* annotations and preserve-unknown-fields maps
    schema = {"$schema": D4, "type": "object", "properties": {
        "apiVersion": _s(), "kind": _s(), "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": {
            "schedule": _s(pattern="^(@(annually|yearly|monthly|weekly|daily|hourly))|((\\S+\\s){4}\\S+)$"),
            "suspend": {"type": "boolean"}, "concurrencyPolicy": {"enum": ["Allow", "Forbid", "Replace"]},
            "successfulJobsHistoryLimit": {"type": "integer", "format": "int32", "minimum": 0},
            "jobTemplate": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "required": ["schedule", "jobTemplate"], "x-kubernetes-validations": [{"rule": "self.x > 0"}]},
        "status": {"type": "object", "properties": {
            "lastScheduleTime": _s(format="date-time"),
            "active": {"type": "array", "items": _obj({"name": _s(), "uid": _s(format="uuid")}),
                       "x-kubernetes-list-type": "atomic"}}}}}
    valid = [{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
              "spec": {"schedule": "0 3 * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": {}}},
              "status": {"lastScheduleTime": "2024-05-01T03:00:00Z",
                         "active": [{"name": "n-1", "uid": "123e4567-e89b-12d3-a456-426614174000"}]}},
             {"spec": {"schedule": "@daily", "jobTemplate": {}}}]
    invalid = [{"spec": {"schedule": "daily", "jobTemplate": {}}}, {"spec": {"schedule": "@daily"}},
               {"status": {"lastScheduleTime": "yesterday"}},
               {"spec": {"schedule": "@hourly", "jobTemplate": {}, "concurrencyPolicy": "Never"}}]
    return schema, valid, invalid


# --- Snowplow-style self-describing events ---------------------------------------------------
def _snowplow(vendor: str, name: str, props: dict, required: list[str]) -> dict:
    return {"$schema": "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#",
            "description": f"Schema for a {name} event",
            "self": {"vendor": vendor, "name": name, "format": "jsonschema", "version": "1-0-0"},
            "type": "object", "properties": props, "required": required, "additionalProperties": False}


def snowplow_link_click() -> tuple[dict, list, list]:
    schema = _snowplow("com.example", "link_click", {
        "elementId": {"type": "string", "maxLength": 4096}, "elementClasses": {
            "type": ["array", "null"], "items": {"type": "string", "maxLength": 4096}},
        "elementTarget": {"type": ["string", "null"], "maxLength": 4096},
        "targetUrl": {"type": "string", "minLength": 1, "maxLength": 4096},
        "elementContent": {"type": ["string", "null"], "maxLength": 4096}}, ["targetUrl"])
    valid = [{"elementId": "nav-1", "elementClasses": ["btn", "primary"], "targetUrl": "https://example.org/x"},
             {"targetUrl": "/", "elementTarget": None, "elementContent": "Café ☕"}]
    invalid = [{"elementId": "x"}, {"targetUrl": ""}, {"targetUrl": "/", "extra": 1},
               {"targetUrl": "/", "elementClasses": [1]}]
    return schema, valid, invalid


def snowplow_transaction() -> tuple[dict, list, list]:
    schema = _snowplow("com.example", "transaction", {
        "orderId": {"type": "string", "maxLength": 255}, "affiliation": {"type": ["string", "null"], "maxLength": 255},
        "total": {"type": "number", "minimum": 0, "maximum": 9999999999999},
        "tax": {"type": ["number", "null"], "minimum": 0, "maximum": 9999999999999},
        "shipping": {"type": ["number", "null"], "minimum": 0, "maximum": 9999999999999},
        "currency": {"type": ["string", "null"], "minLength": 3, "maxLength": 3},
        "items": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        "eventId": {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807},
        "createdAt": {"type": "string", "format": "date-time"}}, ["orderId", "total"])
    valid = [{"orderId": "o-1", "total": 99.95, "tax": 8.0, "shipping": None, "currency": "EUR", "items": 3,
              "eventId": 9007199254740993, "createdAt": "2024-01-02T03:04:05.678Z"},
             {"orderId": "o-2", "total": 0, "tax": 1e-05}]
    invalid = [{"orderId": "o", "total": -1}, {"orderId": "o", "total": 1, "currency": "EURO"},
               {"orderId": "o", "total": 1, "items": 2147483648}, {"total": 1},
               {"orderId": "o", "total": 1, "createdAt": "2024-13-01"}]
    return schema, valid, invalid


def snowplow_screen_view() -> tuple[dict, list, list]:
    schema = _snowplow("com.example.mobile", "screen_view", {
        "name": {"type": "string", "maxLength": 1024},
        "id": {"type": "string", "format": "uuid", "maxLength": 36},
        "type": {"type": ["string", "null"], "maxLength": 64},
        "previousName": {"type": ["string", "null"], "maxLength": 4096},
        "previousId": {"type": ["string", "null"], "format": "uuid"},
        "transitionType": {"type": ["string", "null"], "maxLength": 255},
        "viewportWidth": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535}}, ["name", "id"])
    valid = [{"name": "home", "id": "2f1c36ae-5a0a-4f36-9b34-8f33a0dbd2b7", "type": None,
              "previousId": "6e1d6e5b-1f83-4b3c-9a50-0a4f0bd1a7a1", "viewportWidth": 1080}]
    invalid = [{"name": "home", "id": "not-a-uuid-at-all"}, {"name": "h"}, {"name": "h", "id":
                                                                    "2f1c36ae-5a0a-4f36-9b34-8f33a0dbd2b7",
                                                                    "viewportWidth": 70000}]
    return schema, valid, invalid


def snowplow_ad_impression() -> tuple[dict, list, list]:
    schema = _snowplow("com.example", "ad_impression", {
        "impressionId": {"type": "string", "maxLength": 255},
        "costModel": {"enum": ["cpa", "cpc", "cpm"]},
        "cost": {"type": "number", "minimum": 0},
        "targetUrl": {"type": "string", "format": "uri", "maxLength": 4096},
        "bannerId": {"type": "string"}, "zoneId": {"type": "string"}, "advertiserId": {"type": "string"},
        "campaignId": {"type": "string"}}, [])
    schema["dependencies"] = {"cost": ["costModel"]}
    valid = [{"impressionId": "i1", "costModel": "cpm", "cost": 5.5, "targetUrl": "https://ads.example/c"},
             {"bannerId": "b", "zoneId": "z"}]
    invalid = [{"cost": 1.0}, {"costModel": "cpx"}, {"cost": -2, "costModel": "cpc"}]
    return schema, valid, invalid


def snowplow_consent() -> tuple[dict, list, list]:
    schema = _snowplow("com.example", "consent_preferences", {
        "basisForProcessing": {"enum": ["consent", "contract", "legal_obligation", "vital_interests",
                                        "public_task", "legitimate_interests"]},
        "consentUrl": {"type": "string", "format": "uri"}, "consentVersion": {"type": "string"},
        "consentScopes": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "domainsApplied": {"type": "array", "items": {"type": "string"}},
        "gdprApplies": {"type": ["boolean", "null"]}}, ["basisForProcessing", "consentScopes"])
    valid = [{"basisForProcessing": "consent", "consentUrl": "https://example.org/privacy", "consentVersion": "1.0",
              "consentScopes": ["necessary", "analytics"], "gdprApplies": True}]
    invalid = [{"basisForProcessing": "consent", "consentScopes": ["a", "a"]},
               {"basisForProcessing": "whim", "consentScopes": []}]
    return schema, valid, invalid


# --- Washington Post-style content ---------------------------------------------------------
def wapo_story() -> tuple[dict, list, list]:
    credit = _obj({"type": {"enum": ["author", "reference"]}, "_id": _s(), "name": _s(),
                   "url": _s(format="uri"), "additional_properties": {"type": "object"}}, ["type"])
    element = {"type": "object", "properties": {
        "type": {"enum": ["text", "image", "video", "header", "list", "raw_html", "quote"]},
        "_id": _s(), "content": _s(), "level": {"type": "integer", "minimum": 1, "maximum": 6},
        "items": {"type": "array", "items": {"$ref": "#/definitions/element"}},
        "url": _s(format="uri"), "caption": _s()}, "required": ["type"],
        "if": {"properties": {"type": {"const": "header"}}}, "then": {"required": ["level", "content"]}}
    schema = {"$schema": D4, "id": "https://example.invalid/ans/story.json", "definitions": {
        "credit": credit, "element": element}, "type": "object", "properties": {
        "_id": _s(), "type": {"enum": ["story"]}, "version": {"enum": ["0.10.9", "0.10.10", "1.0.0"]},
        "canonical_url": _s(), "headlines": _obj({"basic": _s()}, ["basic"]),
        "subheadlines": _obj({"basic": _s()}),
        "credits": _obj({"by": {"type": "array", "items": {"$ref": "#/definitions/credit"}}}),
        "display_date": _s(format="date-time"), "content_elements": {"type": "array", "items": {
            "$ref": "#/definitions/element"}},
        "taxonomy": _obj({"tags": {"type": "array", "items": _obj({"text": _s(), "slug": _s()}, ["text"])},
                          "primary_section": {"type": "object"}}),
        "language": _s(pattern="^[a-z]{2}(-[A-Z]{2})?$"), "word_count": {"type": "integer", "minimum": 0}},
        "required": ["type", "version"]}
    valid = [{"_id": "ABC123", "type": "story", "version": "1.0.0", "canonical_url": "/politics/2024/05/01/x/",
              "headlines": {"basic": "A headline — with “quotes”"},
              "credits": {"by": [{"type": "author", "name": "Jane Doe", "url": "https://example.org/jane"}]},
              "display_date": "2024-05-01T12:00:00Z", "content_elements": [
                  {"type": "header", "level": 2, "content": "Intro"}, {"type": "text", "content": "Hello."},
                  {"type": "list", "items": [{"type": "text", "content": "one"}]}],
              "taxonomy": {"tags": [{"text": "Elections", "slug": "elections"}]}, "language": "en-US",
              "word_count": 850}]
    invalid = [{"type": "story", "version": "2.0"}, {"type": "story", "version": "1.0.0",
                                                      "content_elements": [{"type": "header", "content": "x"}]},
               {"type": "story", "version": "1.0.0", "language": "english"},
               {"type": "story", "version": "1.0.0", "credits": {"by": [{"name": "x"}]}}]
    return schema, valid, invalid


def wapo_image() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "type": "object", "properties": {
        "type": {"enum": ["image"]}, "_id": _s(), "url": _s(format="uri"),
        "width": {"type": "integer", "minimum": 0}, "height": {"type": "integer", "minimum": 0},
        "caption": _s(), "alt_text": _s(maxLength=500),
        "focal_point": _obj({"x": {"type": "number"}, "y": {"type": "number"}}, ["x", "y"]),
        "resized_params": {"type": "object", "patternProperties": {
            "^[0-9]+x[0-9]+$": {"type": "string"}}, "additionalProperties": False},
        "licensable": {"type": "boolean"}, "copyright": _s()}, "required": ["type"]}
    valid = [{"type": "image", "url": "https://img.example.org/a.jpg", "width": 1200, "height": 800,
              "focal_point": {"x": 600, "y": 400.5}, "resized_params": {"800x600": "abc="}}]
    invalid = [{"type": "image", "width": -1}, {"type": "image", "resized_params": {"big": "x"}},
               {"type": "image", "focal_point": {"x": 1}}, {"type": "video"}]
    return schema, valid, invalid


def wapo_video() -> tuple[dict, list, list]:
    stream = _obj({"stream_type": {"enum": ["mp4", "ts", "gif", "webm"]}, "url": _s(format="uri"),
                   "height": {"type": "integer"}, "width": {"type": "integer"},
                   "bitrate": {"type": "integer", "minimum": 0}, "filesize": {"type": "integer"}}, ["url"])
    schema = {"$schema": D4, "type": "object", "properties": {
        "type": {"enum": ["video"]}, "duration": {"type": "integer", "minimum": 0, "description": "milliseconds"},
        "streams": {"type": "array", "items": stream, "minItems": 1},
        "promo_image": {"type": "object"}, "embed_html": _s(),
        "video_type": {"enum": ["clip", "live", "vod", "trailer"]},
        "youtube_content_id": _s(), "transcript": _s()}, "required": ["type", "streams"]}
    valid = [{"type": "video", "duration": 93000, "streams": [
        {"stream_type": "mp4", "url": "https://v.example.org/a.mp4", "height": 720, "width": 1280,
         "bitrate": 2000}], "video_type": "clip"}]
    invalid = [{"type": "video", "streams": []}, {"type": "video", "streams": [{"stream_type": "avi", "url": "x:/"}]},
               {"type": "video", "streams": [{"url": "https://a"}], "duration": -5}]
    return schema, valid, invalid


# --- GitHub-style schemas (the long tail: small app configs, APIs, data files) --------------
def gh_user_profile() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "title": "User", "type": "object", "properties": {
        "id": {"type": "integer"}, "username": _s(minLength=3, maxLength=20, pattern="^[a-zA-Z0-9_]+$"),
        "email": _s(format="email"), "age": {"type": "integer", "minimum": 13, "maximum": 120},
        "roles": {"type": "array", "items": {"enum": ["admin", "editor", "viewer"]}, "uniqueItems": True,
                  "minItems": 1},
        "address": _obj({"street": _s(), "city": _s(), "zip": _s(pattern="^[0-9]{5}(-[0-9]{4})?$"),
                         "country": _s(minLength=2, maxLength=2)}, ["city"]),
        "createdAt": _s(format="date-time"), "active": {"type": "boolean", "default": True}},
        "required": ["id", "username", "email"], "additionalProperties": False}
    valid = [{"id": 1, "username": "ada_l", "email": "ada@example.org", "age": 36, "roles": ["admin", "viewer"],
              "address": {"street": "1 Main St", "city": "London", "zip": "12345", "country": "GB"},
              "createdAt": "2020-01-01T00:00:00+00:00"}, {"id": 2, "username": "bob", "email": "b@x.io"}]
    invalid = [{"id": 1, "username": "ab", "email": "a@b.c"}, {"id": 1, "username": "abc", "email": "nope"},
               {"id": 1, "username": "abc", "email": "a@b.c", "roles": ["admin", "admin"]},
               {"id": 1, "username": "abc", "email": "a@b.c", "roles": []},
               {"id": 1, "username": "abc", "email": "a@b.c", "age": 5}]
    return schema, valid, invalid


def gh_api_error() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "type": "object", "properties": {
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "error": {"type": "object", "properties": {"code": _s(), "message": _s(), "details": {"type": "array",
                                                                                          "items": {}}},
                  "required": ["code", "message"]},
        "requestId": _s(), "retryAfter": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
        "required": ["status", "error"]}
    valid = [{"status": 404, "error": {"code": "not_found", "message": "No such item", "details": []},
              "requestId": "r-1"}, {"status": 429, "error": {"code": "rate", "message": "slow down"},
                                    "retryAfter": 1.5}]
    invalid = [{"status": 200, "error": {"code": "x", "message": "y"}}, {"status": 500, "error": {"code": "x"}},
               {"status": 429, "error": {"code": "r", "message": "m"}, "retryAfter": 0}]
    return schema, valid, invalid


def gh_geojson_point() -> tuple[dict, list, list]:
    position = {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "number"}}
    schema = {"$schema": D7, "definitions": {"position": position}, "oneOf": [
        {"type": "object", "properties": {"type": {"const": "Point"}, "coordinates": {"$ref": "#/definitions/position"}},
         "required": ["type", "coordinates"]},
        {"type": "object", "properties": {"type": {"const": "LineString"}, "coordinates": {
            "type": "array", "items": {"$ref": "#/definitions/position"}, "minItems": 2}},
         "required": ["type", "coordinates"]},
        {"type": "object", "properties": {"type": {"const": "Polygon"}, "coordinates": {
            "type": "array", "items": {"type": "array", "items": {"$ref": "#/definitions/position"}, "minItems": 4}}},
         "required": ["type", "coordinates"]}]}
    valid = [{"type": "Point", "coordinates": [102.0, 0.5]}, {"type": "LineString", "coordinates": [[0, 0], [1, 1.5]]},
             {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]}]
    invalid = [{"type": "Point", "coordinates": [1]}, {"type": "LineString", "coordinates": [[0, 0]]},
               {"type": "Circle", "coordinates": []}, {"type": "Point"}]
    return schema, valid, invalid


def gh_todo_app() -> tuple[dict, list, list]:
    schema = {"$schema": D2020, "$id": "https://example.invalid/todo.json", "type": "object", "$defs": {
        "todo": {"type": "object", "properties": {
            "id": {"type": "string", "format": "uuid"}, "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "done": {"type": "boolean"}, "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
            "due": {"type": ["string", "null"], "format": "date"},
            "subtasks": {"type": "array", "items": {"$ref": "#/$defs/todo"}}},
            "required": ["id", "title", "done"], "additionalProperties": False}},
        "properties": {"owner": {"type": "string"}, "todos": {"type": "array", "items": {"$ref": "#/$defs/todo"}}},
        "required": ["todos"]}
    valid = [{"owner": "me", "todos": [{"id": "123e4567-e89b-12d3-a456-426614174000", "title": "Buy milk",
                                        "done": False, "priority": 2, "due": "2024-06-01", "subtasks": [
            {"id": "123e4567-e89b-12d3-a456-426614174001", "title": "Find shop", "done": True}]}]}, {"todos": []}]
    invalid = [{"todos": [{"id": "x", "title": "a", "done": False}]},
               {"todos": [{"id": "123e4567-e89b-12d3-a456-426614174000", "title": "", "done": False}]},
               {"todos": [{"id": "123e4567-e89b-12d3-a456-426614174000", "title": "a", "done": False,
                           "priority": 9}]}, {"owner": "x"}]
    return schema, valid, invalid


def gh_i18n_messages() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "propertyNames": {"pattern": "^[a-z]{2}(_[A-Z]{2})?$"},
              "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"},
                                       "minProperties": 1}}
    valid = [{"en": {"hello": "Hello", "bye": "Bye"}, "fr_FR": {"hello": "Bonjour", "bye": "Au revoir"},
              "ja": {"hello": "こんにちは"}}]
    invalid = [{"english": {"hello": "Hi"}}, {"en": {}}, {"en": {"hello": 1}}]
    return schema, valid, invalid


def gh_feature_flags() -> tuple[dict, list, list]:
    flag = {"type": "object", "properties": {
        "enabled": {"type": "boolean"}, "rollout": {"type": "number", "minimum": 0, "maximum": 1},
        "variants": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0, "maximum": 100}},
        "owner": _s(format="email"), "expires": _s(format="date")},
        "required": ["enabled"], "additionalProperties": False,
        "dependentRequired": {"variants": ["rollout"]}}
    schema = {"$schema": D2020, "type": "object", "properties": {"flags": {
        "type": "object", "additionalProperties": flag, "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"}}},
        "required": ["flags"]}
    valid = [{"flags": {"new_ui": {"enabled": True, "rollout": 0.25, "variants": {"a": 50, "b": 50},
                                   "owner": "team@example.org", "expires": "2025-01-31"},
                        "beta": {"enabled": False}, "tiny": {"enabled": True, "rollout": 1e-05}}}]
    invalid = [{"flags": {"x": {"enabled": True, "variants": {"a": 1}}}}, {"flags": {"X": {"enabled": True}}},
               {"flags": {"x": {"enabled": True, "rollout": 1.5}}}, {"flags": {"x": {}}}]
    return schema, valid, invalid


def gh_money_transfer() -> tuple[dict, list, list]:
    amount = {"type": "object", "properties": {"currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                               "value": {"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]{1,2})?$"}},
              "required": ["currency", "value"], "additionalProperties": False}
    schema = {"$schema": D7, "definitions": {"amount": amount}, "type": "object", "properties": {
        "id": _s(), "from": _s(minLength=8, maxLength=34), "to": _s(minLength=8, maxLength=34),
        "amount": {"$ref": "#/definitions/amount"}, "fee": {"$ref": "#/definitions/amount"},
        "status": {"enum": ["pending", "completed", "failed", "cancelled"]},
        "reason": {"type": "string"}},
        "required": ["from", "to", "amount", "status"],
        "if": {"properties": {"status": {"const": "failed"}}, "required": ["status"]},
        "then": {"required": ["reason"]},
        "not": {"properties": {"status": {"const": "cancelled"}, "fee": {"type": "object"}}, "required": ["fee",
                                                                                                           "status"]}}
    valid = [{"id": "t1", "from": "DE89370400440532013000", "to": "GB29NWBK60161331926819",
              "amount": {"currency": "EUR", "value": "100.50"}, "status": "completed",
              "fee": {"currency": "EUR", "value": "0.50"}},
             {"from": "DE89370400440532013000", "to": "GB29NWBK60161331926819",
              "amount": {"currency": "EUR", "value": "5"}, "status": "failed", "reason": "insufficient funds"}]
    invalid = [{"from": "DE89370400440532013000", "to": "GB29NWBK60161331926819",
                "amount": {"currency": "EUR", "value": "5"}, "status": "failed"},
               {"from": "DE8937040044", "to": "GB29NWBK60161331926819", "amount": {"currency": "eur", "value": "5"},
                "status": "pending"},
               {"from": "DE89370400440532013000", "to": "GB29NWBK60161331926819",
                "amount": {"currency": "EUR", "value": "5.123"}, "status": "pending"}]
    return schema, valid, invalid


def gh_color_palette() -> tuple[dict, list, list]:
    color = {"type": "string", "pattern": "^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"}
    schema = {"$schema": D7, "type": "object", "properties": {
        "name": _s(), "colors": {"type": "object", "additionalProperties": color, "minProperties": 1,
                                 "maxProperties": 16},
        "mode": {"enum": ["light", "dark"]}, "contrast": {"type": "number", "exclusiveMinimum": 1,
                                                          "maximum": 21}}, "required": ["colors"]}
    valid = [{"name": "Solar", "colors": {"bg": "#002b36", "fg": "#839496", "accent": "#b58900"}, "mode": "dark",
              "contrast": 4.5}]
    invalid = [{"colors": {}}, {"colors": {"bg": "red"}}, {"colors": {"a": "#fff"}, "contrast": 1},
               {"colors": {f"c{i}": "#000" for i in range(17)}}]
    return schema, valid, invalid


def gh_env_settings() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "env": {"enum": ["development", "staging", "production"]}, "debug": {"type": "boolean"},
        "port": {"type": "integer", "minimum": 1024, "maximum": 65535},
        "database": {"type": "object", "properties": {"url": _s(format="uri"), "pool": {"type": "integer",
                                                                                       "minimum": 1}},
                     "required": ["url"]},
        "logLevel": {"enum": ["trace", "debug", "info", "warn", "error", "fatal"]}},
        "required": ["env"], "allOf": [
            {"if": {"properties": {"env": {"const": "production"}}}, "then": {"properties": {
                "debug": {"const": False}}, "required": ["database"]}},
            {"if": {"properties": {"env": {"enum": ["development"]}}}, "then": {"properties": {
                "logLevel": {"enum": ["trace", "debug", "info"]}}}}]}
    valid = [{"env": "production", "debug": False, "port": 8080, "database": {"url": "postgres://db/x", "pool": 10}},
             {"env": "development", "debug": True, "logLevel": "debug"}, {"env": "staging"}]
    invalid = [{"env": "production", "debug": True, "database": {"url": "postgres://db"}}, {"env": "production"},
               {"env": "development", "logLevel": "error"}, {"env": "test"}, {"env": "staging", "port": 80}]
    return schema, valid, invalid


def gh_semver_release() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "version": {"type": "string", "format": "semver"}, "date": {"type": "string", "format": "date"},
        "changes": {"type": "array", "items": {"type": "object", "properties": {
            "type": {"enum": ["added", "changed", "deprecated", "removed", "fixed", "security"]},
            "description": {"type": "string", "minLength": 1}, "pr": {"type": "integer", "minimum": 1},
            "breaking": {"type": "boolean"}}, "required": ["type", "description"]}},
        "yanked": {"type": "boolean"}}, "required": ["version", "changes"]}
    valid = [{"version": "1.4.0", "date": "2024-03-01", "changes": [
        {"type": "added", "description": "Streaming", "pr": 120}, {"type": "fixed", "description": "Crash on é"}]}]
    invalid = [{"version": "1.4.0", "changes": [{"type": "improved", "description": "x"}]},
               {"version": "1.4.0", "changes": [{"type": "fixed", "description": ""}]}, {"changes": []}]
    return schema, valid, invalid


def gh_survey() -> tuple[dict, list, list]:
    question = {"type": "object", "properties": {
        "id": _s(), "text": _s(), "kind": {"enum": ["single", "multiple", "scale", "free"]},
        "options": {"type": "array", "items": _s(), "minItems": 2},
        "scale": _obj({"min": {"type": "integer"}, "max": {"type": "integer"}}, ["min", "max"])},
        "required": ["id", "text", "kind"], "oneOf": [
            {"properties": {"kind": {"enum": ["single", "multiple"]}}, "required": ["options"]},
            {"properties": {"kind": {"const": "scale"}}, "required": ["scale"]},
            {"properties": {"kind": {"const": "free"}}}]}
    schema = {"$schema": D7, "type": "object", "definitions": {"question": question}, "properties": {
        "title": _s(), "questions": {"type": "array", "items": {"$ref": "#/definitions/question"}, "minItems": 1}},
        "required": ["title", "questions"]}
    valid = [{"title": "Feedback", "questions": [
        {"id": "q1", "text": "How was it?", "kind": "scale", "scale": {"min": 1, "max": 5}},
        {"id": "q2", "text": "Pick", "kind": "multiple", "options": ["a", "b", "c"]},
        {"id": "q3", "text": "Anything else?", "kind": "free"}]}]
    invalid = [{"title": "x", "questions": [{"id": "q", "text": "t", "kind": "single"}]},
               {"title": "x", "questions": [{"id": "q", "text": "t", "kind": "scale"}]},
               {"title": "x", "questions": []}]
    return schema, valid, invalid


def gh_measurements() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "type": "object", "properties": {
        "sensor": _s(), "unit": {"enum": ["C", "F", "K", "%", "hPa", "lux"]},
        "readings": {"type": "array", "items": {"type": "object", "properties": {
            "t": {"type": "integer", "minimum": 0}, "v": {"type": "number"},
            "quality": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": False}},
            "required": ["t", "v"], "additionalProperties": False}, "maxItems": 1000},
        "calibration": {"type": "array", "items": [{"type": "number"}, {"type": "number"}],
                        "additionalItems": False}},
        "required": ["sensor", "readings"]}
    valid = [{"sensor": "t1", "unit": "C", "readings": [{"t": 0, "v": 21.5}, {"t": 60, "v": -3.25e-3},
                                                        {"t": 120, "v": 1e+20, "quality": 1}],
              "calibration": [1.0, -0.5]}]
    invalid = [{"sensor": "t1", "readings": [{"t": -1, "v": 1}]}, {"sensor": "t1", "readings": [{"t": 1}]},
               {"sensor": "t1", "readings": [], "calibration": [1, 2, 3]},
               {"sensor": "t1", "readings": [{"t": 1, "v": 1, "quality": 1.5}]}]
    return schema, valid, invalid


def gh_permissions() -> tuple[dict, list, list]:
    scope = {"enum": ["read", "write", "admin", "none"]}
    schema = {"$schema": D7, "type": "object", "properties": {
        "role": _s(), "permissions": {"type": "object", "properties": {
            "contents": scope, "issues": scope, "pull_requests": scope, "actions": scope, "packages": scope,
            "pages": scope, "deployments": scope, "checks": scope}, "additionalProperties": False,
            "minProperties": 1},
        "inherits": {"type": "array", "items": _s(), "uniqueItems": True, "maxItems": 1}},
        "required": ["role", "permissions"]}
    valid = [{"role": "maintainer", "permissions": {"contents": "write", "issues": "write", "actions": "read"},
              "inherits": ["triage"]}, {"role": "bot", "permissions": {"checks": "write"}}]
    invalid = [{"role": "x", "permissions": {}}, {"role": "x", "permissions": {"contents": "owner"}},
               {"role": "x", "permissions": {"wiki": "read"}}, {"role": "x", "permissions": {"pages": "read"},
                                                                 "inherits": ["a", "b"]}]
    return schema, valid, invalid


def gh_weekly_schedule() -> tuple[dict, list, list]:
    day = {"enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]}
    schema = {"$schema": D2020, "type": "object", "properties": {
        "name": _s(), "days": {"type": "array", "items": day, "uniqueItems": True, "minItems": 1},
        "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "uniqueItems": True,
                  "maxItems": 3},
        "timezone": _s(), "exceptions": {"type": "array", "items": _s(format="date")}},
        "required": ["name", "days"]}
    valid = [{"name": "standup", "days": ["mon", "wed", "fri"], "hours": [9, 17], "timezone": "Europe/Paris"},
             {"name": "weekend", "days": ["sun", "sat"], "exceptions": ["2024-12-25"]}]
    invalid = [{"name": "x", "days": ["mon", "mon"]}, {"name": "x", "days": []},
               {"name": "x", "days": ["mon"], "hours": [9, 9]}, {"name": "x", "days": ["funday"]},
               {"name": "x", "days": ["mon"], "hours": [1, 2, 3, 4]}]
    return schema, valid, invalid


def gh_not_reserved() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "slug": {"type": "string", "pattern": "^[a-z0-9-]+$", "not": {"enum": ["admin", "api", "login", "new"]}},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535, "not": {"enum": [22, 25]}},
        "replicas": {"type": "integer", "not": {"const": 0}},
        "public": {"type": "boolean", "not": {"const": False}},
        "region": {"type": ["string", "null"], "not": {"type": "null"}}}, "required": ["slug"]}
    valid = [{"slug": "my-project", "port": 8080, "replicas": 2, "public": True, "region": "eu"}, {"slug": "admins"}]
    invalid = [{"slug": "admin"}, {"slug": "x", "port": 22}, {"slug": "x", "replicas": 0},
               {"slug": "x", "public": False}, {"slug": "x", "region": None}]
    return schema, valid, invalid


def gh_any_of_contact() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "name": _s(), "email": _s(format="email"), "phone": _s(pattern="^\\+?[0-9 -]{7,15}$"),
        "website": _s(format="uri")}, "required": ["name"],
        "anyOf": [{"required": ["email"]}, {"required": ["phone"]}]}
    valid = [{"name": "A", "email": "a@example.org"}, {"name": "B", "phone": "+44 20 7946 0958"},
             {"name": "C", "email": "c@example.org", "phone": "5551234567", "website": "https://c.example"}]
    invalid = [{"name": "A"}, {"name": "A", "phone": "call me"}, {"email": "a@example.org"}]
    return schema, valid, invalid


def gh_one_of_payment() -> tuple[dict, list, list]:
    card = _obj({"number": _s(pattern="^[0-9]{13,19}$"), "expiry": _s(pattern="^(0[1-9]|1[0-2])/[0-9]{2}$"),
                 "cvv": _s(pattern="^[0-9]{3,4}$")}, ["number", "expiry"], additionalProperties=False)
    bank = _obj({"iban": _s(pattern="^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"), "bic": _s()}, ["iban"],
                additionalProperties=False)
    schema = {"$schema": D7, "type": "object", "definitions": {"card": card, "bank": bank}, "properties": {
        "amount": {"type": "number", "exclusiveMinimum": 0}, "method": {"oneOf": [
            {"$ref": "#/definitions/card"}, {"$ref": "#/definitions/bank"}, {"type": "string",
                                                                            "enum": ["cash", "voucher"]}]}},
        "required": ["amount", "method"]}
    valid = [{"amount": 12.5, "method": {"number": "4111111111111111", "expiry": "09/27", "cvv": "123"}},
             {"amount": 100, "method": {"iban": "DE89370400440532013000"}}, {"amount": 1, "method": "cash"}]
    invalid = [{"amount": 0, "method": "cash"}, {"amount": 1, "method": {"number": "4111", "expiry": "09/27"}},
               {"amount": 1, "method": {"iban": "DE89370400440532013000", "number": "4111111111111111"}},
               {"amount": 1, "method": "cheque"}]
    return schema, valid, invalid


def gh_one_of_overlap() -> tuple[dict, list, list]:
    # oneOf whose branches overlap unless negated: a required-key test against another
    schema = {"$schema": D7, "type": "object", "properties": {
        "file": _s(), "url": _s(format="uri"), "inline": _s()},
        "oneOf": [{"required": ["file"]}, {"required": ["url"]}, {"required": ["inline"]}]}
    valid = [{"file": "a.txt"}, {"url": "https://example.org/a"}, {"inline": "hello"}]
    invalid = [{"file": "a", "url": "https://x.org"}, {}, {"file": "a", "inline": "b"}]
    return schema, valid, invalid


def gh_all_of_inheritance() -> tuple[dict, list, list]:
    base = _obj({"id": _s(format="uuid"), "createdAt": _s(format="date-time"), "updatedAt": _s(format="date-time")},
                ["id"])
    schema = {"$schema": D7, "definitions": {"base": base, "named": {"allOf": [{"$ref": "#/definitions/base"}, _obj(
        {"name": _s(minLength=1)}, ["name"])]}}, "allOf": [{"$ref": "#/definitions/named"}, {
            "type": "object", "properties": {"price": {"type": "number", "minimum": 0},
                                             "sku": _s(pattern="^[A-Z]{3}-[0-9]{4}$"),
                                             "stock": {"type": "integer", "minimum": 0}},
            "required": ["price"]}]}
    valid = [{"id": "123e4567-e89b-12d3-a456-426614174000", "createdAt": "2024-01-01T00:00:00Z", "name": "Widget",
              "price": 9.99, "sku": "ABC-1234", "stock": 10},
             {"id": "123e4567-e89b-12d3-a456-426614174000", "name": "Gadget", "price": 0}]
    invalid = [{"id": "123e4567-e89b-12d3-a456-426614174000", "name": "W"},
               {"id": "123e4567-e89b-12d3-a456-426614174000", "name": "", "price": 1},
               {"name": "W", "price": 1}, {"id": "123e4567-e89b-12d3-a456-426614174000", "name": "W", "price": 1,
                                           "sku": "abc-1234"}]
    return schema, valid, invalid


def gh_ref_chain() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "definitions": {
        "a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/c"},
        "c": {"type": "object", "properties": {"v": {"$ref": "#/definitions/d"}}, "required": ["v"]},
        "d": {"type": "string", "enum": ["x", "y", "z"]}},
        "type": "object", "properties": {"first": {"$ref": "#/definitions/a"},
                                         "rest": {"type": "array", "items": {"$ref": "#/definitions/a"}}}}
    valid = [{"first": {"v": "x"}, "rest": [{"v": "y"}, {"v": "z"}]}, {}]
    invalid = [{"first": {"v": "w"}}, {"first": {}}, {"rest": [{"v": 1}]}]
    return schema, valid, invalid


def gh_big_enum() -> tuple[dict, list, list]:
    countries = ["AD", "AE", "AF", "AG", "AL", "AM", "AO", "AR", "AT", "AU", "AZ", "BA", "BB", "BD", "BE", "BF", "BG",
                 "BH", "BI", "BJ", "BN", "BO", "BR", "BS", "BT", "BW", "BY", "BZ", "CA", "CD", "CF", "CG", "CH", "CI",
                 "CL", "CM", "CN", "CO", "CR", "CU", "CV", "CY", "CZ", "DE", "DJ", "DK", "DM", "DO", "DZ", "EC", "EE",
                 "EG", "ER", "ES", "ET", "FI", "FJ", "FM", "FR", "GA", "GB", "GD", "GE", "GH", "GM", "GN", "GQ", "GR",
                 "GT", "GW", "GY", "HN", "HR", "HT", "HU", "ID", "IE", "IL", "IN", "IQ", "IR", "IS", "IT", "JM", "JO",
                 "JP", "KE", "KG", "KH", "KI", "KM", "KN", "KP", "KR", "KW", "KZ", "LA", "LB", "LC", "LI", "LK", "LR",
                 "LS", "LT", "LU", "LV", "LY", "MA", "MC", "MD", "ME", "MG", "MH", "MK", "ML", "MM", "MN", "MR", "MT",
                 "MU", "MV", "MW", "MX", "MY", "MZ", "NA", "NE", "NG", "NI", "NL", "NO", "NP", "NR", "NZ", "OM", "PA",
                 "PE", "PG", "PH", "PK", "PL", "PT", "PW", "PY", "QA", "RO", "RS", "RU", "RW", "SA", "SB", "SC", "SD",
                 "SE", "SG", "SI", "SK", "SL", "SM", "SN", "SO", "SR", "SS", "ST", "SV", "SY", "SZ", "TD", "TG", "TH",
                 "TJ", "TL", "TM", "TN", "TO", "TR", "TT", "TV", "TZ", "UA", "UG", "US", "UY", "UZ", "VA", "VC", "VE",
                 "VN", "VU", "WS", "YE", "ZA", "ZM", "ZW"]
    tz = [f"Etc/GMT{'+' if i > 0 else '-'}{abs(i)}" for i in range(-12, 13) if i] + ["UTC", "Europe/Paris",
                                                                                     "America/New_York"]
    schema = {"$schema": D7, "type": "object", "properties": {
        "country": {"type": "string", "enum": countries}, "shipsTo": {"type": "array", "items": {"enum": countries},
                                                                      "uniqueItems": True},
        "timezone": {"enum": tz}, "currency": {"type": "string", "enum": ["EUR", "USD", "GBP", "JPY", "CHF", "CNY"]}},
        "required": ["country"]}
    valid = [{"country": "FR", "shipsTo": ["FR", "DE", "BE"], "timezone": "Europe/Paris", "currency": "EUR"},
             {"country": "JP", "timezone": "Etc/GMT-9"}]
    invalid = [{"country": "XX"}, {"country": "FR", "shipsTo": ["FR", "FR"]}, {"country": "FR", "timezone": "CET"}]
    return schema, valid, invalid


def gh_type_arrays() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "type": "object", "properties": {
        "value": {"type": ["string", "number", "boolean", "null"]},
        "limit": {"type": ["integer", "null"], "minimum": 0},
        "labels": {"type": ["array", "string"], "items": {"type": "string"}, "minLength": 1},
        "meta": {"type": ["object", "null"], "properties": {"k": {"type": "string"}}, "required": ["k"]}}}
    valid = [{"value": 1.5, "limit": None, "labels": ["a", "b"], "meta": None},
             {"value": None, "limit": 10, "labels": "single", "meta": {"k": "v"}}, {"value": True}]
    invalid = [{"value": [1]}, {"limit": -1}, {"labels": ""}, {"labels": [1]}, {"meta": {}}]
    return schema, valid, invalid


def gh_draft4_bounds() -> tuple[dict, list, list]:
    schema = {"$schema": D4, "id": "http://example.invalid/ratings#", "type": "object", "definitions": {
        "score": {"type": "number", "minimum": 0, "maximum": 10, "exclusiveMaximum": True},
        "weight": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}},
        "properties": {"score": {"$ref": "#/definitions/score"}, "weight": {"$ref": "#/definitions/weight"},
                       "votes": {"type": "integer", "minimum": 0, "maximum": 4294967295},
                       "ratio": {"type": "number", "multipleOf": 0.01}},
        "required": ["score"]}
    valid = [{"score": 9.99, "weight": 1, "votes": 123456789, "ratio": 0.25}, {"score": 0, "weight": 1e-05}]
    invalid = [{"score": 10}, {"score": 1, "weight": 0}, {"score": 1, "votes": 4294967296}, {"score": 1, "ratio": 0.123}]
    return schema, valid, invalid


def gh_string_formats() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "host": _s(format="hostname"), "ip": _s(format="ipv4"), "ip6": _s(format="ipv6"),
        "when": _s(format="date-time"), "day": _s(format="date"), "at": _s(format="time"),
        "span": _s(format="duration"), "link": _s(format="uri"), "ref": _s(format="uri-reference"),
        "mail": _s(format="email"), "id": _s(format="uuid"), "re": _s(format="regex"),
        "tmpl": _s(format="uri-template"), "ptr": _s(format="json-pointer"), "color": _s(format="color"),
        "path": _s(format="path"), "version": _s(format="semver")}}
    valid = [{"host": "api.example.org", "ip": "192.168.0.1", "ip6": "::1", "when": "2024-02-29T23:59:59.5+02:00",
              "day": "2024-02-29", "at": "12:30:00Z", "span": "P1DT2H", "link": "https://example.org/a?b=c#d",
              "ref": "../x.json#/a", "mail": "first.last@example.co.uk",
              "id": "123e4567-e89b-12d3-a456-426614174000", "re": "^a+$", "tmpl": "/users/{id}", "ptr": "/a/0",
              "color": "#fff", "path": "/usr/local/bin", "version": "1.2.3-beta.1"}]
    invalid = [{"ip": "256.0.0.1"}, {"day": "2023-02-29"}, {"mail": "no-at-sign"}, {"when": "2024-02-29 10:00"},
               {"id": "123e4567"}]
    return schema, valid, invalid


def gh_unicode_strings() -> tuple[dict, list, list]:
    schema = {"$schema": D2020, "type": "object", "properties": {
        "title": {"type": "string", "maxLength": 10}, "emoji": {"type": "string", "pattern": "^\\p{So}+$"},
        "greeting": {"enum": ["héllo", "こんにちは", "привет"]}, "note": {"type": "string", "minLength": 2}}}
    valid = [{"title": "Café ☕", "greeting": "こんにちは", "note": "ok\nline"}, {"title": "naïve", "note": "\t\u0001"}]
    invalid = [{"title": "ünïcödé strings"}, {"greeting": "hello"}, {"note": "é"}]
    return schema, valid, invalid


def gh_map_with_pattern() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {"version": {"type": "integer", "const": 1}},
              "patternProperties": {"^env_[A-Z_]+$": {"type": "string"}, "^port_[a-z]+$": {"type": "integer",
                                                                                            "minimum": 1},
                                    "^flag_": {"type": "boolean"}, "^list_": {"type": "array"},
                                    "^obj_": {"type": "object"}, "^num_": {"type": "number"}},
              "additionalProperties": False, "required": ["version"]}
    valid = [{"version": 1, "env_HOME": "/root", "port_http": 80, "flag_x": True, "list_a": [1], "num_pi": 3.14}]
    invalid = [{"version": 1, "env_home": "x"}, {"version": 1, "port_http": 0}, {"version": 2},
               {"version": 1, "other": 1}, {"version": 1, "flag_x": "yes"}]
    return schema, valid, invalid


def gh_recursive_expression() -> tuple[dict, list, list]:
    expr = {"oneOf": [{"type": "number"}, {"type": "string", "pattern": "^[a-z]+$"},
                      {"type": "object", "properties": {"op": {"enum": ["+", "-", "*", "/"]},
                                                        "args": {"type": "array", "items": {"$ref": "#/$defs/expr"},
                                                                 "minItems": 2, "maxItems": 2}},
                       "required": ["op", "args"], "additionalProperties": False}]}
    schema = {"$schema": D2020, "$defs": {"expr": expr}, "$ref": "#/$defs/expr"}
    valid = [{"op": "+", "args": [1, {"op": "*", "args": ["x", 2.5]}]}, 42, "y"]
    invalid = [{"op": "%", "args": [1, 2]}, {"op": "+", "args": [1]}, "X", {"op": "+", "args": [1, {"op": "-"}]}]
    return schema, valid, invalid


def gh_min_max_props_config() -> tuple[dict, list, list]:
    schema = {"$schema": D7, "type": "object", "properties": {
        "aliases": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 5},
        "limits": {"type": "object", "properties": {"cpu": {"type": "number"}, "memory": {"type": "string"},
                                                    "disk": {"type": "string"}}, "minProperties": 1,
                   "additionalProperties": False},
        "headers": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}}}
    valid = [{"aliases": {"ll": "ls -l"}, "limits": {"cpu": 0.5}, "headers": {"X-Id": "1"}},
             {"limits": {"memory": "1Gi", "disk": "10Gi"}}]
    invalid = [{"limits": {}}, {"headers": {}}, {"aliases": {str(i): "x" for i in range(6)}}, {"limits": {"gpu": 1}}]
    return schema, valid, invalid


# --- Glaive-style function-calling schemas ---------------------------------------------------
_FUNCTIONS = [
    ("get_weather", {"location": _s(description="The city and state, e.g. San Francisco, CA"),
                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["location"],
     {"location": "Paris, France", "unit": "celsius"}, [{"unit": "kelvin", "location": "x"}, {"unit": "celsius"}]),
    ("calculate_area", {"shape": {"type": "string", "enum": ["circle", "rectangle", "triangle"]},
                        "dimensions": {"type": "object", "properties": {
                            "radius": {"type": "number"}, "length": {"type": "number"}, "width": {"type": "number"},
                            "base": {"type": "number"}, "height": {"type": "number"}}}}, ["shape", "dimensions"],
     {"shape": "rectangle", "dimensions": {"length": 5, "width": 3.5}}, [{"shape": "square", "dimensions": {}},
                                                                         {"shape": "circle"}]),
    ("search_recipes", {"ingredients": {"type": "array", "items": {"type": "string"}},
                        "diet": {"type": "string", "enum": ["vegetarian", "vegan", "gluten-free", "keto"]},
                        "max_prep_time": {"type": "integer", "description": "minutes"}}, ["ingredients"],
     {"ingredients": ["chicken", "broccoli"], "max_prep_time": 30}, [{"ingredients": "chicken"}, {}]),
    ("create_calendar_event", {"title": _s(), "start_time": _s(format="date-time"), "end_time": _s(format="date-time"),
                               "attendees": {"type": "array", "items": _s(format="email")},
                               "location": _s()}, ["title", "start_time", "end_time"],
     {"title": "Sync", "start_time": "2024-05-01T10:00:00Z", "end_time": "2024-05-01T10:30:00Z",
      "attendees": ["a@example.org"]}, [{"title": "x", "start_time": "10am", "end_time": "11am"}]),
    ("generate_password", {"length": {"type": "integer", "minimum": 8, "maximum": 128},
                           "include_symbols": {"type": "boolean"}, "include_numbers": {"type": "boolean"}}, ["length"],
     {"length": 16, "include_symbols": True}, [{"length": 4}, {"include_symbols": True}]),
    ("convert_currency", {"amount": {"type": "number"}, "from_currency": _s(pattern="^[A-Z]{3}$"),
                          "to_currency": _s(pattern="^[A-Z]{3}$")}, ["amount", "from_currency", "to_currency"],
     {"amount": 1000, "from_currency": "USD", "to_currency": "EUR"}, [{"amount": "1000", "from_currency": "USD",
                                                                       "to_currency": "EUR"}]),
    ("book_flight", {"origin": _s(), "destination": _s(), "departure_date": _s(format="date"),
                     "return_date": _s(format="date"), "passengers": {"type": "integer", "minimum": 1},
                     "class": {"type": "string", "enum": ["economy", "premium_economy", "business", "first"]}},
     ["origin", "destination", "departure_date"],
     {"origin": "JFK", "destination": "LHR", "departure_date": "2024-07-01", "passengers": 2, "class": "economy"},
     [{"origin": "JFK", "destination": "LHR", "departure_date": "July 1"}, {"origin": "JFK", "destination": "LHR",
                                                                            "departure_date": "2024-07-01",
                                                                            "passengers": 0}]),
    ("calculate_mortgage", {"loan_amount": {"type": "number", "minimum": 0}, "interest_rate": {
        "type": "number", "minimum": 0, "maximum": 100}, "loan_term": {"type": "integer", "minimum": 1}},
     ["loan_amount", "interest_rate", "loan_term"], {"loan_amount": 200000, "interest_rate": 3.5, "loan_term": 30},
     [{"loan_amount": 200000, "interest_rate": 3.5}, {"loan_amount": -1, "interest_rate": 3.5, "loan_term": 30}]),
    ("send_email", {"recipient": _s(format="email"), "subject": _s(), "body": _s(),
                    "cc": {"type": "array", "items": _s(format="email")}, "priority": {"enum": ["low", "normal",
                                                                                               "high"]}},
     ["recipient", "subject", "body"], {"recipient": "bob@example.org", "subject": "Hi", "body": "Hello Bob,\n…"},
     [{"recipient": "bob", "subject": "Hi", "body": "x"}, {"recipient": "bob@example.org", "subject": "Hi"}]),
    ("get_stock_price", {"symbol": _s(pattern="^[A-Z]{1,5}$"), "exchange": {"type": "string"}}, ["symbol"],
     {"symbol": "AAPL"}, [{"symbol": "apple"}, {}]),
    ("translate_text", {"text": _s(), "source_language": _s(), "target_language": _s()},
     ["text", "target_language"], {"text": "Bonjour", "source_language": "fr", "target_language": "en"},
     [{"text": "Bonjour"}]),
    ("create_invoice", {"customer": {"type": "object", "properties": {"name": _s(), "email": _s(format="email")},
                                     "required": ["name"]},
                        "items": {"type": "array", "items": {"type": "object", "properties": {
                            "description": _s(), "quantity": {"type": "integer", "minimum": 1},
                            "unit_price": {"type": "number", "minimum": 0}},
                            "required": ["description", "quantity", "unit_price"]}, "minItems": 1},
                        "due_date": _s(format="date"), "tax_rate": {"type": "number", "minimum": 0, "maximum": 1}},
     ["customer", "items"], {"customer": {"name": "ACME"}, "items": [{"description": "Widget", "quantity": 3,
                                                                       "unit_price": 2.5}], "tax_rate": 0.2},
     [{"customer": {"name": "ACME"}, "items": []}, {"customer": {}, "items": [{"description": "w", "quantity": 1,
                                                                               "unit_price": 1}]}]),
    ("find_restaurants", {"location": _s(), "cuisine": _s(), "price_range": {"type": "string",
                                                                             "enum": ["$", "$$", "$$$", "$$$$"]},
                          "open_now": {"type": "boolean"}, "rating_min": {"type": "number", "minimum": 1,
                                                                          "maximum": 5}}, ["location"],
     {"location": "Rome", "cuisine": "Italian", "price_range": "$$", "rating_min": 4.5},
     [{"location": "Rome", "price_range": "cheap"}, {"location": "Rome", "rating_min": 0}]),
    ("schedule_meeting", {"participants": {"type": "array", "items": _s(), "minItems": 2},
                          "date": _s(format="date"), "time": _s(pattern="^([01]?[0-9]|2[0-3]):[0-5][0-9]$"),
                          "duration_minutes": {"type": "integer", "enum": [15, 30, 45, 60, 90]}},
     ["participants", "date", "time"], {"participants": ["ann", "bo"], "date": "2024-05-02", "time": "14:30",
                                        "duration_minutes": 30},
     [{"participants": ["ann"], "date": "2024-05-02", "time": "14:30"},
      {"participants": ["a", "b"], "date": "2024-05-02", "time": "2pm"},
      {"participants": ["a", "b"], "date": "2024-05-02", "time": "14:30", "duration_minutes": 20}]),
    ("calculate_bmi", {"weight": {"type": "number", "description": "kg"}, "height": {"type": "number"}},
     ["weight", "height"], {"weight": 70.5, "height": 1.75}, [{"weight": 70}, {"weight": "70", "height": 1.8}]),
    ("get_news_headlines", {"country": _s(), "category": {"type": "string", "enum": [
        "business", "entertainment", "general", "health", "science", "sports", "technology"]},
        "page_size": {"type": "integer", "minimum": 1, "maximum": 100}}, [],
     {"country": "us", "category": "technology", "page_size": 5}, [{"category": "politics"}, {"page_size": 0}]),
    ("create_todo", {"title": _s(), "due_date": _s(format="date"), "priority": {"type": "string",
                                                                              "enum": ["low", "medium", "high"]}},
     ["title"], {"title": "Call mom", "due_date": "2024-05-03", "priority": "high"},
     [{"due_date": "2024-05-03"}, {"title": "x", "priority": "urgent"}]),
    ("search_movies", {"query": _s(), "year": {"type": "integer", "minimum": 1888, "maximum": 2100},
                       "genres": {"type": "array", "items": {"type": "string", "enum": [
                           "action", "comedy", "drama", "horror", "romance", "sci-fi", "thriller"]},
                                  "uniqueItems": True}}, ["query"],
     {"query": "inception", "year": 2010, "genres": ["sci-fi", "thriller"]},
     [{"query": "x", "genres": ["drama", "drama"]}, {"query": "x", "year": 1500}]),
    ("calculate_tip", {"bill_amount": {"type": "number", "minimum": 0}, "tip_percentage": {
        "type": "number", "minimum": 0, "maximum": 100}}, ["bill_amount", "tip_percentage"],
     {"bill_amount": 85.5, "tip_percentage": 18}, [{"bill_amount": 10, "tip_percentage": 150}]),
    ("get_directions", {"origin": _s(), "destination": _s(), "mode": {"type": "string", "enum": [
        "driving", "walking", "bicycling", "transit"]}, "avoid": {"type": "array", "items": {"enum": [
            "tolls", "highways", "ferries"]}, "uniqueItems": True}}, ["origin", "destination"],
     {"origin": "Berlin", "destination": "Potsdam", "mode": "transit", "avoid": ["tolls"]},
     [{"origin": "a", "destination": "b", "mode": "flying"}, {"origin": "a", "destination": "b",
                                                             "avoid": ["tolls", "tolls"]}]),
    ("analyze_sentiment", {"text": _s(minLength=1), "language": _s(pattern="^[a-z]{2}$")}, ["text"],
     {"text": "I love it!", "language": "en"}, [{"text": ""}, {"text": "x", "language": "english"}]),
    ("set_reminder", {"message": _s(), "time": _s(format="date-time"), "repeat": {"type": "string", "enum": [
        "none", "daily", "weekly", "monthly"], "default": "none"}}, ["message", "time"],
     {"message": "Stand up", "time": "2024-05-01T09:00:00+02:00", "repeat": "daily"},
     [{"message": "x", "time": "tomorrow"}]),
    ("get_exchange_rates", {"base": _s(pattern="^[A-Z]{3}$"), "symbols": {"type": "array", "items": _s(
        pattern="^[A-Z]{3}$"), "minItems": 1, "maxItems": 10}}, ["base"],
     {"base": "USD", "symbols": ["EUR", "JPY"]}, [{"base": "USD", "symbols": []}, {"base": "usd"}]),
    ("order_food", {"restaurant_id": _s(), "items": {"type": "array", "items": {"type": "object", "properties": {
        "name": _s(), "quantity": {"type": "integer", "minimum": 1, "maximum": 20},
        "notes": {"type": ["string", "null"]}}, "required": ["name", "quantity"]}, "minItems": 1},
        "delivery": {"type": "boolean"}, "tip": {"type": "number", "minimum": 0}}, ["restaurant_id", "items"],
     {"restaurant_id": "r42", "items": [{"name": "Pad Thai", "quantity": 2, "notes": None}], "delivery": True,
      "tip": 3.5}, [{"restaurant_id": "r", "items": [{"name": "x", "quantity": 0}]}, {"restaurant_id": "r"}]),
    ("check_availability", {"date": _s(format="date"), "party_size": {"type": "integer", "minimum": 1,
                                                                      "maximum": 12},
                            "time_slot": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):(00|30)$"}},
     ["date", "party_size"], {"date": "2024-06-01", "party_size": 4, "time_slot": "19:30"},
     [{"date": "2024-06-01", "party_size": 13}, {"date": "2024-06-01", "party_size": 2, "time_slot": "19:15"}]),
    ("play_music", {"song": _s(), "artist": _s(), "shuffle": {"type": "boolean"}, "volume": {
        "type": "integer", "minimum": 0, "maximum": 100}}, [],
     {"song": "Bohemian Rhapsody", "artist": "Queen", "volume": 80}, [{"volume": 101}, {"shuffle": "yes"}]),
    ("convert_units", {"value": {"type": "number"}, "from_unit": _s(), "to_unit": _s(),
                       "precision": {"type": "integer", "minimum": 0, "maximum": 10}},
     ["value", "from_unit", "to_unit"], {"value": -40, "from_unit": "C", "to_unit": "F", "precision": 1},
     [{"value": 1, "from_unit": "m"}, {"value": 1, "from_unit": "m", "to_unit": "ft", "precision": 1.5}]),
    ("track_package", {"tracking_number": _s(pattern="^[A-Z0-9]{10,22}$"), "carrier": {"type": "string", "enum": [
        "UPS", "FedEx", "DHL", "USPS"]}}, ["tracking_number"], {"tracking_number": "1Z999AA10123456784",
                                                              "carrier": "UPS"},
     [{"tracking_number": "short"}, {"tracking_number": "1Z999AA10123456784", "carrier": "Royal Mail"}]),
    ("generate_qr_code", {"data": _s(maxLength=2953), "size": {"type": "integer", "minimum": 21, "maximum": 177},
                          "error_correction": {"enum": ["L", "M", "Q", "H"]}}, ["data"],
     {"data": "https://example.org", "size": 33, "error_correction": "M"},
     [{"data": "x", "size": 10}, {"data": "x", "error_correction": "X"}]),
    ("search_jobs", {"keywords": {"type": "array", "items": _s()}, "location": _s(), "remote": {"type": "boolean"},
                     "salary_min": {"type": "integer", "minimum": 0}, "experience_level": {"type": "string", "enum": [
                         "entry", "mid", "senior", "lead"]}}, ["keywords"],
     {"keywords": ["python", "ml"], "remote": True, "salary_min": 90000, "experience_level": "senior"},
     [{"keywords": "python"}, {"keywords": [], "experience_level": "junior"}]),
    ("rate_product", {"product_id": _s(), "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                      "review": _s(maxLength=500), "anonymous": {"type": "boolean", "default": False}},
     ["product_id", "rating"], {"product_id": "p1", "rating": 4, "review": "Good value"},
     [{"product_id": "p1", "rating": 0}, {"product_id": "p1", "rating": 4.5}]),
    ("split_bill", {"total": {"type": "number", "exclusiveMinimum": 0}, "people": {"type": "integer", "minimum": 1},
                    "shares": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}}},
     ["total", "people"], {"total": 120.0, "people": 3, "shares": [0.5, 0.25, 0.25]},
     [{"total": 0, "people": 2}, {"total": 10, "people": 2, "shares": [1.5]}]),
]


def _function(name: str, props: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": props, "required": required}


def _resolve(root: dict, s: Any) -> Any:
    for _ in range(20):
        if isinstance(s, dict) and isinstance(s.get("$ref"), str) and s["$ref"].startswith("#/"):
            node: Any = root
            for part in s["$ref"][2:].split("/"):
                node = node[part]
            s = node
        else:
            break
    return s


def _parts(root: dict, s: Any, value: Any) -> list[dict]:
    """The schema and the sub-schemas that apply to `value` in place ($ref, allOf, the first
    anyOf/oneOf branch it satisfies), in declaration order."""
    s = _resolve(root, s)
    if not isinstance(s, dict):
        return []
    out = [s]
    for sub in s.get("allOf", []):
        out += _parts(root, sub, value)
    for key in ("anyOf", "oneOf"):
        for sub in s.get(key, []):
            if jsonschema.Draft7Validator({**root, **_resolve(root, sub)} if isinstance(_resolve(root, sub), dict)
                                          else sub).is_valid(value):
                out += _parts(root, sub, value)
                break
    return out


def schema_order(root: dict, schema: Any, value: Any) -> Any:
    """`value` with object keys in the order the schema declares them (merged parts left to
    right, then undeclared keys as they came): what MaskBench did to its instances (reordered
    to the stable property order engines generate)."""
    parts = _parts(root, schema, value)
    if isinstance(value, dict):
        order: list[str] = []
        for p in parts:
            order += [k for k in p.get("properties", {}) if k not in order]
            order += [k for k in p.get("required", []) if k not in order]
        keys = [k for k in order if k in value] + [k for k in value if k not in order]
        out = {}
        for k in keys:
            sub: Any = True
            for p in parts:
                if k in p.get("properties", {}):
                    sub = p["properties"][k]
                    break
                pats = [ps for pat, ps in p.get("patternProperties", {}).items() if __import__("re").search(pat, k)]
                if pats:
                    sub = pats[0]
                    break
                if isinstance(p.get("additionalProperties"), dict):
                    sub = p["additionalProperties"]
            out[k] = schema_order(root, sub, value[k])
        return out
    if isinstance(value, list):
        items: Any = True
        for p in parts:
            if isinstance(p.get("items"), dict):
                items = p["items"]
        return [schema_order(root, items, v) for v in value]
    return value


def cases() -> list[Case]:
    builders = [package_json, tsconfig, eslintrc, docker_compose, github_workflow, prettierrc, renovate, babelrc,
                lintstaged, editorconfig_json, vscode_extensions, jest_config, cargo_like, openapi_fragment,
                mkdocs_like, codecov, stylelint, dependabot, pre_commit, gitlab_ci_like, vercel_json,
                serverless_like, tslint_like_recursive, hcl_variables, k8s_deployment, k8s_service, k8s_configmap,
                k8s_hpa, k8s_crd_like, snowplow_link_click, snowplow_transaction, snowplow_screen_view,
                snowplow_ad_impression, snowplow_consent, wapo_story, wapo_image, wapo_video, gh_user_profile,
                gh_api_error, gh_geojson_point, gh_todo_app, gh_i18n_messages, gh_feature_flags, gh_money_transfer,
                gh_color_palette, gh_env_settings, gh_semver_release, gh_survey, gh_measurements, gh_permissions,
                gh_weekly_schedule, gh_not_reserved, gh_any_of_contact, gh_one_of_payment, gh_one_of_overlap,
                gh_all_of_inheritance, gh_ref_chain, gh_big_enum, gh_type_arrays, gh_draft4_bounds,
                gh_string_formats, gh_unicode_strings, gh_map_with_pattern, gh_recursive_expression,
                gh_min_max_props_config]
    raw: list[tuple[str, dict, list, list]] = [(b.__name__, *b()) for b in builders]
    for name, props, required, ok, bad in _FUNCTIONS:
        raw.append((f"glaive_{name}", _function(name, props, required), [ok], bad))
    out = []
    for name, schema, valid, invalid in raw:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        if "iglucentral.com" in str(schema.get("$schema", "")):
            cls = jsonschema.Draft4Validator  # Iglu's self-describing meta-schema extends draft-04
        # (as MaskBench labelled: the draft's keywords, 2020-12's format checker; jsonschema checks
        # uri / hostname only with optional packages, so no instance here rests on those)
        v = cls(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        case = Case(name, schema)
        for inst in valid + invalid:  # labels by jsonschema, whatever the list it was written in
            inst = schema_order(schema, schema, inst)
            (case.valid if v.is_valid(inst) else case.invalid).append(serialize(inst))
        out.append(case)
    return out


def write(directory: str) -> int:
    import os
    os.makedirs(directory, exist_ok=True)
    n = 0
    for c in cases():
        tests = [{"description": "valid", "data": json.loads(t), "valid": True} for t in c.valid] + \
                [{"description": "invalid", "data": json.loads(t), "valid": False} for t in c.invalid]
        with open(os.path.join(directory, f"{c.name}.json"), "w") as f:
            json.dump({"description": c.name, "schema": c.schema, "tests": tests}, f, indent=1, ensure_ascii=False)
        n += 1
    return n


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        print(f"wrote {write(sys.argv[2])} files")
    else:
        cs = cases()
        print(f"{len(cs)} schemas, {sum(len(c.valid) for c in cs)} valid / {sum(len(c.invalid) for c in cs)} invalid")
