"""Every JSON Schema 2020-12 string format, enforced with its RFC's grammar (string_formats.py):
valid and invalid strings per format, the same strings judged by an independent validator where
one exists (rfc3987 for the URI / IRI family, uri_template, idna, Python's re and, when it is on
the machine, node's RegExp with the u flag for ECMA-262), strings drawn from each compiled
automaton checked by those validators (soundness), the formats through the JSON compiler on the
real tokenizer, and the refusal of a format sgrun does not know."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import warnings

import idna
import pytest
from jsonschema import FormatChecker

from constrain_fixtures import constrain_tok  # noqa: F401  (the fixture)
from sgrun.constrain import compile_constraint
from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node, minimize, product
from sgrun.constrain.errors import UnsupportedSchemaError
from sgrun.constrain.regex_parser import parse_regex
from sgrun.constrain.string_formats import KNOWN_FORMATS
from sgrun.constrain.string_leaf import format_dfa

CHECKER = FormatChecker()

# (format, valid strings, invalid strings), by the RFC's grammar
CASES = [
    ("uri", ["http://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c", "http://[::1]:80/",
             "http://[v1.x]/", "a:", "http://a/%20", "foo://u:p@h:1/p;x", "http://1.2.3.4/", "file:///etc/x"],
     ["not-an-uri", "/rel", "http://a b", "http://a/%2", "1http://x", "http://[::1/", ":x", "http://ex.com/ä",
      "http://a#b#c", "http://[1::2::3]/", ""]),
    ("uri-reference", ["http://example.com", "/a/b", "a/b", "?q", "#f", "", "//host/p", "./a:b", "%41", "a:b"],
     ["http://a b", "\\\\WINDOWS", "#a#b", "a%", "http://[::1/", "ä", "a b"]),
    ("iri", ["http://ä.com/ü?ö#ß", "http://example.com", "urn:x:y", "http://[::1]/", "http://a/?\ue000",
             "http://例子.测试/路径"],
     ["ä", "/rel", "not-an-iri", "http://a b", "http://a/%zz", "http://x/\ue000", "http://a/\ufffe"]),
    ("iri-reference", ["ä/b", "http://ä.de", "#ß", "", "//ü/x", "?\ue000"],
     ["http://a b", "%", "a\\b", "http://[zz]/", "#\ue000"]),
    ("uri-template", ["http://example.com/{id}", "{+path}/here", "{/a,b*}", "{?x,y:3}", "plain", "{a.b}",
                      "{#x}", "{.x}{;y}{&z}", "/{x:999}", "ü{x}"],
     ["{", "http://{", "{}", "{a b}", "{x:0}", "{x:10000}", "}", "{x*:3}", "{..x}", "a b", "{=x}", "{a.}", "<x>"]),
    ("email", ["a@b.co", "a.b+c@ex-ample.org", '"john doe"@x.com', "a@[127.0.0.1]", "a@[IPv6:::1]", "a@localhost",
               '"a\\"b"@x.y'],
     ["a", "a@", "@b", "a..b@c", ".a@b", "a@b..c", "a@-b.c", "ä@b.c", "a b@c", "a@[300.1.1.1]", "a@[x:y]"]),
    ("date-time", ["1998-12-31T23:59:60Z", "1998-12-31T23:59:60.5+00:00", "2024-02-29T12:30:00.25+05:30",
                   "2024-01-01t00:00:00z"],
     ["1998-12-31T22:59:60Z", "1998-12-31T23:58:60Z", "1998-12-31T23:59:61Z", "2023-02-29T00:00:00Z",
      "2024-01-01T24:00:00Z", "2024-01-01T00:00:00"]),
    ("time", ["23:59:60Z", "10:20:30+02:00", "00:00:00.000001Z"], ["22:59:60Z", "10:20:30", "10:20:30+24:00"]),
    ("hostname", ["example.com", "a", "A-1.b2", "a--b.c", "x" * 63], ["xn--X", "ab--c.d", "-a", "a-", "a..b", "x" * 64,
                                                                 "ü.de", ""]),
    ("idn-email", ["실례@실례.테스트", "ä@b.c", "a@bücher.de", '"ü"@x.y', "a@b.co"],
     ["a", "ä@", "a@b..c", "@x", "a@-x.y", "a@Bücher.de"]),
    ("idn-hostname", ["실례.테스트", "bücher.de", "münchen-flughafen.de", "example.com", "Example.COM", "a-b.c", "מוקד.il", "例子.测试",
                      "xn-a.b", "a--b.c", "δοκιμή"],
     ["ab--c", "xn--bcher-kva", "-a.b", "a-.b", "a..b", "", ".a", "\u0301a.b", "a" * 64, "ab\u200dc",
      "a_b", "a b", "ÄBC", "a\u00b7b", "e\u0301", "\u05d0a", "aé\u05d0", "ü" + "a" * 25]),
    ("regex", ["", "a", "^[a-z]+$", "(a|b)*c", "\\d{2,4}", "a{1,100}", "a{12,99}", "(?:x)(?=y)(?!z)",
               "[\\w.-]+@[\\w-]+", "\\u00e9", "((a))", ".*?", "[-a]", "[^-]", "a{3}", "x|", "\\/\\$", "é+"],
     ["(", ")", "a**", "[z-a]", "a{3,2}", "\\", "*a", "a{", "(?<n>a)", "\\1", "[a-\\d]", "x{10,9}", "(?=a)*",
      "[]", "[^]", "a]", "\\p{L}", "\\q", "(((a)))"]),
]
# Where the independent validator departs from the RFC (checked to be these exact strings):
# uri_template rejects pct-encoded variable names and max-lengths from 1000 on that RFC 6570
# allows, and accepts a space and '<' (no literal of RFC 6570) and a varname ending in '.';
# jsonschema checks an email only for
# an '@'; idna accepts an ASCII label with uppercase (valid) and combining marks after a
# precomposed letter (valid, narrowed here: see idn_label_node); Python's re accepts what the
# u flag forbids and knows no lookahead rule.
# And where sgrun narrows a format to a regular, sound part: an A-label (xn--...) is valid when
# its Punycode decodes to a valid U-label, which no regular language checks; a U-label past the
# bound that provably fits an A-label's 63 octets (IDN_ONE_NON_ASCII_SIDE) is not accepted.
VALIDATOR_DIFFERS = {("uri-template", "a b"), ("uri-template", "<x>"), ("uri-template", "{a.}"),
                     ("idn-hostname", "xn--bcher-kva"), ("idn-hostname", "ü" + "a" * 25)}


@pytest.mark.parametrize("fmt,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_valid_and_invalid_strings(fmt, valid, invalid):
    d = format_dfa(fmt)
    assert [v for v in valid if not d.fullmatch(v.encode())] == []
    assert [v for v in invalid if d.fullmatch(v.encode())] == []


@pytest.mark.parametrize("fmt", ["uri", "uri-reference", "iri", "iri-reference", "uri-template", "idn-hostname"])
def test_the_independent_validator_agrees_on_the_hand_cases(fmt):
    valid, invalid = next((v, i) for f, v, i in CASES if f == fmt)
    judged = {s: _independent(fmt, s) for s in valid + invalid}
    differ = {s for s in valid if not judged[s]} | {s for s in invalid if judged[s]}
    assert differ == {s for f, s in VALIDATOR_DIFFERS if f == fmt}, differ


def test_every_standard_format_is_known():
    assert KNOWN_FORMATS == {"date-time", "date", "time", "duration", "email", "idn-email", "hostname",
                             "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference",
                             "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex"}


@pytest.mark.parametrize("fmt", ["uri", "uri-reference", "iri", "iri-reference", "uri-template", "idn-hostname",
                                 "idn-email", "email", "regex"])
def test_strings_drawn_from_the_automaton_are_valid(fmt):
    """Soundness: random walks through the format's DFA end in strings the validator accepts."""
    rng = random.Random(fmt)
    d = format_dfa(fmt)
    drawn = [_walk(d, rng) for _ in range(300)]
    rejected = [s for s in drawn if not _independent(fmt, s)]
    if fmt == "uri-template":  # RFC 6570 allows pct-encoded varnames, max-lengths < 10000; uri_template not
        rejected = [s for s in rejected
                    if not _independent(fmt, re.sub(r"%[0-9A-Fa-f]{2}", "A", re.sub(r":[0-9]+([,}])", r":1\1", s)))]
    assert rejected == []
    if fmt == "regex" and shutil.which("node"):  # ECMA-262 itself, u flag
        script = ("const xs=JSON.parse(require('fs').readFileSync(0,'utf8'));"
                  "console.log(JSON.stringify(xs.filter(x=>{try{new RegExp(x,'u');return false}catch(e){return true}})))")
        out = subprocess.run(["node", "-e", script], input=json.dumps(drawn), capture_output=True, text=True,
                             timeout=60)
        assert json.loads(out.stdout) == []


