// sgrun playground: plain JS against the server's own endpoints (no build step, no CDN).
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "sgrun.apiKey";
let model = null;           // served model id, from /v1/models
let defaults = {};          // recommended sampling, from /ui/engine
let keyPrompt = null;       // one pending "ask for the key" at a time

// ---------------------------------------------------------------- API key and fetch
function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function askForKey() {
  if (!keyPrompt) {
    keyPrompt = new Promise((resolve) => {
      const dlg = $("key-dialog");
      $("key-form").onsubmit = () => {
        sessionStorage.setItem(KEY_STORE, $("key-input").value);
        keyPrompt = null;
        resolve();
      };
      dlg.showModal();
    });
  }
  return keyPrompt;
}

// fetch with the key; on 401 ask for the key (once for all callers) and retry.
async function api(path, body, opts = {}) {
  for (;;) {
    const init = { method: body === undefined ? "GET" : "POST", signal: opts.signal,
                   headers: { ...authHeaders(), ...(body === undefined ? {} : { "Content-Type": "application/json" }) } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const resp = await fetch(path, init);
    if (resp.status === 401) { await askForKey(); continue; }
    return resp;
  }
}

async function apiJSON(path, body) {
  const resp = await api(path, body);
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(data.error ? data.error.message : `HTTP ${resp.status}`);
  return data;
}

// Server-sent events from a fetch response: yields each data payload (parsed JSON).
async function* sse(resp) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

// ---------------------------------------------------------------- tabs
let activeTab = "chat";
document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => {
  document.querySelectorAll("nav button").forEach((x) => x.classList.toggle("active", x === b));
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.id === `tab-${b.dataset.tab}`));
  activeTab = b.dataset.tab;
  $("sampling").hidden = activeTab === "engine";   // the sampling panel serves the three generating tabs
  if (activeTab === "engine") refreshEngine();
}));

// ---------------------------------------------------------------- sampling controls
const SAMPLING = ["temperature", "top_p", "top_k", "repetition_penalty"];
function applyDefaults() {
  for (const k of SAMPLING) $(`s-${k}`).value = defaults[k] ?? "";
  $("sampling-source").textContent = defaults.source ? `defaults from: ${defaults.source}` : "";
}
$("s-reset").onclick = applyDefaults;

function samplingParams() {
  const p = {};
  for (const k of [...SAMPLING, "max_tokens", "seed"]) {
    const v = $(`s-${k}`).value;
    if (v !== "") p[k] = Number(v);
  }
  return p;
}

// ---------------------------------------------------------------- chat playground
const history = [];
let chatAbort = null;

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  const body = document.createElement("div");
  body.className = "body";
  body.textContent = text;
  div.appendChild(body);
  $("chat-log").appendChild(div);
  $("chat-log").scrollTop = $("chat-log").scrollHeight;
  return div;
}

async function sendChat(ev) {
  ev.preventDefault();
  const text = $("chat-input").value.trim();
  if (!text || chatAbort) return;
  $("chat-input").value = "";
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const system = $("chat-system").value.trim();
  const messages = (system ? [{ role: "system", content: system }] : []).concat(history);
  const box = addMessage("assistant", "");
  const body = box.querySelector(".body");
  const meta = document.createElement("div");
  meta.className = "meta";
  box.appendChild(meta);
  chatAbort = new AbortController();
  $("chat-send").disabled = true;
  $("chat-stop").disabled = false;
  const t0 = performance.now();
  let tFirst = null, answer = "", usage = null, finish = null;
  try {
    const resp = await api("/v1/chat/completions", { model, messages, stream: true,
      stream_options: { include_usage: true }, ...samplingParams() }, { signal: chatAbort.signal });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error(err.error ? err.error.message : `HTTP ${resp.status}`);
    }
    for await (const chunk of sse(resp)) {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices || []) {
        const delta = c.delta && c.delta.content;
        if (delta) {
          if (tFirst === null) tFirst = performance.now();
          answer += delta;
          body.textContent = answer;
          box.dataset.chunks = String(Number(box.dataset.chunks || 0) + 1);   // streamed pieces so far
          $("chat-log").scrollTop = $("chat-log").scrollHeight;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") { box.classList.add("error"); body.textContent = answer + `\n[error] ${e.message}`; }
    finish = finish || (e.name === "AbortError" ? "stopped" : "error");
  }
  const tEnd = performance.now();
  history.push({ role: "assistant", content: answer });
  const parts = [];
  if (usage) parts.push(`prompt ${usage.prompt_tokens} tok`, `completion ${usage.completion_tokens} tok`);
  if (tFirst !== null) parts.push(`TTFT ${((tFirst - t0) / 1000).toFixed(2)} s`);
  if (usage && tFirst !== null && usage.completion_tokens > 1 && tEnd > tFirst) {
    parts.push(`${((usage.completion_tokens - 1) / ((tEnd - tFirst) / 1000)).toFixed(1)} tok/s`);
  }
  if (finish) parts.push(`finish: ${finish}`);
  meta.textContent = parts.join(" · ");
  meta.dataset.done = "1";
  chatAbort = null;
  $("chat-send").disabled = false;
  $("chat-stop").disabled = true;
}
$("chat-form").addEventListener("submit", sendChat);
$("chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("chat-form").requestSubmit(); }
});
$("chat-stop").onclick = () => chatAbort && chatAbort.abort();
$("chat-clear").onclick = () => { history.length = 0; $("chat-log").innerHTML = ""; };