def test_regex_hand_cases_against_ecma262():
    if not shutil.which("node"):
        valid, invalid = next((v, i) for f, v, i in CASES if f == "regex")
        assert all(_independent("regex", v) for v in valid)
        return
    valid, invalid = next((v, i) for f, v, i in CASES if f == "regex")
    script = ("const xs=JSON.parse(require('fs').readFileSync(0,'utf8'));"
              "console.log(JSON.stringify(xs.map(x=>{try{new RegExp(x,'u');return true}catch(e){return false}})))")
    out = subprocess.run(["node", "-e", script], input=json.dumps(valid + invalid), capture_output=True, text=True,
                         timeout=60)
    ecma = dict(zip(valid + invalid, json.loads(out.stdout)))
    assert all(ecma[v] for v in valid)
    # the invalid ones ECMA accepts are the narrowing to what Python's re also reads (named groups,
    # \\p, the empty classes) and to REGEX_DEPTH nested groups
    assert {s for s in invalid if ecma[s]} == {"(?<n>a)", "\\p{L}", "[]", "[^]", "(((a)))"}


def test_formats_in_json_schemas(constrain_tok):
    def c(fmt, **kw):
        return compile_constraint(constrain_tok, json_schema={"type": "string", "format": fmt}, warm_up=False,
                                  use_cache=False, **kw)
    iri = c("iri")
    assert iri.matches_bytes('"http://ä.com/ü"'.encode()) and not iri.matches_bytes(b'"not-an-iri"')
    assert iri.matches_bytes('"http:\\/\\/ä.com\\/"'.encode())  # JSON escapes decode to the same IRI
    host = c("idn-hostname")
    assert host.matches_bytes('"bücher.de"'.encode()) and not host.matches_bytes(b'"-x.de"')
    rx = c("regex")
    assert rx.matches_bytes(b'"^[a-z]+\\\\d$"') and not rx.matches_bytes(b'"(a"')
    tpl = c("uri-template")
    assert tpl.matches_bytes(b'"/users/{id}"') and not tpl.matches_bytes(b'"/users/{id"')