// ---------------------------------------------------------------- request forms
// The structured-output and tool-call tabs are one form: an option and a source (a constraint,
// or the tools), the user's message, a send button with the usage line under it, the answer.
// requestForm builds it into the tab from a spec, with ids `${prefix}-option`, `-source`,
// `-prompt`, `-send`, `-stats`, `-answer`; `optionExtra`, `sourceExtra` and `answer` are a
// tab's own markup beside the option, under the source and in the answer.
function requestForm(tab, f) {
  const p = f.prefix;
  const options = f.options.map(([value, text]) => `<option value="${value}">${text}</option>`).join("");
  $(`tab-${tab}`).innerHTML = `<div class="main-col">
    <div class="row"><label>${f.optionLabel} <select id="${p}-option">${options}</select></label>${f.optionExtra || ""}</div>
    <label>${f.sourceLabel} <textarea id="${p}-source" rows="${f.sourceRows}" spellcheck="false" class="mono"></textarea></label>
    ${f.sourceExtra || ""}
    <label>Message <textarea id="${p}-prompt" rows="2"></textarea></label>
    <div class="row"><button id="${p}-send" type="button" class="primary">${f.send}</button><span id="${p}-stats" class="muted"></span></div>
    <div id="${p}-answer">${f.answer || ""}</div></div>`;
  $(`${p}-source`).value = f.source;
  $(`${p}-prompt`).value = f.prompt;
}

// One chat completion from a request form (its message, the sampling panel, the tab's own
// fields); the usage line goes under the send button.
async function sendForm(p, fields) {
  const t0 = performance.now();
  const res = await apiJSON("/v1/chat/completions", { model, messages: [{ role: "user", content: $(`${p}-prompt`).value }],
                                                      ...samplingParams(), ...fields });
  $(`${p}-stats`).textContent = `${res.usage.completion_tokens} tokens in ${((performance.now() - t0) / 1000).toFixed(2)} s` +
    ` · finish: ${res.choices[0].finish_reason}`;
  return res;
}

// ---------------------------------------------------------------- structured output
const EXAMPLES = {
  json_schema: JSON.stringify({ type: "object", properties: {
    name: { type: "string", maxLength: 20 }, age: { type: "integer", minimum: 0, maximum: 120 },
    hobbies: { type: "array", items: { type: "string", maxLength: 20 }, maxItems: 3 } },
    required: ["name", "age"], additionalProperties: false }, null, 2),
  regex: "[A-Z][a-z]+ is [0-9]{1,3} years old\\.",
  grammar: 'start: person\nperson: NAME " is " AGE " years old."\nNAME: /[A-Z][a-z]+/\nAGE: /[0-9]{1,3}/',
};
requestForm("structured", {
  prefix: "so", optionLabel: "Kind",
  options: [["json_schema", "JSON Schema"], ["regex", "Regex"], ["grammar", "Grammar (Lark or GBNF)"]],
  optionExtra: `<button id="so-example" type="button">Example</button>`,
  sourceLabel: "Constraint", sourceRows: 10, source: EXAMPLES.json_schema,
  sourceExtra: `<div class="row"><button id="so-compile" type="button" class="primary">Compile</button>` +
               `<span id="so-compile-result" class="result"></span></div>`,
  prompt: "Describe a fictional person.", send: "Generate",
  answer: `<pre id="so-output" class="output mono"></pre><div id="so-validation" class="result"></div>`,
});
$("so-option").onchange = () => { $("so-source").value = EXAMPLES[$("so-option").value]; showResult("so-compile-result", ""); };
$("so-example").onclick = $("so-option").onchange;

function showResult(id, text, ok) {
  const el = $(id);
  el.textContent = text;
  el.className = "result" + (ok === true ? " ok" : ok === false ? " bad" : "");
}

function constraintSource() {
  const kind = $("so-option").value, text = $("so-source").value;
  if (kind !== "json_schema") return { kind, source: text };
  return { kind, source: JSON.parse(text) };   // a JSON syntax error is reported by the caller
}

async function compileConstraint(text) {
  let req;
  try { req = constraintSource(); } catch (e) { showResult("so-compile-result", `not JSON: ${e.message}`, false); return null; }
  if (text !== undefined) req.text = text;
  const res = await apiJSON("/ui/constraint", req);
  if (text === undefined) {
    if (res.ok) showResult("so-compile-result", `compiled in ${res.compile_ms.toFixed(1)} ms${res.detail ? ` · ${res.detail}` : ""}`, true);
    else showResult("so-compile-result", `refused${res.keyword ? ` (keyword: ${res.keyword})` : ""}: ${res.message}`, false);
  }
  return res;
}
$("so-compile").onclick = () => compileConstraint().catch((e) => showResult("so-compile-result", e.message, false));

$("so-send").onclick = async () => {
  $("so-output").textContent = "";
  showResult("so-validation", "");
  let req;
  try { req = constraintSource(); } catch (e) { showResult("so-compile-result", `not JSON: ${e.message}`, false); return; }
  const fields = req.kind === "json_schema" ? { response_format: { type: "json_schema", json_schema: { name: "schema", schema: req.source } } }
    : req.kind === "regex" ? { regex: req.source } : { ebnf: req.source };
  try {
    const out = await sendForm("so", fields);
    const text = out.choices[0].message.content || "";
    $("so-output").textContent = text;
    const v = await compileConstraint(text);
    if (v) showResult("so-validation", v.valid ? `valid (checked by ${v.validator})` : `INVALID (${v.validator}): ${v.validation_error}`, !!v.valid);
  } catch (e) {
    showResult("so-validation", e.message, false);
  }
};

// ---------------------------------------------------------------- tool calls
requestForm("tools", {
  prefix: "tc", optionLabel: "tool_choice", options: [["auto", "auto"], ["required", "required"], ["none", "none"]],
  sourceLabel: 'Tools (OpenAI "tools" JSON)', sourceRows: 12,
  source: JSON.stringify([{ type: "function", function: {
    name: "get_weather", description: "Current weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
                  required: ["city"] } } }], null, 2),
  prompt: "What is the weather like in Paris today?", send: "Send",
});

$("tc-send").onclick = async () => {
  const out = $("tc-answer");
  out.innerHTML = "";
  let tools;
  try { tools = JSON.parse($("tc-source").value); } catch (e) { out.textContent = `tools are not JSON: ${e.message}`; return; }
  try {
    const res = await sendForm("tc", { tools, tool_choice: $("tc-option").value });
    const msg = res.choices[0].message;
    for (const call of msg.tool_calls || []) {
      const div = document.createElement("div");
      div.className = "call";
      let args = call.function.arguments;
      try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* shown as sent */ }
      div.innerHTML = "<b></b> <span class='muted small'></span><pre class='mono'></pre>";
      div.querySelector("b").textContent = call.function.name;
      div.querySelector("span").textContent = call.id;
      div.querySelector("pre").textContent = args;
      out.appendChild(div);
    }
    if (msg.content) {
      const p = document.createElement("div");
      p.className = "msg assistant";
      p.textContent = msg.content;
      out.appendChild(p);
    }
    if (!(msg.tool_calls || []).length && !msg.content) out.textContent = "(no tool call and no text)";
  } catch (e) {
    out.textContent = `error: ${e.message}`;
  }
};

// ---------------------------------------------------------------- engine view
function card(k, v) { return `<div class="card"><div class="v">${v}</div><div class="k">${k}</div></div>`; }
const ms = (s) => (s === null || s === undefined ? "–" : `${(s * 1000).toFixed(0)} ms`);