def test_an_unknown_format_is_refused_by_name(constrain_tok):
    with pytest.raises(UnsupportedSchemaError, match="'format' at #/properties/v.*'semver'"):
        compile_constraint(constrain_tok, json_schema={"type": "object", "properties": {
            "v": {"type": "string", "format": "semver"}}}, warm_up=False, use_cache=False)
    with pytest.raises(UnsupportedSchemaError, match="'format' at #/propertyNames"):
        compile_constraint(constrain_tok, json_schema={"type": "object", "propertyNames": {"format": "color"}},
                           warm_up=False, use_cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compile_constraint(constrain_tok, json_schema={"type": "string", "format": "semver"}, lenient=True,
                               warm_up=False, use_cache=False)
    assert c.matches_bytes(b'"anything"') and any("'format'" in w and "semver" in w for w in c.warnings)
    # a format on a non-string type is no string constraint: it stays an annotation, as 2020-12 says
    c = compile_constraint(constrain_tok, json_schema={"type": "integer", "format": "int64"}, warm_up=False,
                           use_cache=False)
    assert c.matches_bytes(b"12")


def test_minimize_keeps_the_language():
    node = parse_regex("a(b|c)d|e(b|c)d|x{2,5}").fullmatch_node()
    d = dfa_from_node(node)
    m = minimize(d)
    assert d.num_states > m.num_states == 8  # start, a|e, b|c, x, xx, xxx, xxxx; one final state for abd and xxxxx
    assert _same_language(d, m)


@pytest.mark.slow
def test_the_shipped_tables_match_a_fresh_build():
    from sgrun.constrain import format_tables
    for fmt in format_tables.TABLED_FORMATS:
        if fmt.startswith("idn-") and format_tables.table_inputs() != format_tables.inputs():
            continue  # the IDN tables follow the Unicode / IDNA data they were built from
        assert _same_language(format_tables.load(fmt), format_tables.build(fmt)), fmt


def _same_language(a: ByteDFA, b: ByteDFA) -> bool:
    return not product(a, b, "minus").accepting and not product(b, a, "minus").accepting


def _walk(d: ByteDFA, rng: random.Random, max_len: int = 40) -> str:
    s, out = d.start, bytearray()
    while not (s in d.accepting and (len(out) >= max_len or rng.random() < 0.15 or not d.edges[s])):
        m, s = rng.choice(d.edges[s])
        out.append(rng.choice([b for b in range(256) if m >> b & 1]))
    return out.decode()


def _independent(fmt: str, s: str) -> bool:
    if fmt == "regex":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                re.compile(s)
                return True
            except re.error:
                return False
    if fmt == "idn-hostname":
        try:
            idna.encode(s, strict=True)
            return True
        except (idna.IDNAError, UnicodeError):
            return False
    if fmt == "idn-email":  # RFC 6531: the domain's U-labels are IDNA2008 labels
        domain = s.rsplit("@", 1)[1]
        return domain.startswith("[") or all(label.isascii() or _independent("idn-hostname", label)
                                             for label in domain.split("."))
    return CHECKER.conforms(s, fmt)