function drawTree(tree) {
  const host = $("tree");
  if (!tree) { host.textContent = "prefix cache disabled"; return; }
  $("tree-meta").textContent = `${tree.nodes} nodes, ${tree.cached_tokens} cached tokens` +
    (tree.truncated ? `, ${tree.truncated} more not shown` : "");
  // Layout: leaves left to right in order, a parent centred over its children, one row per depth.
  const W = 92, H = 46, placed = [];
  let nextX = 0, maxDepth = 0;
  (function place(n, depth) {
    maxDepth = Math.max(maxDepth, depth);
    if (!n.children.length) { n.x = nextX++; } else {
      n.children.forEach((c) => place(c, depth + 1));
      n.x = (n.children[0].x + n.children[n.children.length - 1].x) / 2;
    }
    n.depth = depth;
    placed.push(n);
  })(tree.root, 0);
  const width = Math.max(1, nextX) * W + 20, height = (maxDepth + 1) * H + 20;
  const px = (n) => 10 + n.x * W + W / 2, py = (n) => 10 + n.depth * H + 14;
  const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}">`;
  for (const n of placed) for (const c of n.children) {
    svg += `<line x1="${px(n)}" y1="${py(n) + 10}" x2="${px(c)}" y2="${py(c) - 10}" stroke="#9aa4b2"/>`;
  }
  for (const n of placed) {
    const isRoot = n === tree.root;
    const fill = isRoot ? "#fff" : n.locked ? "var(--lock)" : "var(--cache)";
    const label = isRoot ? "root" : `${n.tokens} tok`;
    const title = isRoot ? "root" : `${n.tokens} tokens, ${n.pages} pages, lock_ref ${n.lock_ref}\n${n.preview}`;
    svg += `<g class="node${n.locked && !isRoot ? " locked" : ""}" data-tokens="${n.tokens}"><title>${esc(title)}</title>` +
      `<rect x="${px(n) - 40}" y="${py(n) - 10}" width="80" height="20" rx="5" fill="${fill}" stroke="#4b5563"/>` +
      `<text x="${px(n)}" y="${py(n) + 4}" text-anchor="middle">${esc(label)}${n.locked && !isRoot ? " \u{1F512}" : ""}</text></g>`;
  }
  host.innerHTML = svg + "</svg>";
}

let engineTimer = null;
async function refreshEngine() {
  clearTimeout(engineTimer);
  try {
    const s = await apiJSON("/ui/engine");
    const e = s.engine;
    $("engine-cards").innerHTML = card("running", e.running) + card("waiting", e.waiting) +
      card("KV pages free", e.pages_free) + card("KV pages cached", e.pages_evictable) +
      card("KV pages in use", e.pages_in_use) + card("KV capacity (tokens)", e.pages_total * e.page_size) +
      card("prefix-cache hit rate", `${(100 * e.cache_hit_rate).toFixed(1)}%`) +
      card("recent TTFT p50", ms(s.recent.ttft_p50)) + card("recent TPOT p50", ms(s.recent.tpot_p50)) +
      card("requests seen", s.recent.count);
    const total = e.pages_total || 1;
    $("kv-bar").innerHTML = `<div class="in-use" style="width:${100 * e.pages_in_use / total}%"></div>` +
      `<div class="cached" style="width:${100 * e.pages_evictable / total}%"></div>` +
      `<div class="free" style="width:${100 * e.pages_free / total}%"></div>`;
    $("engine-cards").dataset.updated = String(Date.now());
    drawTree(s.radix_tree);
  } catch (err) {
    $("engine-cards").textContent = `engine view unavailable: ${err.message}`;
  }
  if (activeTab === "engine") engineTimer = setTimeout(refreshEngine, 1000);
}

// ---------------------------------------------------------------- start-up
(async function init() {
  try {
    const models = await apiJSON("/v1/models");
    model = models.data[0].id;
    const s = await apiJSON("/ui/engine");
    defaults = s.recommended_sampling || {};
    applyDefaults();
    $("model-line").textContent = `${model} · ${s.dtype} · ${s.device} · KV ${s.engine.pages_total * s.engine.page_size} tokens`;
  } catch (e) {
    $("model-line").textContent = `server unreachable: ${e.message}`;
  }
})();
